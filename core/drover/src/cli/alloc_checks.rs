//! `drover alloc checks`: Nomad's command, the latest result of each service check of an
//! allocation, from the client endpoint of the agent that runs it.

use std::collections::BTreeMap;

use drover_structs::service_check::CheckQueryResult;

use super::alloc::find_alloc;
use super::api::{Client, escape_segment};
use super::format::format_list;
use super::timefmt::format_time;
use super::{Exit, ui};

#[derive(Debug, clap::Args)]
pub struct AllocChecksArgs {
    /// Show full identifiers
    #[arg(long)]
    pub verbose: bool,
    /// Allocation ID (or unique prefix)
    pub alloc: String,
}

pub fn run(client: &Client, args: AllocChecksArgs) -> anyhow::Result<Exit> {
    let alloc = match find_alloc(client, &args.alloc, args.verbose) {
        Ok(alloc) => alloc,
        Err(message) => {
            ui::err(&message);
            return Ok(1);
        }
    };
    let path = format!("/v1/client/allocation/{}/checks", escape_segment(&alloc.id));
    let query = [("namespace", alloc.namespace.as_str())];
    let checks: BTreeMap<String, CheckQueryResult> = match client.get_json(&path, &query) {
        Ok((checks, _)) => checks,
        Err(e) => {
            ui::err(&format!("Error querying allocation checks: {e}"));
            return Ok(1);
        }
    };
    println!("{}", render(&checks));
    Ok(0)
}

/// Nomad's output: a count, then one list per check.
fn render(checks: &BTreeMap<String, CheckQueryResult>) -> String {
    let mut out = format!("Status of {} Nomad Service Checks\n", checks.len());
    for check in checks.values() {
        let task = if check.task.is_empty() {
            "(group)"
        } else {
            &check.task
        };
        let mut rows = vec![
            format!("ID|=|{}", check.id),
            format!("Name|=|{}", check.check),
            format!("Group|=|{}", check.group),
            format!("Task|=|{task}"),
            format!("Service|=|{}", check.service),
            format!("Status|=|{}", check.status),
        ];
        if check.status_code > 0 {
            rows.push(format!("StatusCode|=|{}", check.status_code));
        }
        rows.push(format!("Mode|=|{}", check.mode));
        rows.push(format!(
            "Timestamp|=|{}",
            format_time(check.timestamp.saturating_mul(1_000_000_000))
        ));
        rows.push(format!("Output|=|{}", check.output));
        out.push('\n');
        out.push_str(&format_list(&rows));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_check_is_listed_with_its_status_code_only_when_it_has_one() {
        let mut checks = BTreeMap::new();
        checks.insert(
            "a".to_string(),
            CheckQueryResult {
                id: "a".into(),
                check: "alive".into(),
                group: "web.g[0]".into(),
                service: "api".into(),
                status: "success".into(),
                status_code: 200,
                mode: "healthiness".into(),
                output: "nomad: http ok".into(),
                timestamp: 1_700_000_000,
                ..Default::default()
            },
        );
        checks.insert(
            "b".to_string(),
            CheckQueryResult {
                id: "b".into(),
                check: "port".into(),
                task: "web".into(),
                status: "failure".into(),
                ..Default::default()
            },
        );
        let text = render(&checks);
        assert!(
            text.starts_with("Status of 2 Nomad Service Checks\n"),
            "{text}"
        );
        let rows: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        assert!(rows.contains(&("Task", "(group)")), "{text}");
        assert!(rows.contains(&("StatusCode", "200")), "{text}");
        assert!(rows.contains(&("Task", "web")), "{text}");
        assert_eq!(text.matches("StatusCode").count(), 1, "{text}");
    }
}
