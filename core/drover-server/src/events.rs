//! The event broker: what every committed log entry changed, as Nomad's event stream has it
//! (`/v1/event/stream`): a batch per Raft index of events with a topic (`Job`, `Evaluation`,
//! `Allocation`, `Node`), a type named after the entry (`JobRegistered`, `PlanResult`,
//! `AllocationUpdated`, ...), a key and the object as the state holds it after the entry.
//!
//! Fed by the FSM from committed entries only, so every server of a cluster streams the same
//! events for the same indexes. The newest `capacity` batches are kept (Nomad's
//! `event_buffer_size`, 100 by default), which lets a subscriber resume from an index while it
//! is still buffered. The objects are shared with the state store (`Arc`), and turned into
//! JSON only when a subscriber reads them.

mod source;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use drover_structs::{Allocation, Evaluation, Job, Node};
use serde::Serialize;
use serde::ser::SerializeMap;
use tokio::sync::watch;

pub(crate) use source::EntryEvents;

/// Nomad's default `event_buffer_size`.
pub const DEFAULT_BUFFER_SIZE: usize = 100;

/// The object an event carries, shared with the state store.
#[derive(Debug, Clone)]
pub enum Payload {
    Job(Arc<Job>),
    Evaluation(Arc<Evaluation>),
    /// Serialized without its job, as Nomad sends it ("to keep the event small").
    Allocation(Arc<Allocation>),
    /// Serialized without its secret.
    Node(Arc<Node>),
    Deployment(Arc<drover_structs::Deployment>),
    /// Serialized without its secret, as Nomad sends it.
    AclToken(Arc<drover_structs::AclToken>),
    AclPolicy(Arc<drover_structs::AclPolicy>),
    CsiVolume(Arc<drover_structs::csi::CsiVolume>),
    CsiPlugin(Arc<drover_structs::csi::CsiPlugin>),
    /// A native service registration that appeared or went with its allocation.
    Service(Arc<drover_structs::ServiceRegistration>),
}

impl Payload {
    pub fn topic(&self) -> &'static str {
        match self {
            Payload::Job(_) => "Job",
            Payload::Evaluation(_) => "Evaluation",
            Payload::Allocation(_) => "Allocation",
            Payload::Node(_) => "Node",
            Payload::Deployment(_) => "Deployment",
            Payload::AclToken(_) => "ACLToken",
            Payload::AclPolicy(_) => "ACLPolicy",
            Payload::CsiVolume(_) => "CSIVolume",
            Payload::CsiPlugin(_) => "CSIPlugin",
            Payload::Service(_) => "Service",
        }
    }

    /// Nomad's `Key` (the object's id), `Namespace` (empty for nodes) and `FilterKeys`.
    fn identity(&self) -> (&str, &str, Vec<&str>) {
        match self {
            Payload::Job(j) => (&j.id, &j.namespace, Vec::new()),
            Payload::Evaluation(e) => (&e.id, &e.namespace, vec![&e.job_id, &e.deployment_id]),
            Payload::Allocation(a) => (&a.id, &a.namespace, vec![&a.job_id, &a.deployment_id]),
            Payload::Node(n) => (&n.id, "", Vec::new()),
            Payload::Deployment(d) => (&d.id, &d.namespace, vec![&d.job_id]),
            Payload::AclToken(t) => (&t.accessor_id, "", Vec::new()),
            Payload::AclPolicy(p) => (&p.name, "", Vec::new()),
            Payload::CsiVolume(v) => (&v.id, &v.namespace, Vec::new()),
            Payload::CsiPlugin(p) => (&p.id, "", Vec::new()),
            Payload::Service(r) => (&r.id, &r.namespace, vec![&r.service_name, &r.job_id]),
        }
    }
}

/// One change: an object of a topic, and why it changed (the entry's type).
#[derive(Debug, Clone)]
pub struct Event {
    /// The Raft index of the entry that made the change.
    pub index: u64,
    pub event_type: &'static str,
    pub payload: Payload,
}

impl Event {
    pub fn topic(&self) -> &'static str {
        self.payload.topic()
    }

    pub fn key(&self) -> &str {
        self.payload.identity().0
    }

    pub fn namespace(&self) -> &str {
        self.payload.identity().1
    }

    /// Whether a subscription's key (a topic's filter) selects this event: its key or one of
    /// its filter keys (a job id for evaluations and allocations).
    pub fn matches_key(&self, key: &str) -> bool {
        let (own, _, filter) = self.payload.identity();
        key == "*" || own == key || filter.contains(&key)
    }
}

/// The events of one Raft index.
#[derive(Debug, Clone)]
pub struct EventBatch {
    pub index: u64,
    pub events: Vec<Event>,
}

/// `{"Index": N, "Events": [...]}`: one line of Nomad's stream for the events a subscriber
/// selected from a batch.
pub struct BatchJson<'a> {
    pub index: u64,
    pub events: Vec<&'a Event>,
}

impl Serialize for BatchJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("Index", &self.index)?;
        m.serialize_entry("Events", &self.events)?;
        m.end()
    }
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (key, namespace, filter) = self.payload.identity();
        let filter: Option<Vec<&str>> = (!filter.is_empty()).then_some(filter);
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("Topic", self.topic())?;
        m.serialize_entry("Type", self.event_type)?;
        m.serialize_entry("Key", key)?;
        m.serialize_entry("Namespace", namespace)?;
        m.serialize_entry("FilterKeys", &filter)?;
        m.serialize_entry("Index", &self.index)?;
        m.serialize_entry("Payload", &PayloadJson(&self.payload))?;
        m.end()
    }
}

struct PayloadJson<'a>(&'a Payload);

impl Serialize for PayloadJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        match self.0 {
            Payload::Job(j) => m.serialize_entry("Job", &**j)?,
            Payload::Evaluation(e) => m.serialize_entry("Evaluation", &**e)?,
            Payload::Allocation(a) => {
                if a.job.is_some() {
                    let mut stripped = (**a).clone();
                    stripped.job = None;
                    m.serialize_entry("Allocation", &stripped)?
                } else {
                    m.serialize_entry("Allocation", &**a)?
                }
            }
            Payload::Node(n) => m.serialize_entry("Node", &n.sanitized())?,
            Payload::Deployment(d) => m.serialize_entry("Deployment", &**d)?,
            Payload::AclToken(t) => {
                let mut redacted = (**t).clone();
                redacted.secret_id = String::new();
                m.serialize_entry("ACLToken", &redacted)?
            }
            Payload::AclPolicy(p) => m.serialize_entry("ACLPolicy", &**p)?,
            // Nomad's `CSIVolumeEvent` and `CSIPluginEvent`.
            Payload::CsiVolume(v) => m.serialize_entry("Volume", &v.sanitized())?,
            Payload::CsiPlugin(p) => m.serialize_entry("Plugin", &**p)?,
            Payload::Service(r) => m.serialize_entry("Service", &**r)?,
        }
        m.end()
    }
}

/// Keeps the newest batches and wakes subscribers when one arrives.
pub struct EventBroker {
    shared: Arc<Buffer>,
    /// Entries applied but not yet turned into events: the FSM (on the Raft thread) hands
    /// over what an entry touched and the state it left (an O(1) snapshot), and a thread of
    /// the broker's own looks the objects up, so the Raft thread pays for neither.
    pending: Option<Mutex<std::sync::mpsc::Sender<Applied>>>,
}

/// The batches and their watchers.
struct Buffer {
    capacity: usize,
    batches: Mutex<VecDeque<Arc<EventBatch>>>,
    /// The newest published index, watched by subscribers.
    newest: watch::Sender<u64>,
}

/// One applied entry on its way to the buffer.
enum Applied {
    /// What it touched and the state it left, to be looked up on the broker's thread (boxed:
    /// the state's table roots are most of a kilobyte).
    Touched(Box<(u64, EntryEvents, drover_state::StateSnapshot)>),
    /// Its batch, built by the FSM.
    Built(EventBatch),
}

impl Buffer {
    fn push(&self, batch: EventBatch) {
        if batch.events.is_empty() {
            return;
        }
        let index = batch.index;
        {
            let mut batches = lock(&self.batches);
            while batches.len() >= self.capacity {
                batches.pop_front();
            }
            batches.push_back(Arc::new(batch));
        }
        self.newest.send_replace(index);
    }
}

impl EventBroker {
    /// A broker keeping `capacity` batches; 0 disables it (nothing is kept or streamed).
    pub fn new(capacity: usize) -> EventBroker {
        let shared = Arc::new(Buffer {
            capacity,
            batches: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
            newest: watch::channel(0).0,
        });
        let pending = (capacity > 0)
            .then(|| {
                let (tx, rx) = std::sync::mpsc::channel::<Applied>();
                let buffer = shared.clone();
                // Ends when the broker (the sender) is dropped.
                std::thread::Builder::new()
                    .name("drover-events".into())
                    .spawn(move || {
                        for applied in rx {
                            let batch = match applied {
                                Applied::Touched(applied) => {
                                    let (index, touched, state) = *applied;
                                    touched.into_batch(index, &state)
                                }
                                Applied::Built(batch) => batch,
                            };
                            buffer.push(batch);
                        }
                    })
                    .ok()
                    .map(|_| Mutex::new(tx))
            })
            .flatten();
        EventBroker { shared, pending }
    }

    pub fn enabled(&self) -> bool {
        self.shared.capacity > 0
    }

    /// Publishes a batch as it is (tests, and callers that built the events themselves).
    pub fn publish(&self, batch: EventBatch) {
        if self.enabled() {
            self.shared.push(batch);
        }
    }

    /// Turns what entry `index` touched into its batch, from `state` (the state just after
    /// it), on the broker's thread; batches keep the order entries were applied in.
    pub(crate) fn publish_applied(
        &self,
        index: u64,
        touched: EntryEvents,
        state: drover_state::StateSnapshot,
    ) {
        match &self.pending {
            Some(_) => self.send(index, Applied::Touched(Box::new((index, touched, state)))),
            None => self.publish(touched.into_batch(index, &state)),
        }
    }

    /// Like `publish_applied`, but the batch is built here, from `state`, which is not kept:
    /// while the FSM applies a long run of entries (replay, catch-up), every state version
    /// still held when the next entry writes makes that write copy what it touches.
    pub(crate) fn publish_built(
        &self,
        index: u64,
        touched: EntryEvents,
        state: &drover_state::StateSnapshot,
    ) {
        let batch = touched.into_batch(index, state);
        match &self.pending {
            // Through the broker's thread all the same, behind the batches it still builds.
            Some(_) => self.send(index, Applied::Built(batch)),
            None => self.publish(batch),
        }
    }

    fn send(&self, index: u64, applied: Applied) {
        if let Some(tx) = &self.pending
            && lock(tx).send(applied).is_err()
        {
            tracing::warn!(index, "the event broker's thread is gone; event dropped");
        }
    }

    /// A subscription from `index` on: the buffered batches at or after it first (all of
    /// them for 0, or from the oldest still buffered when `index` is older), then new ones.
    pub fn subscribe(self: &Arc<Self>, index: u64) -> Subscription {
        Subscription {
            broker: self.clone(),
            next: index,
            newest: self.shared.newest.subscribe(),
        }
    }

    /// The buffered batches at or after `index`.
    fn since(&self, index: u64) -> Vec<Arc<EventBatch>> {
        lock(&self.shared.batches)
            .iter()
            .filter(|b| b.index >= index)
            .cloned()
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One reader of the broker.
pub struct Subscription {
    broker: Arc<EventBroker>,
    /// The lowest index not yet handed out.
    next: u64,
    newest: watch::Receiver<u64>,
}

impl Subscription {
    /// The next batches, waiting until there is at least one. A reader slower than the buffer
    /// goes on from the oldest batch still buffered (Nomad restarts it the same way).
    pub async fn next(&mut self) -> Vec<Arc<EventBatch>> {
        loop {
            self.newest.borrow_and_update();
            let batches = self.broker.since(self.next);
            if let Some(last) = batches.last() {
                self.next = last.index + 1;
                return batches;
            }
            if self.newest.changed().await.is_err() {
                // The broker is gone with its server: nothing more will come.
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(id: &str, job: &str) -> Event {
        Event {
            index: 0,
            event_type: "EvaluationUpdated",
            payload: Payload::Evaluation(Arc::new(Evaluation {
                id: id.into(),
                job_id: job.into(),
                namespace: "default".into(),
                ..Default::default()
            })),
        }
    }

    fn batch(index: u64, events: Vec<Event>) -> EventBatch {
        EventBatch { index, events }
    }

    #[tokio::test]
    async fn a_subscriber_gets_the_backlog_then_waits_for_new_batches() {
        let broker = Arc::new(EventBroker::new(10));
        broker.publish(batch(3, vec![eval("e1", "web")]));
        let mut sub = broker.subscribe(0);
        let first = sub.next().await;
        assert_eq!(first.iter().map(|b| b.index).collect::<Vec<_>>(), vec![3]);
        let waiting = tokio::spawn(async move { sub.next().await });
        tokio::task::yield_now().await;
        broker.publish(batch(5, vec![eval("e2", "web")]));
        let second = waiting.await.unwrap();
        assert_eq!(second.iter().map(|b| b.index).collect::<Vec<_>>(), vec![5]);
    }

    #[tokio::test]
    async fn the_buffer_keeps_the_newest_batches_and_resumes_from_an_index() {
        let broker = Arc::new(EventBroker::new(2));
        for i in 1..=4 {
            broker.publish(batch(i, vec![eval(&format!("e{i}"), "web")]));
        }
        let all = broker.subscribe(0).next().await;
        assert_eq!(all.iter().map(|b| b.index).collect::<Vec<_>>(), vec![3, 4]);
        let from_four = broker.subscribe(4).next().await;
        assert_eq!(
            from_four.iter().map(|b| b.index).collect::<Vec<_>>(),
            vec![4]
        );
        // An index older than the buffer starts at the oldest kept.
        let old = broker.subscribe(1).next().await;
        assert_eq!(old[0].index, 3);
    }

    #[test]
    fn a_disabled_broker_keeps_nothing() {
        let broker = EventBroker::new(0);
        broker.publish(batch(1, vec![eval("e1", "web")]));
        assert!(broker.since(0).is_empty());
    }

    #[test]
    fn events_serialize_as_nomads_with_filter_keys_and_the_payload_under_its_name() {
        let e = eval("e1", "web");
        let line = serde_json::to_value(BatchJson {
            index: 7,
            events: vec![&e],
        })
        .unwrap();
        assert_eq!(line["Index"], 7);
        let ev = &line["Events"][0];
        assert_eq!(ev["Topic"], "Evaluation");
        assert_eq!(ev["Type"], "EvaluationUpdated");
        assert_eq!(ev["Key"], "e1");
        assert_eq!(ev["Namespace"], "default");
        assert_eq!(ev["FilterKeys"], serde_json::json!(["web", ""]));
        assert_eq!(ev["Payload"]["Evaluation"]["ID"], "e1");
        assert!(e.matches_key("web") && e.matches_key("e1") && !e.matches_key("api"));
    }

    #[test]
    fn allocation_payloads_leave_out_the_job_and_nodes_their_secret() {
        let alloc = Allocation {
            id: "a1".into(),
            job: Some(Arc::new(Job::default())),
            ..Default::default()
        };
        let e = Event {
            index: 4,
            event_type: "PlanResult",
            payload: Payload::Allocation(Arc::new(alloc)),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert!(v["Payload"]["Allocation"]["Job"].is_null(), "{v}");
        let node = Node {
            id: "n1".into(),
            secret_id: "s3cret".into(),
            ..Default::default()
        };
        let e = Event {
            index: 5,
            event_type: "NodeRegistration",
            payload: Payload::Node(Arc::new(node)),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["Payload"]["Node"]["SecretID"], "", "{v}");
        assert_eq!(v["Index"], 5);
        assert_eq!(v["Namespace"], "");
    }
}
