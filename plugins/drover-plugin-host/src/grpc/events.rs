//! Task events from a plugin (Nomad's `TaskEvents` stream of `DriverTaskEvent`s). The agent
//! subscribes once per connection, before any call can start a task, and hands every event to
//! the listeners of the driver object and to the agent's log.
//!
//! The driver object's own subscription answers the contract's `Driver::task_events` (the
//! agent's way to them); other listeners get them from
//! [`super::GrpcDriver::subscribe_task_events`].

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use drover_plugin_proto::drivers::{self as pb, driver_client::DriverClient};
use tokio::sync::watch;
use tonic::Streaming;
use tonic::transport::Channel;

use super::lock;

/// One event a plugin reported about one of its tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginTaskEvent {
    pub task_id: String,
    pub alloc_id: String,
    pub task_name: String,
    /// Unix time in nanoseconds (0 when the plugin sent none).
    pub timestamp: i64,
    pub message: String,
    pub annotations: BTreeMap<String, String>,
}

impl PluginTaskEvent {
    fn from_wire(e: pb::DriverTaskEvent) -> PluginTaskEvent {
        let timestamp = e.timestamp.map_or(0, |t| {
            t.seconds
                .saturating_mul(1_000_000_000)
                .saturating_add(i64::from(t.nanos))
        });
        PluginTaskEvent {
            task_id: e.task_id,
            alloc_id: e.alloc_id,
            task_name: e.task_name,
            timestamp,
            message: e.message,
            annotations: e.annotations.into_iter().collect(),
        }
    }
}

impl From<PluginTaskEvent> for drover_abi::DriverTaskEvent {
    fn from(e: PluginTaskEvent) -> Self {
        drover_abi::DriverTaskEvent {
            task_id: e.task_id,
            alloc_id: e.alloc_id,
            task_name: e.task_name,
            timestamp: e.timestamp,
            message: e.message,
            annotations: e.annotations,
        }
    }
}

/// The listeners of one plugin's events; they stay across plugin restarts.
#[derive(Default)]
pub struct EventHub {
    listeners: Mutex<Vec<Sender<PluginTaskEvent>>>,
}

impl EventHub {
    pub fn subscribe(&self) -> Receiver<PluginTaskEvent> {
        let (tx, rx) = channel();
        lock(&self.listeners).push(tx);
        rx
    }

    /// Hands `event` to every listener still there.
    fn publish(&self, event: &PluginTaskEvent) {
        lock(&self.listeners).retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// The TaskEvents call, under way: it resolves to the stream of the plugin's task events, or
/// to `None` when the plugin refuses one (then it has no events to report, and that is not a
/// reason to refuse the plugin).
pub type PendingEvents = tokio::task::JoinHandle<Option<Streaming<pb::DriverTaskEvent>>>;

/// Starts the TaskEvents call on the current runtime without waiting for its answer. Go
/// plugins (Nomad's server side on grpc-go) send a server stream's response headers with its
/// first message only, so a plugin with no event yet does not answer the call at all: waiting
/// for that answer here would hold up the plugin's start and lose its events.
pub fn open(driver: &DriverClient<Channel>, plugin: &str) -> PendingEvents {
    let mut driver = driver.clone();
    let plugin = plugin.to_string();
    tokio::spawn(async move {
        match driver.task_events(pb::TaskEventsRequest {}).await {
            Ok(response) => Some(response.into_inner()),
            Err(s) => {
                tracing::debug!(plugin, error = %s.message(), "the plugin offers no task events");
                None
            }
        }
    })
}

/// Forwards the events of the `pending` stream to `hub` and the log, on the plugin runtime, until the
/// stream ends (the plugin went away: its successor is followed anew) or `stop` fires.
pub fn follow(
    pending: PendingEvents,
    hub: Arc<EventHub>,
    plugin: String,
    mut stop: watch::Receiver<bool>,
) {
    let runtime = match super::runtime::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(plugin = %plugin, error = %e, "cannot follow the plugin's task events");
            return;
        }
    };
    runtime.spawn(async move {
        let mut stream = tokio::select! {
            opened = pending => match opened {
                Ok(Some(stream)) => stream,
                _ => return,
            },
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        loop {
            let next = tokio::select! {
                next = stream.message() => next,
                _ = stop.wait_for(|stopped| *stopped) => return,
            };
            match next {
                Ok(Some(wire)) => {
                    let event = PluginTaskEvent::from_wire(wire);
                    tracing::info!(
                        plugin = %plugin,
                        task = %event.task_id,
                        "driver event: {}",
                        event.message
                    );
                    hub.publish(&event);
                }
                Ok(None) => return,
                Err(s) => {
                    tracing::debug!(plugin = %plugin, error = %s.message(), "the task events stream ended");
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wire_event_keeps_its_fields_and_reaches_every_listener_still_there() {
        let hub = EventHub::default();
        let first = hub.subscribe();
        let gone = hub.subscribe();
        drop(gone);
        let event = PluginTaskEvent::from_wire(pb::DriverTaskEvent {
            task_id: "a/t/1".into(),
            alloc_id: "a".into(),
            task_name: "t".into(),
            timestamp: Some(prost_types::Timestamp {
                seconds: 3,
                nanos: 4,
            }),
            message: "image pulled".into(),
            annotations: [("image".to_string(), "busybox".to_string())].into(),
        });
        assert_eq!(event.timestamp, 3_000_000_004);
        assert_eq!(event.annotations["image"], "busybox");
        hub.publish(&event);
        assert_eq!(first.try_recv().unwrap(), event);
        assert_eq!(
            lock(&hub.listeners).len(),
            1,
            "the dropped listener is forgotten"
        );
    }
}
