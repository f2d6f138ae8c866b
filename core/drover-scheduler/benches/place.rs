//! Placement throughput of the generic scheduler: jobs of C allocations, each with a
//! constraint, placed one after another on N nodes (C1M's shape, scaled down). Run with
//! `cargo bench -p drover-scheduler --bench place`; `PLACE_NODES`, `PLACE_COUNT` and
//! `PLACE_JOBS` change the shape, `PLACE_PREFILL` puts that many allocations of another job on
//! every node first, `PLACE_SUMMARIES=0` makes the state answer without per-node usage
//! summaries. Prints one JSON line last; `placements_per_cpu_sec` counts this thread's CPU time
//! only, which other processes on a shared machine do not inflate.

use std::time::{Duration, Instant};

use drover_scheduler::harness::{Harness, NodeBuilder, mock_alloc, mock_job, register_eval};
use drover_scheduler::{Planner, SchedulerConfig, SchedulerError, State, process_eval};
use drover_structs::{Allocation, Evaluation, Plan, PlanResult};

/// CPU time of this thread: the figure that matters on a shared machine, where other
/// processes take the cores in turns.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Accepts every plan whole and keeps what it placed, so the bench can write it to the state
/// between evaluations. Its own copying is timed and left out of the scheduler's figure.
#[derive(Default)]
struct AcceptAll {
    placed: Vec<Allocation>,
    own_time: Duration,
    own_cpu: Duration,
}

impl Planner for AcceptAll {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Box<dyn State>>), SchedulerError> {
        let start = Instant::now();
        let cpu = thread_cpu();
        self.placed
            .extend(plan.node_allocation.values().flatten().cloned());
        let result = PlanResult {
            node_update: plan.node_update,
            node_allocation: plan.node_allocation,
            refresh_index: 0,
            alloc_index: 1,
            ..Default::default()
        };
        self.own_time += start.elapsed();
        self.own_cpu += thread_cpu().saturating_sub(cpu);
        Ok((result, None))
    }

    fn update_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }

    fn create_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let nodes = env("PLACE_NODES", 5000);
    let count = env("PLACE_COUNT", 1000);
    let jobs = env("PLACE_JOBS", 20);
    // Allocations of other jobs already on every node (C1M's last jobs find ~200 per node).
    let prefill = env("PLACE_PREFILL", 0);
    let summaries = env("PLACE_SUMMARIES", 1) != 0;

    let mut h = Harness::new();
    for i in 0..nodes {
        // One node in ten runs another kernel: the job's constraint filters it.
        let kernel = if i % 10 == 9 { "windows" } else { "linux" };
        let node = NodeBuilder::new()
            .name(&format!("node-{i}"))
            .attr("kernel.name", kernel)
            .attr("rack", &format!("r{}", i % 25))
            .build();
        h.upsert_node(node);
    }

    h.state.set_node_usage_summaries(summaries);
    if prefill > 0 {
        let mut filler = mock_job();
        filler.task_groups[0].tasks[0].resources.cpu = 1;
        filler.task_groups[0].tasks[0].resources.memory_mb = 1;
        let filler = h.upsert_job(filler);
        for node in h.state.nodes() {
            for i in 0..prefill {
                h.state.put_alloc(mock_alloc(&filler, &node, i as u64));
            }
        }
    }

    let config = SchedulerConfig::default();
    let mut sched_time = Duration::ZERO;
    let mut sched_cpu = Duration::ZERO;
    let mut worst = Duration::ZERO;
    let mut placements = 0usize;
    for _ in 0..jobs {
        let mut job = mock_job();
        job.task_groups[0].count = count as i64;
        job.task_groups[0].tasks[0].resources.cpu = 10;
        job.task_groups[0].tasks[0].resources.memory_mb = 16;
        if let Some(d) = job.task_groups[0].ephemeral_disk.as_mut() {
            d.size_mb = 10;
        }
        let job = h.upsert_job(job);
        let eval = register_eval(&job);
        let mut planner = AcceptAll::default();
        let start = Instant::now();
        let cpu = thread_cpu();
        process_eval(&h.state, &mut planner, &eval, &config).expect("evaluation processed");
        let took = start.elapsed().saturating_sub(planner.own_time);
        let took_cpu = thread_cpu()
            .saturating_sub(cpu)
            .saturating_sub(planner.own_cpu);
        sched_time += took;
        sched_cpu += took_cpu;
        if std::env::var_os("PLACE_VERBOSE").is_some() {
            eprintln!(
                "eval {:.2} ms, {} placed",
                took.as_secs_f64() * 1000.0,
                planner.placed.len()
            );
        }
        worst = worst.max(took);
        placements += planner.placed.len();
        if std::env::var_os("PLACE_NO_APPLY").is_none() {
            for a in planner.placed {
                h.state.put_alloc(a);
            }
        }
    }
    let secs = sched_time.as_secs_f64();
    let cpu_secs = sched_cpu.as_secs_f64();
    println!(
        "{{\"nodes\":{nodes},\"jobs\":{jobs},\"count\":{count},\"prefill_per_node\":{prefill},\"node_usage_summaries\":{summaries},\"placements\":{placements},\"seconds\":{secs:.4},\"cpu_seconds\":{cpu_secs:.4},\"placements_per_sec\":{:.0},\"placements_per_cpu_sec\":{:.0},\"worst_eval_ms\":{:.2}}}",
        placements as f64 / secs,
        placements as f64 / cpu_secs,
        worst.as_secs_f64() * 1000.0
    );
}
