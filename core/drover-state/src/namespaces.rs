//! Namespaces: written only through the FSM; `default` is always there (as Nomad creates it
//! at bootstrap), its stored version once an operator wrote one.

use std::sync::Arc;

use drover_structs::{DEFAULT_NAMESPACE, Namespace};

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table};

impl StateStore {
    /// Stores each namespace at `index`, keeping the create index of one that exists.
    pub fn upsert_namespaces(&self, index: u64, namespaces: Vec<Namespace>) {
        self.write(index, &[Table::Namespaces], |t| {
            for mut n in namespaces {
                n.create_index = t
                    .namespaces
                    .get(&n.name)
                    .map_or(index, |old| old.create_index);
                n.modify_index = index;
                t.namespaces.insert(n.name.clone(), Arc::new(n));
            }
        })
    }

    /// Removes namespaces (the server checked they may go).
    pub fn delete_namespaces(&self, index: u64, names: &[String]) {
        self.write(index, &[Table::Namespaces], |t| {
            for name in names {
                t.namespaces.remove(name);
            }
        })
    }
}

impl StateSnapshot {
    /// One namespace; `default` even when nobody wrote it.
    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        match self.t.namespaces.get(name) {
            Some(n) => Some(n.clone()),
            None if name == DEFAULT_NAMESPACE => Some(Arc::new(Namespace::default_namespace())),
            None => None,
        }
    }

    /// Every namespace whose name starts with `prefix`, by name, `default` included.
    pub fn namespaces(&self, prefix: &str) -> Vec<Arc<Namespace>> {
        let mut out: Vec<Arc<Namespace>> = self
            .t
            .namespaces
            .values()
            .filter(|n| n.name.starts_with(prefix))
            .cloned()
            .collect();
        if DEFAULT_NAMESPACE.starts_with(prefix)
            && !self.t.namespaces.contains_key(DEFAULT_NAMESPACE)
        {
            out.push(Arc::new(Namespace::default_namespace()));
            out.sort_by(|a, b| a.name.cmp(&b.name));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_always_there_and_written_ones_keep_their_create_index() {
        let s = StateStore::new();
        assert_eq!(
            s.snapshot().namespace("default").unwrap().description,
            "Default shared namespace"
        );
        assert!(s.snapshot().namespace("dev").is_none());
        let dev = Namespace {
            name: "dev".into(),
            ..Default::default()
        };
        s.upsert_namespaces(5, vec![dev.clone()]);
        s.upsert_namespaces(
            7,
            vec![Namespace {
                description: "d".into(),
                ..dev
            }],
        );
        let snap = s.snapshot();
        let stored = snap.namespace("dev").unwrap();
        assert_eq!((stored.create_index, stored.modify_index), (5, 7));
        let names: Vec<_> = snap.namespaces("").iter().map(|n| n.name.clone()).collect();
        assert_eq!(names, ["default", "dev"]);
        assert_eq!(snap.namespaces("de").len(), 2);
        assert_eq!(snap.namespaces("dev").len(), 1);
        s.delete_namespaces(8, &["dev".into()]);
        assert!(s.snapshot().namespace("dev").is_none());
        assert_eq!(s.snapshot().table_index(Table::Namespaces), 8);
    }
}
