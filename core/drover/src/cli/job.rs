//! `drover job run|stop|inspect|validate` (and `status`, in `job_status`; `periodic force` in
//! `job_periodic`; `dispatch` in `job_dispatch`).

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID};
use super::job_status::{self, JobStatusArgs};
use super::jobfile::{self, JobFileArgs};
use super::lookup::{self, Match};
use super::{ConnArgs, Exit, monitor, ui};

#[derive(Debug, clap::Args)]
pub struct JobCli {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(subcommand)]
    pub command: JobCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum JobCommand {
    /// Submit a job file and monitor its evaluation
    Run(RunArgs),
    /// Display the status of a job, or list jobs
    Status(JobStatusArgs),
    /// Stop a running job (and optionally purge it)
    Stop(StopArgs),
    /// Print a registered job as JSON
    Inspect(InspectArgs),
    /// Check a job file for errors without submitting it
    Validate(ValidateArgs),
    /// Interact with periodic jobs
    #[command(subcommand)]
    Periodic(super::job_periodic::PeriodicCommand),
    /// Dispatch an instance of a parameterized job
    Dispatch(super::job_dispatch::DispatchArgs),
    /// Revert a job to an older version
    Revert(super::job_versions::RevertArgs),
    /// Force an evaluation of a job
    Eval(super::job_versions::EvalArgs),
    /// Change a task group's count, within its scaling policy
    Scale(super::job_scale::ScaleArgs),
    /// Display the versions of a job
    History(super::job_history::HistoryArgs),
    /// Dry-run a job update to determine its effects
    Plan(super::job_plan::PlanArgs),
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Return right after submitting instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Print the parsed job as JSON ({"Job": ...}) and exit without submitting
    #[arg(long)]
    pub output: bool,
    /// Show full identifiers while monitoring
    #[arg(long)]
    pub verbose: bool,
    /// Register only if the job's modify index is still this (0: only if the job is new),
    /// as `job plan` prints it
    #[arg(long = "check-index")]
    pub check_index: Option<u64>,
    #[command(flatten)]
    pub file_args: JobFileArgs,
    /// Job file (HCL or JSON); "-" reads stdin
    #[arg(value_name = "FILE")]
    pub file: String,
}

#[derive(Debug, clap::Args)]
pub struct StopArgs {
    /// Remove the job from the state store instead of only stopping it
    #[arg(long)]
    pub purge: bool,
    /// Stop a multiregion job in every region of its multiregion block
    #[arg(long)]
    pub global: bool,
    /// Return right after the stop request instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers while monitoring
    #[arg(long)]
    pub verbose: bool,
    /// Accepted for Nomad compatibility; drover never prompts
    #[arg(long)]
    pub yes: bool,
    /// Job ID (or unique prefix)
    pub job: String,
}

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Job ID (or unique prefix)
    pub job: String,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub file_args: JobFileArgs,
    /// Job file (HCL or JSON); "-" reads stdin
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// `PUT /v1/jobs` answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RegisterResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    #[serde(rename = "Warnings")]
    warnings: String,
}

/// `DELETE /v1/job/:id` answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DeregisterResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
}

/// `PUT /v1/validate/job` answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ValidateResponse {
    #[serde(rename = "ValidationErrors")]
    validation_errors: Option<Vec<String>>,
    #[serde(rename = "Error")]
    error: String,
    #[serde(rename = "Warnings")]
    warnings: String,
}

pub fn run(cli: JobCli) -> anyhow::Result<Exit> {
    let client = cli.conn.client()?;
    match cli.command {
        JobCommand::Run(args) => job_run(&client, args),
        JobCommand::Status(args) => job_status::run(&client, args),
        JobCommand::Stop(args) => job_stop(&client, args),
        JobCommand::Inspect(args) => job_inspect(&client, args),
        JobCommand::Validate(args) => job_validate(&client, args),
        JobCommand::Periodic(cmd) => super::job_periodic::run(&client, cmd),
        JobCommand::Dispatch(args) => super::job_dispatch::run(&client, args),
        JobCommand::Revert(args) => super::job_versions::revert(&client, args),
        JobCommand::Eval(args) => super::job_versions::eval(&client, args),
        JobCommand::Scale(args) => super::job_scale::run(&client, args),
        JobCommand::History(args) => super::job_history::run(&client, args),
        JobCommand::Plan(args) => super::job_plan::run(&client, args),
    }
}

/// Nomad's `json.MarshalIndent(v, "", "    ")`.
pub fn to_indented_json(v: &Value) -> String {
    let mut buf = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, formatter);
    // Serialising a Value into memory cannot fail: every key is a string.
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8(buf).unwrap_or_else(|_| v.to_string())
}

fn is_set(job: &Value, key: &str) -> bool {
    job.get(key).is_some_and(|v| !v.is_null())
}

fn job_run(client: &Client, args: RunArgs) -> anyhow::Result<Exit> {
    let (job, submission) = match jobfile::load_with_source(&args.file, &args.file_args) {
        Ok(loaded) => loaded,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    if args.output {
        ui::out(&to_indented_json(&json!({ "Job": job })));
        return Ok(0);
    }
    let periodic = is_set(&job, "Periodic");
    let parameterized = is_set(&job, "ParameterizedJob");
    let multiregion = job
        .get("Multiregion")
        .and_then(|m| m.get("Regions"))
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    // Nomad sends the job to its own namespace.
    let client = match job
        .get("Namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(ns) => client.in_namespace(ns),
        None => client.in_namespace(
            client
                .namespace()
                .unwrap_or(drover_structs::DEFAULT_NAMESPACE),
        ),
    };
    // As Nomad: a job file that names its region is sent to that region.
    let client = match job
        .get("Region")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(region) => client.in_region(region),
        None => client,
    };
    let mut request = json!({ "Job": job, "Submission": submission });
    if let Some(index) = args.check_index {
        request["EnforceIndex"] = json!(true);
        request["JobModifyIndex"] = json!(index);
    }
    let resp: RegisterResponse = match client.put_json("/v1/jobs", &[], &request) {
        Ok(r) => r,
        Err(e) => {
            // Nomad prints an index conflict on its own, then that nothing changed.
            let text = e.to_string();
            match text.find("Enforcing job modify index") {
                Some(at) => {
                    ui::err(text[at..].trim_end_matches(')'));
                    ui::err("Job not updated");
                }
                None => ui::err(&format!("Error submitting job: {text}")),
            }
            return Ok(1);
        }
    };
    if !resp.warnings.is_empty() {
        ui::out(&format!("Job Warnings:\n{}\n", resp.warnings));
    }
    if args.detach || periodic || parameterized || multiregion {
        ui::out("Job registration successful");
        if !parameterized && !periodic && !resp.eval_id.is_empty() {
            ui::out(&format!("Evaluation ID: {}", resp.eval_id));
        }
        return Ok(0);
    }
    if resp.eval_id.is_empty() {
        ui::out("Job registration successful");
        return Ok(0);
    }
    Ok(monitor::monitor(
        &client,
        &resp.eval_id,
        id_length(args.verbose),
    ))
}

fn id_length(verbose: bool) -> usize {
    if verbose { FULL_ID } else { SHORT_ID }
}

/// Finds the job a user-typed ID or prefix names. `Err` carries the message to print.
pub fn find_job(
    client: &Client,
    prefix: &str,
) -> anyhow::Result<Result<drover_structs::JobListStub, String>> {
    let prefix = prefix.trim();
    let jobs: Vec<drover_structs::JobListStub> =
        match client.get_json("/v1/jobs", &[("prefix", prefix)]) {
            Ok((jobs, _)) => jobs,
            Err(e) => return Ok(Err(format!("Error querying job prefix {prefix:?}: {e}"))),
        };
    Ok(match lookup::resolve(jobs, prefix, |j| j.id.as_str()) {
        Match::One(job) => Ok(job),
        Match::None => Err(format!("No job(s) with prefix or id {prefix:?} found")),
        Match::Many(jobs) => Err(format!(
            "Prefix matched multiple jobs\n\n{}",
            job_status::job_list_table(&jobs, false)
        )),
    })
}

fn job_stop(client: &Client, args: StopArgs) -> anyhow::Result<Exit> {
    let stub = match find_job(client, &args.job)? {
        Ok(stub) => stub,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&stub.namespace);
    let path = format!("/v1/job/{}", escape_segment(&stub.id));
    let mut query: Vec<(&str, &str)> = Vec::new();
    if args.purge {
        query.push(("purge", "true"));
    }
    if args.global {
        query.push(("global", "true"));
    }
    let multiregion = stub.multiregion.as_ref().is_some_and(|m| {
        m.get("Regions")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
    });
    let resp: DeregisterResponse = match client.delete_json(&path, &query) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Error deregistering job: {e}"));
            return Ok(1);
        }
    };
    // Periodic and parameterized jobs have no evaluation to follow; multiregion jobs are
    // not monitored (as in Nomad: their regions stop on their own).
    if resp.eval_id.is_empty() {
        return Ok(0);
    }
    if args.detach || multiregion {
        ui::out(&resp.eval_id);
        return Ok(0);
    }
    Ok(monitor::monitor(
        &client,
        &resp.eval_id,
        id_length(args.verbose),
    ))
}

fn job_inspect(client: &Client, args: InspectArgs) -> anyhow::Result<Exit> {
    let stub = match find_job(client, &args.job)? {
        Ok(stub) => stub,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&stub.namespace);
    let path = format!("/v1/job/{}", escape_segment(&stub.id));
    let job: Value = match client.get_json(&path, &[]) {
        Ok((job, _)) => job,
        Err(e) => {
            ui::err(&format!("Error inspecting job: {e}"));
            return Ok(1);
        }
    };
    ui::out(&to_indented_json(&json!({ "Job": job })));
    Ok(0)
}

/// What the job validation found, however it was checked.
#[derive(Debug, Default, PartialEq)]
struct Validation {
    errors: String,
    warnings: String,
    /// The agent was not reachable, so only the local rules ran.
    local_only: bool,
}

fn job_validate(client: &Client, args: ValidateArgs) -> anyhow::Result<Exit> {
    let file = args.file.display().to_string();
    let job = match jobfile::load(&file, &args.file_args) {
        Ok(job) => job,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let validation = match client.put_json::<ValidateResponse>(
        "/v1/validate/job",
        &[],
        &json!({ "Job": job }),
    ) {
        Ok(resp) => Validation {
            errors: if resp.error.is_empty() {
                resp.validation_errors.unwrap_or_default().join("\n")
            } else {
                resp.error
            },
            warnings: resp.warnings,
            local_only: false,
        },
        // Like Nomad, fall back to the local rules when no agent answers.
        Err(super::api::ApiError::Unreachable { .. }) => validate_locally(job),
        Err(e) => {
            ui::err(&format!("Error validating job: {e}"));
            return Ok(1);
        }
    };
    Ok(report_validation(&validation))
}

fn validate_locally(job: Value) -> Validation {
    let errors = match drover_structs::decode::decode_api_job(job) {
        Err(e) => e.to_string(),
        Ok(job) => match drover_structs::validate::validate_job(&job) {
            Ok(()) => String::new(),
            Err(e) => e.to_string(),
        },
    };
    Validation {
        errors,
        warnings: String::new(),
        local_only: true,
    }
}

fn report_validation(v: &Validation) -> Exit {
    if v.local_only {
        ui::out(
            "Driver configuration not validated since connection to Nomad agent couldn't be established.\n",
        );
    }
    if !v.errors.trim().is_empty() {
        ui::err("Job validation errors:");
        ui::err(v.errors.trim_end());
        return 1;
    }
    if !v.warnings.is_empty() {
        ui::out(&format!("Job Warnings:\n{}\n", v.warnings));
    }
    ui::out("Job validation successful");
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_json_is_indented_with_four_spaces() {
        let out = to_indented_json(&json!({"Job": {"ID": "x"}}));
        assert_eq!(out, "{\n    \"Job\": {\n        \"ID\": \"x\"\n    }\n}");
    }

    #[test]
    fn local_validation_reports_model_errors() {
        let v =
            validate_locally(json!({"ID": "x", "Name": "x", "Type": "service", "TaskGroups": []}));
        assert!(v.local_only);
        assert!(
            !v.errors.is_empty(),
            "a job without task groups must not validate"
        );
        assert_eq!(report_validation(&v), 1);
    }

    #[test]
    fn clean_validation_exits_zero() {
        assert_eq!(report_validation(&Validation::default()), 0);
    }

    #[test]
    fn periodic_detection_ignores_null() {
        assert!(!is_set(&json!({"Periodic": null}), "Periodic"));
        assert!(is_set(
            &json!({"Periodic": {"Spec": "* * * * *"}}),
            "Periodic"
        ));
    }
}
