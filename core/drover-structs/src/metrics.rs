//! One metric figure as Nomad's telemetry names it: the server's gauges, the client's host and
//! allocation gauges, all exported by `/v1/metrics` in Nomad's JSON and the Prometheus format.

use std::collections::BTreeMap;

/// One gauge: Nomad's metric name, its labels, its value now.
#[derive(Debug, Clone, PartialEq)]
pub struct Gauge {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Gauge {
    pub fn new(name: impl Into<String>, value: f64) -> Gauge {
        Gauge {
            name: name.into(),
            labels: BTreeMap::new(),
            value,
        }
    }

    pub fn label(mut self, key: &str, value: impl Into<String>) -> Gauge {
        self.labels.insert(key.to_string(), value.into());
        self
    }
}
