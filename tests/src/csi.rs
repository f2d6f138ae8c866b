//! CSI fixtures shared by the scenarios: our hostpath plugin built and run as a monolith plugin
//! job, and a small single-node-writer volume spec for it.

use std::path::{Path, PathBuf};

use crate::build_workspace_binary;

/// The `drover-csi-hostpath` binary, built if needed.
pub fn our_hostpath_plugin() -> PathBuf {
    build_workspace_binary("drover-csi-hostpath", "drover-csi-hostpath")
}

/// A job "plugin-hostpath" running `bin` (our hostpath plugin) under raw_exec as the monolith
/// CSI plugin "hostpath", keeping its volumes under `state_dir`.
pub fn hostpath_plugin_job(bin: &Path, state_dir: &Path) -> String {
    format!(
        r#"
job "plugin-hostpath" {{
  datacenters = ["dc1"]
  group "monolith" {{
    task "plugin" {{
      driver = "raw_exec"
      config {{
        command = "{bin}"
        args    = ["--node-id", "${{node.unique.id}}", "--state-dir", "{state}"]
      }}
      csi_plugin {{
        id        = "hostpath"
        type      = "monolith"
        mount_dir = "/csi"
      }}
      resources {{
        cpu    = 50
        memory = 64
      }}
    }}
  }}
}}
"#,
        bin = bin.display(),
        state = state_dir.display()
    )
}

/// Volume "data" of plugin "hostpath": 10 MiB, single-node-writer, file-system.
pub const HOSTPATH_VOLUME: &str = r#"
id        = "data"
name      = "data"
type      = "csi"
plugin_id = "hostpath"
capacity_min = "10MiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
"#;
