//! Container Storage Interface objects as the servers keep them: volumes with their claims,
//! plugins with the controller and node instances clients fingerprint, and the pure rules that
//! change them (claims and releases, plugin health counts, expected counts from jobs). Nomad's
//! JSON names and shapes throughout; the state store applies these rules inside its writes.

mod external;
mod modes;
mod plugin;
mod snapshot;
mod spec;
mod volume;

pub use external::*;
pub use modes::*;
pub use plugin::*;
pub use snapshot::*;
pub use spec::{CsiSpecError, parse_bytes, volume_from_spec};
pub use volume::*;

/// Why `id` (a CSI plugin or volume ID) cannot be used, or `None`. Both become directory
/// names on clients (the plugin's socket directory, a volume's staging and publish paths),
/// so only letters, digits, `-`, `_`, `.` and the `[n]` of per-allocation volumes are taken,
/// and never `.` or `..` themselves.
pub fn unsafe_csi_id(id: &str) -> Option<&'static str> {
    if id.len() > 128 {
        return Some("is longer than 128 characters");
    }
    if id == "." || id == ".." {
        return Some("is not a usable name");
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '[' | ']');
    if !id.chars().all(ok) {
        return Some("may hold only letters, digits, '-', '_', '.', '[' and ']'");
    }
    None
}

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
