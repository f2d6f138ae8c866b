//! Reading process facts from /proc: identity (start time), process group and resource usage.

use std::io;

use drover_abi::TaskResourceUsage;

use super::time::unix_nanos_now;

/// The fields of `/proc/<pid>/stat` the drivers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pgrp: i32,
    /// User and system CPU time, in clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Start time after boot, in clock ticks: with the pid, it names one process for its lifetime,
    /// so a recovered pid can be told apart from a reused one.
    pub start_ticks: u64,
    /// Resident set size, in pages.
    pub rss_pages: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name is skipped by its last `)` because it
/// may itself contain spaces and parentheses.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is index 0 here, so field N of proc(5) is index N - 3.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(ProcStat {
        pgrp: field(5)?.parse().ok()?,
        utime: field(14)?.parse().ok()?,
        stime: field(15)?.parse().ok()?,
        start_ticks: field(22)?.parse().ok()?,
        rss_pages: field(24)?.parse::<i64>().ok()?.max(0).unsigned_abs(),
    })
}

pub fn read_stat(pid: i32) -> io::Result<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat is not in the expected format"),
        )
    })
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// Sums memory and CPU over every live process in process group `pgid`: a task's children stay
/// in its group unless they leave it on purpose.
pub fn group_usage(pgid: i32) -> io::Result<TaskResourceUsage> {
    let page = page_size();
    let mut rss_bytes = 0u64;
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A process may exit between listing and reading; that is not an error.
        let Ok(stat) = read_stat(pid) else { continue };
        if stat.pgrp == pgid {
            rss_bytes = rss_bytes.saturating_add(stat.rss_pages.saturating_mul(page));
            ticks = ticks.saturating_add(stat.utime + stat.stime);
        }
    }
    Ok(TaskResourceUsage {
        memory_rss_bytes: rss_bytes,
        cpu_total_ticks: ticks as f64,
        timestamp: unix_nanos_now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_spaces_and_parens_in_the_command_name() {
        let text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    17 5 0 0 20 0 1 0 987654 1000000 321 18446744073709551615";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.utime, 17);
        assert_eq!(stat.stime, 5);
        assert_eq!(stat.start_ticks, 987654);
        assert_eq!(stat.rss_pages, 321);
    }

    #[test]
    fn truncated_stat_is_rejected() {
        assert_eq!(parse_stat("12 (x) S 1 12"), None);
        assert_eq!(parse_stat("no parens at all"), None);
    }

    #[test]
    fn own_stat_reports_own_process_group_and_memory() {
        let me = std::process::id() as i32;
        let stat = read_stat(me).unwrap();
        assert_eq!(stat.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(stat.rss_pages > 0);
        let usage = group_usage(stat.pgrp).unwrap();
        assert!(usage.memory_rss_bytes >= stat.rss_pages * page_size());
    }
}
