//! Test and benchmark support: a busybox image built locally (no registry is reachable), and a
//! check that a Docker daemon answers. Plain std and the docker CLI only, so that the bench and
//! the end-to-end tests (tests/tests/docker.rs) include this file as well (`#[path]`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Built from the host's static busybox by [`ensure_test_image`].
pub const TEST_IMAGE: &str = "drover-test-busybox:latest";

/// Applets linked into the image's /bin.
const APPLETS: &[&str] = &[
    "sh", "echo", "sleep", "cat", "httpd", "nc", "head", "tr", "ls", "env", "id", "ps", "kill",
    "wget", "true", "false", "printf", "mkdir", "touch", "dd", "yes", "seq",
];

fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running docker {args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether a daemon answers; the reason when not.
pub fn docker_reachable() -> Result<(), String> {
    docker(&["version", "--format", "{{.Server.Version}}"]).map(drop)
}

pub fn image_exists(image: &str) -> bool {
    docker(&["image", "inspect", "--format", "{{.Id}}", image]).is_ok()
}

/// A lock file held while one process builds the image, so that parallel test processes do
/// not each import one (leaving dangling copies behind).
const BUILD_LOCK: &str = "drover-test-busybox.lock";
/// A lock older than this belongs to a builder that died.
const STALE_LOCK: Duration = Duration::from_secs(120);

/// Builds [`TEST_IMAGE`] unless it exists: a root with `bin/busybox` and its applet links,
/// piped through `tar -c . | docker import -`, imported under a tag of its own and then tagged
/// as the test image, so the image is complete whenever the name exists.
pub fn ensure_test_image() -> Result<(), String> {
    let lock = std::env::temp_dir().join(BUILD_LOCK);
    let deadline = Instant::now() + STALE_LOCK * 2;
    loop {
        if image_exists(TEST_IMAGE) {
            return Ok(());
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => {
                let built = if image_exists(TEST_IMAGE) {
                    Ok(())
                } else {
                    build_test_image()
                };
                let _ = std::fs::remove_file(&lock);
                return built;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stale = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_LOCK);
                if stale {
                    let _ = std::fs::remove_file(&lock);
                }
                if Instant::now() > deadline {
                    return Err(format!("gave up waiting for {} to go away", lock.display()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("creating {}: {e}", lock.display())),
        }
    }
}

fn build_test_image() -> Result<(), String> {
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        return Err(
            "/bin/busybox is missing: install Debian's busybox-static (apt-get install -y busybox-static)"
                .to_string(),
        );
    }
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let root: PathBuf = std::env::temp_dir().join(format!("drover-test-image-{unique}"));
    let build = || -> Result<(), String> {
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(root.join("tmp")).map_err(|e| e.to_string())?;
        std::fs::copy(busybox, bin.join("busybox")).map_err(|e| e.to_string())?;
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).map_err(|e| e.to_string())?;
        }
        let temp_tag = format!("drover-test-busybox-build:{unique}");
        let script = format!(
            "tar -C '{}' -c . | docker import - '{temp_tag}'",
            root.display()
        );
        let out = Command::new("sh")
            .args(["-c", &script])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "building {TEST_IMAGE}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        docker(&["tag", &temp_tag, TEST_IMAGE])?;
        docker(&["rmi", &temp_tag]).map(drop)
    };
    let result = build();
    let _ = std::fs::remove_dir_all(&root);
    result
}

/// Whether Docker tests can run here: `Ok(false)` (with a message printed) when no daemon
/// answers, an error when the daemon answers but the test image cannot be built.
pub fn docker_tests_enabled() -> Result<bool, String> {
    if let Err(reason) = docker_reachable() {
        eprintln!("skipping: no Docker daemon reachable ({reason})");
        return Ok(false);
    }
    ensure_test_image().map(|()| true)
}
