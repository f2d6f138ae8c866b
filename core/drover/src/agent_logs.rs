//! The agent's log subscriber: its own log on stderr at `--log-level`, and every event a
//! monitor wants (`/v1/agent/monitor`, maybe more verbose than the agent's own level) to
//! drover-http's log feed, formatted as Nomad's hclog writes: text
//! `2026-11-29T16:24:20.123Z [INFO]  target: message: key=value` or JSON
//! `{"@level","@message","@module","@timestamp", fields...}`.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the process's subscriber (once; later calls change nothing).
pub fn init(filter: EnvFilter) {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let monitor = MonitorLayer.with_filter(filter_fn(|meta| {
        drover_http::log_feed().wants(*meta.level())
    }));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(monitor)
        .try_init();
}

/// Hands events to the log feed.
struct MonitorLayer;

#[derive(Default)]
struct Fields {
    message: String,
    pairs: Vec<(String, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.pairs
                .push((field.name().to_string(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.pairs
                .push((field.name().to_string(), format!("{value:?}")));
        }
    }
}

fn hclog_level(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => "WARN",
        tracing::Level::INFO => "INFO",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::TRACE => "TRACE",
    }
}

/// hclog's text and JSON lines for one event.
pub fn format_record(
    level: tracing::Level,
    target: &str,
    message: &str,
    pairs: &[(String, String)],
    unix_nanos: i64,
) -> drover_http::LogRecord {
    // hclog's timestamp: milliseconds.
    let millis = unix_nanos - unix_nanos.rem_euclid(1_000_000);
    let stamp = drover_structs::time::format_rfc3339_nanos(millis);
    let name = hclog_level(level);
    let mut text = format!("{stamp} [{name}] ");
    for _ in name.len()..5 {
        text.push(' ');
    }
    // Writing to a String cannot fail.
    let _ = write!(text, "{target}: {message}");
    for (k, v) in pairs {
        let _ = write!(text, ": {k}={v}");
    }
    text.push('\n');
    let mut json = serde_json::Map::new();
    json.insert("@level".into(), name.to_ascii_lowercase().into());
    json.insert("@message".into(), message.into());
    json.insert("@module".into(), target.into());
    json.insert("@timestamp".into(), stamp.into());
    for (k, v) in pairs {
        json.insert(k.clone(), v.clone().into());
    }
    let json = format!("{}\n", serde_json::Value::Object(json));
    drover_http::LogRecord { level, text, json }
}

impl<S: tracing::Subscriber> Layer<S> for MonitorLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        drover_http::log_feed().publish(format_record(
            *meta.level(),
            meta.target(),
            &fields.message,
            &fields.pairs,
            drover_structs::time::now_nanos(),
        ));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn records_are_written_as_hclog_text_and_json() {
        let r = super::format_record(
            tracing::Level::INFO,
            "drover_server::cluster",
            "joined the cluster",
            &[("id".into(), "7".into())],
            1_796_056_660_123_456_789,
        );
        assert_eq!(
            r.text,
            "2026-11-30T16:37:40.123Z [INFO]  drover_server::cluster: joined the cluster: id=7\n"
        );
        let json: serde_json::Value = serde_json::from_str(&r.json).expect("json");
        assert_eq!(json["@level"], "info");
        assert_eq!(json["@module"], "drover_server::cluster");
        assert_eq!(json["@timestamp"], "2026-11-30T16:37:40.123Z");
        assert_eq!(json["id"], "7");
    }
}
