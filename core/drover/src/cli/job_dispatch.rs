//! `drover job dispatch [-meta k=v]... [-id-prefix-template T] [-idempotency-token T] JOB
//! [INPUT_FILE|-]`: dispatches a parameterized job over `PUT /v1/job/:id/dispatch`, with
//! Nomad's flags and texts. With a token whose child still exists, the server answers that
//! child and no evaluation, so the command prints its id and does not monitor.

use std::collections::BTreeMap;
use std::io::Read as _;

use serde::Deserialize;
use serde_json::json;

use super::api::{Client, escape_segment};
use super::format::{FULL_ID, SHORT_ID, format_kv};
use super::lookup::{self, Match};
use super::{Exit, job_status, monitor, ui};

/// Nomad's `DispatchPayloadSizeLimit`, checked before reading a file.
const PAYLOAD_SIZE_LIMIT: u64 = 16 * 1024;

#[derive(Debug, clap::Args)]
pub struct DispatchArgs {
    /// Meta key/value for the dispatched job (repeatable): -meta key=value
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    pub meta: Vec<String>,
    /// A prefix for the dispatched job's id, after "dispatch-"
    #[arg(long = "id-prefix-template", value_name = "PREFIX", default_value = "")]
    pub id_prefix_template: String,
    /// Dispatch at most one child per token: a dispatch with the token of a child that still
    /// exists returns that child
    #[arg(long = "idempotency-token", value_name = "TOKEN", default_value = "")]
    pub idempotency_token: String,
    /// Return right after dispatching instead of monitoring the evaluation
    #[arg(long)]
    pub detach: bool,
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Parameterized job ID (or unique prefix)
    pub job: String,
    /// File whose content is the payload; "-" reads stdin
    #[arg(value_name = "INPUT_FILE")]
    pub input: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DispatchResponse {
    #[serde(rename = "DispatchedJobID")]
    dispatched_job_id: String,
    #[serde(rename = "EvalID")]
    eval_id: String,
}

/// Go's standard base64 (the JSON encoding of `[]byte`).
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn read_payload(source: &str) -> Result<Vec<u8>, String> {
    if source == "-" {
        let mut data = Vec::new();
        std::io::stdin()
            .read_to_end(&mut data)
            .map_err(|e| format!("Error reading input data: {e}"))?;
        return Ok(data);
    }
    let meta = std::fs::metadata(source).map_err(|e| format!("Error loading source file: {e}"))?;
    if meta.len() > PAYLOAD_SIZE_LIMIT {
        return Err(format!(
            "Payload exceeds maximum size; {} > {PAYLOAD_SIZE_LIMIT}",
            meta.len()
        ));
    }
    std::fs::read(source).map_err(|e| format!("Error reading input data: {e}"))
}

fn parse_meta(pairs: &[String]) -> Result<BTreeMap<String, String>, String> {
    pairs
        .iter()
        .map(|m| match m.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(format!("Error parsing meta value: {m}")),
        })
        .collect()
}

/// The parameterized job a prefix names (Nomad's `JobIDByPrefix` with a parameterized filter).
fn find_parameterized_job(
    client: &Client,
    prefix: &str,
) -> Result<drover_structs::JobListStub, String> {
    let jobs: Vec<drover_structs::JobListStub> =
        match client.get_json("/v1/jobs", &[("prefix", prefix)]) {
            Ok((jobs, _)) => jobs,
            Err(e) => return Err(format!("Error querying job prefix {prefix:?}: {e}")),
        };
    let parameterized: Vec<_> = jobs.into_iter().filter(|j| j.parameterized_job).collect();
    match lookup::resolve(parameterized, prefix, |j| j.id.as_str()) {
        Match::One(job) => Ok(job),
        Match::None => Err(format!(
            "No parameterized job(s) with prefix or ID {prefix:?} found"
        )),
        Match::Many(jobs) => Err(format!(
            "Prefix matched multiple jobs\n\n{}",
            job_status::job_list_table(&jobs, false)
        )),
    }
}

pub fn run(client: &Client, args: DispatchArgs) -> anyhow::Result<Exit> {
    let payload = match args.input.as_deref() {
        None => Vec::new(),
        Some(source) => match read_payload(source) {
            Ok(p) => p,
            Err(message) => {
                ui::err(&message);
                return Ok(1);
            }
        },
    };
    let meta = match parse_meta(&args.meta) {
        Ok(m) => m,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let job = match find_parameterized_job(client, args.job.trim()) {
        Ok(job) => job,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let client = client.in_namespace(&job.namespace);
    let path = format!("/v1/job/{}/dispatch", escape_segment(&job.id));
    let body = json!({
        "JobID": job.id,
        "Payload": (!payload.is_empty()).then(|| base64(&payload)),
        "Meta": meta,
        "IdPrefixTemplate": args.id_prefix_template,
        "IdempotencyToken": args.idempotency_token,
    });
    let resp: DispatchResponse = match client.put_json(&path, &[], &body) {
        Ok(r) => r,
        Err(e) => {
            ui::err(&format!("Failed to dispatch job: {e}"));
            return Ok(1);
        }
    };
    let length = if args.verbose { FULL_ID } else { SHORT_ID };
    let mut rows = vec![format!("Dispatched Job ID|{}", resp.dispatched_job_id)];
    // A periodic parameterized job's children get no evaluation of their own.
    let eval_created = !resp.eval_id.is_empty();
    if eval_created {
        let shown: String = resp.eval_id.chars().take(length).collect();
        rows.push(format!("Evaluation ID|{shown}"));
    }
    ui::out(&format_kv(&rows));
    if args.detach || !eval_created {
        return Ok(0);
    }
    ui::out("");
    Ok(monitor::monitor(&client, &resp.eval_id, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_gos_standard_encoding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"frame-42"), "ZnJhbWUtNDI=");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn meta_pairs_split_on_the_first_equals() {
        let m = parse_meta(&["a=1".into(), "b=x=y".into()]).unwrap();
        assert_eq!((m["a"].as_str(), m["b"].as_str()), ("1", "x=y"));
        assert_eq!(
            parse_meta(&["novalue".into()]).unwrap_err(),
            "Error parsing meta value: novalue"
        );
    }

    #[test]
    fn nomads_dispatch_command_line_parses() {
        use clap::{CommandFactory, Parser};
        let known = super::super::argv::known_long_flags(&super::super::Cli::command());
        let args = [
            "drover",
            "job",
            "dispatch",
            "-meta",
            "frame=42",
            "-meta=owner=me",
            "-id-prefix-template=nightly",
            "-idempotency-token",
            "retry-1",
            "-detach",
            "render",
            "-",
        ]
        .iter()
        .map(std::ffi::OsString::from)
        .collect();
        let cli = super::super::Cli::try_parse_from(super::super::argv::rewrite_single_dash_flags(
            args, &known,
        ))
        .expect("parses");
        let Some(super::super::Command::Job(job)) = cli.command else {
            panic!("expected the job command");
        };
        let super::super::job::JobCommand::Dispatch(d) = job.command else {
            panic!("expected dispatch");
        };
        assert_eq!(d.meta, ["frame=42", "owner=me"]);
        assert_eq!(d.id_prefix_template, "nightly");
        assert_eq!(d.idempotency_token, "retry-1");
        assert!(d.detach);
        assert_eq!((d.job.as_str(), d.input.as_deref()), ("render", Some("-")));
    }
}
