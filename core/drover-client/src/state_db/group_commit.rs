//! Group commit for the client state file: writers that arrive while a commit is being made
//! wait for it to end and are then committed together, in one transaction with one fsync.
//!
//! Why: a burst of task starts saves one task handle each, from as many threads. redb lets one
//! write transaction run at a time, so each handle used to wait for every earlier one's fsync:
//! 100 starts made 100 fsyncs in a row. Grouped, every writer still returns only once its own
//! write is durable, and a burst costs a handful of fsyncs.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use redb::{Database, Durability, WriteTransaction};

/// One writer's changes. `Fn`, not `FnOnce`: when a grouped transaction fails, each body is
/// run again in a transaction of its own so that each writer gets its own outcome.
pub(super) type Body = Box<dyn Fn(&WriteTransaction) -> Result<(), redb::Error> + Send>;

/// Writers waiting for the next commit. One of them at a time commits for all that wait.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<Queue>,
    /// Signalled when a commit ends: its writers have their outcomes, and the next may begin.
    commit_ended: Condvar,
    #[cfg(test)]
    batches: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<(u64, Body)>,
    committing: bool,
    next_ticket: u64,
    outcomes: HashMap<u64, Result<(), redb::Error>>,
}

impl GroupCommit {
    /// Commits `body` durably, together with whatever other writers wait at the same time;
    /// returns once that commit is on disk. Blocks: call from a blocking thread.
    pub(super) fn write(&self, db: &Database, body: Body) -> Result<(), redb::Error> {
        let mut queue = self.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, body));
        loop {
            if let Some(outcome) = queue.outcomes.remove(&ticket) {
                return outcome;
            }
            if queue.committing {
                queue = self
                    .commit_ended
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // No commit running and this writer's body still waits: it commits the group.
            queue.committing = true;
            let batch = std::mem::take(&mut queue.waiting);
            drop(queue);
            let tickets: Vec<u64> = batch.iter().map(|(t, _)| *t).collect();
            #[cfg(test)]
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outcomes =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit_batch(db, batch)))
                    // A body that panicked must not leave the others waiting for ever.
                    .unwrap_or_else(|_| {
                        tickets
                            .iter()
                            .map(|t| (*t, Err(redb::Error::Io(std::io::Error::other("panicked")))))
                            .collect()
                    });
            queue = self.lock();
            queue.committing = false;
            queue.outcomes.extend(outcomes);
            self.commit_ended.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds no invariant a panicking holder could break half-way: every change
        // to it is one statement.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Commits `body` alone, durably.
pub(super) fn commit_one(
    db: &Database,
    body: &dyn Fn(&WriteTransaction) -> Result<(), redb::Error>,
) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    body(&txn)?;
    txn.commit()?;
    Ok(())
}

fn commit_batch(db: &Database, batch: Vec<(u64, Body)>) -> Vec<(u64, Result<(), redb::Error>)> {
    if let [(ticket, body)] = batch.as_slice() {
        return vec![(*ticket, commit_one(db, body))];
    }
    let together = commit_one(db, &|txn| batch.iter().try_for_each(|(_, body)| body(txn)));
    match together {
        Ok(()) => batch.into_iter().map(|(t, _)| (t, Ok(()))).collect(),
        // A failed transaction changed nothing. One writer's failure must not become the
        // others': each is tried alone and gets its own outcome.
        Err(_) => batch
            .into_iter()
            .map(|(t, body)| (t, commit_one(db, &body)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn db() -> (TempDir, Arc<Database>) {
        let dir =
            TempDir(std::env::temp_dir().join(format!("drover-group-{}", uuid::Uuid::new_v4())));
        std::fs::create_dir_all(&dir.0).expect("dir");
        let db = Database::create(dir.0.join("db.redb")).expect("create");
        (dir, Arc::new(db))
    }

    fn put(key: u64) -> Body {
        Box::new(move |txn| {
            txn.open_table(T)?.insert(key, key)?;
            Ok(())
        })
    }

    fn refused(why: &'static str) -> Body {
        Box::new(move |_| Err(redb::Error::Io(std::io::Error::other(why))))
    }

    fn count(db: &Database) -> u64 {
        let txn = db.begin_read().expect("read");
        txn.open_table(T)
            .map(|t| t.len().expect("len"))
            .unwrap_or(0)
    }

    #[test]
    fn writers_arriving_during_a_commit_are_committed_together_once_it_ends() {
        let (_dir, db) = db();
        let group = Arc::new(GroupCommit::default());
        // A commit in progress, as if another writer were fsyncing.
        group.lock().committing = true;
        let writers: Vec<_> = (0..16)
            .map(|i| {
                let (db, group) = (db.clone(), group.clone());
                std::thread::spawn(move || group.write(&db, put(i)))
            })
            .collect();
        while group.lock().waiting.len() < 16 {
            std::thread::yield_now();
        }
        assert_eq!(count(&db), 0, "nothing is written while they wait");
        {
            let mut queue = group.lock();
            queue.committing = false;
            group.commit_ended.notify_all();
        }
        for w in writers {
            w.join().expect("join").expect("write");
        }
        assert_eq!(count(&db), 16);
        assert_eq!(
            group.batches.load(Ordering::Relaxed),
            1,
            "one commit for all 16"
        );
        let queue = group.lock();
        assert!(queue.waiting.is_empty() && queue.outcomes.is_empty() && !queue.committing);
    }

    #[test]
    fn a_failing_writer_fails_alone() {
        let (_dir, db) = db();
        let outcomes = commit_batch(&db, vec![(0, refused("refused")), (1, put(7))]);
        assert!(outcomes[0].1.is_err());
        assert!(outcomes[1].1.is_ok());
        assert_eq!(count(&db), 1);
        // Through the queue, a lone failing writer gets its own error back.
        let err = GroupCommit::default()
            .write(&db, refused("no room"))
            .expect_err("fails");
        assert!(err.to_string().contains("no room"), "{err}");
    }

    #[test]
    fn a_panicking_writer_gets_an_error_and_the_next_writer_goes_on() {
        let (_dir, db) = db();
        let group = Arc::new(GroupCommit::default());
        let (g, d) = (group.clone(), db.clone());
        let outcome = std::thread::spawn(move || g.write(&d, Box::new(|_| panic!("boom"))))
            .join()
            .expect("the writer gets an error, not the panic");
        assert!(outcome.is_err());
        group.write(&db, put(1)).expect("next write");
        assert_eq!(count(&db), 1);
    }
}
