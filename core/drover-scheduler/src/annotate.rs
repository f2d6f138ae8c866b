//! Nomad's `scheduler.Annotate`: marks a job diff with what the scheduler's dry run decided,
//! for `job plan` to show. Each task group gets its update counts (`Updates`: "create",
//! "in-place update", ...), a count change says whether it forces allocations to be created
//! or destroyed, and each changed task says whether its change is done in place or needs new
//! allocations.

use drover_structs::PlanAnnotations;
use drover_structs::diff::{DiffType, JobDiff, TaskDiff, TaskGroupDiff};

pub const ANNOTATION_FORCES_CREATE: &str = "forces create";
pub const ANNOTATION_FORCES_DESTROY: &str = "forces destroy";
pub const ANNOTATION_FORCES_INPLACE_UPDATE: &str = "forces in-place update";
pub const ANNOTATION_FORCES_DESTRUCTIVE_UPDATE: &str = "forces create/destroy update";

pub const UPDATE_TYPE_IGNORE: &str = "ignore";
pub const UPDATE_TYPE_CREATE: &str = "create";
pub const UPDATE_TYPE_DESTROY: &str = "destroy";
pub const UPDATE_TYPE_MIGRATE: &str = "migrate";
pub const UPDATE_TYPE_CANARY: &str = "canary";
pub const UPDATE_TYPE_INPLACE_UPDATE: &str = "in-place update";
pub const UPDATE_TYPE_DESTRUCTIVE_UPDATE: &str = "create/destroy update";

/// Annotates `diff` with the scheduler's `annotations` (Nomad's `Annotate`). Without
/// annotations the groups get no update counts, but count changes and tasks are still
/// annotated.
pub fn annotate(diff: &mut JobDiff, annotations: Option<&PlanAnnotations>) {
    for tg in &mut diff.task_groups {
        annotate_task_group(tg, annotations);
    }
}

fn annotate_task_group(tg: &mut TaskGroupDiff, annotations: Option<&PlanAnnotations>) {
    if let Some(u) = annotations.and_then(|a| a.desired_tg_updates.get(&tg.name)) {
        let updates = tg.updates.get_or_insert_with(Default::default);
        for (kind, count) in [
            (UPDATE_TYPE_IGNORE, u.ignore),
            (UPDATE_TYPE_CREATE, u.place),
            (UPDATE_TYPE_MIGRATE, u.migrate),
            (UPDATE_TYPE_DESTROY, u.stop),
            (UPDATE_TYPE_CANARY, u.canary),
            (UPDATE_TYPE_INPLACE_UPDATE, u.in_place_update),
            (UPDATE_TYPE_DESTRUCTIVE_UPDATE, u.destructive_update),
        ] {
            if count != 0 {
                updates.insert(kind.to_string(), count);
            }
        }
    }
    annotate_count_change(tg);
    let group_type = tg.diff_type;
    for task in &mut tg.tasks {
        annotate_task(task, group_type);
    }
}

/// A higher count forces creates, a lower one destroys. A count that does not read as a
/// number (Nomad fails the plan there; a diff of Drover's integer counts never has one) is
/// left unannotated.
fn annotate_count_change(tg: &mut TaskGroupDiff) {
    let Some(count) = tg.fields.iter_mut().find(|f| f.name == "Count") else {
        return;
    };
    let parse = |s: &str| {
        if s.is_empty() {
            Some(0)
        } else {
            s.parse::<i64>().ok()
        }
    };
    let (Some(old), Some(new)) = (parse(&count.old), parse(&count.new)) else {
        return;
    };
    if old < new {
        count.annotations.push(ANNOTATION_FORCES_CREATE.into());
    } else if new < old {
        count.annotations.push(ANNOTATION_FORCES_DESTROY.into());
    }
}

/// A task of an added or removed group forces creates or destroys. Otherwise any changed
/// field but the kill timeout, or any changed block but services, constraints, affinities,
/// spreads and log settings (unless logging is switched on or off), forces new allocations;
/// the rest is done in place.
fn annotate_task(task: &mut TaskDiff, group_type: DiffType) {
    if task.diff_type == DiffType::None {
        return;
    }
    if matches!(group_type, DiffType::Added | DiffType::Deleted) {
        match task.diff_type {
            DiffType::Added => {
                task.annotations.push(ANNOTATION_FORCES_CREATE.into());
                return;
            }
            DiffType::Deleted => {
                task.annotations.push(ANNOTATION_FORCES_DESTROY.into());
                return;
            }
            _ => {}
        }
    }
    let destructive = task.fields.iter().any(|f| f.name != "KillTimeout")
        || task.objects.iter().any(|o| match o.name.as_str() {
            "Service" | "Constraint" | "Affinity" | "Spread" => false,
            "LogConfig" => o.fields.iter().any(|f| f.name == "Disabled"),
            _ => true,
        });
    task.annotations.push(
        if destructive {
            ANNOTATION_FORCES_DESTRUCTIVE_UPDATE
        } else {
            ANNOTATION_FORCES_INPLACE_UPDATE
        }
        .into(),
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_structs::DesiredUpdates;
    use drover_structs::diff::{FieldDiff, ObjectDiff};

    use super::*;

    fn field(name: &str, old: &str, new: &str) -> FieldDiff {
        FieldDiff {
            diff_type: DiffType::Edited,
            name: name.into(),
            old: old.into(),
            new: new.into(),
            ..Default::default()
        }
    }

    fn object(name: &str, fields: Vec<FieldDiff>) -> ObjectDiff {
        ObjectDiff {
            diff_type: DiffType::Edited,
            name: name.into(),
            fields,
            ..Default::default()
        }
    }

    fn task(diff_type: DiffType, fields: Vec<FieldDiff>, objects: Vec<ObjectDiff>) -> TaskDiff {
        TaskDiff {
            diff_type,
            name: "t".into(),
            fields,
            objects,
            ..Default::default()
        }
    }

    fn job(tg: TaskGroupDiff) -> JobDiff {
        JobDiff {
            diff_type: DiffType::Edited,
            id: "example".into(),
            task_groups: vec![tg],
            ..Default::default()
        }
    }

    fn group(diff_type: DiffType, fields: Vec<FieldDiff>, tasks: Vec<TaskDiff>) -> TaskGroupDiff {
        TaskGroupDiff {
            diff_type,
            name: "cache".into(),
            fields,
            tasks,
            ..Default::default()
        }
    }

    fn task_annotations(tg_type: DiffType, t: TaskDiff) -> Vec<String> {
        let mut d = job(group(tg_type, vec![], vec![t]));
        annotate(&mut d, None);
        d.task_groups[0].tasks[0].annotations.clone()
    }

    #[test]
    fn desired_updates_become_the_groups_update_counts_leaving_out_zeros() {
        let mut d = job(group(DiffType::Edited, vec![], vec![]));
        let mut other = group(DiffType::None, vec![], vec![]);
        other.name = "other".into();
        d.task_groups.push(other);
        let annotations = PlanAnnotations {
            desired_tg_updates: BTreeMap::from([(
                "cache".to_string(),
                DesiredUpdates {
                    ignore: 1,
                    place: 2,
                    migrate: 3,
                    stop: 4,
                    in_place_update: 5,
                    destructive_update: 6,
                    canary: 7,
                    preemptions: 8,
                },
            )]),
            preempted_allocs: None,
        };
        annotate(&mut d, Some(&annotations));
        let expected: BTreeMap<String, u64> = [
            ("ignore", 1),
            ("create", 2),
            ("migrate", 3),
            ("destroy", 4),
            ("in-place update", 5),
            ("create/destroy update", 6),
            ("canary", 7),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(d.task_groups[0].updates, Some(expected));
        // A group the scheduler said nothing of gets no counts.
        assert_eq!(d.task_groups[1].updates, None);

        // A group in the annotations with nothing to do gets an empty map, as in Nomad.
        let mut d = job(group(DiffType::None, vec![], vec![]));
        let mut annotations = annotations;
        annotations
            .desired_tg_updates
            .insert("cache".into(), DesiredUpdates::default());
        annotate(&mut d, Some(&annotations));
        assert_eq!(d.task_groups[0].updates, Some(BTreeMap::new()));
    }

    #[test]
    fn count_changes_force_creates_or_destroys() {
        for (old, new, expected) in [
            ("1", "3", vec![ANNOTATION_FORCES_CREATE]),
            ("3", "1", vec![ANNOTATION_FORCES_DESTROY]),
            ("", "2", vec![ANNOTATION_FORCES_CREATE]),
            ("2", "", vec![ANNOTATION_FORCES_DESTROY]),
            ("2", "2", vec![]),
            ("x", "2", vec![]),
        ] {
            let mut d = job(group(
                DiffType::Edited,
                vec![field("Count", old, new)],
                vec![],
            ));
            annotate(&mut d, None);
            assert_eq!(
                d.task_groups[0].fields[0].annotations, expected,
                "{old} -> {new}"
            );
        }
    }

    #[test]
    fn tasks_of_added_or_removed_groups_force_creates_or_destroys() {
        assert_eq!(
            task_annotations(DiffType::Added, task(DiffType::Added, vec![], vec![])),
            [ANNOTATION_FORCES_CREATE]
        );
        assert_eq!(
            task_annotations(DiffType::Deleted, task(DiffType::Deleted, vec![], vec![])),
            [ANNOTATION_FORCES_DESTROY]
        );
        // A task added to a group that stays needs new allocations.
        let added = task(DiffType::Added, vec![field("Driver", "", "docker")], vec![]);
        assert_eq!(
            task_annotations(DiffType::Edited, added),
            [ANNOTATION_FORCES_DESTRUCTIVE_UPDATE]
        );
        assert!(
            task_annotations(DiffType::Edited, task(DiffType::None, vec![], vec![])).is_empty()
        );
    }

    #[test]
    fn only_kill_timeout_services_constraints_and_log_settings_change_in_place() {
        let in_place = [
            task(
                DiffType::Edited,
                vec![field("KillTimeout", "5", "10")],
                vec![],
            ),
            task(
                DiffType::Edited,
                vec![],
                vec![
                    object("Service", vec![]),
                    object("Constraint", vec![]),
                    object("Affinity", vec![]),
                    object("Spread", vec![]),
                    object("LogConfig", vec![field("MaxFiles", "10", "5")]),
                ],
            ),
            task(DiffType::Edited, vec![], vec![]),
        ];
        for t in in_place {
            assert_eq!(
                task_annotations(DiffType::Edited, t.clone()),
                [ANNOTATION_FORCES_INPLACE_UPDATE],
                "{t:?}"
            );
        }
        let destructive = [
            task(
                DiffType::Edited,
                vec![field("Driver", "exec", "docker")],
                vec![],
            ),
            task(DiffType::Edited, vec![], vec![object("Config", vec![])]),
            task(DiffType::Edited, vec![], vec![object("Resources", vec![])]),
            task(
                DiffType::Edited,
                vec![],
                vec![object(
                    "LogConfig",
                    vec![field("Disabled", "false", "true")],
                )],
            ),
        ];
        for t in destructive {
            assert_eq!(
                task_annotations(DiffType::Edited, t.clone()),
                [ANNOTATION_FORCES_DESTRUCTIVE_UPDATE],
                "{t:?}"
            );
        }
    }

    #[test]
    fn annotating_a_real_diff_marks_a_config_change_destructive() {
        let old = crate::harness::mock_job();
        let mut new = old.clone();
        new.task_groups[0].count += 1;
        let config = new.task_groups[0].tasks[0]
            .config
            .get_or_insert_with(Default::default);
        config.insert("command".into(), "/bin/other".into());
        let mut d = drover_structs::diff::job_diff(Some(&old), Some(&new), true).unwrap();
        annotate(&mut d, None);
        let tg = &d.task_groups[0];
        let count = tg.fields.iter().find(|f| f.name == "Count").unwrap();
        assert_eq!(count.annotations, [ANNOTATION_FORCES_CREATE]);
        assert_eq!(
            tg.tasks[0].annotations,
            [ANNOTATION_FORCES_DESTRUCTIVE_UPDATE]
        );
    }
}
