//! The agent's `telemetry` block: what Drover acts on (`prometheus_metrics`,
//! `collection_interval`, `publish_node_metrics`, `publish_allocation_metrics`) and the keys
//! it warns about (statsd, datadog and the other sinks, filters: Drover serves `/v1/metrics`
//! only).

use serde_json::{Map, Value};

use drover_client::client_metrics::Telemetry;

/// The telemetry settings in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// Whether `/v1/metrics?format=prometheus` is served. Drover's default is on (Nomad's is
    /// off); `prometheus_metrics = false` turns it off as in Nomad.
    pub prometheus_metrics: bool,
    pub client: Telemetry,
}

const ACTED_ON: [&str; 4] = [
    "prometheus_metrics",
    "collection_interval",
    "publish_node_metrics",
    "publish_allocation_metrics",
];

/// The block's objects (hcl-rs may give a block as a one-element list).
fn blocks(telemetry: Option<&Value>) -> Vec<&Map<String, Value>> {
    match telemetry {
        Some(Value::Object(m)) => vec![m],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    }
}

/// The settings of the `telemetry` block over the defaults; a value of the wrong kind is an
/// error naming its key.
pub fn settings(telemetry: Option<&Value>) -> anyhow::Result<TelemetrySettings> {
    let mut out = TelemetrySettings {
        prometheus_metrics: true,
        client: Telemetry::default(),
    };
    for block in blocks(telemetry) {
        let flag = |key: &str| -> anyhow::Result<Option<bool>> {
            match block.get(key) {
                None => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(other) => {
                    anyhow::bail!("telemetry.{key}: expected true or false, got {other}")
                }
            }
        };
        if let Some(b) = flag("prometheus_metrics")? {
            out.prometheus_metrics = b;
        }
        if let Some(b) = flag("publish_node_metrics")? {
            out.client.publish_node_metrics = b;
        }
        if let Some(b) = flag("publish_allocation_metrics")? {
            out.client.publish_allocation_metrics = b;
        }
        match block.get("collection_interval") {
            None => {}
            Some(Value::String(s)) => {
                let d = drover_jobspec::parse_duration(s)
                    .map_err(|e| anyhow::anyhow!("telemetry.collection_interval: {e}"))?;
                if d.is_zero() {
                    anyhow::bail!("telemetry.collection_interval must be greater than 0");
                }
                out.client.collection_interval = d;
            }
            Some(other) => anyhow::bail!(
                "telemetry.collection_interval: expected a duration such as \"1s\", got {other}"
            ),
        }
    }
    Ok(out)
}

/// The `telemetry` keys Drover does not act on, as `telemetry.KEY`.
pub fn ignored(telemetry: Option<&Value>) -> Vec<String> {
    blocks(telemetry)
        .into_iter()
        .flat_map(|b| b.keys())
        .filter(|k| !ACTED_ON.contains(&k.as_str()))
        .map(|k| format!("telemetry.{k}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn block(hcl: &str) -> Value {
        crate::config::parse_str(hcl, "agent.hcl")
            .unwrap()
            .telemetry
            .unwrap()
    }

    #[test]
    fn the_settings_drover_acts_on_are_read_and_the_others_listed() {
        let t = block(
            "telemetry {\n  prometheus_metrics = false\n  collection_interval = \"5s\"\n  publish_node_metrics = true\n  statsd_address = \"127.0.0.1:8125\"\n}\n",
        );
        let s = settings(Some(&t)).unwrap();
        assert!(!s.prometheus_metrics);
        assert_eq!(s.client.collection_interval, Duration::from_secs(5));
        assert!(s.client.publish_node_metrics && !s.client.publish_allocation_metrics);
        assert_eq!(ignored(Some(&t)), ["telemetry.statsd_address"]);
        let default = settings(None).unwrap();
        assert!(default.prometheus_metrics);
        assert_eq!(default.client, Telemetry::default());
    }

    #[test]
    fn a_bad_value_names_its_key() {
        for (hcl, key) in [
            (
                "telemetry {\n  collection_interval = \"soon\"\n}\n",
                "collection_interval",
            ),
            (
                "telemetry {\n  collection_interval = \"0s\"\n}\n",
                "collection_interval",
            ),
            (
                "telemetry {\n  publish_node_metrics = \"yes\"\n}\n",
                "publish_node_metrics",
            ),
        ] {
            let e = settings(Some(&block(hcl))).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
