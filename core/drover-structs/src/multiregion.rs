//! Multiregion jobs (Nomad's `multiregion` block): the regions a job runs in, in rollout
//! order, what each region changes in its copy of the job, and how the regional deployments
//! follow each other (`strategy`). The block stays on every regional copy: each region's
//! scheduler and deployment watcher read it to know their place in the rollout.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::Job;
use crate::multierror::MultiError;

/// `on_failure = "fail_all"`: a failed region fails every region's deployment.
pub const ON_FAILURE_FAIL_ALL: &str = "fail_all";
/// `on_failure = "fail_local"`: only the failed region fails; the others block.
pub const ON_FAILURE_FAIL_LOCAL: &str = "fail_local";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Multiregion {
    #[serde(rename = "Strategy")]
    pub strategy: Option<MultiregionStrategy>,
    #[serde(rename = "Regions")]
    pub regions: Option<Vec<MultiregionRegion>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiregionStrategy {
    /// How many regions deploy at once; 0: all of them.
    #[serde(rename = "MaxParallel")]
    pub max_parallel: Option<i64>,
    /// "", "fail_all" or "fail_local".
    #[serde(rename = "OnFailure")]
    pub on_failure: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MultiregionRegion {
    #[serde(rename = "Name")]
    pub name: String,
    /// The count of the groups that ask for none (`count = 0`); unset reads as 1.
    #[serde(rename = "Count")]
    pub count: Option<i64>,
    #[serde(rename = "Datacenters")]
    pub datacenters: Option<Vec<String>>,
    #[serde(rename = "NodePool")]
    pub node_pool: Option<String>,
    #[serde(rename = "Meta")]
    pub meta: Option<BTreeMap<String, String>>,
}

impl Multiregion {
    /// The regions in rollout order.
    pub fn regions(&self) -> &[MultiregionRegion] {
        self.regions.as_deref().unwrap_or_default()
    }

    pub fn max_parallel(&self) -> i64 {
        self.strategy
            .as_ref()
            .and_then(|s| s.max_parallel)
            .unwrap_or(0)
    }

    pub fn on_failure(&self) -> &str {
        self.strategy
            .as_ref()
            .and_then(|s| s.on_failure.as_deref())
            .unwrap_or("")
    }

    /// Where `region` is in the rollout order.
    pub fn position(&self, region: &str) -> Option<usize> {
        self.regions().iter().position(|r| r.name == region)
    }

    /// Whether `region`'s deployment starts at once (one of the first `max_parallel`
    /// regions, or every region when `max_parallel` is 0) rather than `pending`.
    pub fn starts_at_once(&self, region: &str) -> bool {
        let max = self.max_parallel();
        match self.position(region) {
            Some(i) => max <= 0 || (i as i64) < max,
            None => true,
        }
    }

    /// The last region of the rollout: it unblocks the others when all are done.
    pub fn last_region(&self) -> Option<&str> {
        self.regions().last().map(|r| r.name.as_str())
    }

    /// Nomad's multiregion validation, errors in its words.
    pub fn validate(&self, job: &Job, m: &mut MultiError) {
        let mut seen = std::collections::BTreeSet::new();
        for r in self.regions() {
            if r.name.is_empty() {
                m.push("Multiregion region must have a name".to_string());
                continue;
            }
            if !seen.insert(r.name.as_str()) {
                m.push(format!(
                    "Multiregion region {:?} can't be listed twice",
                    r.name
                ));
            }
            let dcs = r.datacenters.as_deref().unwrap_or_default();
            if dcs.is_empty() && job.datacenters.is_empty() {
                m.push(format!(
                    "Multiregion region {:?} must have at least 1 datacenter",
                    r.name
                ));
            }
            if r.count.is_some_and(|c| c < 0) {
                m.push(format!(
                    "Multiregion region {:?} count must be non-negative",
                    r.name
                ));
            }
        }
        let on_failure = self.on_failure();
        if !matches!(on_failure, "" | ON_FAILURE_FAIL_ALL | ON_FAILURE_FAIL_LOCAL) {
            m.push(format!(
                "Multiregion on_failure must be \"\", {ON_FAILURE_FAIL_ALL:?} or {ON_FAILURE_FAIL_LOCAL:?}, not {on_failure:?}"
            ));
        }
        match job.job_type.as_str() {
            crate::JOB_TYPE_BATCH if !on_failure.is_empty() || self.max_parallel() != 0 => {
                m.push("Multiregion batch jobs can't have an update strategy".to_string());
            }
            crate::JOB_TYPE_SYSTEM if !on_failure.is_empty() => {
                m.push("Multiregion system jobs can't have an on_failure setting".to_string());
            }
            _ => {}
        }
    }
}

impl Job {
    /// The job's `multiregion` block, when it has one with at least one region (Nomad's
    /// `IsMultiregion`).
    pub fn multiregion_spec(&self) -> Option<Multiregion> {
        let value = self.multiregion.as_ref().filter(|v| !v.is_null())?;
        let spec: Multiregion = serde_json::from_value(value.clone()).ok()?;
        (!spec.regions().is_empty()).then_some(spec)
    }

    /// Nomad's `regionalJob`: the copy of this job that runs in `region`. Its region's
    /// datacenters replace the job's (when given), its count fills the groups that ask for
    /// none, its meta is laid over the job's; the multiregion block stays.
    pub fn regional_copy(&self, region: &MultiregionRegion) -> Job {
        let mut j = self.clone();
        j.region.clone_from(&region.name);
        if let Some(dcs) = region.datacenters.as_ref().filter(|d| !d.is_empty()) {
            j.datacenters.clone_from(dcs);
        }
        let count = region.count.unwrap_or(1);
        for tg in &mut j.task_groups {
            if tg.count == 0 {
                tg.count = count;
            }
        }
        if let Some(meta) = region.meta.as_ref().filter(|m| !m.is_empty()) {
            let merged = j.meta.get_or_insert_with(BTreeMap::new);
            for (k, v) in meta {
                merged.insert(k.clone(), v.clone());
            }
        }
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskGroup;
    use serde_json::json;

    fn job(spec: serde_json::Value) -> Job {
        Job {
            id: "web".into(),
            job_type: "service".into(),
            datacenters: vec!["dc1".into()],
            task_groups: vec![
                TaskGroup {
                    name: "zero".into(),
                    count: 0,
                    ..Default::default()
                },
                TaskGroup {
                    name: "three".into(),
                    count: 3,
                    ..Default::default()
                },
            ],
            meta: Some([("k".to_string(), "job".to_string())].into()),
            multiregion: Some(spec),
            ..Default::default()
        }
    }

    #[test]
    fn a_regional_copy_takes_the_region_s_datacenters_count_and_meta() {
        let j = job(json!({
            "Strategy": {"MaxParallel": 1},
            "Regions": [
                {"Name": "east", "Count": 2, "Datacenters": ["e1"], "Meta": {"k": "east", "x": "1"}},
                {"Name": "west"}
            ]
        }));
        let spec = j.multiregion_spec().expect("multiregion");
        let east = j.regional_copy(&spec.regions()[0]);
        assert_eq!(east.region, "east");
        assert_eq!(east.datacenters, ["e1"]);
        assert_eq!(
            (east.task_groups[0].count, east.task_groups[1].count),
            (2, 3)
        );
        assert_eq!(east.meta.as_ref().unwrap()["k"], "east");
        assert_eq!(east.meta.as_ref().unwrap()["x"], "1");
        assert!(east.multiregion_spec().is_some(), "the block stays");
        let west = j.regional_copy(&spec.regions()[1]);
        assert_eq!(west.datacenters, ["dc1"]);
        assert_eq!(west.task_groups[0].count, 1, "an unset count reads as 1");
    }

    #[test]
    fn the_first_max_parallel_regions_start_at_once_and_the_last_unblocks() {
        let j = job(json!({
            "Strategy": {"MaxParallel": 1},
            "Regions": [{"Name": "a"}, {"Name": "b"}, {"Name": "c"}]
        }));
        let spec = j.multiregion_spec().unwrap();
        assert!(spec.starts_at_once("a"));
        assert!(!spec.starts_at_once("b"));
        assert_eq!(spec.last_region(), Some("c"));
        let all = job(json!({"Regions": [{"Name": "a"}, {"Name": "b"}]}));
        assert!(all.multiregion_spec().unwrap().starts_at_once("b"));
        assert!(job(json!({"Regions": []})).multiregion_spec().is_none());
    }

    #[test]
    fn validation_speaks_nomads_words() {
        let mut j = job(json!({
            "Strategy": {"OnFailure": "fail_some"},
            "Regions": [{"Name": "a"}, {"Name": "a"}]
        }));
        j.datacenters.clear();
        let mut m = MultiError::new();
        j.multiregion_spec().unwrap().validate(&j, &mut m);
        let text = m.to_string();
        assert!(
            text.contains("Multiregion region \"a\" can't be listed twice"),
            "{text}"
        );
        assert!(
            text.contains("Multiregion region \"a\" must have at least 1 datacenter"),
            "{text}"
        );
        assert!(text.contains("Multiregion on_failure must be"), "{text}");
        j.job_type = "batch".into();
        j.multiregion = Some(
            json!({"Strategy": {"MaxParallel": 1}, "Regions": [{"Name": "a", "Datacenters": ["d"]}]}),
        );
        let mut m = MultiError::new();
        j.multiregion_spec().unwrap().validate(&j, &mut m);
        assert!(
            m.to_string()
                .contains("Multiregion batch jobs can't have an update strategy")
        );
    }
}
