//! `drover alloc signal` and `drover alloc restart`: Nomad's commands, through the client
//! endpoints of the agent that runs the allocation.

use drover_structs::Allocation;
use serde_json::{Value, json};

use super::alloc::find_alloc;
use super::api::{Client, escape_segment};
use super::format::format_list;
use super::{Exit, ui};

/// Nomad's `alloc signal` default.
const DEFAULT_SIGNAL: &str = "SIGKILL";

#[derive(Debug, clap::Args)]
pub struct AllocSignalArgs {
    /// Signal the selected tasks receive
    #[arg(short = 's', value_name = "SIGNAL", default_value = DEFAULT_SIGNAL)]
    pub signal: String,
    /// The task to signal (wins over the TASK argument)
    #[arg(long = "task", value_name = "TASK")]
    pub task_flag: Option<String>,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Allocation ID (or unique prefix)
    pub alloc: String,
    /// The task to signal; every task of the allocation when omitted
    pub task: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct AllocRestartArgs {
    /// Restart every task of the allocation, not only the running ones
    #[arg(long = "all-tasks")]
    pub all_tasks: bool,
    /// The task to restart (wins over the TASK argument)
    #[arg(long = "task", value_name = "TASK")]
    pub task_flag: Option<String>,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Allocation ID (or unique prefix)
    pub alloc: String,
    /// The task to restart; the running tasks when omitted
    pub task: Option<String>,
}

/// `-task`, else the TASK argument; empty counts as none.
fn chosen_task(flag: Option<String>, arg: Option<String>) -> Option<String> {
    flag.filter(|t| !t.is_empty())
        .or(arg)
        .filter(|t| !t.is_empty())
}

pub fn signal(client: &Client, args: AllocSignalArgs) -> anyhow::Result<Exit> {
    let task = chosen_task(args.task_flag, args.task);
    let alloc = match target(client, &args.alloc, args.verbose, task.as_deref()) {
        Ok(alloc) => alloc,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let body = json!({"Task": task.unwrap_or_default(), "Signal": args.signal});
    match call(client, &alloc, "signal", &body) {
        Ok(()) => Ok(0),
        Err(e) => {
            ui::err(&format!("Error signalling allocation: {e}"));
            Ok(1)
        }
    }
}

pub fn restart(client: &Client, args: AllocRestartArgs) -> anyhow::Result<Exit> {
    let task = chosen_task(args.task_flag, args.task);
    if args.all_tasks && task.is_some() {
        ui::err("The -all-tasks option is not allowed when restarting a specific task.");
        return Ok(1);
    }
    let alloc = match target(client, &args.alloc, args.verbose, task.as_deref()) {
        Ok(alloc) => alloc,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let what = if task.is_some() { "task" } else { "allocation" };
    let body = json!({"TaskName": task.unwrap_or_default(), "AllTasks": args.all_tasks});
    match call(client, &alloc, "restart", &body) {
        Ok(()) => Ok(0),
        Err(e) => {
            ui::err(&format!("Failed to restart {what}:\n\n{e}"));
            Ok(1)
        }
    }
}

/// The allocation `prefix` names, checked to have `task` when one is named.
fn target(
    client: &Client,
    prefix: &str,
    verbose: bool,
    task: Option<&str>,
) -> Result<Allocation, String> {
    let alloc = find_alloc(client, prefix, verbose)?;
    if let Some(task) = task {
        task_exists(&alloc, task)?;
    }
    Ok(alloc)
}

/// Nomad's `validateTaskExistsInAllocation`.
fn task_exists(alloc: &Allocation, task: &str) -> Result<(), String> {
    let group = alloc
        .job
        .as_ref()
        .and_then(|job| job.lookup_task_group(&alloc.task_group))
        .ok_or_else(|| format!("Could not find allocation task group: {}", alloc.task_group))?;
    let names: Vec<&str> = group.tasks.iter().map(|t| t.name.as_str()).collect();
    if names.contains(&task) {
        return Ok(());
    }
    Err(format!(
        "Could not find task named: {task}, found:\n{}",
        format_list(&names)
    ))
}

/// `PUT /v1/client/allocation/:id/<action>` in the allocation's namespace.
fn call(
    client: &Client,
    alloc: &Allocation,
    action: &str,
    body: &Value,
) -> Result<(), super::api::ApiError> {
    let path = format!(
        "/v1/client/allocation/{}/{action}",
        escape_segment(&alloc.id)
    );
    client
        .in_namespace(&alloc.namespace)
        .put_json::<Value>(&path, &[], body)
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use drover_structs::{Job, Task, TaskGroup};

    use super::*;

    fn alloc_with(tasks: &[&str]) -> Allocation {
        Allocation {
            id: "a1".into(),
            task_group: "g".into(),
            job: Some(Arc::new(Job {
                task_groups: vec![TaskGroup {
                    name: "g".into(),
                    tasks: tasks
                        .iter()
                        .map(|t| Task {
                            name: t.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_task_not_in_the_group_is_refused_with_the_tasks_it_has() {
        let alloc = alloc_with(&["web", "side"]);
        assert_eq!(task_exists(&alloc, "web"), Ok(()));
        assert_eq!(
            task_exists(&alloc, "db"),
            Err("Could not find task named: db, found:\nweb\nside".to_string())
        );
        let no_job = Allocation {
            task_group: "g".into(),
            ..Default::default()
        };
        assert_eq!(
            task_exists(&no_job, "web"),
            Err("Could not find allocation task group: g".to_string())
        );
    }

    #[test]
    fn the_task_flag_wins_over_the_task_argument() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(chosen_task(s("a"), s("b")), s("a"));
        assert_eq!(chosen_task(None, s("b")), s("b"));
        assert_eq!(chosen_task(s(""), s("b")), s("b"));
        assert_eq!(chosen_task(None, s("")), None);
    }
}
