//! Nomad's printer of job diffs, as `job plan` and `job history -p` show them
//! (`formatJobDiff` and its helpers in Nomad's `command/job_plan.go`): `+`, `-` and `+/-`
//! markers, names and values aligned per block, `"old" => "new"`, annotations in
//! parentheses and a group's update counts ("(1 create, 1 in-place update)").
//!
//! The text is built with Nomad's colour markup (`[green]`, `[bold]`, ...) and then rendered
//! by [`colorize`]; Drover's CLI prints without colour (as Nomad's `-no-color`), so
//! [`format_job_diff`] strips the markup.

use drover_structs::diff::{DiffType, FieldDiff, JobDiff, ObjectDiff, TaskDiff, TaskGroupDiff};

/// The diff as `job plan` and `job history -p` print it: Nomad's `formatJobDiff`, trimmed,
/// without colour. `verbose` (`job plan -verbose`) also expands added and deleted jobs,
/// groups and tasks.
pub(crate) fn format_job_diff(diff: &JobDiff, verbose: bool) -> String {
    colorize(job_markup(diff, verbose).trim(), false)
}

/// Nomad's `formatJobDiff`, with colour markup.
fn job_markup(job: &JobDiff, verbose: bool) -> String {
    let (marker, _) = diff_marker(job.diff_type);
    let mut out = format!("{marker}[bold]Job: {}\n", go_quote(&job.id));

    let (longest_field, mut longest_marker) = longest_prefixes(&job.fields, &job.objects);
    for tg in &job.task_groups {
        longest_marker = longest_marker.max(diff_marker(tg.diff_type).1);
    }
    if job.diff_type == DiffType::Edited || verbose {
        let fo = aligned(&job.fields, &job.objects, 0, longest_field, longest_marker);
        out += &fo;
        if !fo.is_empty() {
            out.push('\n');
        }
    }
    for tg in &job.task_groups {
        let prefix = longest_marker.saturating_sub(diff_marker(tg.diff_type).1);
        out += &group_markup(tg, prefix, verbose);
        out.push('\n');
    }
    out
}

/// Nomad's `formatTaskGroupDiff`; `tg_prefix` spaces go between the marker and the name.
fn group_markup(tg: &TaskGroupDiff, tg_prefix: usize, verbose: bool) -> String {
    let (marker, _) = diff_marker(tg.diff_type);
    let mut out = format!(
        "{marker}{}[bold]Task Group: {}[reset]",
        spaces(tg_prefix),
        go_quote(&tg.name)
    );
    match tg.updates.as_ref().filter(|u| !u.is_empty()) {
        // A BTreeMap iterates in the byte order Nomad's sort.Strings gives.
        Some(updates) => {
            let parts: Vec<String> = updates
                .iter()
                .map(|(kind, count)| format!("[reset]{}{count} {kind}", update_color(kind)))
                .collect();
            out += &format!(" ({}[reset])\n", parts.join(", "));
        }
        None => out += "[reset]\n",
    }

    let (longest_field, mut longest_marker) = longest_prefixes(&tg.fields, &tg.objects);
    for task in &tg.tasks {
        longest_marker = longest_marker.max(diff_marker(task.diff_type).1);
    }
    let sub_start = tg_prefix + 2;
    if tg.diff_type == DiffType::Edited || verbose {
        let fo = aligned(
            &tg.fields,
            &tg.objects,
            sub_start,
            longest_field,
            longest_marker,
        );
        out += &fo;
        if !fo.is_empty() {
            out.push('\n');
        }
    }
    for task in &tg.tasks {
        let prefix = longest_marker.saturating_sub(diff_marker(task.diff_type).1);
        out += &task_markup(task, sub_start, prefix, verbose);
        out.push('\n');
    }
    out
}

/// Nomad's `formatTaskDiff`: `start` spaces before the marker, `task_prefix` after it. An
/// unchanged task, and an added or deleted one unless `verbose`, is its header alone.
fn task_markup(task: &TaskDiff, start: usize, task_prefix: usize, verbose: bool) -> String {
    let (marker, _) = diff_marker(task.diff_type);
    let mut out = format!(
        "{}{marker}{}[bold]Task: {}",
        spaces(start),
        spaces(task_prefix),
        go_quote(&task.name)
    );
    if !task.annotations.is_empty() {
        out += &format!(" [reset]({})", color_annotations(&task.annotations));
    }
    match task.diff_type {
        DiffType::None => return out,
        DiffType::Added | DiffType::Deleted if !verbose => return out,
        _ => out.push('\n'),
    }
    let (longest_field, longest_marker) = longest_prefixes(&task.fields, &task.objects);
    out += &aligned(
        &task.fields,
        &task.objects,
        start + 2,
        longest_field,
        longest_marker,
    );
    out
}

/// Nomad's `formatObjectDiff`: the block's name, its fields and blocks, the closing brace
/// under the name.
fn object_markup(diff: &ObjectDiff, start: usize, key_prefix: usize) -> String {
    let (marker, marker_len) = diff_marker(diff.diff_type);
    let mut out = format!(
        "{}{marker}{}{} {{\n",
        spaces(start),
        spaces(key_prefix),
        diff.name
    );
    let (longest_field, longest_marker) = longest_prefixes(&diff.fields, &diff.objects);
    out += &aligned(
        &diff.fields,
        &diff.objects,
        start + key_prefix + 2,
        longest_field,
        longest_marker,
    );
    format!("{out}\n{}}}", spaces(start + marker_len + key_prefix))
}

/// Nomad's `formatFieldDiff`: `key_prefix` spaces after the marker align the names,
/// `value_prefix` spaces after the colon align the values.
fn field_markup(diff: &FieldDiff, start: usize, key_prefix: usize, value_prefix: usize) -> String {
    let (marker, _) = diff_marker(diff.diff_type);
    let mut out = format!(
        "{}{marker}{}{}: {}",
        spaces(start),
        spaces(key_prefix),
        diff.name,
        spaces(value_prefix)
    );
    match diff.diff_type {
        DiffType::Added | DiffType::None => out += &go_quote(&diff.new),
        DiffType::Deleted => out += &go_quote(&diff.old),
        DiffType::Edited => {
            out += &format!("{} => {}", go_quote(&diff.old), go_quote(&diff.new));
        }
    }
    if !diff.annotations.is_empty() {
        out += &format!(" ({})", color_annotations(&diff.annotations));
    }
    out
}

/// Nomad's `alignedFieldAndObjects`: fields, then blocks, one per line, with no newline
/// after the last.
fn aligned(
    fields: &[FieldDiff],
    objects: &[ObjectDiff],
    start: usize,
    longest_field: usize,
    longest_marker: usize,
) -> String {
    let mut out = String::new();
    for (i, field) in fields.iter().enumerate() {
        let key_prefix = longest_marker.saturating_sub(diff_marker(field.diff_type).1);
        // Go's len: bytes.
        let value_prefix = longest_field.saturating_sub(field.name.len());
        out += &field_markup(field, start, key_prefix, value_prefix);
        if i + 1 != fields.len() || !objects.is_empty() {
            out.push('\n');
        }
    }
    for (i, object) in objects.iter().enumerate() {
        let key_prefix = longest_marker.saturating_sub(diff_marker(object.diff_type).1);
        out += &object_markup(object, start, key_prefix);
        if i + 1 != objects.len() {
            out.push('\n');
        }
    }
    out
}

/// Nomad's `getLongestPrefixes`: the longest field name and the longest marker.
fn longest_prefixes(fields: &[FieldDiff], objects: &[ObjectDiff]) -> (usize, usize) {
    let longest_field = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    let longest_marker = fields
        .iter()
        .map(|f| f.diff_type)
        .chain(objects.iter().map(|o| o.diff_type))
        .map(|t| diff_marker(t).1)
        .max()
        .unwrap_or(0);
    (longest_field, longest_marker)
}

/// Nomad's `getDiffString`: the coloured marker and its printed width.
fn diff_marker(t: DiffType) -> (&'static str, usize) {
    match t {
        DiffType::Added => ("[green]+[reset] ", 2),
        DiffType::Deleted => ("[red]-[reset] ", 2),
        DiffType::Edited => ("[light_yellow]+/-[reset] ", 4),
        DiffType::None => ("", 0),
    }
}

/// The colour of a group's update kind in its summary.
fn update_color(kind: &str) -> &'static str {
    match kind {
        "create" => "[green]",
        "destroy" => "[red]",
        "migrate" => "[blue]",
        "in-place update" => "[cyan]",
        "create/destroy update" => "[yellow]",
        "canary" => "[light_yellow]",
        _ => "",
    }
}

/// Nomad's `colorAnnotations`: comma-separated, coloured where known.
fn color_annotations(annotations: &[String]) -> String {
    annotations
        .iter()
        .map(|a| match a.as_str() {
            "forces create" => format!("[green]{a}[reset]"),
            "forces destroy" => format!("[red]{a}[reset]"),
            "forces in-place update" => format!("[cyan]{a}[reset]"),
            "forces create/destroy update" => format!("[yellow]{a}[reset]"),
            _ => a.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn spaces(n: usize) -> String {
    " ".repeat(n)
}

/// The colour names of Nomad's markup (colorstring's `DefaultColors`) with their ANSI codes,
/// as `name:code` words.
const COLORS: &str = concat!(
    "default:39 _default_:49 black:30 red:31 green:32 yellow:33 blue:34 magenta:35 ",
    "cyan:36 light_gray:37 dark_gray:90 light_red:91 light_green:92 light_yellow:93 ",
    "light_blue:94 light_magenta:95 light_cyan:96 white:97 _black_:40 _red_:41 ",
    "_green_:42 _yellow_:43 _blue_:44 _magenta_:45 _cyan_:46 _light_gray_:47 ",
    "_dark_gray_:100 _light_red_:101 _light_green_:102 _light_yellow_:103 ",
    "_light_blue_:104 _light_magenta_:105 _light_cyan_:106 _white_:107 bold:1 dim:2 ",
    "underline:4 blink_slow:5 blink_fast:6 invert:7 hidden:8 reset:0 reset_bold:21"
);

/// The ANSI code of a colour name of Nomad's markup.
fn color_code(name: &str) -> Option<&'static str> {
    COLORS
        .split(' ')
        .filter_map(|entry| entry.split_once(':'))
        .find_map(|(n, code)| (n == name).then_some(code))
}

/// colorstring's `Colorize.Color` as Nomad's CLI sets it up: each `[name]` of a known colour
/// becomes its ANSI sequence (with a reset at the end), or nothing when `color` is off;
/// anything else in brackets (`port_map[0][db]`) stays as it is.
fn colorize(markup: &str, color: bool) -> String {
    let mut out = String::with_capacity(markup.len());
    let mut colored = false;
    let mut rest = markup;
    while let Some(open) = rest.find('[') {
        out += &rest[..open];
        // `[` and `]` are ASCII and the name is ASCII, so every slice below is on a char
        // boundary.
        let after = &rest[open + 1..];
        let name_len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
            .count();
        if name_len == 0 || !after[name_len..].starts_with(']') {
            // Not a tag: keep the bracket and look on from the next character.
            out.push('[');
            rest = after;
            continue;
        }
        let name = &after[..name_len];
        match color_code(name) {
            Some(code) => {
                colored = true;
                if color {
                    out += &format!("\x1b[{code}m");
                }
            }
            None => {
                out.push('[');
                out += name;
                out.push(']');
            }
        }
        rest = &after[name_len + 1..];
    }
    out += rest;
    if colored && color {
        out += "\x1b[0m";
    }
    out
}

/// Go's `%q` (`strconv.Quote`): escapes quotes, backslashes and what does not print; keeps
/// printable Unicode as it is.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            '\u{7}' => out += "\\a",
            '\u{8}' => out += "\\b",
            '\u{c}' => out += "\\f",
            '\n' => out += "\\n",
            '\r' => out += "\\r",
            '\t' => out += "\\t",
            '\u{b}' => out += "\\v",
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => out += &format!("\\x{:02x}", c as u32),
            c if (c as u32) < 0x10000 => out += &format!("\\u{:04x}", c as u32),
            c => out += &format!("\\U{:08x}", c as u32),
        }
    }
    out.push('"');
    out
}

/// Close to Go's `unicode.IsPrint`: not a control or format character, not a space other than
/// U+0020, not private use.
fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format_chars = matches!(
        c as u32,
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f
            | 0x202a..=0x202e | 0x2060..=0x2064 | 0x2066..=0x206f | 0xfeff | 0xfff9..=0xfffb
            | 0xe000..=0xf8ff | 0xf0000..=0x10ffff
    );
    !(c.is_control() || c.is_whitespace() || format_chars)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use drover_structs::diff::job_diff;
    use drover_structs::job::{Job, Task, TaskGroup};
    use drover_structs::resources::Resources;
    use serde_json::json;

    use super::*;

    fn field(t: DiffType, name: &str, old: &str, new: &str) -> FieldDiff {
        FieldDiff {
            diff_type: t,
            name: name.into(),
            old: old.into(),
            new: new.into(),
            annotations: vec![],
        }
    }

    fn added(name: &str, new: &str) -> FieldDiff {
        field(DiffType::Added, name, "", new)
    }

    fn unchanged(name: &str, value: &str) -> FieldDiff {
        field(DiffType::None, name, value, value)
    }

    fn object(
        t: DiffType,
        name: &str,
        fields: Vec<FieldDiff>,
        objects: Vec<ObjectDiff>,
    ) -> ObjectDiff {
        ObjectDiff {
            diff_type: t,
            name: name.into(),
            fields,
            objects,
        }
    }

    fn updates(kinds: &[(&str, u64)]) -> Option<BTreeMap<String, u64>> {
        Some(kinds.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    /// Nomad's example job: group "cache" with a docker task "redis".
    fn example(count: i64, image: &str) -> Job {
        let config = json!({"image": image, "port_map": [{"db": 6379}]});
        Job {
            id: "example".into(),
            name: "example".into(),
            job_type: "service".into(),
            datacenters: vec!["dc1".into()],
            task_groups: vec![TaskGroup {
                name: "cache".into(),
                count,
                tasks: vec![Task {
                    name: "redis".into(),
                    driver: "docker".into(),
                    config: config.as_object().cloned(),
                    resources: Resources {
                        cpu: 500,
                        memory_mb: 256,
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
    fn a_new_job_shows_its_group_summary_and_tasks_only() {
        // Nomad's docs, `job plan` of a job not submitted before.
        let mut d = job_diff(None, Some(&example(1, "redis:7")), true).unwrap();
        d.task_groups[0].updates = updates(&[("create", 1)]);
        d.task_groups[0].tasks[0].annotations = vec!["forces create".into()];
        assert_eq!(
            format_job_diff(&d, false),
            "+ Job: \"example\"\n\
             + Task Group: \"cache\" (1 create)\n\
             \x20 + Task: \"redis\" (forces create)"
        );
    }

    #[test]
    fn a_count_change_shows_the_field_and_the_unchanged_task() {
        // Nomad's docs, `job plan` raising the count.
        let mut d = job_diff(
            Some(&example(1, "redis:7")),
            Some(&example(8, "redis:7")),
            true,
        )
        .unwrap();
        let tg = &mut d.task_groups[0];
        tg.updates = updates(&[("create", 7), ("in-place update", 1)]);
        tg.fields[0].annotations = vec!["forces create".into()];
        assert_eq!(
            format_job_diff(&d, false),
            "+/- Job: \"example\"\n\
             +/- Task Group: \"cache\" (7 create, 1 in-place update)\n\
             \x20 +/- Count: \"1\" => \"8\" (forces create)\n\
             \x20     Task: \"redis\""
        );
    }

    #[test]
    fn a_config_change_aligns_the_config_leaves() {
        // Nomad's docs, `job plan` of a rolling update. The docs show the closing brace under
        // "Config"; Nomad's code puts it after the marker's width, as here.
        let mut d = job_diff(
            Some(&example(3, "redis:2.8")),
            Some(&example(3, "redis:7")),
            true,
        )
        .unwrap();
        let tg = &mut d.task_groups[0];
        tg.updates = updates(&[("create/destroy update", 3)]);
        tg.tasks[0].annotations = vec!["forces create/destroy update".into()];
        assert_eq!(
            format_job_diff(&d, false),
            r#"+/- Job: "example"
+/- Task Group: "cache" (3 create/destroy update)
  +/- Task: "redis" (forces create/destroy update)
    +/- Config {
      +/- image:           "redis:2.8" => "redis:7"
          port_map[0][db]: "6379"
        }"#
        );
    }

    #[test]
    fn job_history_shows_a_resources_change_among_unchanged_fields() {
        // Nomad's docs, `job history -p` (a diff of Nomad 0.6's resources).
        let resources = object(
            DiffType::Edited,
            "Resources",
            vec![
                unchanged("CPU", "500"),
                unchanged("DiskMB", "0"),
                field(DiffType::Edited, "MemoryMB", "256", "512"),
            ],
            vec![],
        );
        let d = JobDiff {
            diff_type: DiffType::Edited,
            id: "example".into(),
            task_groups: vec![TaskGroupDiff {
                diff_type: DiffType::Edited,
                name: "cache".into(),
                tasks: vec![TaskDiff {
                    diff_type: DiffType::Edited,
                    name: "redis".into(),
                    objects: vec![resources],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            format_job_diff(&d, false),
            r#"+/- Job: "example"
+/- Task Group: "cache"
  +/- Task: "redis"
    +/- Resources {
          CPU:      "500"
          DiskMB:   "0"
      +/- MemoryMB: "256" => "512"
        }"#
        );
    }

    /// The task Nomad's docs add with `job plan -verbose`.
    fn website() -> TaskDiff {
        let port = object(
            DiffType::Added,
            "Dynamic Port",
            vec![added("Label", "web")],
            vec![],
        );
        let network = object(
            DiffType::Added,
            "Network",
            vec![added("MBits", "10")],
            vec![port],
        );
        let check = object(
            DiffType::Added,
            "Check",
            vec![
                unchanged("Command", ""),
                added("Interval", "10000000000"),
                added("Name", "alive"),
                unchanged("Path", ""),
                unchanged("Protocol", ""),
                added("Timeout", "2000000000"),
                added("Type", "tcp"),
            ],
            vec![],
        );
        TaskDiff {
            diff_type: DiffType::Added,
            name: "my-website".into(),
            fields: vec![
                added("Driver", "docker"),
                added("KillTimeout", "5000000000"),
            ],
            objects: vec![
                object(
                    DiffType::Added,
                    "Config",
                    vec![added("image", "node:6.2"), added("port_map[0][web]", "80")],
                    vec![],
                ),
                object(
                    DiffType::Added,
                    "Resources",
                    vec![
                        added("CPU", "500"),
                        added("DiskMB", "300"),
                        added("MemoryMB", "256"),
                    ],
                    vec![network],
                ),
                object(
                    DiffType::Added,
                    "LogConfig",
                    vec![added("MaxFileSizeMB", "10"), added("MaxFiles", "10")],
                    vec![],
                ),
                object(
                    DiffType::Added,
                    "Service",
                    vec![added("Name", "website"), added("PortLabel", "web")],
                    vec![check],
                ),
            ],
            annotations: vec!["forces create/destroy update".into()],
        }
    }

    fn website_job() -> JobDiff {
        JobDiff {
            diff_type: DiffType::Edited,
            id: "example".into(),
            task_groups: vec![TaskGroupDiff {
                diff_type: DiffType::Edited,
                name: "cache".into(),
                tasks: vec![
                    website(),
                    TaskDiff {
                        name: "redis".into(),
                        ..Default::default()
                    },
                ],
                updates: updates(&[("create/destroy update", 3)]),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn verbose_expands_an_added_task_with_nested_blocks() {
        // Nomad's docs, `job plan -verbose` adding a task; closing braces as Nomad's code
        // places them.
        assert_eq!(
            format_job_diff(&website_job(), true),
            r#"+/- Job: "example"
+/- Task Group: "cache" (3 create/destroy update)
  + Task: "my-website" (forces create/destroy update)
    + Driver:      "docker"
    + KillTimeout: "5000000000"
    + Config {
      + image:            "node:6.2"
      + port_map[0][web]: "80"
      }
    + Resources {
      + CPU:      "500"
      + DiskMB:   "300"
      + MemoryMB: "256"
      + Network {
        + MBits: "10"
        + Dynamic Port {
          + Label: "web"
          }
        }
      }
    + LogConfig {
      + MaxFileSizeMB: "10"
      + MaxFiles:      "10"
      }
    + Service {
      + Name:      "website"
      + PortLabel: "web"
      + Check {
          Command:  ""
        + Interval: "10000000000"
        + Name:     "alive"
          Path:     ""
          Protocol: ""
        + Timeout:  "2000000000"
        + Type:     "tcp"
        }
      }
    Task: "redis""#
        );
        // Without -verbose an added task is its header.
        assert_eq!(
            format_job_diff(&website_job(), false),
            r#"+/- Job: "example"
+/- Task Group: "cache" (3 create/destroy update)
  + Task: "my-website" (forces create/destroy update)
    Task: "redis""#
        );
    }

    #[test]
    fn verbose_shows_the_fields_of_a_new_job() {
        // As in Nomad's PR #6154 (`job plan -verbose` of a new job).
        let group = TaskGroupDiff {
            diff_type: DiffType::Added,
            name: "api".into(),
            fields: vec![FieldDiff {
                annotations: vec!["forces create".into()],
                ..added("Count", "1")
            }],
            objects: vec![object(
                DiffType::Added,
                "RestartPolicy",
                vec![added("Attempts", "2"), added("Mode", "fail")],
                vec![],
            )],
            updates: updates(&[("create", 1)]),
            ..Default::default()
        };
        let d = JobDiff {
            diff_type: DiffType::Added,
            id: "countdash".into(),
            fields: vec![added("AllAtOnce", "false"), added("Dispatched", "false")],
            objects: vec![object(
                DiffType::Added,
                "Datacenters",
                vec![added("Datacenters", "dc1")],
                vec![],
            )],
            task_groups: vec![group],
        };
        assert_eq!(
            format_job_diff(&d, true),
            r#"+ Job: "countdash"
+ AllAtOnce:  "false"
+ Dispatched: "false"
+ Datacenters {
  + Datacenters: "dc1"
  }
+ Task Group: "api" (1 create)
  + Count: "1" (forces create)
  + RestartPolicy {
    + Attempts: "2"
    + Mode:     "fail"
    }"#
        );
        // Without -verbose an added job and group show their headers only.
        assert_eq!(
            format_job_diff(&d, false),
            "+ Job: \"countdash\"\n+ Task Group: \"api\" (1 create)"
        );
    }

    #[test]
    fn an_added_block_among_edits_is_aligned_after_the_wider_marker() {
        // As in Nomad's PR #18332 (a scaling block added with a count change).
        let d = JobDiff {
            diff_type: DiffType::Edited,
            id: "foo".into(),
            task_groups: vec![TaskGroupDiff {
                diff_type: DiffType::Edited,
                name: "foo".into(),
                fields: vec![FieldDiff {
                    annotations: vec!["forces create".into()],
                    ..field(DiffType::Edited, "Count", "1", "2")
                }],
                objects: vec![object(
                    DiffType::Added,
                    "Scaling",
                    vec![
                        added("Enabled", "true"),
                        added("Max", "10"),
                        added("Min", "2"),
                    ],
                    vec![],
                )],
                tasks: vec![TaskDiff {
                    name: "foo".into(),
                    ..Default::default()
                }],
                updates: updates(&[("in-place update", 1), ("create", 1)]),
            }],
            ..Default::default()
        };
        assert_eq!(
            format_job_diff(&d, false),
            r#"+/- Job: "foo"
+/- Task Group: "foo" (1 create, 1 in-place update)
  +/- Count: "1" => "2" (forces create)
  +   Scaling {
      + Enabled: "true"
      + Max:     "10"
      + Min:     "2"
      }
      Task: "foo""#
        );
    }

    #[test]
    fn deleted_fields_and_values_are_quoted_as_go_does() {
        let d = JobDiff {
            diff_type: DiffType::Edited,
            id: "web".into(),
            fields: vec![
                field(DiffType::Deleted, "Meta[owner]", "a\"b", ""),
                added("Meta[note]", "line\nnext\u{7f}é"),
            ],
            ..Default::default()
        };
        assert_eq!(
            format_job_diff(&d, false),
            "+/- Job: \"web\"\n- Meta[owner]: \"a\\\"b\"\n+ Meta[note]:  \"line\\nnext\\x7fé\""
        );
    }

    #[test]
    fn colorize_strips_or_renders_only_known_colours() {
        let markup = "[green]+[reset] [bold]Task: x[0][db] [a b] [unknown]";
        assert_eq!(colorize(markup, false), "+ Task: x[0][db] [a b] [unknown]");
        assert_eq!(
            colorize(markup, true),
            "\x1b[32m+\x1b[0m \x1b[1mTask: x[0][db] [a b] [unknown]\x1b[0m"
        );
        assert_eq!(colorize("plain [", true), "plain [");
    }
}
