//! Entries this server proposed, kept decoded until Raft applies them.
//!
//! The plan applier writes the largest entries of the log (thousands of allocations each) and,
//! on the leader, the same process applies them a moment later. Parsing back the JSON it has just
//! written cost the leader's Raft thread as much as encoding it; instead the applier leaves the
//! entry here and the FSM takes it when the identical bytes come out of the log. Followers, and
//! the leader after a restart, find nothing here and decode as usual: the bytes in the log stay
//! the only truth, which is why an entry is taken only on an exact byte match and why only entry
//! kinds whose decoding reproduces them exactly (checked by a test in `plan_apply`) come here.

use std::sync::Mutex;

use crate::fsm::LogEntry;

/// At most this many entries wait. Proposals that never reach `apply` (a lost leadership) leave
/// their entries behind; the oldest go first.
const MAX_WAITING: usize = 32;

#[derive(Default)]
pub(crate) struct ProposedEntries {
    waiting: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next_ticket: u64,
    list: Vec<Waiting>,
}

struct Waiting {
    ticket: u64,
    bytes: Vec<u8>,
    entry: LogEntry,
}

impl ProposedEntries {
    /// Keeps `entry`, whose encoding is `bytes`, for [`ProposedEntries::take`]; the ticket
    /// forgets it again.
    pub(crate) fn keep(&self, bytes: &[u8], entry: LogEntry) -> u64 {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if waiting.list.len() >= MAX_WAITING {
            waiting.list.remove(0);
        }
        waiting.next_ticket += 1;
        let ticket = waiting.next_ticket;
        waiting.list.push(Waiting {
            ticket,
            bytes: bytes.to_vec(),
            entry,
        });
        ticket
    }

    /// Whether an entry is kept for exactly these bytes.
    pub(crate) fn holds(&self, bytes: &[u8]) -> bool {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.list.iter().any(|w| w.bytes == bytes)
    }

    /// The entry kept for exactly these bytes, if any.
    pub(crate) fn take(&self, bytes: &[u8]) -> Option<LogEntry> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        let pos = waiting.list.iter().position(|w| w.bytes == bytes)?;
        Some(waiting.list.remove(pos).entry)
    }

    /// Drops the entry kept under `ticket`, if it is still there (its proposal failed).
    pub(crate) fn forget(&self, ticket: u64) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.list.retain(|w| w.ticket != ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> LogEntry {
        LogEntry::EvalDelete {
            ids: vec![id.to_string()],
        }
    }

    #[test]
    fn an_entry_is_taken_once_and_only_for_identical_bytes() {
        let kept = ProposedEntries::default();
        let bytes = entry("a").encode();
        kept.keep(&bytes, entry("a"));
        assert!(kept.take(&entry("b").encode()).is_none());
        assert!(matches!(kept.take(&bytes), Some(LogEntry::EvalDelete { ids }) if ids == ["a"]));
        assert!(kept.take(&bytes).is_none(), "taken once");
    }

    #[test]
    fn the_oldest_entries_make_room_and_failed_proposals_are_forgotten() {
        let kept = ProposedEntries::default();
        for i in 0..=MAX_WAITING {
            let e = entry(&i.to_string());
            kept.keep(&e.encode(), e);
        }
        assert!(kept.take(&entry("0").encode()).is_none(), "the oldest went");
        let last = entry("last");
        let bytes = last.encode();
        let ticket = kept.keep(&bytes, last);
        kept.forget(ticket);
        assert!(kept.take(&bytes).is_none());
        assert!(
            kept.take(&entry(&MAX_WAITING.to_string()).encode())
                .is_some()
        );
    }
}
