//! Small helpers: a seeded random source, a fast hasher for the scheduler's own maps,
//! allocation names, Nomad's "does this job change need new allocations" test, and the legacy
//! resource fields of allocations.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use drover_structs::{Job, NetworkResource, TaskGroup};

/// A small deterministic random source (xorshift64*). The scheduler seeds it from the evaluation
/// so that a run can be replayed, while different evaluations visit nodes in different orders.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn seeded(text: &str, salt: u64) -> Rng {
        // FNV-1a over the text, mixed with the salt.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in text.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Rng(if h == 0 { 0x2545_f491_4f6c_dd1d } else { h })
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % (n.max(1) as u64)) as usize
    }

    /// Fisher-Yates shuffle.
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}

/// The Fx hash (rustc's): the scheduler's maps are keyed by ids and names it builds itself
/// from trusted state, so it needs speed, not resistance to chosen keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;
pub(crate) type FxMap<K, V> = HashMap<K, V, FxBuild>;

/// `job.group[index]`, Nomad's allocation name.
pub(crate) fn alloc_name(job_id: &str, group: &str, index: u64) -> String {
    format!("{job_id}.{group}[{index}]")
}

/// Whether going from `old` to `new` changes group `tg` in a way that needs new allocations
/// rather than an in-place update (Nomad's `tasksUpdated`). Counts, update strategies, restart
/// and reschedule policies, services and constraints are not part of it: constraints are checked
/// against the current node when the update is tried in place.
pub(crate) fn tasks_updated(new: &Job, old: &Job, tg: &str) -> bool {
    let (Some(a), Some(b)) = (new.lookup_task_group(tg), old.lookup_task_group(tg)) else {
        return true;
    };
    if a.tasks.len() != b.tasks.len() {
        return true;
    }
    if a.ephemeral_disk != b.ephemeral_disk {
        return true;
    }
    if networks_updated(a.networks.as_deref(), b.networks.as_deref()) {
        return true;
    }
    if affinities(new, a) != affinities(old, b) {
        return true;
    }
    if new.spreads != old.spreads || a.spreads != b.spreads {
        return true;
    }
    if a.volumes != b.volumes || a.consul != b.consul {
        return true;
    }
    for at in &a.tasks {
        let Some(bt) = b.tasks.iter().find(|t| t.name == at.name) else {
            return true;
        };
        if at.driver != bt.driver
            || at.user != bt.user
            || at.config != bt.config
            || at.env != bt.env
            || at.artifacts != bt.artifacts
            || at.vault != bt.vault
            || at.templates != bt.templates
            || at.csi_plugin_config != bt.csi_plugin_config
            || at.volume_mounts != bt.volume_mounts
            || at.lifecycle != bt.lifecycle
        {
            return true;
        }
        if combined_meta(new, a, &at.name) != combined_meta(old, b, &bt.name) {
            return true;
        }
        let (ar, br) = (&at.resources, &bt.resources);
        if networks_updated(ar.networks.as_deref(), br.networks.as_deref()) {
            return true;
        }
        if ar.cpu != br.cpu
            || ar.cores != br.cores
            || ar.memory_mb != br.memory_mb
            || ar.memory_max_mb != br.memory_max_mb
            || ar.devices != br.devices
        {
            return true;
        }
    }
    false
}

fn affinities<'a>(job: &'a Job, tg: &'a TaskGroup) -> Vec<&'a drover_structs::Affinity> {
    job.affinities
        .iter()
        .flatten()
        .chain(tg.affinities.iter().flatten())
        .chain(tg.tasks.iter().flat_map(|t| t.affinities.iter().flatten()))
        .collect()
}

fn combined_meta(job: &Job, tg: &TaskGroup, task: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for layer in [job.meta.as_ref(), tg.meta.as_ref()].into_iter().flatten() {
        m.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if let Some(t) = tg.tasks.iter().find(|t| t.name == task)
        && let Some(meta) = &t.meta
    {
        m.extend(meta.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    m
}

/// Nomad's `networkUpdated`: dynamic port values are ignored, everything else that shapes the
/// network counts.
fn networks_updated(a: Option<&[NetworkResource]>, b: Option<&[NetworkResource]>) -> bool {
    let a = a.unwrap_or_default();
    let b = b.unwrap_or_default();
    if a.len() != b.len() {
        return true;
    }
    a.iter().zip(b).any(|(x, y)| {
        x.mode != y.mode
            || x.mbits != y.mbits
            || x.hostname != y.hostname
            || x.dns != y.dns
            || port_shape(x) != port_shape(y)
    })
}

fn port_shape(n: &NetworkResource) -> Vec<(&str, i64, i64, &str)> {
    let statics = n
        .reserved_ports
        .iter()
        .flatten()
        .map(|p| (p.label.as_str(), p.value, p.to, p.host_network.as_str()));
    let dynamics = n
        .dynamic_ports
        .iter()
        .flatten()
        .map(|p| (p.label.as_str(), -1, p.to, p.host_network.as_str()));
    statics.chain(dynamics).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::{Port, Resources, Task};

    fn job() -> Job {
        Job {
            id: "web".into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 3,
                tasks: vec![Task {
                    name: "t".into(),
                    driver: "exec".into(),
                    resources: Resources {
                        cpu: 100,
                        memory_mb: 64,
                        ..Default::default()
                    },
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn shuffle_is_a_deterministic_permutation() {
        let mut a: Vec<u32> = (0..50).collect();
        let mut b = a.clone();
        Rng::seeded("eval-1", 7).shuffle(&mut a);
        Rng::seeded("eval-1", 7).shuffle(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, (0..50).collect::<Vec<_>>());
        a.sort();
        assert_eq!(a, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn count_and_restart_changes_are_not_destructive() {
        let old = job();
        let mut new = job();
        new.task_groups[0].count = 10;
        new.task_groups[0].restart_policy = Some(Default::default());
        assert!(!tasks_updated(&new, &old, "g"));
    }

    #[test]
    fn driver_resources_env_and_meta_changes_are_destructive() {
        let old = job();
        let mut new = job();
        new.task_groups[0].tasks[0].resources.cpu = 200;
        assert!(tasks_updated(&new, &old, "g"));
        let mut new = job();
        new.task_groups[0].tasks[0].driver = "raw_exec".into();
        assert!(tasks_updated(&new, &old, "g"));
        let mut new = job();
        new.meta = Some([("k".to_string(), "v".to_string())].into());
        assert!(tasks_updated(&new, &old, "g"));
        assert!(tasks_updated(&new, &old, "missing-group"));
    }

    #[test]
    fn dynamic_port_values_do_not_count_as_network_changes() {
        let net = |value| NetworkResource {
            dynamic_ports: Some(vec![Port {
                label: "http".into(),
                value,
                ..Default::default()
            }]),
            ..Default::default()
        };
        let mut old = job();
        old.task_groups[0].networks = Some(vec![net(0)]);
        let mut new = job();
        new.task_groups[0].networks = Some(vec![net(23456)]);
        assert!(!tasks_updated(&new, &old, "g"));
        new.task_groups[0].networks = Some(vec![NetworkResource::default()]);
        assert!(tasks_updated(&new, &old, "g"));
    }
}
