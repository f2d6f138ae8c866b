//! What a long-running `drover` process keeps resident. Once an agent or a mesh proxy
//! serves, it lets go of the pages of the program file it mapped to start (the binary's text
//! is about 44 MB, of which a proxy runs a small part and an agent a larger one); what it runs
//! afterwards is faulted back in from the page cache as it runs, so its resident set becomes
//! its working set. An agent does the same, and gives the allocator's free memory back to the
//! system, each time a burst of work (starting or stopping tasks, a busy API) is over: without
//! that, the pages a burst touched stayed resident for the life of the process
//! (BENCHMARKS.md, issue 18: 49 MB after 50 tasks were stopped and purged, against 22 MB idle).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the agent looks at its own CPU time.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// CPU time within one check interval above which the interval counts as busy, and at or
/// below which it counts as quiet. An idle dev agent (heartbeats, host statistics, Raft ticks,
/// the deployment watcher) uses 10-14 ms a second, 30 ms in some seconds, measured per thread
/// with `schedstat`; at 20 ms the quiet seconds after a burst were often not seen as quiet,
/// and the trim came late or not at all. Starting or stopping even a few tasks uses more.
const QUIET_CPU: Duration = Duration::from_millis(50);

/// Quiet intervals in a row after a busy one before the process is trimmed: the blocking
/// pool's threads a burst started exit after `BLOCKING_KEEP_ALIVE` (2 s), and what they held
/// is given back only after that.
const QUIET_BEFORE_TRIM: u32 = 3;

/// Trims the process once each time a busy interval is followed by `QUIET_BEFORE_TRIM` quiet
/// ones. The process's start counts as busy, so the process is trimmed soon after it starts
/// too. A trim costs about a millisecond and the minor faults of what is run again afterwards.
pub async fn trim_after_bursts() {
    let mut ticks = tokio::time::interval(CHECK_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut bursts = BurstEnd::default();
    let mut previous = process_cpu_time();
    loop {
        ticks.tick().await;
        let now = process_cpu_time();
        if bursts.observe(now.saturating_sub(previous)) {
            trim();
            // The trim's own CPU time is not a burst.
            previous = process_cpu_time();
        } else {
            previous = now;
        }
    }
}

/// Tells, from the CPU time of each check interval, when a burst of work has ended.
#[derive(Debug)]
struct BurstEnd {
    busy_since_trim: bool,
    quiet_in_a_row: u32,
}

impl Default for BurstEnd {
    /// The process's start is a burst.
    fn default() -> Self {
        BurstEnd {
            busy_since_trim: true,
            quiet_in_a_row: 0,
        }
    }
}

impl BurstEnd {
    /// Takes the CPU time of one interval; true when the process should be trimmed now.
    fn observe(&mut self, used: Duration) -> bool {
        if used > QUIET_CPU {
            self.busy_since_trim = true;
            self.quiet_in_a_row = 0;
            return false;
        }
        self.quiet_in_a_row += 1;
        if self.busy_since_trim && self.quiet_in_a_row >= QUIET_BEFORE_TRIM {
            self.busy_since_trim = false;
            return true;
        }
        false
    }
}

/// Gives back the allocator's free memory (forcing the purge of every arena page no thread
/// uses, which mimalloc otherwise does only on later allocations) and drops the program's
/// clean pages ([`drop_clean`]). mimalloc collects only the calling thread's pages, so each
/// runtime worker collects its own the next time it parks ([`collect_if_trimmed`]).
pub fn trim() {
    TRIMS.fetch_add(1, Ordering::Relaxed);
    collect_if_trimmed();
    drop_clean();
}

/// How many trims there were; a thread that has seen fewer collects its heap.
static TRIMS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The trims this thread has collected its heap for.
    static TRIMS_COLLECTED: Cell<u64> = const { Cell::new(0) };
}

/// Collects the calling thread's allocator heap once per trim: run by each runtime worker
/// before it parks (`on_thread_park`), which costs an atomic load when there is nothing to do.
/// A worker holds the pages of what it allocated; without this, the memory a burst of tasks
/// used stayed in the workers' heaps after the tasks were gone (a client agent after 50 tasks
/// were purged: 8.0 MB resident in the allocator's arena against 2.4 MB idle).
pub fn collect_if_trimmed() {
    let trims = TRIMS.load(Ordering::Relaxed);
    if TRIMS_COLLECTED.get() == trims {
        return;
    }
    TRIMS_COLLECTED.set(trims);
    // SAFETY: `mi_collect` takes no pointer; it frees the calling thread's unused pages and
    // purges free arena memory, both of which no live allocation refers to.
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// mimalloc's `mi_option_purge_delay`: its place in `mi_option_e` (the same in mimalloc v2 and
/// v3; libmimalloc-sys builds v3 and names no constant for it). The test below checks that it
/// reads v3's documented default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long a server's allocator keeps memory it freed before giving it back to the system.
/// mimalloc's default, 1 s, gives back part of what the plan entries freed before later ones
/// allocate it again, so the kernel faults in and zeroes those pages again (BENCHMARKS.md,
/// issue 21: the C1M shape takes 15% fewer page faults with 5 s, 854,000 - 867,000 against
/// 1,006,000 - 1,029,000, and placed 7% faster on average over four alternating pairs). A
/// restart did not measurably change. [`trim`] still forces the purge whatever the delay.
pub const SERVER_PURGE_DELAY_MS: i64 = 5_000;

/// Makes the allocator keep freed memory for [`SERVER_PURGE_DELAY_MS`] before purging it, unless
/// the operator set `MIMALLOC_PURGE_DELAY` (mimalloc reads it at start; it wins).
pub fn keep_freed_memory_for_reuse() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets one of mimalloc's integer options; it takes no pointer and mimalloc reads
    // the option atomically each time it decides whether to purge.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, SERVER_PURGE_DELAY_MS as _) };
}

/// CPU time the whole process has used (every thread, user and system).
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Drops every clean, read-only file mapping's pages from the process (`MADV_DONTNEED`; the
/// pages stay in the page cache, shared with other processes). BENCHMARKS.md has what it
/// saves (a proxy: 11.6 MB RSS before, of which 9 MB were the binary's pages). Mappings
/// holding written (anonymous) pages, such as the relocated read-only data, are left alone:
/// dropping them would lose what was written.
///
/// Only the program's own mappings are touched: they live as long as the process, so none
/// can be unmapped and its addresses reused by another thread between reading `smaps` and
/// the `madvise` (a library's could, with `dlclose`).
pub fn drop_clean() {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return;
    };
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let exe = exe.to_string_lossy().to_string();
    for (start, end) in clean_file_mappings(&smaps, &exe) {
        // SAFETY: the range is a whole mapping of the program's own file, which lives as long
        // as the process, not writable, with no anonymous page (resident or swapped):
        // dropping its pages only makes later accesses read them again from the file,
        // unchanged.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The address ranges of `smaps` that map file `path` read-only and hold no anonymous page,
/// resident or swapped out.
fn clean_file_mappings(smaps: &str, path: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // (start, end, eligible so far) of the mapping whose fields are being read.
    let mut current: Option<(usize, usize, bool)> = None;
    let finish = |m: Option<(usize, usize, bool)>, out: &mut Vec<(usize, usize)>| {
        if let Some((start, end, true)) = m {
            out.push((start, end));
        }
    };
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            finish(current.take(), &mut out);
            let perms = words.next().unwrap_or("");
            // offset, device, inode, then the path of a file mapping (which may contain
            // spaces, and ends in " (deleted)" once the file was replaced).
            let mapped = words.skip(3).collect::<Vec<_>>().join(" ");
            let mapped = mapped.strip_suffix(" (deleted)").unwrap_or(&mapped);
            let ours =
                !path.is_empty() && mapped == path.strip_suffix(" (deleted)").unwrap_or(path);
            current = Some((
                start,
                end,
                ours && perms.starts_with('r') && !perms.contains('w'),
            ));
        } else if (first == "Anonymous:" || first == "Swap:")
            && words.next().is_some_and(|kb| kb != "0")
            && let Some(m) = current.as_mut()
        {
            m.2 = false;
        }
    }
    finish(current.take(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_option_reads_mimallocs_documented_default() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // No test of this binary calls `keep_freed_memory_for_reuse`, so the option is still
        // at its default, 1,000 ms in v3 (10 in v2); its neighbours in `mi_option_e` default
        // to 1 and 0.
        // SAFETY: reads an integer option; no pointer is involved.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }

    #[test]
    fn a_burst_is_trimmed_once_after_three_quiet_intervals() {
        let busy = Duration::from_millis(200);
        // What an idle dev agent uses in its busier seconds (heartbeats, Raft ticks, host
        // statistics): still quiet.
        let idle = Duration::from_millis(30);
        let mut bursts = BurstEnd::default();
        // The start counts as a burst.
        assert_eq!(
            [idle, idle, idle, idle].map(|used| bursts.observe(used)),
            [false, false, true, false]
        );
        // Idle for long: nothing more to give back.
        assert!((0..100).all(|_| !bursts.observe(idle)));
        // A burst, interrupted quiet, then quiet for long enough: one trim.
        assert_eq!(
            [busy, idle, idle, busy, idle, idle, idle, idle].map(|used| bursts.observe(used)),
            [false, false, false, false, false, false, true, false]
        );
    }

    #[test]
    fn only_clean_read_only_file_mappings_are_dropped() {
        let smaps = "\
55ad1d186000-55ad1dd02000 r--p 00000000 fe:01 123 /usr/bin/drover
Rss:                2536 kB
Anonymous:             0 kB
55ad1dd02000-55ad207e2000 r-xp 00b7b000 fe:01 123 /usr/bin/drover
Anonymous:             0 kB
55ad207e2000-55ad20913000 r--p 03658000 fe:01 123 /usr/bin/drover
Anonymous:          1212 kB
55ad20913000-55ad20914000 rw-p 03789000 fe:01 123 /usr/bin/drover
Anonymous:             4 kB
20000000000-20000280000 rw-p 00000000 00:00 0
Anonymous:           268 kB
7ffc530e6000-7ffc53107000 rw-p 00000000 00:00 0                          [stack]
Anonymous:            68 kB
7f80b6d50000-7f80b6ea6000 r-xp 00028000 fe:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
";
        assert_eq!(
            clean_file_mappings(smaps, "/usr/bin/drover"),
            vec![
                (0x55ad1d186000, 0x55ad1dd02000),
                (0x55ad1dd02000, 0x55ad207e2000),
            ]
        );
        // A page swapped out of a copy-on-write mapping is written data too.
        let swapped = "\
55ad1d186000-55ad1dd02000 r--p 00000000 fe:01 123 /usr/bin/drover (deleted)
Anonymous:             0 kB
Swap:                  8 kB
55ad1dd02000-55ad207e2000 r-xp 00b7b000 fe:01 123 /usr/bin/drover (deleted)
Anonymous:             0 kB
Swap:                  0 kB
";
        assert_eq!(
            clean_file_mappings(swapped, "/usr/bin/drover (deleted)"),
            vec![(0x55ad1dd02000, 0x55ad207e2000)]
        );
    }
}
