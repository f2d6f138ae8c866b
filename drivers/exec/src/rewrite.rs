//! The client hands drivers host paths (`NOMAD_TASK_DIR=<data_dir>/alloc/<id>/<task>/local`, and
//! `${NOMAD_TASK_DIR}` already interpolated into `command` and `args`). Inside the task root
//! those directories are `/local`, `/alloc`, `/secrets`, `/tmp` (Nomad's paths for drivers that
//! isolate the filesystem), so the exec driver rewrites them before starting the task, as the
//! docker driver does for its containers.

use std::collections::BTreeMap;

use drover_abi::TaskConfig;

use crate::rootfs::ALLOC_IN_TASK;

/// Host directory -> its path inside the task root, longest host path first.
#[derive(Debug, Clone)]
pub struct PathRewrite {
    pairs: Vec<(String, &'static str)>,
}

/// Whether `c` may continue a path name, so that a match ending before it is only a prefix of
/// some longer name (`/x/web` inside `/x/webserver`).
fn continues_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

impl PathRewrite {
    pub fn for_task(task: &TaskConfig) -> Self {
        let dir = |sub: &str| task.task_dir.join(sub).display().to_string();
        let mut pairs = vec![
            (
                task.alloc_dir.join("alloc").display().to_string(),
                ALLOC_IN_TASK,
            ),
            (dir("local"), "/local"),
            (dir("secrets"), "/secrets"),
            (dir("tmp"), "/tmp"),
            (dir("private"), "/private"),
            (task.task_dir.display().to_string(), "/"),
        ];
        // Nothing to rewrite for a task dir that is `/` or empty (never the case in practice).
        pairs.retain(|(host, _)| host.len() > 1);
        pairs.sort_by_key(|(host, _)| std::cmp::Reverse(host.len()));
        PathRewrite { pairs }
    }

    /// `value` with every host path of the task's directories replaced by its task path.
    pub fn apply(&self, value: &str) -> String {
        let mut out = String::with_capacity(value.len());
        let mut rest = value;
        let mut previous: Option<char> = None;
        'scan: while !rest.is_empty() {
            let starts_name = previous.is_none_or(|c| !continues_name(c) && c != '/');
            if starts_name {
                for (host, inside) in &self.pairs {
                    let Some(after) = rest.strip_prefix(host.as_str()) else {
                        continue;
                    };
                    let next = after.chars().next();
                    if next.is_some_and(continues_name) {
                        continue;
                    }
                    // `<task_dir>/x` becomes `/x`, not `//x`.
                    if !(*inside == "/" && next == Some('/')) {
                        out.push_str(inside);
                    }
                    previous = inside.chars().last();
                    rest = after;
                    continue 'scan;
                }
            }
            // Not at a match: copy one character.
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                out.push(c);
                previous = Some(c);
            }
            rest = chars.as_str();
        }
        out
    }

    pub fn apply_env(&self, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        env.iter()
            .map(|(k, v)| (k.clone(), self.apply(v)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn rewrite() -> PathRewrite {
        let task = TaskConfig {
            id: "a/web/1".into(),
            name: "web".into(),
            alloc_id: "a".into(),
            job_name: "j".into(),
            group_name: "g".into(),
            env: Default::default(),
            driver_config: serde_json::Value::Null,
            resources: Default::default(),
            user: String::new(),
            alloc_dir: PathBuf::from("/data/alloc/a"),
            task_dir: PathBuf::from("/data/alloc/a/web"),
            stdout_path: PathBuf::new(),
            stderr_path: PathBuf::new(),
            ..Default::default()
        };
        PathRewrite::for_task(&task)
    }

    #[test]
    fn nomads_directories_get_their_task_paths() {
        let r = rewrite();
        assert_eq!(r.apply("/data/alloc/a/alloc"), "/alloc");
        assert_eq!(r.apply("/data/alloc/a/alloc/data/x"), "/alloc/data/x");
        assert_eq!(r.apply("/data/alloc/a/web/local"), "/local");
        assert_eq!(r.apply("/data/alloc/a/web/secrets/token"), "/secrets/token");
        assert_eq!(r.apply("/data/alloc/a/web/tmp"), "/tmp");
        assert_eq!(r.apply("/data/alloc/a/web"), "/");
        assert_eq!(r.apply("/data/alloc/a/web/run.sh"), "/run.sh");
    }

    #[test]
    fn paths_inside_longer_text_are_rewritten_only_whole() {
        let r = rewrite();
        assert_eq!(
            r.apply("--dir=/data/alloc/a/web/local/x:/data/alloc/a/alloc"),
            "--dir=/local/x:/alloc"
        );
        // Another task's directory and a lookalike prefix stay as they are.
        assert_eq!(
            r.apply("/data/alloc/a/webserver/local"),
            "/data/alloc/a/webserver/local"
        );
        assert_eq!(r.apply("/x/data/alloc/a/web"), "/x/data/alloc/a/web");
        assert_eq!(r.apply("/data/alloc/a/web/localx"), "/localx");
        assert_eq!(r.apply("plain text"), "plain text");
    }
}
