//! The mesh CA (set once, never replaced by a second leader's) and intentions, written only
//! through the FSM.

use std::sync::Arc;

use drover_structs::mesh::{Intention, MeshCa};

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table};

impl StateStore {
    /// Keeps `ca` unless one is stored already (two leaders racing to make one: the first
    /// entry wins). Returns whether it was stored.
    pub fn init_mesh_ca(&self, index: u64, mut ca: MeshCa) -> bool {
        if self.snapshot().t.mesh_ca.is_some() {
            return false;
        }
        ca.create_index = index;
        self.write(index, &[Table::Mesh], |t| t.mesh_ca = Some(Arc::new(ca)));
        true
    }

    /// Writes `intention` (replacing the one of the same namespace, source and destination).
    pub fn upsert_intention(&self, index: u64, mut intention: Intention) {
        let key = (
            intention.namespace.clone(),
            intention.source_name.clone(),
            intention.destination_name.clone(),
        );
        self.write(index, &[Table::Mesh], |t| {
            intention.create_index = t.intentions.get(&key).map_or(index, |i| i.create_index);
            intention.modify_index = index;
            t.intentions.insert(key, Arc::new(intention));
        });
    }

    /// Removes an intention; returns whether there was one.
    pub fn delete_intention(
        &self,
        index: u64,
        namespace: &str,
        source: &str,
        destination: &str,
    ) -> bool {
        let key = (
            namespace.to_string(),
            source.to_string(),
            destination.to_string(),
        );
        if !self.snapshot().t.intentions.contains_key(&key) {
            return false;
        }
        self.write(index, &[Table::Mesh], |t| {
            t.intentions.remove(&key);
        });
        true
    }
}

impl StateSnapshot {
    pub fn mesh_ca(&self) -> Option<Arc<MeshCa>> {
        self.t.mesh_ca.clone()
    }

    /// The intentions of `namespace` (`None`: every namespace's), by source and destination.
    pub fn intentions(&self, namespace: Option<&str>) -> Vec<Arc<Intention>> {
        self.t
            .intentions
            .iter()
            .filter(|((ns, _, _), _)| namespace.is_none_or(|want| want == ns))
            .map(|(_, i)| i.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ca_stays_and_intentions_keep_their_create_index() {
        let s = StateStore::new();
        let ca = |d: &str| MeshCa {
            trust_domain: d.into(),
            ..Default::default()
        };
        assert!(s.init_mesh_ca(3, ca("a")));
        assert!(!s.init_mesh_ca(4, ca("b")));
        assert_eq!(s.snapshot().mesh_ca().unwrap().trust_domain, "a");
        let i = Intention {
            namespace: "default".into(),
            source_name: "api".into(),
            destination_name: "db".into(),
            action: "deny".into(),
            ..Default::default()
        };
        s.upsert_intention(5, i.clone());
        s.upsert_intention(
            6,
            Intention {
                action: "allow".into(),
                ..i
            },
        );
        let got = s.snapshot().intentions(Some("default"));
        assert_eq!(
            (
                got[0].create_index,
                got[0].modify_index,
                got[0].action.as_str()
            ),
            (5, 6, "allow")
        );
        // Kept across a snapshot's encoding.
        let restored = StateStore::new();
        restored.restore(&s.snapshot().encode()).unwrap();
        assert_eq!(restored.snapshot().intentions(None).len(), 1);
        assert_eq!(restored.snapshot().mesh_ca().unwrap().trust_domain, "a");
        assert!(s.delete_intention(7, "default", "api", "db"));
        assert!(!s.delete_intention(8, "default", "api", "db"));
        assert!(s.snapshot().intentions(None).is_empty());
    }
}
