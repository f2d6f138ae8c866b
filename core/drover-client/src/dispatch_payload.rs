//! The payload of a dispatched job, written where its task asked (`dispatch_payload { file }`,
//! relative to the task's `local/` directory) before the task starts, as Nomad's dispatch hook
//! does. A task without the block, or a job without a payload, gets nothing.

use std::path::{Component, Path};

use drover_structs::{Job, Task, decode_job_payload};

/// Writes the job's payload for `task` under `local_dir`. The file name comes from the job,
/// validated on the server; it is checked again here so it can never leave `local_dir`.
pub fn write(task: &Task, job: Option<&Job>, local_dir: &Path) -> Result<(), String> {
    let Some(file) = task
        .dispatch_payload
        .as_ref()
        .and_then(|d| d.get("File"))
        .and_then(|f| f.as_str())
        .filter(|f| !f.is_empty())
    else {
        return Ok(());
    };
    let Some(payload) = job
        .and_then(|j| j.payload.as_ref())
        .filter(|p| !p.is_null())
    else {
        return Ok(());
    };
    let relative = Path::new(file);
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "dispatch payload file {file:?} escapes the task's local directory"
        ));
    }
    let data = decode_job_payload(payload)?;
    let target = local_dir.join(relative);
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    std::fs::write(&target, data).map_err(|e| format!("writing {}: {e}", target.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_structs::encode_job_payload;

    fn task(file: Option<&str>) -> Task {
        Task {
            name: "t".into(),
            dispatch_payload: file.map(|f| serde_json::json!({ "File": f })),
            ..Default::default()
        }
    }

    fn job(payload: &[u8]) -> Job {
        Job {
            payload: Some(encode_job_payload(payload)),
            ..Default::default()
        }
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "drover-dispatch-payload-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_payload_lands_in_the_named_file_under_local() {
        let dir = scratch("write");
        write(&task(Some("in/data.txt")), Some(&job(b"hello")), &dir).unwrap();
        assert_eq!(std::fs::read(dir.join("in/data.txt")).unwrap(), b"hello");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nothing_is_written_without_a_block_or_a_payload() {
        let dir = scratch("none");
        write(&task(None), Some(&job(b"x")), &dir).unwrap();
        write(&task(Some("f")), Some(&Job::default()), &dir).unwrap();
        write(&task(Some("f")), None, &dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_outside_local_is_refused() {
        let dir = scratch("escape");
        let err = write(&task(Some("../../etc/x")), Some(&job(b"x")), &dir).unwrap_err();
        assert!(err.contains("escapes"), "{err}");
        assert!(write(&task(Some("/etc/x")), Some(&job(b"x")), &dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
