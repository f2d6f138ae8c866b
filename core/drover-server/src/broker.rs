//! The eval broker: a leader-only queue of evaluations for the scheduler workers.
//!
//! Guarantees: highest priority first (oldest first within a priority); at most one evaluation
//! per job outstanding (later ones for the same job wait behind it); at-least-once delivery:
//! an evaluation dequeued but not acked within the nack timeout is redelivered, up to the
//! delivery limit, after which it is handed back as failed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover_structs::Evaluation;
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BrokerError {
    #[error("evaluation {0} is not outstanding")]
    NotOutstanding(String),
    #[error("token does not match for evaluation {0}")]
    TokenMismatch(String),
    #[error("eval broker is disabled (this server is not the leader)")]
    Disabled,
}

struct Ready {
    priority: i64,
    seq: u64,
    eval: Arc<Evaluation>,
}

impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ready {
    fn cmp(&self, o: &Self) -> Ordering {
        // Max-heap: higher priority first, then lower sequence (older) first.
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

struct Unacked {
    eval: Arc<Evaluation>,
    token: String,
    deadline: Instant,
}

#[derive(Default)]
struct Inner {
    enabled: bool,
    seq: u64,
    ready: BinaryHeap<Ready>,
    /// Job key -> evaluation id currently ready or outstanding for that job.
    job_in_flight: HashMap<(String, String), String>,
    /// Evaluations waiting behind the in-flight one of their job.
    job_pending: HashMap<(String, String), VecDeque<Arc<Evaluation>>>,
    unacked: HashMap<String, Unacked>,
    deliveries: HashMap<String, u32>,
    /// Evaluations that exceeded the delivery limit, for the leader to mark failed.
    failed: Vec<Arc<Evaluation>>,
    /// Evaluation ids known to the broker, to drop duplicates.
    known: BTreeMap<String, ()>,
}

pub struct EvalBroker {
    inner: Mutex<Inner>,
    notify: Notify,
    nack_timeout: Duration,
    delivery_limit: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStats {
    pub ready: usize,
    pub unacked: usize,
    /// Evaluations waiting behind the outstanding one of their job (Nomad's broker "blocked").
    pub pending: usize,
    /// By scheduler type (`service`, `batch`, `system`, `_core`...): (ready, unacked).
    pub by_type: BTreeMap<String, (usize, usize)>,
}

impl EvalBroker {
    pub fn new(nack_timeout: Duration, delivery_limit: u32) -> Self {
        EvalBroker {
            inner: Mutex::new(Inner::default()),
            notify: Notify::new(),
            nack_timeout,
            delivery_limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The broker's invariants hold between statements; a panic elsewhere doesn't break them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Turns the broker on (leadership gained) or off (lost); turning it off drops everything.
    pub fn set_enabled(&self, enabled: bool) {
        let mut i = self.lock();
        if !enabled {
            *i = Inner::default();
        }
        i.enabled = enabled;
        drop(i);
        self.notify.notify_waiters();
    }

    pub fn enabled(&self) -> bool {
        self.lock().enabled
    }

    pub fn enqueue(&self, eval: Evaluation) {
        self.enqueue_all(vec![eval]);
    }

    pub fn enqueue_all(&self, evals: Vec<Evaluation>) {
        let mut i = self.lock();
        if !i.enabled {
            return;
        }
        for eval in evals {
            if i.known.contains_key(&eval.id) {
                continue;
            }
            i.known.insert(eval.id.clone(), ());
            let eval = Arc::new(eval);
            let jk = (eval.namespace.clone(), eval.job_id.clone());
            if i.job_in_flight.contains_key(&jk) {
                i.job_pending.entry(jk).or_default().push_back(eval);
                continue;
            }
            i.job_in_flight.insert(jk, eval.id.clone());
            push_ready(&mut i, eval);
        }
        drop(i);
        self.notify.notify_waiters();
    }

    /// Takes the next evaluation, waiting up to `timeout`. Returns it with its delivery token.
    pub async fn dequeue(
        &self,
        timeout: Duration,
    ) -> Result<Option<(Arc<Evaluation>, String)>, BrokerError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut i = self.lock();
                if !i.enabled {
                    return Err(BrokerError::Disabled);
                }
                self.requeue_expired(&mut i);
                if let Some(r) = i.ready.pop() {
                    let token = uuid::Uuid::new_v4().to_string();
                    *i.deliveries.entry(r.eval.id.clone()).or_insert(0) += 1;
                    i.unacked.insert(
                        r.eval.id.clone(),
                        Unacked {
                            eval: r.eval.clone(),
                            token: token.clone(),
                            deadline: Instant::now() + self.nack_timeout,
                        },
                    );
                    return Ok(Some((r.eval, token)));
                }
            }
            let next_expiry = {
                let i = self.lock();
                i.unacked.values().map(|u| u.deadline).min()
            };
            let wake = match next_expiry {
                Some(d) => {
                    let d = tokio::time::Instant::from_std(d);
                    if d < deadline { d } else { deadline }
                }
                None => deadline,
            };
            if tokio::time::timeout_at(wake, notified).await.is_err()
                && tokio::time::Instant::now() >= deadline
            {
                return Ok(None);
            }
        }
    }

    /// Redelivers evaluations whose nack timeout passed.
    fn requeue_expired(&self, i: &mut Inner) {
        let now = Instant::now();
        let expired: Vec<String> = i
            .unacked
            .iter()
            .filter(|(_, u)| u.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(u) = i.unacked.remove(&id) {
                self.redeliver_or_fail(i, u.eval);
            }
        }
    }

    fn redeliver_or_fail(&self, i: &mut Inner, eval: Arc<Evaluation>) {
        let count = i.deliveries.get(&eval.id).copied().unwrap_or(0);
        if count >= self.delivery_limit {
            i.failed.push(eval.clone());
            release_job(i, &eval);
        } else {
            push_ready(i, eval);
        }
    }

    /// The worker finished the evaluation.
    pub fn ack(&self, eval_id: &str, token: &str) -> Result<(), BrokerError> {
        let mut i = self.lock();
        let u = i
            .unacked
            .get(eval_id)
            .ok_or_else(|| BrokerError::NotOutstanding(eval_id.into()))?;
        if u.token != token {
            return Err(BrokerError::TokenMismatch(eval_id.into()));
        }
        let u = i
            .unacked
            .remove(eval_id)
            .ok_or_else(|| BrokerError::NotOutstanding(eval_id.into()))?;
        i.deliveries.remove(eval_id);
        i.known.remove(eval_id);
        release_job(&mut i, &u.eval);
        drop(i);
        self.notify.notify_waiters();
        Ok(())
    }

    /// The worker failed the evaluation: deliver it again (or fail it at the delivery limit).
    pub fn nack(&self, eval_id: &str, token: &str) -> Result<(), BrokerError> {
        let mut i = self.lock();
        let u = i
            .unacked
            .get(eval_id)
            .ok_or_else(|| BrokerError::NotOutstanding(eval_id.into()))?;
        if u.token != token {
            return Err(BrokerError::TokenMismatch(eval_id.into()));
        }
        let u = i
            .unacked
            .remove(eval_id)
            .ok_or_else(|| BrokerError::NotOutstanding(eval_id.into()))?;
        self.redeliver_or_fail(&mut i, u.eval);
        drop(i);
        self.notify.notify_waiters();
        Ok(())
    }

    /// Evaluations that hit the delivery limit since the last call.
    pub fn take_failed(&self) -> Vec<Arc<Evaluation>> {
        std::mem::take(&mut self.lock().failed)
    }

    pub fn stats(&self) -> BrokerStats {
        let i = self.lock();
        // Every scheduler is listed (at zero when idle), as Nomad's broker lists those it saw.
        let mut by_type: BTreeMap<String, (usize, usize)> =
            ["_core", "batch", "service", "sysbatch", "system"]
                .into_iter()
                .map(|t| (t.to_string(), (0, 0)))
                .collect();
        for r in &i.ready {
            by_type.entry(r.eval.eval_type.clone()).or_default().0 += 1;
        }
        for u in i.unacked.values() {
            by_type.entry(u.eval.eval_type.clone()).or_default().1 += 1;
        }
        BrokerStats {
            ready: i.ready.len(),
            unacked: i.unacked.len(),
            pending: i.job_pending.values().map(VecDeque::len).sum(),
            by_type,
        }
    }
}

fn push_ready(i: &mut Inner, eval: Arc<Evaluation>) {
    i.seq += 1;
    let seq = i.seq;
    i.ready.push(Ready {
        priority: eval.priority,
        seq,
        eval,
    });
}

/// The job's outstanding evaluation is done: let the next one of that job through.
fn release_job(i: &mut Inner, eval: &Evaluation) {
    let jk = (eval.namespace.clone(), eval.job_id.clone());
    if i.job_in_flight.get(&jk) != Some(&eval.id) {
        return;
    }
    i.job_in_flight.remove(&jk);
    let next = i.job_pending.get_mut(&jk).and_then(VecDeque::pop_front);
    if i.job_pending.get(&jk).is_some_and(VecDeque::is_empty) {
        i.job_pending.remove(&jk);
    }
    if let Some(next) = next {
        i.job_in_flight.insert(jk, next.id.clone());
        push_ready(i, next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(id: &str, job: &str, priority: i64) -> Evaluation {
        Evaluation {
            id: id.into(),
            namespace: "default".into(),
            job_id: job.into(),
            priority,
            ..Default::default()
        }
    }

    fn broker() -> EvalBroker {
        let b = EvalBroker::new(Duration::from_millis(100), 2);
        b.set_enabled(true);
        b
    }

    const T: Duration = Duration::from_millis(500);

    #[tokio::test]
    async fn dequeues_by_priority_then_age() {
        let b = broker();
        b.enqueue(eval("low", "a", 10));
        b.enqueue(eval("high", "b", 90));
        b.enqueue(eval("mid1", "c", 50));
        b.enqueue(eval("mid2", "d", 50));
        let order: Vec<String> = futures_ids(&b, 4).await;
        assert_eq!(order, ["high", "mid1", "mid2", "low"]);
    }

    async fn futures_ids(b: &EvalBroker, n: usize) -> Vec<String> {
        let mut out = vec![];
        for _ in 0..n {
            let (e, t) = b.dequeue(T).await.unwrap().unwrap();
            b.ack(&e.id, &t).unwrap();
            out.push(e.id.clone());
        }
        out
    }

    #[tokio::test]
    async fn one_outstanding_eval_per_job() {
        let b = broker();
        b.enqueue(eval("e1", "job", 50));
        b.enqueue(eval("e2", "job", 50));
        let (e, t) = b.dequeue(T).await.unwrap().unwrap();
        assert_eq!(e.id, "e1");
        assert!(
            b.dequeue(Duration::from_millis(30))
                .await
                .unwrap()
                .is_none()
        );
        b.ack("e1", &t).unwrap();
        let (e, _) = b.dequeue(T).await.unwrap().unwrap();
        assert_eq!(e.id, "e2");
    }

    #[tokio::test]
    async fn unacked_eval_is_redelivered_then_failed_at_limit() {
        let b = broker();
        b.enqueue(eval("e1", "job", 50));
        let (_, t1) = b.dequeue(T).await.unwrap().unwrap();
        // Not acked: comes back after the nack timeout.
        let (e, t2) = b.dequeue(T).await.unwrap().unwrap();
        assert_eq!(e.id, "e1");
        assert_ne!(t1, t2);
        assert_eq!(
            b.ack("e1", &t1),
            Err(BrokerError::TokenMismatch("e1".into()))
        );
        b.nack("e1", &t2).unwrap();
        assert!(
            b.dequeue(Duration::from_millis(30))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(b.take_failed().len(), 1);
    }

    #[tokio::test]
    async fn disabled_broker_refuses() {
        let b = EvalBroker::new(T, 3);
        assert_eq!(b.dequeue(T).await.unwrap_err(), BrokerError::Disabled);
    }
}
