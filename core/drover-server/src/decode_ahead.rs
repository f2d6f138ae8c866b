//! Log entries decoded on a thread of their own while the FSM applies the ones before them.
//!
//! A follower catching up, or a server replaying its log after a restart, applies hundreds of
//! plan entries in a row, and decoding one (thousands of allocations of JSON) costs about as
//! much as applying it. Raft hands the FSM the whole run first (`StateMachine::prepare`);
//! the entries are decoded in order here, a few ahead of `apply`, which takes each only when
//! it asks for that index with exactly those bytes. Anything else (an entry this server
//! proposed, already decoded; a run replaced by the next) is decoded as usual, so the bytes
//! stay the only truth and the order of application never changes.

use std::sync::mpsc::{Receiver, sync_channel};

use drover_raft::Bytes;

use crate::fsm::{FsmError, LogEntry};

/// Decoded entries waiting for `apply` at most: bounds the memory held ahead of it.
const AHEAD: usize = 4;
/// A run is decoded ahead only from this many entries and bytes: a replay or a catch-up, not
/// the few entries of one Ready on a busy server, where waiting on another thread for each
/// entry costs more than decoding it here.
pub(crate) const MIN_ENTRIES: usize = 32;
const MIN_BYTES: usize = 4 * 1024 * 1024;

type Decoded = (u64, Bytes, Result<LogEntry, FsmError>);

#[derive(Default)]
pub(crate) struct DecodeAhead {
    decoded: Option<Receiver<Decoded>>,
    /// Received for an index `apply` has not asked for yet.
    peeked: Option<Decoded>,
}

impl DecodeAhead {
    /// Starts decoding `entries` (in log order) ahead; a run still being decoded is dropped.
    pub(crate) fn start(&mut self, entries: Vec<(u64, Bytes)>) {
        self.decoded = None;
        self.peeked = None;
        let bytes: usize = entries.iter().map(|(_, b)| b.len()).sum();
        if entries.len() < MIN_ENTRIES || bytes < MIN_BYTES {
            return;
        }
        let (send, decoded) = sync_channel(AHEAD);
        let spawned = std::thread::Builder::new()
            .name("drover-decode-ahead".into())
            .spawn(move || {
                for (index, data) in entries {
                    let entry = LogEntry::decode(&data);
                    // Gone: `apply` moved on to another run, or the server stops.
                    if send.send((index, data, entry)).is_err() {
                        return;
                    }
                }
            });
        // Without a thread, entries are decoded by `apply` as usual.
        if spawned.is_ok() {
            self.decoded = Some(decoded);
        }
    }

    /// Whether a run of entries is being applied (some of it may still be decoding).
    pub(crate) fn running(&self) -> bool {
        self.decoded.is_some() || self.peeked.is_some()
    }

    /// The entry at `index` if it was decoded ahead from exactly `data`.
    pub(crate) fn take(&mut self, index: u64, data: &[u8]) -> Option<Result<LogEntry, FsmError>> {
        loop {
            let next = match self.peeked.take() {
                Some(peeked) => peeked,
                None => match self.decoded.as_ref()?.recv() {
                    Ok(next) => next,
                    Err(_) => {
                        self.decoded = None;
                        return None;
                    }
                },
            };
            if next.0 > index {
                self.peeked = Some(next);
                return None;
            }
            if next.0 == index {
                return (*next.1 == *data).then_some(next.2);
            }
            // An index before `index`: one `apply` took otherwise; dropped.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsm::LogEntry;

    fn entry(n: usize) -> Bytes {
        // A run of `MIN_ENTRIES` of them is large enough to be decoded ahead.
        let id = format!("{n}{}", "x".repeat(MIN_BYTES / MIN_ENTRIES));
        Bytes::from(LogEntry::EvalDelete { ids: vec![id] }.encode())
    }

    #[test]
    fn entries_decoded_ahead_are_given_only_for_their_index_and_bytes() {
        let run: Vec<_> = (1..=MIN_ENTRIES as u64)
            .map(|i| (i, entry(i as usize)))
            .collect();
        let mut ahead = DecodeAhead::default();
        ahead.start(run.clone());
        assert!(ahead.take(1, &run[0].1).unwrap().is_ok());
        // Other bytes at index 2: not given (decoded as usual by the caller).
        assert!(ahead.take(2, b"other").is_none());
        // Index 3 skipped by the caller: 4 is still given.
        assert!(ahead.take(4, &run[3].1).unwrap().is_ok());
        assert!(ahead.take(5, &run[3].1).is_none());
        // Past the run's end: nothing more.
        let last = MIN_ENTRIES as u64;
        assert!(ahead.take(last + 1, &run[3].1).is_none());
    }

    #[test]
    fn a_short_run_is_not_decoded_ahead() {
        let few: Vec<_> = (1..=4u64).map(|i| (i, entry(i as usize))).collect();
        let mut ahead = DecodeAhead::default();
        ahead.start(few.clone());
        assert!(!ahead.running());
        assert!(ahead.take(1, &few[0].1).is_none());
    }
}
