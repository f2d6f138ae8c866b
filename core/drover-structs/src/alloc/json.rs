//! How an allocation is written out (API, log entries, snapshots), and its legacy resource
//! fields.
//!
//! Nomad still shows `Resources`, `SharedResources` and `TaskResources` beside
//! `AllocatedResources`, from which they follow, and `AllocatedResources.TaskLifecycles`, which
//! follows from the job. A server holding a million allocations does not keep them:
//! `Allocation::drop_derivable_legacy_resources` leaves `Resources` and `SharedResources` empty,
//! `TaskResources` an empty map and `TaskLifecycles` an empty map (empty maps allocate nothing),
//! and serialization derives them again, so the JSON is the same either way.

use std::collections::BTreeMap;

use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::Allocation;
use crate::job::Opaque;
use crate::resources::{AllocatedResources, NetworkResource, Resources};

/// The legacy resource fields of an allocation, as Nomad derives them from its
/// `AllocatedResources`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegacyResources {
    /// `Resources`: the tasks' cpu and memory summed, the shared disk, every network.
    pub total: Resources,
    /// `SharedResources`: the group's disk and networks.
    pub shared: Resources,
    /// `TaskResources`: each task's cpu, memory and networks.
    pub tasks: BTreeMap<String, Resources>,
}

/// Derives the legacy resource fields from what was allocated.
pub fn legacy_resources(ar: &AllocatedResources) -> LegacyResources {
    let shared_networks = ar.shared.networks.clone().filter(|n| !n.is_empty());
    let mut total = Resources {
        disk_mb: ar.shared.disk_mb,
        ..Default::default()
    };
    let mut networks: Vec<NetworkResource> = shared_networks.clone().unwrap_or_default();
    let mut tasks = BTreeMap::new();
    for (name, t) in &ar.tasks {
        total.cpu += t.cpu.cpu_shares;
        total.memory_mb += t.memory.memory_mb;
        total.memory_max_mb += t.memory.memory_max_mb.max(t.memory.memory_mb);
        networks.extend(t.networks.iter().flatten().cloned());
        tasks.insert(
            name.clone(),
            Resources {
                cpu: t.cpu.cpu_shares,
                memory_mb: t.memory.memory_mb,
                memory_max_mb: t.memory.memory_max_mb,
                networks: t.networks.clone(),
                ..Default::default()
            },
        );
    }
    total.networks = (!networks.is_empty()).then_some(networks);
    LegacyResources {
        total,
        shared: Resources {
            disk_mb: ar.shared.disk_mb,
            networks: shared_networks,
            ..Default::default()
        },
        tasks,
    }
}

impl Allocation {
    /// Drops the legacy resource fields when they hold exactly what `AllocatedResources`
    /// derives, and `TaskLifecycles` when it holds exactly what the linked job says (both as
    /// the scheduler sets them): serialization writes them again, so the JSON does not change,
    /// and the server keeps about 2 KB less per allocation. An allocation without its job
    /// keeps its `TaskLifecycles`.
    pub fn drop_derivable_legacy_resources(&mut self) {
        // Checked before deriving: a held allocation (decoded from a log entry or snapshot)
        // has none, and deriving them builds a map per allocation.
        let holds_lifecycles = self
            .allocated_resources
            .as_ref()
            .is_some_and(|ar| !ar.task_lifecycles.is_empty());
        if holds_lifecycles
            && let Some(derived) = self.job_task_lifecycles()
            && let Some(ar) = self.allocated_resources.as_mut()
            && ar.task_lifecycles == derived
        {
            ar.task_lifecycles = BTreeMap::new();
        }
        let Some(ar) = &self.allocated_resources else {
            return;
        };
        let (Some(total), Some(shared), Some(tasks)) = (
            &self.resources,
            &self.shared_resources,
            &self.task_resources,
        ) else {
            return;
        };
        if tasks.is_empty() {
            return;
        }
        let derived = legacy_resources(ar);
        if **total == derived.total && **shared == derived.shared && *tasks == derived.tasks {
            self.resources = None;
            self.shared_resources = None;
            self.task_resources = Some(BTreeMap::new());
        }
    }

    /// `TaskLifecycles` as the scheduler fills it: every task of the group, by name, with its
    /// `lifecycle` block. `None` without the job or the group.
    fn job_task_lifecycles(&self) -> Option<BTreeMap<String, Opaque>> {
        let job = self.job.as_ref()?;
        let tg = job
            .task_groups
            .iter()
            .find(|tg| tg.name == self.task_group)?;
        Some(
            tg.tasks
                .iter()
                .map(|t| (t.name.clone(), t.lifecycle.clone()))
                .collect(),
        )
    }

    /// `AllocatedResources` with the `TaskLifecycles` dropped by
    /// `drop_derivable_legacy_resources` derived again; `None` when nothing was dropped.
    fn allocated_with_lifecycles(&self) -> Option<AllocatedResources> {
        let ar = self.allocated_resources.as_ref()?;
        if !ar.task_lifecycles.is_empty() || ar.tasks.is_empty() {
            return None;
        }
        let lifecycles = self.job_task_lifecycles()?;
        if lifecycles.is_empty() {
            return None;
        }
        let mut full = ar.clone();
        full.task_lifecycles = lifecycles;
        Some(full)
    }

    /// Derives again what `drop_derivable_legacy_resources` dropped, for a copy about to lose
    /// its job (snapshots store allocations without it).
    pub fn restore_derivable_fields(&mut self) {
        if let Some(full) = self.allocated_with_lifecycles() {
            self.allocated_resources = Some(full);
        }
        if let Some(l) = self.dropped_legacy_resources() {
            self.resources = Some(Box::new(l.total));
            self.shared_resources = Some(Box::new(l.shared));
            self.task_resources = Some(l.tasks);
        }
    }

    /// Sets what the allocation holds. The legacy `Resources`, `SharedResources` and
    /// `TaskResources` Nomad still writes are left to be derived from it when the allocation
    /// is written out, and `TaskLifecycles`, when `ar` has none, from the job's tasks: the
    /// form `drop_derivable_legacy_resources` leaves, built directly.
    pub fn set_allocated_resources(&mut self, ar: AllocatedResources) {
        self.allocated_resources = Some(ar);
        self.resources = None;
        self.shared_resources = None;
        self.task_resources = Some(BTreeMap::new());
    }

    /// The legacy resource fields as the allocation is written out: stored, or derived from
    /// `AllocatedResources`. `None` when it has neither.
    pub fn legacy_resource_fields(&self) -> Option<LegacyResources> {
        if let Some(derived) = self.dropped_legacy_resources() {
            return Some(derived);
        }
        Some(LegacyResources {
            total: self.resources.as_deref()?.clone(),
            shared: self.shared_resources.as_deref()?.clone(),
            tasks: self.task_resources.clone()?,
        })
    }

    /// The legacy fields were dropped by `drop_derivable_legacy_resources`: derive them.
    fn dropped_legacy_resources(&self) -> Option<LegacyResources> {
        let ar = self.allocated_resources.as_ref()?;
        let dropped = self.resources.is_none()
            && self.shared_resources.is_none()
            && self.task_resources.as_ref().is_some_and(BTreeMap::is_empty)
            && !ar.tasks.is_empty();
        dropped.then(|| legacy_resources(ar))
    }
}

impl Serialize for Allocation {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.serialize_fields(serializer, Derived::WrittenOut)
    }
}

/// An allocation serialized as it is held, without the fields `Serialize` derives again (the
/// legacy resources, `TaskLifecycles`): what the Raft log carries, so that decoding gives back
/// exactly the allocation that was encoded, and smaller. Decoded with `Allocation`'s own
/// `Deserialize`.
pub struct AllocationAsHeld<'a>(pub &'a Allocation);

impl Serialize for AllocationAsHeld<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_fields(serializer, Derived::Omitted)
    }
}

/// An allocation as held ([`AllocationAsHeld`]) and without its linked job: what a state
/// snapshot stores when it stores that job version too, so restore links it again.
pub struct AllocationHeldWithoutJob<'a>(pub &'a Allocation);

impl Serialize for AllocationHeldWithoutJob<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_fields(serializer, Derived::OmittedWithoutJob)
    }
}

/// `serialize_with` for a list of allocations to be written as held ([`AllocationAsHeld`]).
pub fn serialize_allocations_as_held<S: Serializer>(
    allocs: &[Allocation],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(allocs.iter().map(AllocationAsHeld))
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Whether serialization writes the fields dropped from a held allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Derived {
    WrittenOut,
    Omitted,
    /// `Omitted`, and the linked job left out too.
    OmittedWithoutJob,
}

impl Allocation {
    fn serialize_fields<S: Serializer>(
        &self,
        serializer: S,
        derived: Derived,
    ) -> Result<S::Ok, S::Error> {
        let legacy = match derived {
            Derived::WrittenOut => self.dropped_legacy_resources(),
            Derived::Omitted | Derived::OmittedWithoutJob => None,
        };
        let (resources, shared_resources, task_resources) = match &legacy {
            Some(l) => (Some(&l.total), Some(&l.shared), Some(&l.tasks)),
            None => (
                self.resources.as_deref(),
                self.shared_resources.as_deref(),
                self.task_resources.as_ref(),
            ),
        };
        let mut st = serializer.serialize_struct("Allocation", 36)?;
        // Written out, every field is present, as in Nomad's JSON. Held (the Raft log), a
        // field at its default is left out: `Deserialize` defaults it back to the same value,
        // and a placement's entry shrinks by a fifth.
        macro_rules! field {
            ($name:literal, $value:expr) => {{
                let value = $value;
                if derived != Derived::WrittenOut && is_default(value) {
                    st.skip_field($name)?;
                } else {
                    st.serialize_field($name, value)?;
                }
            }};
        }
        field!("ID", &self.id);
        field!("Namespace", &self.namespace);
        field!("EvalID", &self.eval_id);
        field!("Name", &self.name);
        field!("NodeID", &self.node_id);
        field!("NodeName", &self.node_name);
        field!("JobID", &self.job_id);
        if derived == Derived::OmittedWithoutJob {
            st.skip_field("Job")?;
        } else {
            field!("Job", &self.job);
        }
        field!("TaskGroup", &self.task_group);
        field!("Resources", &resources);
        field!("SharedResources", &shared_resources);
        field!("TaskResources", &task_resources);
        match self
            .allocated_with_lifecycles()
            .filter(|_| derived == Derived::WrittenOut)
        {
            Some(full) => st.serialize_field("AllocatedResources", &Some(full))?,
            None => st.serialize_field("AllocatedResources", &self.allocated_resources)?,
        }
        field!("Metrics", &self.metrics);
        field!("DesiredStatus", &self.desired_status);
        field!("DesiredDescription", &self.desired_description);
        field!("DesiredTransition", &self.desired_transition);
        field!("ClientStatus", &self.client_status);
        field!("ClientDescription", &self.client_description);
        field!("TaskStates", &self.task_states);
        field!("DeploymentID", &self.deployment_id);
        field!("DeploymentStatus", &self.deployment_status);
        field!("FollowupEvalID", &self.followup_eval_id);
        field!("RescheduleTracker", &self.reschedule_tracker);
        field!("PreemptedAllocations", &self.preempted_allocations);
        field!("PreemptedByAllocation", &self.preempted_by_allocation);
        if self.previous_allocation.is_empty() {
            st.skip_field("PreviousAllocation")?;
        } else {
            field!("PreviousAllocation", &self.previous_allocation);
        }
        if self.next_allocation.is_empty() {
            st.skip_field("NextAllocation")?;
        } else {
            field!("NextAllocation", &self.next_allocation);
        }
        field!("NetworkStatus", &self.network_status);
        field!("AllocStates", &self.alloc_states);
        field!("CreateIndex", &self.create_index);
        field!("ModifyIndex", &self.modify_index);
        field!("AllocModifyIndex", &self.alloc_modify_index);
        field!("CreateTime", &self.create_time);
        field!("ModifyTime", &self.modify_time);
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{
        AllocatedCpuResources, AllocatedMemoryResources, AllocatedSharedResources,
        AllocatedTaskResources,
    };
    use serde::de::{self, Deserialize, Deserializer, Visitor};

    /// The field names `Deserialize` knows: serde hands them to `deserialize_struct`.
    fn deserialized_fields() -> Vec<&'static str> {
        struct Capture;
        #[derive(Debug)]
        struct Fields(Vec<&'static str>);
        impl std::fmt::Display for Fields {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }
        impl std::error::Error for Fields {}
        impl de::Error for Fields {
            fn custom<T: std::fmt::Display>(_: T) -> Self {
                Fields(Vec::new())
            }
        }
        impl<'de> Deserializer<'de> for Capture {
            type Error = Fields;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
                Err(Fields(Vec::new()))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Fields> {
                Err(Fields(fields.to_vec()))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }
        match Allocation::deserialize(Capture) {
            Err(Fields(f)) => f,
            Ok(_) => Vec::new(),
        }
    }

    fn placed() -> Allocation {
        let ar = AllocatedResources {
            tasks: crate::vec_map::VecMap::from([(
                "web".to_string(),
                AllocatedTaskResources {
                    cpu: AllocatedCpuResources {
                        cpu_shares: 500,
                        ..Default::default()
                    },
                    memory: AllocatedMemoryResources {
                        memory_mb: 256,
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )]),
            shared: AllocatedSharedResources {
                disk_mb: 150,
                ..Default::default()
            },
            ..Default::default()
        };
        let legacy = legacy_resources(&ar);
        Allocation {
            id: "a1".into(),
            resources: Some(Box::new(legacy.total)),
            shared_resources: Some(Box::new(legacy.shared)),
            task_resources: Some(legacy.tasks),
            allocated_resources: Some(ar),
            ..Default::default()
        }
    }

    #[test]
    fn every_field_deserialize_knows_is_serialized() {
        let mut a = placed();
        a.previous_allocation = "p".into();
        a.next_allocation = "n".into();
        let v = serde_json::to_value(&a).unwrap();
        let mut written: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut known = deserialized_fields();
        written.sort_unstable();
        known.sort_unstable();
        assert!(!known.is_empty());
        assert_eq!(written, known);
    }

    #[test]
    fn dropped_legacy_resources_serialize_as_before() {
        let full = placed();
        let mut stored = full.clone();
        stored.drop_derivable_legacy_resources();
        assert_eq!(stored.resources, None);
        assert_eq!(stored.task_resources, Some(BTreeMap::new()));
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            serde_json::to_string(&full).unwrap()
        );
        let v = serde_json::to_value(&stored).unwrap();
        assert_eq!(v["Resources"]["CPU"], 500);
        assert_eq!(v["SharedResources"]["DiskMB"], 150);
        assert_eq!(v["TaskResources"]["web"]["MemoryMB"], 256);
    }

    #[test]
    fn task_lifecycles_are_dropped_only_with_the_job_and_written_out_from_it() {
        use crate::job::{Job, Task, TaskGroup};
        let job = Job {
            task_groups: vec![TaskGroup {
                name: "g".into(),
                tasks: vec![Task {
                    name: "web".into(),
                    lifecycle: Some(serde_json::json!({"Hook": "prestart"})),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut full = placed();
        full.task_group = "g".into();
        if let Some(ar) = full.allocated_resources.as_mut() {
            ar.task_lifecycles =
                BTreeMap::from([("web".into(), Some(serde_json::json!({"Hook": "prestart"})))]);
        }
        let mut jobless = full.clone();
        jobless.drop_derivable_legacy_resources();
        let lifecycles = |a: &Allocation| {
            a.allocated_resources
                .as_ref()
                .unwrap()
                .task_lifecycles
                .len()
        };
        assert_eq!(lifecycles(&jobless), 1, "nothing to derive them from");

        full.job = Some(std::sync::Arc::new(job));
        let mut stored = full.clone();
        stored.drop_derivable_legacy_resources();
        assert_eq!(lifecycles(&stored), 0);
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            serde_json::to_string(&full).unwrap()
        );
        let mut copy = stored.clone();
        copy.restore_derivable_fields();
        assert_eq!(copy, full);
    }

    #[test]
    fn legacy_resources_that_differ_are_kept() {
        let mut a = placed();
        if let Some(r) = a.resources.as_mut() {
            r.cpu = 1;
        }
        let before = a.clone();
        a.drop_derivable_legacy_resources();
        assert_eq!(a, before);
        // Absent legacy fields stay absent in the JSON.
        let mut bare = placed();
        bare.resources = None;
        bare.shared_resources = None;
        bare.task_resources = None;
        let v = serde_json::to_value(&bare).unwrap();
        assert!(v["Resources"].is_null() && v["TaskResources"].is_null());
    }
}
