//! Where driver calls that may block for an unbounded time run: a task's stop (up to its kill
//! timeout), a blocking wait for its exit, an artifact download, an allocation network set
//! up or torn down (CNI plugins, a driver's namespace). Starts are bounded in number and run
//! on the runtime's blocking pool (`task_runner`).
//!
//! Not on tokio's blocking pool: it is bounded, and sixteen stops waiting out their kill
//! timeouts would hold every other blocking call (state writes, allocation directories)
//! behind them. Not a thread per call either, which is what this replaced: every thread has
//! an allocator heap of its own, and whatever a call allocated that outlived it (a driver's
//! record of a task) kept a mostly empty page of that heap once the thread was gone. With
//! starts on threads of their own, 1,000 tasks held 152-157 MB; on the blocking pool's 16
//! threads, 138 MB (BENCHMARKS.md, issue 18). Here idle threads are reused, so a burst of
//! calls runs on as many threads as run at once, and a thread left idle for [`KEEP_ALIVE`]
//! exits.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long an idle thread waits for another call before it exits: as long as the runtime's
/// blocking-pool threads, for the same reason (a burst's threads are gone before the agent
/// trims itself once the burst is over).
const KEEP_ALIVE: Duration = Duration::from_secs(2);

/// A call as queued: it runs the driver call and returns what delivers the result, so that
/// the thread counts as free again before its caller can submit the next call.
type Call = Box<dyn FnOnce() -> Deliver + Send>;
type Deliver = Box<dyn FnOnce() + Send>;

struct Pool {
    state: Mutex<PoolState>,
    call_waiting: Condvar,
}

struct PoolState {
    /// Calls waiting for a thread, each with its number.
    calls: VecDeque<(u64, Call)>,
    next_call: u64,
    /// Threads of the pool.
    threads: usize,
    /// Of those, the ones not running a call: waiting for one, about to look for one, or
    /// just started for one. The pool keeps `idle >= calls.len()`: every queued call has a
    /// thread that will take it.
    idle: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(PoolState {
        calls: VecDeque::new(),
        next_call: 0,
        threads: 0,
        idle: 0,
    }),
    call_waiting: Condvar::new(),
};

/// Runs `call` on a pool thread and waits for its result without holding a runtime worker.
pub(crate) async fn run<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    submit(Box::new(move || {
        let result = call();
        Box::new(move || {
            let _ = tx.send(result);
        })
    }))?;
    rx.await.map_err(|_| "the driver call panicked".to_string())
}

fn submit(call: Call) -> Result<(), String> {
    let mut state = lock();
    let number = state.next_call;
    state.next_call += 1;
    state.calls.push_back((number, call));
    if state.idle >= state.calls.len() {
        POOL.call_waiting.notify_one();
        return Ok(());
    }
    state.threads += 1;
    state.idle += 1;
    drop(state);
    let spawned = std::thread::Builder::new()
        .name("drover-driver-call".into())
        .spawn(serve);
    let Err(e) = spawned else {
        return Ok(());
    };
    let mut state = lock();
    state.threads -= 1;
    state.idle -= 1;
    if state.threads > 0 {
        // A busy thread takes the call once it is done with its own.
        return Ok(());
    }
    // No thread will ever take it: it must not run later, unseen by its caller.
    state.calls.retain(|(n, _)| *n != number);
    Err(format!("starting a thread for a driver call: {e}"))
}

/// A pool thread: runs calls until none came for [`KEEP_ALIVE`].
fn serve() {
    loop {
        let call = {
            let mut state = lock();
            loop {
                if let Some((_, call)) = state.calls.pop_front() {
                    state.idle -= 1;
                    break call;
                }
                let (next, waited) = POOL
                    .call_waiting
                    .wait_timeout(state, KEEP_ALIVE)
                    .unwrap_or_else(|e| e.into_inner());
                state = next;
                if waited.timed_out() && state.calls.is_empty() {
                    state.idle -= 1;
                    state.threads -= 1;
                    return;
                }
            }
        };
        // A panicking call drops its result sender: its caller gets an error.
        let deliver = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
        lock().idle += 1;
        if let Ok(deliver) = deliver {
            deliver();
        }
    }
}

fn lock() -> MutexGuard<'static, PoolState> {
    // Every change to the state is a single statement under the lock: a panic elsewhere
    // cannot leave it half-changed.
    POOL.state.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|dir| {
                dir.filter_map(|t| t.ok())
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == name)
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_in_a_row_reuse_one_thread_and_calls_at_once_get_a_thread_each() {
        // In a row, each once the previous call's thread is idle again: that thread serves it.
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.push(run(|| std::thread::current().id()).await.expect("call"));
            loop {
                let settled = {
                    let state = lock();
                    state.idle > 0 && state.calls.is_empty()
                };
                if settled {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        ids.sort_by_key(|id| format!("{id:?}"));
        ids.dedup();
        // One thread; the bound leaves room for another test's calls in the same process.
        assert!(
            ids.len() <= 3,
            "20 calls in a row used {} threads",
            ids.len()
        );

        // At once, blocking: none waits for another (a pool bound would deadlock here).
        let started = Arc::new(AtomicUsize::new(0));
        let all_started = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new((Mutex::new(false), Condvar::new()));
        let calls: Vec<_> = (0..24)
            .map(|_| {
                let (started, all_started, release) =
                    (started.clone(), all_started.clone(), release.clone());
                tokio::spawn(run(move || {
                    if started.fetch_add(1, Ordering::SeqCst) + 1 == 24 {
                        all_started.notify_one();
                    }
                    let (go, cv) = &*release;
                    let mut go = go.lock().expect("lock");
                    while !*go {
                        go = cv.wait(go).expect("wait");
                    }
                }))
            })
            .collect();
        all_started.notified().await;
        assert!(threads_named("drover-driver-c") >= 24);
        {
            let (go, cv) = &*release;
            *go.lock().expect("lock") = true;
            cv.notify_all();
        }
        for c in calls {
            c.await.expect("join").expect("call");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_call_is_an_error_and_the_pool_goes_on() {
        let err = run(|| panic!("driver bug")).await.expect_err("panicked");
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(run(|| 7).await.expect("next call"), 7);
    }
}
