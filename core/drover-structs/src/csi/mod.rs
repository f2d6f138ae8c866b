//! Container Storage Interface objects as the servers keep them: volumes with their claims,
//! plugins with the controller and node instances clients fingerprint, and the pure rules that
//! change them (claims and releases, plugin health counts, expected counts from jobs). Nomad's
//! JSON names and shapes throughout; the state store applies these rules inside its writes.

mod modes;
mod plugin;
mod snapshot;
mod spec;
mod volume;

pub use modes::*;
pub use plugin::*;
pub use snapshot::*;
pub use spec::{CsiSpecError, parse_bytes, volume_from_spec};
pub use volume::*;

/// The `type` of a group `volume` block (and of a volume spec) served by a CSI plugin.
pub const VOLUME_TYPE_CSI: &str = "csi";

/// Go's zero `time.Time` as JSON: what Nomad writes for a time that was never set.
pub const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Serialises a time held as an RFC 3339 string, writing Go's zero time for an unset one.
pub(crate) fn serialize_go_time<S: serde::Serializer>(t: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if t.is_empty() { GO_ZERO_TIME } else { t })
}

/// Whether a time held as an RFC 3339 string is set (not empty, not Go's zero time).
pub fn go_time_is_set(t: &str) -> bool {
    !t.is_empty() && t != GO_ZERO_TIME
}
