//! Helpers shared by the log tests.

use std::fs;
use std::path::{Path, PathBuf};

pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new() -> Self {
        let path = std::env::temp_dir().join(format!("drover-logs-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

pub(super) fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).expect("read log file")
}

pub(super) fn write_files(dir: &Path, parts: &[(u64, &str)]) {
    for (index, text) in parts {
        fs::write(dir.join(format!("web.stdout.{index}")), text).expect("write");
    }
}
