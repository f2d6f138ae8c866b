//! One timer thread for all mock tasks of a driver: a heap of (due time, task, event), served in
//! order. A thousand tasks cost a thousand heap entries, not a thousand threads.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use crate::task::{Event, MockTask};

struct Timer {
    at: Instant,
    /// Breaks ties so that events due at the same instant run in the order scheduled.
    seq: u64,
    /// Weak: a destroyed task's pending timers simply find nothing to do.
    task: Weak<MockTask>,
    event: Event,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Timer>>,
    next_seq: u64,
    thread_running: bool,
    shutdown: bool,
}

impl Queue {
    fn push(&mut self, at: Instant, task: Weak<MockTask>, event: Event) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Reverse(Timer {
            at,
            seq,
            task,
            event,
        }));
    }
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Delivers task events at their due time from one lazily started thread, which ends when the
/// scheduler is dropped.
#[derive(Default)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

impl Scheduler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn schedule(&self, task: &Arc<MockTask>, at: Instant, event: Event) -> io::Result<()> {
        let mut queue = self.shared.lock();
        if !queue.thread_running {
            let shared = Arc::clone(&self.shared);
            std::thread::Builder::new()
                .name("drover-mock-timer".to_string())
                .spawn(move || run(&shared))?;
            queue.thread_running = true;
        }
        queue.push(at, Arc::downgrade(task), event);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Number of timers not yet due (for tests and diagnostics).
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.shared.lock().heap.len()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
    }
}

fn run(shared: &Shared) {
    let mut queue = shared.lock();
    loop {
        if queue.shutdown {
            return;
        }
        let now = Instant::now();
        let due = queue.heap.peek().map(|Reverse(timer)| timer.at);
        match due {
            None => {
                queue = shared
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            Some(at) if at > now => {
                queue = shared
                    .wake
                    .wait_timeout(queue, at - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            Some(_) => {
                let Some(Reverse(timer)) = queue.heap.pop() else {
                    continue;
                };
                // Tasks are advanced without the queue lock so that `schedule` never waits on
                // a task's work.
                drop(queue);
                let next = timer.task.upgrade().and_then(|task| {
                    let next = task.on_event(timer.event, now)?;
                    Some((Arc::downgrade(&task), next))
                });
                queue = shared.lock();
                if let Some((task, (at, event))) = next {
                    queue.push(at, task, event);
                }
            }
        }
    }
}
