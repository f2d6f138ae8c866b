//! Allocation names of a group (`job.group[index]`): which indexes are taken, the lowest free
//! ones for new placements, the highest ones to stop first.

use super::*;

/// Which `job.group[i]` indexes are taken (Nomad's `allocNameIndex`).
pub(crate) struct NameIndex {
    pub(super) job: String,
    pub(super) group: String,
    count: u64,
    used: BTreeSet<u64>,
}

impl NameIndex {
    pub(crate) fn new<'a>(
        job: &str,
        group: &str,
        count: i64,
        allocs: impl Iterator<Item = &'a Arc<Allocation>>,
    ) -> Self {
        NameIndex {
            job: job.to_string(),
            group: group.to_string(),
            count: count.max(0) as u64,
            used: allocs.filter_map(|a| a.index()).collect(),
        }
    }

    pub(super) fn unset(&mut self, index: u64) {
        self.used.remove(&index);
    }

    /// Removes and returns the names of the `n` highest taken indexes.
    pub(crate) fn highest(&mut self, n: u64) -> HashSet<String> {
        let mut out = HashSet::new();
        while (out.len() as u64) < n {
            let Some(i) = self.used.pop_last() else {
                break;
            };
            out.insert(alloc_name(&self.job, &self.group, i));
        }
        out
    }

    /// Takes and returns `n` names: free indexes below `count` first, lowest first; past
    /// those, indexes from 0 again (duplicates, as Nomad does).
    pub(crate) fn next(&mut self, n: u64) -> Vec<String> {
        let mut out = Vec::new();
        for i in 0..self.count {
            if out.len() as u64 == n {
                return out;
            }
            if self.used.insert(i) {
                out.push(alloc_name(&self.job, &self.group, i));
            }
        }
        let remainder = n - out.len() as u64;
        for i in 0..remainder {
            self.used.insert(i);
            out.push(alloc_name(&self.job, &self.group, i));
        }
        out
    }
}
