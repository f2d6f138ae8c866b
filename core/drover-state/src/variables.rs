//! Variables: written only through the FSM, check-and-set decided there (so two racing writes
//! with the same expected index cannot both succeed), times from the log entry.

use std::sync::Arc;

use drover_structs::{Variable, VariableWrite};

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table};

impl StateStore {
    /// Applies `op` for `var` (its namespace and path; its items for a set) at `index`, at
    /// unix-nanosecond time `now`. False, with nothing written, when a check-and-set finds
    /// another modify index stored.
    pub fn write_variable(&self, index: u64, now: i64, var: Variable, op: VariableWrite) -> bool {
        let key = (var.namespace.clone(), var.path.clone());
        let stored = self
            .snapshot()
            .t
            .variables
            .get(&key)
            .map(|v| v.modify_index);
        if !op.allowed_over(stored) {
            return false;
        }
        self.write(index, &[Table::Variables], |t| match op {
            VariableWrite::Set | VariableWrite::SetIfIndex(_) => {
                let (create_index, create_time) = t
                    .variables
                    .get(&key)
                    .map_or((index, now), |old| (old.create_index, old.create_time));
                let stored = Variable {
                    lock: None,
                    create_index,
                    create_time,
                    modify_index: index,
                    modify_time: now,
                    ..var
                };
                t.variables.insert(key, Arc::new(stored));
            }
            VariableWrite::Delete | VariableWrite::DeleteIfIndex(_) => {
                t.variables.remove(&key);
            }
        });
        true
    }
}

impl StateSnapshot {
    pub fn variable(&self, namespace: &str, path: &str) -> Option<Arc<Variable>> {
        self.t
            .variables
            .get(&(namespace.to_string(), path.to_string()))
            .cloned()
    }

    /// The variables of `namespace` (`None`: of every namespace) whose path starts with
    /// `prefix`, by namespace and path.
    pub fn variables(&self, namespace: Option<&str>, prefix: &str) -> Vec<Arc<Variable>> {
        let start = (namespace.unwrap_or_default().to_string(), String::new());
        self.t
            .variables
            .range(start..)
            .take_while(|((n, _), _)| namespace.is_none_or(|ns| n == ns))
            .filter(|((_, path), _)| path.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn var(ns: &str, path: &str, value: &str) -> Variable {
        Variable {
            namespace: ns.into(),
            path: path.into(),
            items: BTreeMap::from([("k".into(), value.into())]),
            ..Default::default()
        }
    }

    #[test]
    fn writes_keep_their_creation_and_check_and_set_refuses_a_stale_index() {
        let s = StateStore::new();
        assert!(s.write_variable(
            3,
            100,
            var("default", "a/b", "1"),
            VariableWrite::SetIfIndex(0)
        ));
        // Set-if-absent again: refused, nothing changes.
        assert!(!s.write_variable(
            4,
            200,
            var("default", "a/b", "2"),
            VariableWrite::SetIfIndex(0)
        ));
        assert!(s.write_variable(
            5,
            300,
            var("default", "a/b", "3"),
            VariableWrite::SetIfIndex(3)
        ));
        let v = s.snapshot().variable("default", "a/b").unwrap();
        assert_eq!((v.create_index, v.modify_index), (3, 5));
        assert_eq!((v.create_time, v.modify_time), (100, 300));
        assert_eq!(v.items["k"], "3");
        assert!(!s.write_variable(
            6,
            0,
            var("default", "a/b", ""),
            VariableWrite::DeleteIfIndex(3)
        ));
        assert!(s.snapshot().variable("default", "a/b").is_some());
        assert!(s.write_variable(
            7,
            0,
            var("default", "a/b", ""),
            VariableWrite::DeleteIfIndex(5)
        ));
        assert!(s.snapshot().variable("default", "a/b").is_none());
        assert_eq!(s.snapshot().table_index(Table::Variables), 7);
    }

    #[test]
    fn lists_take_a_namespace_or_all_and_a_path_prefix() {
        let s = StateStore::new();
        for (i, (ns, path)) in [
            ("default", "a/x"),
            ("default", "b"),
            ("dev", "a/y"),
            ("devs", "a"),
        ]
        .iter()
        .enumerate()
        {
            s.write_variable(i as u64 + 1, 0, var(ns, path, "v"), VariableWrite::Set);
        }
        let snap = s.snapshot();
        let paths = |l: Vec<Arc<Variable>>| -> Vec<String> {
            l.iter()
                .map(|v| format!("{}:{}", v.namespace, v.path))
                .collect()
        };
        assert_eq!(paths(snap.variables(Some("dev"), "")), ["dev:a/y"]);
        assert_eq!(
            paths(snap.variables(None, "a")),
            ["default:a/x", "dev:a/y", "devs:a"]
        );
        assert_eq!(
            paths(snap.variables(Some("default"), "a/")),
            ["default:a/x"]
        );
    }
}
