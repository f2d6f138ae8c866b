//! Resource usage of an allocation's running tasks in Nomad's `AllocResourceUsage` shape
//! (`GET /v1/client/allocation/:alloc_id/stats`), sampled from the drivers when asked.
//!
//! The task runners record which driver task runs for each task ([`LiveTasks`]); a request
//! samples each with `task_stats`. The contract reports cumulative CPU ticks (USER_HZ, 100 per
//! second), so CPU percent is the rate between this sample and the previous one; a task sampled
//! for the first time is sampled twice, [`FIRST_RATE_WINDOW`] apart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use drover_abi::Driver;
use serde::{Deserialize, Serialize};

/// The gap between the two samples of a task sampled for the first time.
pub const FIRST_RATE_WINDOW: Duration = Duration::from_millis(200);

/// Nomad's `MemoryStats`. Only `RSS` is measured: it is what the driver contract reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MemoryStats {
    #[serde(rename = "RSS")]
    pub rss: u64,
    pub cache: u64,
    pub swap: u64,
    pub usage: u64,
    pub max_usage: u64,
    pub kernel_usage: u64,
    pub kernel_max_usage: u64,
    pub measured: Vec<String>,
}

/// Nomad's `CpuStats`. `TotalTicks` is the MHz in use (Nomad's meaning), `Percent` the share of
/// one core.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CpuStats {
    pub system_mode: f64,
    pub user_mode: f64,
    pub total_ticks: f64,
    pub throttled_periods: u64,
    pub throttled_time: u64,
    pub percent: f64,
    pub measured: Vec<String>,
}

/// Nomad's `ResourceUsage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ResourceUsage {
    pub memory_stats: MemoryStats,
    pub cpu_stats: CpuStats,
    pub device_stats: Vec<serde_json::Value>,
}

impl ResourceUsage {
    /// Nomad's `ResourceUsage.Add`: sums, and the union of what was measured.
    fn add(&mut self, other: &ResourceUsage) {
        let (m, o) = (&mut self.memory_stats, &other.memory_stats);
        m.rss += o.rss;
        m.cache += o.cache;
        m.swap += o.swap;
        m.usage += o.usage;
        m.max_usage += o.max_usage;
        m.kernel_usage += o.kernel_usage;
        m.kernel_max_usage += o.kernel_max_usage;
        union(&mut m.measured, &o.measured);
        let (c, o) = (&mut self.cpu_stats, &other.cpu_stats);
        c.system_mode += o.system_mode;
        c.user_mode += o.user_mode;
        c.total_ticks += o.total_ticks;
        c.throttled_periods += o.throttled_periods;
        c.throttled_time += o.throttled_time;
        c.percent += o.percent;
        union(&mut c.measured, &o.measured);
    }
}

fn union(into: &mut Vec<String>, from: &[String]) {
    for m in from {
        if !into.contains(m) {
            into.push(m.clone());
        }
    }
}

/// Nomad's `TaskResourceUsage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskResourceUsage {
    pub resource_usage: ResourceUsage,
    /// Unix time of the sample, in nanoseconds.
    pub timestamp: i64,
    /// Per-process usage; drivers report none through the contract.
    pub pids: Option<BTreeMap<String, ResourceUsage>>,
}

/// Nomad's `AllocResourceUsage`: the sum over the running tasks, each task, the newest time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocResourceUsage {
    pub resource_usage: ResourceUsage,
    pub tasks: BTreeMap<String, TaskResourceUsage>,
    pub timestamp: i64,
}

/// What a CPU rate is computed from: (cumulative CPU ticks, unix nanos) of a sample.
type Rate = (f64, i64);

/// One task that runs now, and its previous sample.
#[derive(Clone)]
struct LiveTask {
    driver: Arc<dyn Driver>,
    task_id: String,
    last: Option<Rate>,
}

/// The running tasks of one allocation, by task name. Cheap to clone; the task runners write
/// it, stats requests and `alloc exec` read it. The second map has every task of the
/// allocation and whether it ever started.
#[derive(Clone, Default)]
pub struct LiveTasks(
    Arc<Mutex<BTreeMap<String, LiveTask>>>,
    Arc<Mutex<BTreeMap<String, bool>>>,
);

/// Why a task has no running instance to exec into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLive {
    /// The allocation has no such task.
    UnknownTask,
    NotStarted,
    NotRunning,
}

/// A sample as the contract gives it: (memory RSS bytes, cumulative CPU ticks, unix nanos).
type Sample = (u64, f64, i64);

impl LiveTasks {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, LiveTask>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tracker of an allocation with these tasks, none started yet.
    pub fn for_tasks(tasks: impl IntoIterator<Item = String>) -> LiveTasks {
        let live = LiveTasks::default();
        live.started()
            .extend(tasks.into_iter().map(|name| (name, false)));
        live
    }

    fn started(&self) -> MutexGuard<'_, BTreeMap<String, bool>> {
        self.1.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The driver and driver task id of task `task` while it runs, for `alloc exec`.
    pub fn exec_target(&self, task: &str) -> Result<(Arc<dyn Driver>, String), NotLive> {
        if let Some(t) = self.lock().get(task) {
            return Ok((Arc::clone(&t.driver), t.task_id.clone()));
        }
        match self.started().get(task) {
            None => Err(NotLive::UnknownTask),
            Some(false) => Err(NotLive::NotStarted),
            Some(true) => Err(NotLive::NotRunning),
        }
    }

    /// Task `task` now runs as the driver's task `task_id`.
    pub fn running(&self, task: &str, driver: Arc<dyn Driver>, task_id: &str) {
        self.started().insert(task.to_string(), true);
        self.lock().insert(
            task.to_string(),
            LiveTask {
                driver,
                task_id: task_id.to_string(),
                last: None,
            },
        );
    }

    /// Whether any task of the allocation runs now.
    pub fn any_running(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Task `task` no longer runs.
    pub fn ended(&self, task: &str) {
        self.lock().remove(task);
    }

    /// Samples every running task (or only `only`) through its driver. Blocks on the drivers:
    /// call it from a thread that may block. `mhz_per_core` turns CPU percent into MHz. Tasks
    /// whose driver reports no stats are left out, as Nomad leaves them out.
    pub fn sample(&self, only: Option<&str>, mhz_per_core: f64) -> AllocResourceUsage {
        // Copied out: the drivers are called without the lock held.
        let wanted: Vec<(String, LiveTask)> = self
            .lock()
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .map(|(name, t)| (name.clone(), t.clone()))
            .collect();
        let mut usage = AllocResourceUsage::default();
        for (
            name,
            LiveTask {
                driver,
                task_id,
                last,
            },
        ) in wanted
        {
            let read = || -> Option<Sample> {
                match driver.task_stats(&task_id) {
                    Ok(u) => {
                        let at = if u.timestamp > 0 {
                            u.timestamp
                        } else {
                            drover_structs::time::now_nanos()
                        };
                        Some((u.memory_rss_bytes, u.cpu_total_ticks, at))
                    }
                    Err(e) => {
                        tracing::debug!(task = %name, error = %e, "no stats from the driver");
                        None
                    }
                }
            };
            let Some(mut now) = read() else { continue };
            let previous = match last {
                Some(previous) => previous,
                None => {
                    std::thread::sleep(FIRST_RATE_WINDOW);
                    let first = (now.1, now.2);
                    match read() {
                        Some(second) => now = second,
                        None => continue,
                    }
                    first
                }
            };
            if let Some(t) = self.lock().get_mut(&name)
                && t.task_id == task_id
            {
                t.last = Some((now.1, now.2));
            }
            let task = task_usage(now, Some(previous), mhz_per_core);
            usage.resource_usage.add(&task.resource_usage);
            usage.timestamp = usage.timestamp.max(task.timestamp);
            usage.tasks.insert(name, task);
        }
        usage
    }
}

/// One task's usage from its sample `now` and the sample before (ticks, nanos), if any.
fn task_usage(now: Sample, previous: Option<Rate>, mhz_per_core: f64) -> TaskResourceUsage {
    let (rss, ticks, at) = now;
    let mut cpu = CpuStats::default();
    if let Some((before, then)) = previous
        && at > then
    {
        let seconds = (at - then) as f64 / 1e9;
        // USER_HZ ticks: 100 a second make one busy core, that is 100 percent.
        cpu.percent = ((ticks - before) / seconds).max(0.0);
        cpu.total_ticks = cpu.percent / 100.0 * mhz_per_core;
        cpu.measured = vec!["Percent".to_string()];
    }
    TaskResourceUsage {
        resource_usage: ResourceUsage {
            memory_stats: MemoryStats {
                rss,
                measured: vec!["RSS".to_string()],
                ..Default::default()
            },
            cpu_stats: cpu,
            device_stats: Vec::new(),
        },
        timestamp: at,
        pids: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_abi::{
        Capabilities, DriverError, ExitResult, Fingerprint, FsIsolation, HealthState, PluginInfo,
        TaskConfig, TaskHandle, TaskStatus,
    };

    /// Reports `rss` and CPU ticks growing by 10 each sample; `None` reports no stats.
    struct Meter {
        rss: Option<u64>,
        samples: Mutex<u32>,
    }

    impl Driver for Meter {
        fn plugin_info(&self) -> PluginInfo {
            PluginInfo {
                name: "meter".into(),
                plugin_version: "0".into(),
                api_version: drover_abi::DRIVER_API_VERSION.into(),
            }
        }
        fn set_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                send_signals: false,
                exec: false,
                fs_isolation: FsIsolation::None,
                network_isolation: false,
                group_network: false,
                mount_configs: false,
            }
        }
        fn fingerprint(&self) -> Fingerprint {
            Fingerprint {
                health: HealthState::Healthy,
                health_description: String::new(),
                attributes: BTreeMap::new(),
            }
        }
        fn validate_task_config(&self, _: &serde_json::Value) -> Result<(), DriverError> {
            Ok(())
        }
        fn start_task(&self, _: &TaskConfig) -> Result<TaskHandle, DriverError> {
            Err(DriverError::NotSupported("start".into()))
        }
        fn wait_task(&self, _: &str, _: Duration) -> Result<Option<ExitResult>, DriverError> {
            Ok(None)
        }
        fn stop_task(&self, _: &str, _: Duration, _: &str) -> Result<(), DriverError> {
            Ok(())
        }
        fn destroy_task(&self, _: &str, _: bool) -> Result<(), DriverError> {
            Ok(())
        }
        fn inspect_task(&self, id: &str) -> Result<TaskStatus, DriverError> {
            Err(DriverError::TaskNotFound(id.into()))
        }
        fn recover_task(&self, _: &TaskHandle) -> Result<(), DriverError> {
            Ok(())
        }
        fn task_stats(&self, _: &str) -> Result<drover_abi::TaskResourceUsage, DriverError> {
            let rss = self
                .rss
                .ok_or_else(|| DriverError::NotSupported("task_stats".into()))?;
            let mut n = self.samples.lock().unwrap();
            *n += 1;
            Ok(drover_abi::TaskResourceUsage {
                memory_rss_bytes: rss,
                cpu_total_ticks: f64::from(*n) * 10.0,
                timestamp: 0,
            })
        }
    }

    fn meter(rss: Option<u64>) -> Arc<dyn Driver> {
        Arc::new(Meter {
            rss,
            samples: Mutex::new(0),
        })
    }

    #[test]
    fn cpu_percent_is_the_tick_rate_and_total_ticks_the_mhz_it_means() {
        let t = task_usage(
            (5, 150.0, 3_000_000_000),
            Some((100.0, 2_000_000_000)),
            2000.0,
        );
        let cpu = &t.resource_usage.cpu_stats;
        assert_eq!(cpu.percent, 50.0, "50 ticks in a second is half a core");
        assert_eq!(cpu.total_ticks, 1000.0);
        assert_eq!(cpu.measured, vec!["Percent"]);
        assert_eq!(t.resource_usage.memory_stats.rss, 5);
        assert_eq!(t.resource_usage.memory_stats.measured, vec!["RSS"]);
        let first = task_usage((5, 150.0, 3), None, 2000.0);
        assert!(first.resource_usage.cpu_stats.measured.is_empty());
    }

    #[test]
    fn an_allocs_usage_sums_its_running_tasks_and_leaves_out_those_without_stats() {
        let live = LiveTasks::default();
        live.running("a", meter(Some(1000)), "x/a/1");
        live.running("b", meter(Some(24)), "x/b/1");
        live.running("quiet", meter(None), "x/quiet/1");
        let usage = live.sample(None, 1000.0);
        assert_eq!(
            usage.tasks.keys().collect::<Vec<_>>(),
            vec!["a", "b"],
            "{usage:?}"
        );
        assert_eq!(usage.resource_usage.memory_stats.rss, 1024);
        assert_eq!(usage.resource_usage.memory_stats.measured, vec!["RSS"]);
        let a = &usage.tasks["a"].resource_usage.cpu_stats;
        assert!(a.percent > 0.0, "two samples give a rate: {a:?}");
        assert!(usage.timestamp >= usage.tasks["a"].timestamp);

        // The next request rates against the sample before: no second wait, still a rate.
        let again = live.sample(Some("a"), 1000.0);
        assert_eq!(again.tasks.keys().collect::<Vec<_>>(), vec!["a"]);
        assert!(again.tasks["a"].resource_usage.cpu_stats.percent > 0.0);

        live.ended("a");
        assert!(!live.sample(None, 1000.0).tasks.contains_key("a"));
    }

    #[test]
    fn usage_serializes_in_nomads_shape() {
        let live = LiveTasks::default();
        live.running("web", meter(Some(7)), "x/web/1");
        let json = serde_json::to_value(live.sample(None, 1000.0)).unwrap();
        assert_eq!(
            json["Tasks"]["web"]["ResourceUsage"]["MemoryStats"]["RSS"],
            7
        );
        assert_eq!(json["ResourceUsage"]["MemoryStats"]["Measured"][0], "RSS");
        assert!(json["ResourceUsage"]["CpuStats"]["TotalTicks"].is_number());
        assert!(json["ResourceUsage"]["DeviceStats"].is_array());
        assert!(json["Timestamp"].as_i64().unwrap() > 0);
        assert!(json["Tasks"]["web"]["Pids"].is_null());
    }

    #[test]
    fn a_task_is_an_exec_target_only_while_it_runs() {
        let live = LiveTasks::for_tasks(["web".to_string()]);
        assert_eq!(live.exec_target("web").err(), Some(NotLive::NotStarted));
        assert_eq!(live.exec_target("db").err(), Some(NotLive::UnknownTask));
        let driver: Arc<dyn Driver> = Arc::new(Meter {
            rss: Some(1),
            samples: Mutex::new(0),
        });
        live.running("web", driver, "a/web/1");
        assert_eq!(
            live.exec_target("web").map(|(_, id)| id),
            Ok("a/web/1".into())
        );
        live.ended("web");
        assert_eq!(live.exec_target("web").err(), Some(NotLive::NotRunning));
    }
}
