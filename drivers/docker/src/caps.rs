//! Linux capabilities of a container: what Docker grants by default, what the agent allows
//! (`allow_caps`) and what the task asks for (`cap_add`, `cap_drop`), turned into Docker's
//! CapAdd/CapDrop lists the way Nomad does it.

use std::collections::BTreeSet;

/// Nomad's default `allow_caps`: Docker's defaults without NET_RAW.
pub const NOMAD_DEFAULT_CAPS: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

const ALL: &str = "all";

/// Lower case without the `CAP_` prefix, the form Docker and Nomad's docker driver use.
fn normalize(cap: &str) -> String {
    let lower = cap.trim().to_ascii_lowercase();
    lower
        .strip_prefix("cap_")
        .map(str::to_string)
        .unwrap_or(lower)
}

fn set(caps: &[String]) -> BTreeSet<String> {
    caps.iter().map(|c| normalize(c)).collect()
}

/// What Docker grants a container when nothing is added or dropped.
fn docker_defaults() -> BTreeSet<String> {
    let mut s: BTreeSet<String> = NOMAD_DEFAULT_CAPS.iter().map(|c| normalize(c)).collect();
    s.insert("net_raw".to_string());
    s
}

/// The capabilities to add and to drop. Fails with the capabilities the task asks for that
/// the agent does not allow. Docker's defaults that the agent does not allow are dropped, and
/// the task's own adds and drops are always passed on (`cap_add` wins over `cap_drop` in
/// Docker, so `cap_drop = ["all"]` with a few adds works).
pub fn delta(
    allow_caps: &[String],
    cap_add: &[String],
    cap_drop: &[String],
) -> Result<(Vec<String>, Vec<String>), Vec<String>> {
    let allow = set(allow_caps);
    let add = set(cap_add);
    let drop = set(cap_drop);
    let allow_all = allow.contains(ALL);
    if !allow_all {
        let missing: Vec<String> = add.difference(&allow).cloned().collect();
        if !missing.is_empty() {
            return Err(missing);
        }
    }
    let add_out: Vec<String> = if add.contains(ALL) {
        vec![ALL.to_string()]
    } else {
        add.into_iter().collect()
    };
    let drop_out: Vec<String> = if drop.contains(ALL) {
        vec![ALL.to_string()]
    } else {
        let mut d = drop;
        if !allow_all {
            d.extend(docker_defaults().difference(&allow).cloned());
        }
        d.into_iter().collect()
    };
    Ok((add_out, drop_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn defaults() -> Vec<String> {
        strs(&NOMAD_DEFAULT_CAPS)
    }

    #[test]
    fn default_allow_list_drops_net_raw() {
        let (add, drop) = delta(&defaults(), &[], &[]).unwrap();
        assert!(add.is_empty());
        assert_eq!(drop, vec!["net_raw"]);
    }

    #[test]
    fn adding_a_cap_outside_allow_caps_fails_naming_it() {
        let err = delta(&defaults(), &strs(&["SYS_ADMIN", "chown"]), &[]).unwrap_err();
        assert_eq!(err, vec!["sys_admin"]);
    }

    #[test]
    fn allowed_adds_and_task_drops_pass_through() {
        let allow = strs(&["chown", "net_raw", "kill"]);
        let (add, drop) = delta(&allow, &strs(&["CAP_NET_RAW"]), &strs(&["kill"])).unwrap();
        assert_eq!(add, vec!["net_raw"]);
        assert!(drop.contains(&"kill".to_string()));
        assert!(drop.contains(&"setuid".to_string()), "not allowed: dropped");
        assert!(!drop.contains(&"chown".to_string()));
    }

    #[test]
    fn drop_all_and_allow_all() {
        let (_, drop) = delta(&defaults(), &strs(&["chown"]), &strs(&["ALL"])).unwrap();
        assert_eq!(drop, vec!["all"]);
        let (add, drop) = delta(&strs(&["all"]), &strs(&["sys_admin"]), &[]).unwrap();
        assert_eq!(add, vec!["sys_admin"]);
        assert!(drop.is_empty());
    }
}
