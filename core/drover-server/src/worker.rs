//! Scheduler workers: take evaluations from the broker, run the scheduler on a snapshot at least
//! as new as the evaluation, and route its plans and evaluation updates back through the server.

use std::sync::Arc;
use std::time::Duration;

use drover_scheduler::{Planner, SchedulerError, State};
use drover_structs::{EVAL_STATUS_BLOCKED, Evaluation, Plan, PlanResult};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::broker::BrokerError;
use crate::fsm::LogEntry;
use crate::plan_apply::PlanRequest;
use crate::sched_state::SnapshotState;
use crate::server::Inner;

pub(crate) async fn run_worker(inner: Arc<Inner>, id: usize) {
    let mut shutdown = inner.shutdown_rx.clone();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let dequeuing = std::time::Instant::now();
        let next = tokio::select! {
            r = inner.broker.dequeue(Duration::from_secs(1)) => r,
            _ = shutdown.changed() => return,
        };
        let (eval, token) = match next {
            Ok(Some(x)) => {
                crate::metrics::record_time("nomad.nomad.worker.dequeue_eval", dequeuing.elapsed());
                x
            }
            Ok(None) => continue,
            Err(BrokerError::Disabled) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(worker = id, error = %e, "dequeue failed");
                continue;
            }
        };
        // The scheduler must see at least the state the evaluation was created in.
        if !inner
            .state
            .wait_for_index(eval.modify_index, Duration::from_secs(5))
            .await
        {
            let _ = inner.broker.nack(&eval.id, &token);
            continue;
        }
        let snap = inner.state.snapshot();
        let snapshot_index = snap.latest_index();
        let sched_config = crate::sched_config::effective(&inner.sched_config, &snap);
        let planner_inner = inner.clone();
        let handle = Handle::current();
        let eval_for_run = eval.clone();
        let invoked = std::time::Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let mut planner = WorkerPlanner {
                inner: planner_inner.clone(),
                rt: handle,
                snapshot_index,
            };
            drover_scheduler::process_eval(
                &SnapshotState(snap),
                &mut planner,
                &eval_for_run,
                &sched_config,
            )
        })
        .await;
        crate::metrics::record_time(
            &format!("nomad.nomad.worker.invoke_scheduler.{}", eval.eval_type),
            invoked.elapsed(),
        );
        match result {
            Ok(Ok(())) => {
                let _ = inner.broker.ack(&eval.id, &token);
            }
            // These were already recorded as failed on the evaluation: delivering them again
            // would fail the same way.
            Ok(Err(
                e @ (SchedulerError::UnsupportedJobType(_) | SchedulerError::MaxPlanAttempts(..)),
            )) => {
                tracing::warn!(worker = id, eval = %eval.id, error = %e, "evaluation failed");
                let _ = inner.broker.ack(&eval.id, &token);
            }
            Ok(Err(e)) => {
                tracing::warn!(worker = id, eval = %eval.id, error = %e, "scheduler failed");
                let _ = inner.broker.nack(&eval.id, &token);
            }
            Err(e) => {
                tracing::error!(worker = id, eval = %eval.id, error = %e, "scheduler panicked");
                let _ = inner.broker.nack(&eval.id, &token);
            }
        }
    }
}

/// The scheduler's `Planner`, used from a blocking thread.
struct WorkerPlanner {
    inner: Arc<Inner>,
    rt: Handle,
    /// The index of the snapshot the scheduler works on now.
    snapshot_index: u64,
}

impl WorkerPlanner {
    /// Hands the plan to the plan applier (`nomad.nomad.plan.submit`: until its result) and,
    /// when the plan was refused in part, waits for the state it must be retried on.
    fn submit_and_refresh(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError> {
        let submitted = std::time::Instant::now();
        let (tx, rx) = oneshot::channel();
        self.inner
            .plan_tx
            .blocking_send(PlanRequest { plan, reply: tx })
            .map_err(|_| SchedulerError::Planner("plan applier stopped".into()))?;
        let result = rx
            .blocking_recv()
            .map_err(|_| SchedulerError::Planner("plan applier dropped the plan".into()))?
            .map_err(SchedulerError::Planner)?;
        crate::metrics::record_time("nomad.nomad.plan.submit", submitted.elapsed());
        if result.refresh_index == 0 {
            return Ok((result, None));
        }
        let inner = self.inner.clone();
        let index = result.refresh_index;
        self.rt.block_on(async move {
            inner
                .state
                .wait_for_index(index, Duration::from_secs(5))
                .await
        });
        let snap = self.inner.state.snapshot();
        self.snapshot_index = snap.latest_index();
        Ok((result, Some(Box::new(SnapshotState(snap)))))
    }
}

impl Planner for WorkerPlanner {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError> {
        let submitting = std::time::Instant::now();
        let outcome = self.submit_and_refresh(plan);
        crate::metrics::record_time("nomad.nomad.worker.submit_plan", submitting.elapsed());
        outcome
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        let updating = std::time::Instant::now();
        let inner = self.inner.clone();
        let outcome = self
            .rt
            .block_on(async move {
                inner
                    .apply(LogEntry::EvalUpdate { evals: vec![eval] })
                    .await
            })
            .map(|_| ())
            .map_err(|e| SchedulerError::Planner(e.to_string()));
        crate::metrics::record_time("nomad.nomad.worker.update_eval", updating.elapsed());
        outcome
    }

    fn create_eval(&mut self, mut eval: Evaluation) -> Result<(), SchedulerError> {
        // What the scheduler saw, so a blocked evaluation can tell an unblock it missed (Nomad's
        // Worker.CreateEval).
        eval.snapshot_index = self.snapshot_index;
        let inner = self.inner.clone();
        let e = eval.clone();
        self.rt
            .block_on(async move { inner.apply(LogEntry::EvalUpdate { evals: vec![e] }).await })
            .map_err(|e| SchedulerError::Planner(e.to_string()))?;
        if eval.status == EVAL_STATUS_BLOCKED {
            let inner = self.inner.clone();
            self.rt
                .block_on(async move { inner.block_eval(eval).await });
        } else {
            self.inner.enqueue_when_due(eval);
        }
        Ok(())
    }
}
