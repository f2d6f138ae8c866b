//! Linux capabilities of exec tasks, computed as Nomad's `capabilities.Calculate` does: the
//! basis (Nomad's defaults: Docker's list without NET_RAW) intersected with the plugin's
//! `allow_caps`, minus the task's `cap_drop`, plus its `cap_add` (which must lie within
//! `allow_caps`). Names are accepted in any case, with or without `CAP_`; `all` means every
//! capability this kernel supports.

use std::fmt;

use thiserror::Error;

/// Capability names by number, as in linux/capability.h (0 ..= 40).
const NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// Nomad's default `allow_caps` and basis (its `capabilities.HCLSpecLiteral`).
pub const NOMAD_DEFAULTS: [&str; 13] = [
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
];

/// The capability number of `net_raw`, which Nomad's defaults leave out on purpose.
#[cfg(test)]
pub const CAP_NET_RAW: u32 = 13;

/// A set of capabilities as a bit mask (bit N = capability N), the kernel's own layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapSet(u64);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CapError {
    #[error("{field} configured with capabilities not supported by system: {names}")]
    Unsupported { field: &'static str, names: String },
    #[error("driver does not allow the following capabilities: {0}")]
    NotAllowed(String),
}

/// Nomad's spelling of a name: trimmed, lower case, without `cap_`.
fn normalize(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    lower
        .strip_prefix("cap_")
        .map(str::to_string)
        .unwrap_or(lower)
}

impl CapSet {
    pub const fn empty() -> Self {
        CapSet(0)
    }

    /// Every capability up to `last_cap` (the kernel's /proc/sys/kernel/cap_last_cap).
    pub fn supported(last_cap: u32) -> Self {
        let known = NAMES.len() as u32 - 1;
        let last = last_cap.min(known);
        CapSet((0..=last).fold(0, |bits, cap| bits | 1 << cap))
    }

    /// Parses names into a set; `all` is every supported capability. Names this kernel does not
    /// support are reported together, under the config field they came from.
    pub fn parse(
        names: &[String],
        supported: CapSet,
        field: &'static str,
    ) -> Result<CapSet, CapError> {
        let mut set = CapSet::empty();
        let mut unknown = Vec::new();
        for name in names {
            let name = normalize(name);
            if name.is_empty() {
                continue;
            }
            if name == "all" {
                set = set.union(supported);
                continue;
            }
            match NAMES.iter().position(|n| *n == name) {
                Some(cap) if supported.contains(cap as u32) => set.0 |= 1 << cap,
                _ => unknown.push(name),
            }
        }
        if unknown.is_empty() {
            Ok(set)
        } else {
            unknown.sort();
            unknown.dedup();
            Err(CapError::Unsupported {
                field,
                names: unknown.join(", "),
            })
        }
    }

    pub fn contains(self, cap: u32) -> bool {
        cap < 64 && self.0 & (1 << cap) != 0
    }

    pub fn union(self, other: CapSet) -> CapSet {
        CapSet(self.0 | other.0)
    }

    pub fn intersect(self, other: CapSet) -> CapSet {
        CapSet(self.0 & other.0)
    }

    pub fn minus(self, other: CapSet) -> CapSet {
        CapSet(self.0 & !other.0)
    }

    pub fn bits(self) -> u64 {
        self.0
    }

    /// The capability numbers in the set, ascending.
    pub fn numbers(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |cap| self.contains(*cap))
    }
}

impl fmt::Display for CapSet {
    /// Lower-case names, comma separated, as Nomad prints a set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .numbers()
            .filter_map(|cap| NAMES.get(cap as usize).copied())
            .collect();
        let mut sorted = names;
        sorted.sort_unstable();
        f.write_str(&sorted.join(", "))
    }
}

/// The set a task runs with: `(basis ∩ allow) - drop + add`, where `add` must be allowed.
/// `cap_add` wins over `cap_drop`, so `cap_drop = ["all"]` with a short `cap_add` works.
pub fn calculate(
    basis: CapSet,
    allow: CapSet,
    add: CapSet,
    drop: CapSet,
) -> Result<CapSet, CapError> {
    let missing = add.minus(allow);
    if missing != CapSet::empty() {
        return Err(CapError::NotAllowed(missing.to_string()));
    }
    Ok(basis.intersect(allow).minus(drop).union(add))
}

/// Reads the kernel's highest capability number; 40 (Linux 5.9+) if it cannot be read.
pub fn kernel_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(NAMES.len() as u32 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn set(list: &[&str]) -> CapSet {
        CapSet::parse(&names(list), CapSet::supported(40), "test").unwrap()
    }

    fn defaults() -> CapSet {
        set(&NOMAD_DEFAULTS)
    }

    #[test]
    fn nomad_defaults_are_dockers_mask_without_net_raw() {
        // Docker's default CapEff is 0xa80425fb; NET_RAW is its bit 13 (0x2000).
        assert_eq!(defaults().bits(), 0xa804_25fb & !(1 << CAP_NET_RAW));
        assert!(!defaults().contains(CAP_NET_RAW));
    }

    #[test]
    fn names_are_normalized_and_all_expands_to_what_the_kernel_supports() {
        assert_eq!(
            set(&["CAP_NET_RAW", " net_raw", "Cap_Net_Raw"]).bits(),
            1 << 13
        );
        assert_eq!(set(&["ALL"]), CapSet::supported(40));
        let old_kernel = CapSet::supported(37);
        assert_eq!(
            CapSet::parse(&names(&["all"]), old_kernel, "x").unwrap(),
            old_kernel
        );
        assert_eq!(
            CapSet::parse(&names(&["bpf", "chown", "bogus"]), old_kernel, "cap_add"),
            Err(CapError::Unsupported {
                field: "cap_add",
                names: "bogus, bpf".into()
            })
        );
    }

    #[test]
    fn drop_then_add_within_allow() {
        let allow = defaults();
        let none = CapSet::empty();
        assert_eq!(
            calculate(defaults(), allow, none, none).unwrap(),
            defaults()
        );
        assert_eq!(
            calculate(defaults(), allow, set(&["chown", "kill"]), set(&["all"])).unwrap(),
            set(&["chown", "kill"])
        );
        assert_eq!(
            calculate(defaults(), allow, none, set(&["mknod"])).unwrap(),
            defaults().minus(set(&["mknod"]))
        );
    }

    #[test]
    fn adding_beyond_allow_caps_is_refused_naming_the_caps() {
        let err = calculate(
            defaults(),
            defaults(),
            set(&["net_raw", "sys_admin"]),
            CapSet::empty(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "driver does not allow the following capabilities: net_raw, sys_admin"
        );
    }

    #[test]
    fn a_narrower_allow_list_narrows_the_default_set() {
        let allow = set(&["chown", "net_raw"]);
        assert_eq!(
            calculate(defaults(), allow, CapSet::empty(), CapSet::empty()).unwrap(),
            set(&["chown"])
        );
        assert_eq!(
            calculate(defaults(), allow, set(&["net_raw"]), CapSet::empty()).unwrap(),
            set(&["chown", "net_raw"])
        );
    }
}
