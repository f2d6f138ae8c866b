//! The operator's scheduler configuration (Nomad's `Operator.SchedulerGetConfiguration` and
//! `SchedulerSetConfiguration`): read from the state, changed through the log (optionally with
//! check-and-set), and read by every scheduler run. Pausing the eval broker takes effect on the
//! leader as soon as the change applies.

use std::sync::Arc;

use drover_scheduler::SchedulerConfig;
use drover_state::{StateSnapshot, Table};
use drover_structs::SchedulerConfiguration;

use crate::ServerError;
use crate::fsm::LogEntry;
use crate::rpc::{Reply, Request};
use crate::server::{Inner, Server};

/// What the FSM answers when a check-and-set finds another `ModifyIndex`.
pub(crate) const CAS_REJECTED: &str = "scheduler configuration check-and-set index mismatch";

/// The scheduler settings of a run: the server's (ports) with the stored operator settings.
pub(crate) fn effective(base: &SchedulerConfig, snap: &StateSnapshot) -> SchedulerConfig {
    base.with_operator_config(&snap.effective_scheduler_config())
}

impl Server {
    /// The configuration in force (the stored one, else Nomad's default with zero indexes)
    /// and the index to report with it. Unless `stale`, read after catching up with the leader.
    pub async fn scheduler_config(
        &self,
        stale: bool,
    ) -> Result<(SchedulerConfiguration, u64), ServerError> {
        if !stale {
            self.read_barrier().await?;
        }
        let snap = self.snapshot();
        let index = snap.table_index(Table::SchedulerConfig);
        Ok((snap.effective_scheduler_config(), index))
    }

    /// Replaces the scheduler configuration. With `cas`, only if the stored `ModifyIndex` is
    /// still that value (0: none stored yet). Returns whether it was written, and the index.
    pub async fn set_scheduler_config(
        &self,
        config: SchedulerConfiguration,
        cas: Option<u64>,
    ) -> Result<(bool, u64), ServerError> {
        config.validate().map_err(ServerError::BadRequest)?;
        match self
            .route(Request::SetSchedulerConfig { config, cas })
            .await?
        {
            Reply::Updated { updated, index } => Ok((updated, index)),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    /// On the leader.
    pub(crate) async fn set_scheduler_config_here(
        &self,
        mut config: SchedulerConfiguration,
        cas: Option<u64>,
    ) -> Result<Reply, ServerError> {
        config.validate().map_err(ServerError::BadRequest)?;
        config.canonicalize();
        match self
            .inner
            .apply_checked(LogEntry::SchedulerConfigUpdate { config, cas })
            .await
        {
            Ok(index) => {
                sync_broker_pause(&self.inner).await;
                Ok(Reply::Updated {
                    updated: true,
                    index,
                })
            }
            // Nomad answers a lost check-and-set with `Updated: false`, not an error.
            Err(ServerError::Conflict(why)) if why == CAS_REJECTED => Ok(Reply::Updated {
                updated: false,
                index: self.inner.state.latest_index(),
            }),
            Err(e) => Err(e),
        }
    }
}

/// Whether the stored configuration pauses the eval broker.
pub(crate) fn broker_paused(snap: &StateSnapshot) -> bool {
    snap.scheduler_config().is_some_and(|c| c.pause_eval_broker)
}

/// On the leader, makes the broker follow `PauseEvalBroker`: pausing disables it (workers get
/// nothing), unpausing restarts the leader's subsystems so pending evaluations are enqueued
/// again from the state.
pub(crate) async fn sync_broker_pause(inner: &Arc<Inner>) {
    if !inner.is_leader() {
        return;
    }
    let paused = broker_paused(&inner.state.snapshot());
    if paused && inner.broker.enabled() {
        tracing::info!("eval broker paused by the scheduler configuration");
        inner.broker.set_enabled(false);
    } else if !paused && !inner.broker.enabled() {
        tracing::info!("eval broker resumed by the scheduler configuration");
        crate::server::reestablish_leadership(inner).await;
    }
}
