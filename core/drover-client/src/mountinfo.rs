//! Reader for /proc/self/mountinfo: which filesystems are mounted where.
//!
//! Used by the fingerprint (the device behind the data dir) and by the allocation directory
//! (mounts that must be undone before a directory tree is deleted).

use std::path::{Path, PathBuf};

/// One line of mountinfo(5), reduced to what the agent needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Where the filesystem is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type, e.g. `ext4`, `tmpfs`.
    pub fs_type: String,
    /// Mount source, df's "Filesystem" column, e.g. `/dev/sda1`, `tmpfs`.
    pub source: String,
}

/// Reads and parses the calling process's mount table.
pub fn read_self() -> std::io::Result<Vec<MountEntry>> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|text| parse(&text))
}

/// Parses mountinfo text in file order. Malformed lines are skipped.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <type> <source> <super options>"
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fs_type = right.next()?;
    let source = right.next()?;
    Some(MountEntry {
        mount_point: PathBuf::from(unescape(mount_point)),
        fs_type: unescape(fs_type),
        source: unescape(source),
    })
}

/// The mount that holds `path`: the longest matching mount point, and among equal ones the last,
/// because a later mount on the same point shadows earlier ones. `path` should be canonical.
pub fn mount_containing<'a>(mounts: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let mut best: Option<(usize, &MountEntry)> = None;
    for entry in mounts.iter().filter(|m| path.starts_with(&m.mount_point)) {
        let depth = entry.mount_point.components().count();
        if best.is_none_or(|(best_depth, _)| depth >= best_depth) {
            best = Some((depth, entry));
        }
    }
    best.map(|(_, entry)| entry)
}

/// mountinfo escapes space, tab, newline and backslash as a backslash and three octal digits.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            let octal = bytes
                .get(i + 1..i + 4)
                .filter(|digits| digits.iter().all(|b| (b'0'..=b'7').contains(b)))
                .map(|digits| {
                    digits
                        .iter()
                        .fold(0u16, |acc, digit| acc * 8 + u16::from(digit - b'0'))
                });
            if let Some(Ok(byte)) = octal.map(u8::try_from) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:5 / /proc rw - proc proc rw
30 22 8:17 / /var/lib/drover rw - xfs /dev/sdb1 rw
31 22 8:33 / /mnt/with\\040space rw - ext4 /dev/sdc1 rw
32 30 0:40 / /var/lib/drover rw - tmpfs tmpfs rw
garbage line without separator
";

    #[test]
    fn parse_reads_mount_point_type_and_source_and_skips_garbage() {
        let mounts = parse(MOUNTINFO);
        assert_eq!(mounts.len(), 5);
        assert_eq!(
            mounts[0],
            MountEntry {
                mount_point: PathBuf::from("/"),
                fs_type: "ext4".to_string(),
                source: "/dev/sda1".to_string(),
            }
        );
        assert_eq!(mounts[3].mount_point, PathBuf::from("/mnt/with space"));
    }

    #[test]
    fn mount_containing_picks_longest_then_latest_mount_point() {
        let mounts = parse(MOUNTINFO);
        let source = |p: &str| mount_containing(&mounts, Path::new(p)).map(|m| m.source.as_str());
        assert_eq!(source("/home/x"), Some("/dev/sda1"));
        assert_eq!(source("/var/lib/drover/alloc"), Some("tmpfs"));
        assert_eq!(source("/var/lib/droverx"), Some("/dev/sda1"));
        assert_eq!(source("/mnt/with space/d"), Some("/dev/sdc1"));
    }

    #[test]
    fn octal_escapes_are_decoded_and_broken_ones_kept() {
        assert_eq!(unescape("a\\040b\\011c"), "a b\tc");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
        assert_eq!(unescape("big\\777"), "big\\777");
        assert_eq!(unescape("plain"), "plain");
    }

    #[test]
    fn read_self_finds_the_root_mount() {
        let mounts = read_self().expect("mountinfo");
        assert!(mount_containing(&mounts, Path::new("/")).is_some());
    }
}
