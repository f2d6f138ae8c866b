//! Tests of the job diff against the outputs of Nomad's `Job.Diff`.

use serde_json::json;

use super::flat::go_float;
use super::*;
use crate::job::{Constraint, EphemeralDisk, LogConfig, RestartPolicy, Task, TaskGroup};
use crate::resources::{NetworkResource, Port, Resources};

fn redis() -> Task {
    let config = json!({"image": "redis:3.2", "port_map": [{"db": 6379}]});
    Task {
        name: "redis".into(),
        driver: "docker".into(),
        config: config.as_object().cloned(),
        resources: Resources {
            cpu: 500,
            memory_mb: 256,
            ..Default::default()
        },
        kill_timeout: 5_000_000_000,
        log_config: Some(LogConfig {
            max_files: 10,
            max_file_size_mb: 10,
        }),
        ..Default::default()
    }
}

fn cache() -> TaskGroup {
    TaskGroup {
        name: "cache".into(),
        count: 1,
        restart_policy: Some(RestartPolicy {
            attempts: 2,
            interval: 1_800_000_000_000,
            delay: 15_000_000_000,
            mode: "fail".into(),
        }),
        ephemeral_disk: Some(EphemeralDisk {
            size_mb: 300,
            ..Default::default()
        }),
        tasks: vec![redis()],
        ..Default::default()
    }
}

fn example() -> Job {
    Job {
        id: "example".into(),
        name: "example".into(),
        namespace: "default".into(),
        region: "global".into(),
        job_type: "service".into(),
        priority: 50,
        datacenters: vec!["dc1".into()],
        task_groups: vec![cache()],
        ..Default::default()
    }
}

fn diff(old: &Job, new: &Job, contextual: bool) -> JobDiff {
    job_diff(Some(old), Some(new), contextual).expect("same job id")
}

fn field(t: DiffType, name: &str, old: &str, new: &str) -> FieldDiff {
    FieldDiff {
        diff_type: t,
        name: name.into(),
        old: old.into(),
        new: new.into(),
        annotations: vec![],
    }
}

#[test]
fn identical_jobs_diff_to_none_whatever_their_indexes() {
    let old = example();
    let mut new = example();
    new.version = 3;
    new.modify_index = 40;
    new.job_modify_index = 40;
    new.submit_time = 12345;
    new.status = "running".into();
    let d = diff(&old, &new, true);
    assert_eq!(d.diff_type, DiffType::None);
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({
            "Type": "None", "ID": "example", "Fields": null, "Objects": null,
            "TaskGroups": [{
                "Type": "None", "Name": "cache", "Fields": null, "Objects": null,
                "Tasks": [{"Type": "None", "Name": "redis", "Fields": null, "Objects": null,
                           "Annotations": null}],
                "Updates": null,
            }],
        })
    );
}

#[test]
fn a_count_change_is_a_field_of_the_edited_group() {
    let old = example();
    let mut new = example();
    new.task_groups[0].count = 3;
    let d = diff(&old, &new, true);
    assert_eq!(d.diff_type, DiffType::Edited);
    assert!(d.fields.is_empty() && d.objects.is_empty(), "{d:?}");
    let tg = &d.task_groups[0];
    assert_eq!(tg.diff_type, DiffType::Edited);
    assert_eq!(tg.fields, vec![field(DiffType::Edited, "Count", "1", "3")]);
    assert!(tg.objects.is_empty(), "{tg:?}");
    assert_eq!(tg.tasks[0].diff_type, DiffType::None);
}

#[test]
fn an_added_group_lists_its_fields_blocks_and_tasks() {
    let old = example();
    let mut new = example();
    let mut web = cache();
    web.name = "web".into();
    new.task_groups.push(web);
    let d = diff(&old, &new, true);
    assert_eq!(d.diff_type, DiffType::Edited);
    let names: Vec<_> = d
        .task_groups
        .iter()
        .map(|g| (g.name.as_str(), g.diff_type))
        .collect();
    assert_eq!(names, [("cache", DiffType::None), ("web", DiffType::Added)]);
    let web = &d.task_groups[1];
    assert_eq!(web.fields, vec![field(DiffType::Added, "Count", "", "1")]);
    let objects: Vec<_> = web.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(objects, ["RestartPolicy", "EphemeralDisk"]);
    // Contextual: the empty mode of a new block is kept, unchanged.
    let disk = &web.objects[1];
    assert_eq!(disk.diff_type, DiffType::Added);
    assert_eq!(
        disk.fields,
        vec![
            field(DiffType::Added, "Migrate", "", "false"),
            field(DiffType::Added, "SizeMB", "", "300"),
            field(DiffType::Added, "Sticky", "", "false"),
        ]
    );
    let task = &web.tasks[0];
    assert_eq!(task.diff_type, DiffType::Added);
    // Empty strings of a new task are left out (task fields are never contextual).
    assert_eq!(
        task.fields,
        vec![
            field(DiffType::Added, "Driver", "", "docker"),
            field(DiffType::Added, "KillTimeout", "", "5000000000"),
            field(DiffType::Added, "Leader", "", "false"),
            field(DiffType::Added, "ShutdownDelay", "", "0"),
        ]
    );
    let objects: Vec<_> = task.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(objects, ["Config", "Resources", "LogConfig"]);
}

#[test]
fn a_removed_group_is_deleted_with_its_tasks() {
    let mut old = example();
    let mut web = cache();
    web.name = "web".into();
    old.task_groups.push(web);
    let d = diff(&old, &example(), false);
    let web = &d.task_groups[1];
    assert_eq!(
        (web.name.as_str(), web.diff_type),
        ("web", DiffType::Deleted)
    );
    assert_eq!(web.fields, vec![field(DiffType::Deleted, "Count", "1", "")]);
    assert_eq!(web.tasks[0].diff_type, DiffType::Deleted);
    assert_eq!(
        web.tasks[0].objects[1].fields[0],
        field(DiffType::Deleted, "CPU", "500", "")
    );
}

#[test]
fn a_task_config_change_keeps_the_unchanged_leaves_when_contextual() {
    let old = example();
    let mut new = example();
    let config = json!({"image": "redis:7", "port_map": [{"db": 6379}]});
    new.task_groups[0].tasks[0].config = config.as_object().cloned();
    let task = &diff(&old, &new, true).task_groups[0].tasks[0];
    assert_eq!(task.diff_type, DiffType::Edited);
    assert!(task.fields.is_empty());
    assert_eq!(task.objects.len(), 1, "{task:?}");
    let config = &task.objects[0];
    assert_eq!(
        (config.name.as_str(), config.diff_type),
        ("Config", DiffType::Edited)
    );
    assert_eq!(
        config.fields,
        vec![
            field(DiffType::Edited, "image", "redis:3.2", "redis:7"),
            field(DiffType::None, "port_map[0][db]", "6379", "6379"),
        ]
    );
    let plain = &diff(&old, &new, false).task_groups[0].tasks[0].objects[0];
    assert_eq!(
        plain.fields,
        vec![field(DiffType::Edited, "image", "redis:3.2", "redis:7")]
    );
}

#[test]
fn config_numbers_print_as_go_prints_decoded_json_numbers() {
    let old = example();
    let mut new = example();
    let config = json!({"image": "redis:3.2", "port_map": [{"db": 6379}], "big": 1000000,
                        "ratio": 0.5, "args": ["-v"], "none": null, "empty": []});
    new.task_groups[0].tasks[0].config = config.as_object().cloned();
    let config = &diff(&old, &new, false).task_groups[0].tasks[0].objects[0];
    assert_eq!(
        config.fields,
        vec![
            field(DiffType::Added, "args[0]", "", "-v"),
            field(DiffType::Added, "big", "", "1e+06"),
            field(DiffType::Added, "none", "", "nil"),
            field(DiffType::Added, "ratio", "", "0.5"),
        ]
    );
}

#[test]
fn go_float_matches_strconv_shortest_g() {
    for (f, s) in [
        (6379.0, "6379"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.5, "0.5"),
        (-2.25, "-2.25"),
        (0.0001, "0.0001"),
        (1.5e-5, "1.5e-05"),
        (1e100, "1e+100"),
        (0.0, "0"),
    ] {
        assert_eq!(go_float(f), s, "{f}");
    }
}

#[test]
fn meta_entries_are_job_fields_added_and_deleted() {
    let mut old = example();
    old.meta = Some([("owner".to_string(), "a".to_string())].into());
    let mut new = example();
    new.meta = Some([("team".to_string(), "b".to_string())].into());
    let d = diff(&old, &new, true);
    assert_eq!(d.diff_type, DiffType::Edited);
    assert_eq!(
        d.fields,
        vec![
            field(DiffType::Deleted, "Meta[owner]", "a", ""),
            field(DiffType::Added, "Meta[team]", "", "b"),
        ]
    );
}

#[test]
fn datacenters_are_a_set_with_unchanged_members_when_contextual() {
    let old = example();
    let mut new = example();
    new.datacenters = vec!["dc2".into(), "dc1".into()];
    let d = diff(&old, &new, true);
    assert_eq!(d.objects.len(), 1);
    let dcs = &d.objects[0];
    assert_eq!(
        (dcs.name.as_str(), dcs.diff_type),
        ("Datacenters", DiffType::Added)
    );
    assert_eq!(
        dcs.fields,
        vec![
            field(DiffType::Added, "Datacenters", "", "dc2"),
            field(DiffType::None, "Datacenters", "dc1", "dc1"),
        ]
    );
    // The same members in another order are no change.
    let mut reordered = new.clone();
    reordered.datacenters.reverse();
    assert_eq!(diff(&new, &reordered, true).diff_type, DiffType::None);
}

#[test]
fn a_changed_constraint_is_one_added_and_one_deleted() {
    let c = |r: &str| Constraint {
        l_target: "${attr.kernel.name}".into(),
        r_target: r.into(),
        operand: "=".into(),
    };
    let mut old = example();
    old.constraints = Some(vec![c("linux")]);
    let mut new = example();
    new.constraints = Some(vec![c("darwin")]);
    let d = diff(&old, &new, false);
    let kinds: Vec<_> = d
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.diff_type))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Constraint", DiffType::Added),
            ("Constraint", DiffType::Deleted)
        ]
    );
    assert_eq!(
        d.objects[0].fields,
        vec![
            field(DiffType::Added, "LTarget", "", "${attr.kernel.name}"),
            field(DiffType::Added, "Operand", "", "="),
            field(DiffType::Added, "RTarget", "", "darwin"),
        ]
    );
}

#[test]
fn contextual_resources_show_every_field_and_plain_ones_only_the_change() {
    let old = example();
    let mut new = example();
    new.task_groups[0].tasks[0].resources.memory_mb = 512;
    let res = &diff(&old, &new, true).task_groups[0].tasks[0].objects[0];
    assert_eq!(
        (res.name.as_str(), res.diff_type),
        ("Resources", DiffType::Edited)
    );
    let shown: Vec<_> = res
        .fields
        .iter()
        .map(|f| (f.name.as_str(), f.diff_type))
        .collect();
    assert_eq!(
        shown,
        [
            ("CPU", DiffType::None),
            ("Cores", DiffType::None),
            ("DiskMB", DiffType::None),
            ("IOPS", DiffType::None),
            ("MemoryMB", DiffType::Edited),
            ("MemoryMaxMB", DiffType::None),
        ]
    );
    let plain = &diff(&old, &new, false).task_groups[0].tasks[0].objects[0];
    assert_eq!(
        plain.fields,
        vec![field(DiffType::Edited, "MemoryMB", "256", "512")]
    );
}

#[test]
fn jobs_with_different_ids_do_not_diff() {
    let mut other = example();
    other.id = "other".into();
    let e = job_diff(Some(&example()), Some(&other), true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "can not diff jobs with different IDs: \"example\" and \"other\""
    );
    assert_eq!(job_diff(None, None, true).unwrap(), JobDiff::default());
}

#[test]
fn a_new_job_lists_its_primitive_fields_but_not_its_indexes() {
    let mut new = example();
    new.version = 2;
    new.create_index = 9;
    let d = job_diff(None, Some(&new), true).unwrap();
    assert_eq!((d.diff_type, d.id.as_str()), (DiffType::Added, "example"));
    let names: Vec<_> = d.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "AllAtOnce",
            "Dispatched",
            "Name",
            "Namespace",
            "Priority",
            "Region",
            "Stop",
            "Type"
        ]
    );
    assert!(d.fields.iter().all(|f| f.diff_type == DiffType::Added));
    assert_eq!(
        d.objects[0].fields,
        vec![field(DiffType::Added, "Datacenters", "", "dc1")]
    );
    assert_eq!(d.task_groups[0].diff_type, DiffType::Added);
    let gone = job_diff(Some(&new), None, true).unwrap();
    assert_eq!(gone.diff_type, DiffType::Deleted);
    assert_eq!(gone.task_groups[0].tasks[0].diff_type, DiffType::Deleted);
}

#[test]
fn group_pointer_fields_show_only_between_two_versions() {
    let mut old = example();
    let mut new = example();
    new.task_groups[0].shutdown_delay = Some(30_000_000_000);
    let tg = &diff(&old, &new, false).task_groups[0];
    assert_eq!(
        tg.fields,
        vec![field(DiffType::Added, "ShutdownDelay", "", "30000000000")]
    );
    // A new group's pointer fields are not flattened, as in Nomad.
    old.task_groups.clear();
    let tg = &diff(&old, &new, false).task_groups[0];
    assert_eq!(tg.fields, vec![field(DiffType::Added, "Count", "", "1")]);
}

#[test]
fn ports_pair_by_label_and_a_changed_network_is_replaced() {
    let net = |mbits: i64, to: i64| NetworkResource {
        mbits,
        dynamic_ports: Some(vec![Port {
            label: "http".into(),
            value: 23456,
            to,
            ..Default::default()
        }]),
        ..Default::default()
    };
    let mut old = example();
    old.task_groups[0].networks = Some(vec![net(10, 0)]);
    let mut new = example();
    new.task_groups[0].networks = Some(vec![net(10, 8080)]);
    let tg = &diff(&old, &new, false).task_groups[0];
    let kinds: Vec<_> = tg
        .objects
        .iter()
        .map(|o| (o.name.as_str(), o.diff_type))
        .collect();
    assert_eq!(
        kinds,
        [("Network", DiffType::Added), ("Network", DiffType::Deleted)]
    );
    let added = &tg.objects[0];
    // Not the empty mode and hostname, nor the device, CIDR or IP Nomad filters.
    assert_eq!(
        added.fields,
        vec![field(DiffType::Added, "MBits", "", "10")]
    );
    // A dynamic port's value is not compared.
    assert_eq!(added.objects[0].name, "Dynamic Port");
    assert_eq!(
        added.objects[0].fields,
        vec![
            field(DiffType::Added, "Label", "", "http"),
            field(DiffType::Added, "To", "", "8080"),
        ]
    );
}

#[test]
fn templates_pair_by_destination() {
    let tmpl = |dest: &str, data: &str| json!({"DestPath": dest, "EmbeddedTmpl": data});
    let mut old = example();
    old.task_groups[0].tasks[0].templates = Some(json!([tmpl("a", "1"), tmpl("b", "2")]));
    let mut new = example();
    new.task_groups[0].tasks[0].templates = Some(json!([tmpl("b", "3"), tmpl("a", "1")]));
    let task = &diff(&old, &new, false).task_groups[0].tasks[0];
    assert_eq!(task.objects.len(), 1, "{task:?}");
    assert_eq!(
        task.objects[0].fields,
        vec![field(DiffType::Edited, "EmbeddedTmpl", "2", "3")]
    );
}

#[test]
fn empty_lists_read_back_from_null() {
    let d: JobDiff = serde_json::from_value(json!({
        "Type": "Edited", "ID": "x", "Fields": null, "Objects": null,
        "TaskGroups": [{"Type": "Edited", "Name": "g", "Fields": null, "Objects": null,
                        "Tasks": null, "Updates": {"create": 2}}],
    }))
    .unwrap();
    assert_eq!(d.diff_type, DiffType::Edited);
    assert!(d.fields.is_empty());
    assert_eq!(
        d.task_groups[0].updates,
        Some([("create".to_string(), 2)].into())
    );
}
