//! Reading the agent's configuration files as Nomad does. `-config` names files or
//! directories; a directory stands for its `.hcl` and `.json` files in lexical order (not
//! recursing, hidden files skipped); a file is HCL or JSON whatever its name. Each file is
//! checked alone, so an error names the file and the key path, then the files are merged in
//! order: blocks key by key, later values over earlier ones, and each `plugin "NAME"` block
//! replacing the earlier one of that name (Nomad's rule for plugin blocks).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use super::AgentFile;

/// The merged configuration of every file `paths` stands for (none: the defaults).
pub fn load(paths: &[PathBuf]) -> anyhow::Result<AgentFile> {
    let mut merged = Value::Object(Map::new());
    for path in paths {
        for file in config_files(path)? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading agent config {}", file.display()))?;
            let name = file.display().to_string();
            let value = parse_value(&text, &name)?;
            decode(value.clone(), &name)?;
            merge_value(&mut merged, value, true);
        }
    }
    decode(merged, "the merged agent configuration")
}

/// The files `path` stands for: itself, or a directory's `.hcl` and `.json` files by name.
pub fn config_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("reading agent config {}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .with_context(|| format!("reading agent config directory {}", path.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("reading agent config directory {}", path.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let wanted = !name.starts_with('.') && (name.ends_with(".hcl") || name.ends_with(".json"));
        // A directory (or anything that is not a file) named like a config is not read.
        if wanted && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// One file's text parsed (HCL, or JSON when it opens with `{`) and normalized.
#[cfg(test)]
pub fn parse_str(text: &str, name: &str) -> anyhow::Result<AgentFile> {
    decode(parse_value(text, name)?, name)
}

fn parse_value(text: &str, name: &str) -> anyhow::Result<Value> {
    let mut value: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).with_context(|| format!("{name}: invalid JSON"))?
    } else {
        match hcl::from_str::<Value>(&quoted_key_blocks_as_objects(text)) {
            Ok(v) => v,
            Err(e) => bail!("{name}: {e}"),
        }
    };
    if !value.is_object() {
        bail!("{name}: an agent configuration is an object of settings and blocks");
    }
    normalize_plugin_blocks(&mut value);
    normalize_top_level_blocks(&mut value);
    Ok(value)
}

fn decode(value: Value, name: &str) -> anyhow::Result<AgentFile> {
    serde_path_to_error::deserialize::<_, AgentFile>(value)
        .map_err(|e| anyhow::anyhow!("{name}: {}: {}", e.path(), e.inner()))
}

/// A top-level block written as a one-element list (`"server": [{...}]`, the HCL1 JSON layout,
/// or a block repeated in HCL) becomes one object, so that files merge block by block.
fn normalize_top_level_blocks(v: &mut Value) {
    let Some(top) = v.as_object_mut() else { return };
    for value in top.values_mut() {
        if let Value::Array(items) = value
            && !items.is_empty()
            && items.iter().all(Value::is_object)
        {
            let mut merged = Map::new();
            for item in items.drain(..) {
                if let Value::Object(m) = item {
                    merge_map(&mut merged, m, false);
                }
            }
            *value = Value::Object(merged);
        }
    }
}

/// Merges `over` into `base`: objects key by key, anything else replaced. At the top level,
/// `plugin` entries replace each other whole.
fn merge_value(base: &mut Value, over: Value, top: bool) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => merge_map(b, o, top),
        (base, over) => *base = over,
    }
}

fn merge_map(base: &mut Map<String, Value>, over: Map<String, Value>, top: bool) {
    for (key, value) in over {
        match base.get_mut(&key) {
            Some(Value::Object(plugins)) if top && key == "plugin" => {
                if let Value::Object(o) = value {
                    plugins.extend(o);
                } else {
                    base.insert(key, value);
                }
            }
            Some(existing) => merge_value(existing, value, false),
            None => {
                base.insert(key, value);
            }
        }
    }
}

/// hcl-rs turns a repeated or single labeled block into a map; a block written twice would
/// come out as an array of maps, which we merge in order.
fn normalize_plugin_blocks(v: &mut Value) {
    if let Some(Value::Array(items)) = v.get("plugin").cloned() {
        let mut merged = serde_json::Map::new();
        for item in items {
            if let Value::Object(m) = item {
                merged.extend(m);
            }
        }
        v["plugin"] = Value::Object(merged);
    }
    // `config { ... }` inside a plugin block may also arrive as a one-element array.
    if let Some(Value::Object(plugins)) = v.get_mut("plugin") {
        for p in plugins.values_mut() {
            if let Some(Value::Array(cfgs)) = p.get("config").cloned() {
                let mut merged = serde_json::Map::new();
                for c in cfgs {
                    if let Value::Object(m) = c {
                        merged.extend(m);
                    }
                }
                p["config"] = Value::Object(merged);
            }
        }
    }
}

/// Nomad's agent files are HCL1, where `chroot_env { "/host" = "/task" }` and
/// `options { "env.denylist" = "..." }` are blocks with quoted keys; HCL2 (hcl-rs) only takes
/// quoted keys in an object, `chroot_env = { ... }`. Turns such blocks into that object (same
/// content, one `=` added), leaving every other text alone.
fn quoted_key_blocks_as_objects(text: &str) -> std::borrow::Cow<'_, str> {
    const KEYS: [&str; 2] = ["chroot_env", "options"];
    let mut ends: Vec<usize> = KEYS
        .iter()
        .flat_map(|key| {
            text.match_indices(key).filter_map(|(at, _)| {
                let before = text[..at].chars().next_back();
                let starts_word = before.is_none_or(|c| c.is_whitespace() || c == '{' || c == ';');
                let end = at + key.len();
                (starts_word && text[end..].trim_start().starts_with('{')).then_some(end)
            })
        })
        .collect();
    if ends.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    ends.sort_unstable();
    let mut out = String::new();
    let mut copied = 0;
    for end in ends {
        out.push_str(&text[copied..end]);
        out.push_str(" =");
        copied = end;
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test (the crate has no temp-dir dependency).
    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("drover-config-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn a_directory_stands_for_its_hcl_and_json_files_in_lexical_order() {
        let dir = temp_dir("dir_order");
        write(
            dir.as_path(),
            "20-client.json",
            r#"{"client": {"node_class": "json"}}"#,
        );
        write(
            dir.as_path(),
            "10-base.hcl",
            "region = \"r1\"\nclient {\n  enabled = true\n  node_class = \"hcl\"\n}\n",
        );
        write(dir.as_path(), "README.md", "not = a config");
        write(dir.as_path(), ".30-hidden.hcl", "region = \"hidden\"\n");
        std::fs::create_dir(dir.as_path().join("nested.hcl")).unwrap();
        let files = config_files(dir.as_path()).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["10-base.hcl", "20-client.json"]);
        let file = load(&[dir.as_path().to_path_buf()]).unwrap();
        assert_eq!(file.region.as_deref(), Some("r1"));
        let client = file.client.unwrap();
        // Blocks merge key by key: the later file's class, the earlier file's `enabled`.
        assert_eq!(client.enabled, Some(true));
        assert_eq!(client.node_class.as_deref(), Some("json"));
    }

    #[test]
    fn a_file_without_an_extension_is_read_as_hcl_or_json_by_its_text() {
        let dir = temp_dir("no_ext");
        write(dir.as_path(), "agent", "datacenter = \"dc9\"\n");
        write(
            dir.as_path(),
            "extra",
            r#"{"server": [{"enabled": true, "bootstrap_expect": 1}]}"#,
        );
        let file = load(&[dir.as_path().join("agent"), dir.as_path().join("extra")]).unwrap();
        assert_eq!(file.datacenter.as_deref(), Some("dc9"));
        let server = file.server.unwrap();
        assert_eq!(
            (server.enabled, server.bootstrap_expect),
            (Some(true), Some(1))
        );
    }

    #[test]
    fn a_bad_file_in_a_directory_is_named_with_the_key_path() {
        let dir = temp_dir("bad_file");
        write(dir.as_path(), "a.hcl", "client { enabled = true }\n");
        write(
            dir.as_path(),
            "b.json",
            r#"{"client": {"cpu_total_compute": "lots"}}"#,
        );
        let e = load(&[dir.as_path().to_path_buf()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("b.json") && e.contains("client.cpu_total_compute"),
            "{e}"
        );
        let missing = load(&[dir.as_path().join("nope.hcl")]).unwrap_err();
        assert!(format!("{missing:#}").contains("nope.hcl"), "{missing:#}");
    }

    #[test]
    fn plugin_blocks_of_one_name_replace_each_other_and_others_are_kept() {
        let dir = temp_dir("plugins");
        write(
            dir.as_path(),
            "a.hcl",
            "plugin \"raw_exec\" {\n  config {\n    enabled = true\n    no_cgroups = true\n  }\n}\nplugin \"docker\" {\n  config {\n    allow_privileged = true\n  }\n}\n",
        );
        write(
            dir.as_path(),
            "b.hcl",
            "plugin \"raw_exec\" {\n  config {\n    enabled = false\n  }\n}\n",
        );
        let plugins = load(&[dir.as_path().to_path_buf()])
            .unwrap()
            .plugin
            .unwrap();
        let raw = plugins["raw_exec"].config.as_ref().unwrap();
        assert_eq!(raw, &serde_json::json!({"enabled": false}));
        assert!(plugins.contains_key("docker"));
    }
}
