//! `GET /v1/metrics`: Nomad's JSON summary (`Timestamp`, `Gauges`, `Counters`, `Samples`,
//! `Points`) and, with `?format=prometheus`, the Prometheus text format (0.0.4). Figures are
//! gauges read at the request (the server's, see drover-server's `metrics`, and the local
//! client's allocation counts) and the timings the server records (Raft apply, plan evaluate
//! and apply, scheduler invocations) as samples since start; Drover keeps no counters yet,
//! so that list is empty rather than invented.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use drover_server::metrics::Gauge;
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::query::{Params, flag};
use crate::response::respond_json;

/// The gauges of this agent: its server's, and its client's.
fn gauges(s: &AppState) -> Vec<Gauge> {
    let mut gauges = s.server.gauges();
    if let Some(client) = &s.client {
        gauges.extend(client.gauges());
    }
    gauges
}

/// Nomad's `Timestamp`: Go's `time.Time.String()` of the interval, to the second.
fn timestamp() -> String {
    let now = drover_structs::time::now_nanos();
    let whole = now - now.rem_euclid(1_000_000_000);
    drover_structs::time::format_rfc3339_nanos(whole)
        .replacen('T', " ", 1)
        .replace('Z', " +0000 UTC")
}

/// A metric name as Nomad's Prometheus sink writes it: every character not allowed becomes `_`.
fn prometheus_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The gauges in the Prometheus text format, one `# TYPE` per family.
pub(crate) fn prometheus_text(gauges: &[Gauge]) -> String {
    let mut families: BTreeMap<String, Vec<&Gauge>> = BTreeMap::new();
    for g in gauges {
        families
            .entry(prometheus_name(&g.name))
            .or_default()
            .push(g);
    }
    let mut out = String::new();
    for (name, members) in families {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {name} {name}\n# TYPE {name} gauge");
        for g in members {
            out.push_str(&name);
            if !g.labels.is_empty() {
                let labels: Vec<String> = g
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{}=\"{}\"", prometheus_name(k), escape_label(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(out, " {}", g.value);
        }
    }
    out
}

/// Counters as Prometheus counters (the sum of their increments).
pub(crate) fn prometheus_counters(
    counters: &BTreeMap<String, drover_server::metrics::Summary>,
) -> String {
    let mut out = String::new();
    for (name, c) in counters {
        let name = prometheus_name(name);
        let _ = writeln!(
            out,
            "# HELP {name} {name}\n# TYPE {name} counter\n{name} {}",
            c.sum
        );
    }
    out
}

/// Timings as Prometheus summaries (`_sum` and `_count`, in milliseconds as Nomad's sink).
pub(crate) fn prometheus_summaries(
    timings: &BTreeMap<String, drover_server::metrics::Summary>,
) -> String {
    let mut out = String::new();
    for (name, t) in timings {
        let name = prometheus_name(name);
        let _ = writeln!(
            out,
            "# HELP {name} {name}\n# TYPE {name} summary\n{name}_sum {}\n{name}_count {}",
            t.sum, t.count
        );
    }
    out
}

/// `GET /v1/metrics[?format=prometheus]`.
pub(crate) async fn metrics(
    State(s): State<AppState>,
    Query(params): Query<Params>,
) -> Result<Response, ApiError> {
    let pretty = flag(&params, "pretty")?;
    let gauges = gauges(&s);
    Ok(metrics_response(
        gauges,
        &s.agent,
        params.get("format").map(String::as_str),
        pretty,
    ))
}

/// A summary in Nomad's JSON (`Rate`: the sum per second since the agent began recording).
fn summary_json(name: &str, t: &drover_server::metrics::Summary, host: &str) -> serde_json::Value {
    json!({
        "Name": name,
        "Count": t.count,
        "Sum": t.sum,
        "Min": t.min,
        "Max": t.max,
        "Mean": t.mean(),
        "Stddev": t.stddev(),
        "Rate": t.sum / drover_server::metrics::recording_for().as_secs_f64().max(1.0),
        "Labels": {"host": host},
    })
}

/// `gauges` and this process's counters and timings answered as `/v1/metrics` does: Nomad's
/// JSON, or the Prometheus text with `format = prometheus` (Nomad's 415 when the agent's
/// `prometheus_metrics` is off); another format is a 400. Every figure is labelled with the
/// agent's `host`, as Nomad's go-metrics labels them.
pub fn metrics_response(
    mut gauges: Vec<Gauge>,
    agent: &crate::AgentInfo,
    format: Option<&str>,
    pretty: bool,
) -> Response {
    for g in &mut gauges {
        g.labels
            .entry("host".to_string())
            .or_insert_with(|| agent.name.clone());
    }
    let gauges = &gauges;
    let counters = drover_server::metrics::counters();
    let timings = drover_server::metrics::timings();
    match format {
        Some("prometheus") if !agent.prometheus_metrics => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Prometheus is not enabled",
        )
        .into_response(),
        Some("prometheus") => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            prometheus_text(gauges)
                + &prometheus_counters(&counters)
                + &prometheus_summaries(&timings),
        )
            .into_response(),
        None | Some("") | Some("json") => {
            let body = json!({
                "Timestamp": timestamp(),
                "Gauges": gauges.iter().map(|g| json!({
                    "Name": g.name,
                    "Value": g.value,
                    "Labels": g.labels,
                })).collect::<Vec<_>>(),
                "Counters": counters.iter().map(|(name, c)| summary_json(name, c, &agent.name)).collect::<Vec<_>>(),
                "Samples": timings.iter().map(|(name, t)| summary_json(name, t, &agent.name)).collect::<Vec<_>>(),
                "Points": [],
            });
            respond_json(&body, None, pretty).unwrap_or_else(IntoResponse::into_response)
        }
        Some(other) => ApiError::bad_request(format!(
            "unsupported metrics format {other:?}: json or prometheus"
        ))
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use drover_server::metrics::Gauge;

    use crate::test_support::{TestApi, web_job};

    #[test]
    fn prometheus_text_has_one_family_per_name_and_escaped_labels() {
        let text = super::prometheus_text(&[
            Gauge::new("nomad.nomad.nodes", 2.0).label("status", "ready"),
            Gauge::new("nomad.nomad.nodes", 1.0).label("status", "do\"wn"),
            Gauge::new("nomad.raft.appliedIndex", 18.0),
        ]);
        assert_eq!(
            text,
            "# HELP nomad_nomad_nodes nomad_nomad_nodes\n# TYPE nomad_nomad_nodes gauge\n\
             nomad_nomad_nodes{status=\"ready\"} 2\nnomad_nomad_nodes{status=\"do\\\"wn\"} 1\n\
             # HELP nomad_raft_appliedIndex nomad_raft_appliedIndex\n\
             # TYPE nomad_raft_appliedIndex gauge\nnomad_raft_appliedIndex 18\n"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_report_raft_broker_and_job_figures_in_both_formats() {
        let api = TestApi::start().await;
        api.register_node("9f773057-049e-c568-1bcf-300fae47b4b0")
            .await;
        api.register(web_job("web")).await;
        let r = api.get("/v1/metrics").await;
        assert_eq!(r.status, StatusCode::OK);
        let body = r.json();
        let ts = body["Timestamp"].as_str().unwrap_or_default();
        assert!(ts.ends_with(" +0000 UTC"), "{ts}");
        let gauge = |name: &str| {
            body["Gauges"]
                .as_array()
                .and_then(|g| g.iter().find(|g| g["Name"] == name).cloned())
                .unwrap_or_else(|| panic!("no gauge {name}: {body}"))
        };
        assert!(gauge("nomad.raft.appliedIndex")["Value"].as_f64() > Some(0.0));
        assert_eq!(gauge("nomad.raft.leader")["Value"], 1.0);
        gauge("nomad.nomad.broker.total_ready");
        gauge("nomad.nomad.plan.queue_depth");
        assert_eq!(
            gauge("nomad.nomad.job_status.pending")["Value"]
                .as_f64()
                .unwrap_or_default()
                + gauge("nomad.nomad.job_status.running")["Value"]
                    .as_f64()
                    .unwrap_or_default(),
            1.0
        );
        assert_eq!(gauge("nomad.raft.leader")["Labels"]["host"], "test-agent");
        let summary = gauge("nomad.nomad.job_summary.queued");
        assert_eq!(summary["Labels"]["job"], "web", "{summary}");
        // The job's registration went through Raft: counted, and its commit timed.
        let named = |list: &str, name: &str| {
            body[list]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["Name"] == name).cloned())
                .unwrap_or_else(|| panic!("no {name} in {list}: {body}"))
        };
        let raft_apply = named("Counters", "nomad.raft.apply");
        assert!(raft_apply["Count"].as_u64() >= Some(1), "{raft_apply}");
        assert!(raft_apply["Sum"].as_f64() >= Some(1.0), "{raft_apply}");
        let commit = named("Samples", "nomad.raft.commitTime");
        assert!(commit["Count"].as_u64() >= Some(1), "{commit}");

        let r = api.get("/v1/metrics?format=prometheus").await;
        assert_eq!(r.status, StatusCode::OK);
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .starts_with("text/plain; version=0.0.4")
        );
        let text = r.text();
        assert!(
            text.contains("# TYPE nomad_raft_appliedIndex gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("\nnomad_nomad_broker_total_ready{host=\"test-agent\"} "),
            "{text}"
        );
        assert!(
            text.contains("# TYPE nomad_raft_apply counter\nnomad_raft_apply "),
            "{text}"
        );
        assert!(
            text.contains("# TYPE nomad_raft_commitTime summary\nnomad_raft_commitTime_sum "),
            "{text}"
        );
        assert_eq!(
            api.get("/v1/metrics?format=xml").await.status,
            StatusCode::BAD_REQUEST
        );
    }
}
