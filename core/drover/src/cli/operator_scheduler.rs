//! `drover operator scheduler get-config | set-config`, over
//! `/v1/operator/scheduler/configuration`, with Nomad's flags and texts.

use serde_json::Value;

use super::format::format_kv;
use super::job::to_indented_json;
use super::{ConnArgs, Exit, ui};

#[derive(Debug, clap::Subcommand)]
pub enum SchedulerCommand {
    /// Display the current scheduler configuration
    GetConfig {
        /// Output the scheduler config in its JSON format
        #[arg(long)]
        json: bool,
    },
    /// Modify the current scheduler configuration
    SetConfig(SetConfigArgs),
}

/// A boolean flag as Go's flag package takes it: `-flag`, `-flag=true`, `-flag=false`.
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("parse error: invalid boolean {other:?}")),
    }
}

#[derive(Debug, Default, clap::Args)]
pub struct SetConfigArgs {
    /// Only update if the current configuration's modify index is this value
    #[arg(long = "check-index", value_name = "INDEX")]
    pub check_index: Option<String>,
    /// Whether the scheduler binpacks or spreads allocations on available nodes
    #[arg(long = "scheduler-algorithm", value_name = "binpack|spread")]
    pub scheduler_algorithm: Option<String>,
    /// Let tasks exceed their reserved memory (stored; not enforced by Drover's clients)
    #[arg(long = "memory-oversubscription", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub memory_oversubscription: Option<bool>,
    /// Refuse job registrations (stored; not enforced yet)
    #[arg(long = "reject-job-registration", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub reject_job_registration: Option<bool>,
    /// Pause the leader's eval broker: schedulers get no work until unpaused
    #[arg(long = "pause-eval-broker", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub pause_eval_broker: Option<bool>,
    /// Whether batch jobs may preempt lower-priority allocations
    #[arg(long = "preempt-batch-scheduler", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub preempt_batch_scheduler: Option<bool>,
    /// Whether service jobs may preempt lower-priority allocations
    #[arg(long = "preempt-service-scheduler", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub preempt_service_scheduler: Option<bool>,
    /// Whether sysbatch jobs may preempt lower-priority allocations
    #[arg(long = "preempt-sysbatch-scheduler", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub preempt_sysbatch_scheduler: Option<bool>,
    /// Whether system jobs may preempt lower-priority allocations
    #[arg(long = "preempt-system-scheduler", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool)]
    pub preempt_system_scheduler: Option<bool>,
}

const PATH: &str = "/v1/operator/scheduler/configuration";

pub fn run(conn: &ConnArgs, command: SchedulerCommand) -> anyhow::Result<Exit> {
    match command {
        SchedulerCommand::GetConfig { json } => get_config(conn, json),
        SchedulerCommand::SetConfig(args) => set_config(conn, &args),
    }
}

/// Nomad's `get-config` table.
fn config_table(config: &Value) -> String {
    let field = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "false".into(),
        other => other.to_string(),
    };
    let p = &config["PreemptionConfig"];
    format_kv(&[
        format!(
            "Scheduler Algorithm|{}",
            config["SchedulerAlgorithm"].as_str().unwrap_or_default()
        ),
        format!(
            "Memory Oversubscription|{}",
            field(&config["MemoryOversubscriptionEnabled"])
        ),
        format!(
            "Reject Job Registration|{}",
            field(&config["RejectJobRegistration"])
        ),
        format!("Pause Eval Broker|{}", field(&config["PauseEvalBroker"])),
        format!(
            "Preemption System Scheduler|{}",
            field(&p["SystemSchedulerEnabled"])
        ),
        format!(
            "Preemption Service Scheduler|{}",
            field(&p["ServiceSchedulerEnabled"])
        ),
        format!(
            "Preemption Batch Scheduler|{}",
            field(&p["BatchSchedulerEnabled"])
        ),
        format!(
            "Preemption SysBatch Scheduler|{}",
            field(&p["SysBatchSchedulerEnabled"])
        ),
        format!(
            "Modify Index|{}",
            config["ModifyIndex"].as_u64().unwrap_or(0)
        ),
    ])
}

fn get_config(conn: &ConnArgs, json: bool) -> anyhow::Result<Exit> {
    let client = conn.client()?;
    let resp: Value = match client.get_json(PATH, &[]) {
        Ok((resp, _)) => resp,
        Err(e) => {
            ui::err(&format!("Error querying scheduler configuration: {e}"));
            return Ok(1);
        }
    };
    if json {
        ui::out(&to_indented_json(&resp));
    } else {
        ui::out(&config_table(&resp["SchedulerConfig"]));
    }
    Ok(0)
}

/// The current configuration with the flags the operator gave merged in.
fn merge(mut config: Value, args: &SetConfigArgs) -> Value {
    if let Some(alg) = args
        .scheduler_algorithm
        .as_deref()
        .filter(|a| !a.is_empty())
    {
        config["SchedulerAlgorithm"] = Value::String(alg.to_string());
    }
    let top = [
        (
            "MemoryOversubscriptionEnabled",
            args.memory_oversubscription,
        ),
        ("RejectJobRegistration", args.reject_job_registration),
        ("PauseEvalBroker", args.pause_eval_broker),
    ];
    for (key, value) in top {
        if let Some(v) = value {
            config[key] = Value::Bool(v);
        }
    }
    let preemption = [
        ("BatchSchedulerEnabled", args.preempt_batch_scheduler),
        ("ServiceSchedulerEnabled", args.preempt_service_scheduler),
        ("SysBatchSchedulerEnabled", args.preempt_sysbatch_scheduler),
        ("SystemSchedulerEnabled", args.preempt_system_scheduler),
    ];
    for (key, value) in preemption {
        if let Some(v) = value {
            config["PreemptionConfig"][key] = Value::Bool(v);
        }
    }
    config
}

fn set_config(conn: &ConnArgs, args: &SetConfigArgs) -> anyhow::Result<Exit> {
    let check_index = match args.check_index.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(raw) => match raw.parse::<u64>() {
            Ok(i) => i,
            Err(e) => {
                ui::err(&format!("Error parsing check-index value {raw:?}: {e}"));
                return Ok(1);
            }
        },
    };
    let client = conn.client()?;
    let current: Value = match client.get_json::<Value>(PATH, &[]) {
        Ok((resp, _)) => resp["SchedulerConfig"].clone(),
        Err(e) => {
            ui::err(&format!("Error querying for scheduler configuration: {e}"));
            return Ok(1);
        }
    };
    let modify_index = current["ModifyIndex"].as_u64().unwrap_or(0);
    if check_index > 0 && modify_index != check_index {
        ui::err(&format!(
            "Error performing check index set: check-index {check_index} does not match does not match current state value {modify_index}"
        ));
        return Ok(1);
    }
    let cas = if check_index > 0 {
        check_index
    } else {
        modify_index
    };
    let config = merge(current, args);
    let cas = cas.to_string();
    let result: Value = match client.put_json(PATH, &[("cas", cas.as_str())], &config) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error setting scheduler configuration: {e}"));
            return Ok(1);
        }
    };
    if result["Updated"].as_bool() == Some(true) {
        ui::out("Scheduler configuration updated!");
        Ok(0)
    } else {
        ui::out("Scheduler configuration could not be atomically updated, please try again");
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_flags_given_change_the_configuration() {
        let current = json!({
            "SchedulerAlgorithm": "binpack",
            "PreemptionConfig": {"SystemSchedulerEnabled": true, "ServiceSchedulerEnabled": false},
            "PauseEvalBroker": false,
            "ModifyIndex": 7
        });
        let args = SetConfigArgs {
            scheduler_algorithm: Some("spread".into()),
            preempt_service_scheduler: Some(true),
            ..Default::default()
        };
        let merged = merge(current, &args);
        assert_eq!(merged["SchedulerAlgorithm"], "spread");
        assert_eq!(merged["PreemptionConfig"]["ServiceSchedulerEnabled"], true);
        assert_eq!(merged["PreemptionConfig"]["SystemSchedulerEnabled"], true);
        assert_eq!(merged["PauseEvalBroker"], false);
        assert_eq!(merged["ModifyIndex"], 7);
    }

    #[test]
    fn the_table_reads_like_nomads() {
        let table = config_table(&json!({
            "SchedulerAlgorithm": "spread",
            "PreemptionConfig": {"SystemSchedulerEnabled": true, "SysBatchSchedulerEnabled": false,
                                 "BatchSchedulerEnabled": false, "ServiceSchedulerEnabled": true},
            "MemoryOversubscriptionEnabled": false,
            "RejectJobRegistration": false,
            "PauseEvalBroker": false,
            "ModifyIndex": 12
        }));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "Scheduler Algorithm           = spread");
        assert_eq!(lines[5], "Preemption Service Scheduler  = true");
        assert_eq!(lines[8], "Modify Index                  = 12");
    }

    #[test]
    fn nomads_set_config_flags_parse() {
        use clap::{CommandFactory, Parser};
        let cli = super::super::Cli::command();
        let known = super::super::argv::known_long_flags(&cli);
        let args = [
            "drover",
            "operator",
            "scheduler",
            "set-config",
            "-scheduler-algorithm=spread",
            "-preempt-service-scheduler=true",
            "-pause-eval-broker",
            "-preempt-system-scheduler=false",
        ]
        .iter()
        .map(std::ffi::OsString::from)
        .collect();
        let cli = super::super::Cli::try_parse_from(super::super::argv::rewrite_single_dash_flags(
            args, &known,
        ))
        .expect("parses");
        let Some(super::super::Command::Operator(op)) = cli.command else {
            panic!("expected the operator command");
        };
        let super::super::operator::OperatorCommand::Scheduler(SchedulerCommand::SetConfig(a)) =
            op.command
        else {
            panic!("expected set-config");
        };
        assert_eq!(a.scheduler_algorithm.as_deref(), Some("spread"));
        assert_eq!(a.preempt_service_scheduler, Some(true));
        assert_eq!(a.pause_eval_broker, Some(true));
        assert_eq!(a.preempt_system_scheduler, Some(false));
        assert_eq!(a.preempt_batch_scheduler, None);
    }

    #[test]
    fn go_booleans_parse() {
        assert_eq!(go_bool("true"), Ok(true));
        assert_eq!(go_bool("F"), Ok(false));
        assert!(go_bool("yes").is_err());
    }
}
