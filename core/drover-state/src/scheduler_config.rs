//! The operator's scheduler configuration: one row, written only through the FSM.

use std::sync::Arc;

use drover_structs::SchedulerConfiguration;

use crate::store::StateStore;
use crate::tables::{StateSnapshot, Table};

impl StateStore {
    /// Stores `config` (canonicalised: an empty algorithm is binpack) at `index`. With `cas`
    /// (Nomad's check-and-set) it is written only if the stored configuration's `ModifyIndex` is
    /// that value, 0 meaning none is stored yet. Returns whether it was written.
    pub fn set_scheduler_config(
        &self,
        index: u64,
        mut config: SchedulerConfiguration,
        cas: Option<u64>,
    ) -> bool {
        // Only the FSM writes, one entry at a time: the check cannot race another write.
        let existing = self.snapshot().scheduler_config();
        if let Some(want) = cas {
            let have = existing.as_ref().map(|c| c.modify_index).unwrap_or(0);
            if want != have {
                return false;
            }
        }
        config.canonicalize();
        config.create_index = existing.map(|c| c.create_index).unwrap_or(index);
        config.modify_index = index;
        self.write(index, &[Table::SchedulerConfig], |t| {
            t.scheduler_config = Some(Arc::new(config));
        });
        true
    }
}

impl StateSnapshot {
    /// The stored configuration, `None` while nobody set one.
    pub fn scheduler_config(&self) -> Option<Arc<SchedulerConfiguration>> {
        self.t.scheduler_config.clone()
    }

    /// The configuration in force: the stored one, else Nomad's default.
    pub fn effective_scheduler_config(&self) -> SchedulerConfiguration {
        self.t
            .scheduler_config
            .as_deref()
            .cloned()
            .unwrap_or_else(SchedulerConfiguration::nomad_default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_stored_canonical_with_its_indexes() {
        let s = StateStore::new();
        assert_eq!(
            s.snapshot()
                .effective_scheduler_config()
                .scheduler_algorithm,
            "binpack"
        );
        assert!(s.set_scheduler_config(4, SchedulerConfiguration::default(), None));
        let c = s.snapshot().scheduler_config().unwrap();
        assert_eq!(c.scheduler_algorithm, "binpack");
        assert_eq!((c.create_index, c.modify_index), (4, 4));
        assert_eq!(s.snapshot().table_index(Table::SchedulerConfig), 4);

        let spread = SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..Default::default()
        };
        assert!(s.set_scheduler_config(9, spread, Some(4)));
        let c = s.snapshot().scheduler_config().unwrap();
        assert_eq!(c.scheduler_algorithm, "spread");
        assert_eq!((c.create_index, c.modify_index), (4, 9));
    }

    #[test]
    fn check_and_set_refuses_a_stale_index_and_changes_nothing() {
        let s = StateStore::new();
        // Nothing stored: only 0 matches.
        assert!(!s.set_scheduler_config(3, SchedulerConfiguration::default(), Some(7)));
        assert!(s.snapshot().scheduler_config().is_none());
        assert!(s.set_scheduler_config(5, SchedulerConfiguration::default(), Some(0)));
        let spread = SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            ..Default::default()
        };
        assert!(!s.set_scheduler_config(6, spread, Some(0)));
        let c = s.snapshot().scheduler_config().unwrap();
        assert_eq!(
            (c.scheduler_algorithm.as_str(), c.modify_index),
            ("binpack", 5)
        );
    }
}
