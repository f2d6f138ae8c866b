//! Keeps a plugin running: when its process ends (and the driver object is not being dropped),
//! starts it again, re-applies its config and recovers its tasks from the handles the agent
//! gave it. A plugin that keeps dying soon after it starts is restarted with growing backoff.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use drover_plugin_proto::base::SetConfigRequest;
use drover_plugin_proto::drivers::RecoverTaskRequest;
use drover_plugin_proto::handshake::Handshake;

use super::conn::Conn;
use super::process::PluginProcess;
use super::{Shared, block, convert, lock};

const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A plugin that ran at least this long before dying is restarted without delay.
const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Starts the supervisor thread of `shared`, whose plugin currently runs as `process`.
pub fn watch(shared: Arc<Shared>, process: Arc<PluginProcess>) {
    let name = format!("plugin-{}", shared.config_name);
    let spawned = std::thread::Builder::new()
        .name(name)
        .spawn(move || supervise(shared, process));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start a plugin supervisor; a plugin that dies will not be restarted");
    }
}

fn supervise(shared: Arc<Shared>, mut process: Arc<PluginProcess>) {
    let mut backoff = FIRST_BACKOFF;
    let mut started = Instant::now();
    loop {
        let socket = shared.now().map(|c| c.handshake);
        let how = process.wait();
        if let Some(h) = &socket {
            remove_socket(h);
        }
        if shared.stopping() {
            return;
        }
        tracing::warn!(plugin = %shared.config_name, pid = process.pid, "plugin {how}; restarting it");
        shared.lost(None, format!("it {how} and is being restarted"));
        if started.elapsed() >= STABLE_AFTER {
            backoff = FIRST_BACKOFF;
        }
        process = loop {
            if started.elapsed() < STABLE_AFTER && !pause(&shared, backoff) {
                return;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            started = Instant::now();
            match restart(&shared) {
                Ok(p) => break p,
                Err(e) => {
                    tracing::warn!(plugin = %shared.config_name, error = %e, retry_in = ?backoff, "restarting the plugin failed");
                    shared.lost(None, format!("restarting it failed: {e}"));
                }
            }
        };
    }
}

/// Removes a dead plugin's unix socket, and the private directory a Drover sidecar made for it.
pub fn remove_socket(handshake: &Handshake) {
    if handshake.network != "unix" {
        return;
    }
    let socket = Path::new(&handshake.address);
    let _ = std::fs::remove_file(socket);
    if let Some(dir) = socket.parent()
        && dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("drover-plugin-"))
    {
        // Only succeeds when empty: nothing but the socket is ever removed.
        let _ = std::fs::remove_dir(dir);
    }
}

/// Sleeps `d` unless the plugin is being dropped; false when it is.
fn pause(shared: &Shared, d: Duration) -> bool {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        if shared.stopping() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !shared.stopping()
}

/// Starts the plugin again and brings it back to where the old one was.
fn restart(shared: &Arc<Shared>) -> Result<Arc<PluginProcess>, String> {
    let conn = super::start(&shared.path, &shared.options, &shared.config_name)
        .map_err(|e| e.to_string())?;
    let process = Arc::clone(&conn.process);
    if conn.info.name != shared.name {
        process.kill();
        return Err(format!(
            "it now calls itself {:?}, not {:?}",
            conn.info.name, shared.name
        ));
    }
    let config = lock(&shared.plugin_config).clone();
    if let Some(config) = config
        && let Err(e) = apply_config(&conn, &config)
    {
        process.kill();
        return Err(e);
    }
    // Tasks first: a call that reaches the new plugin must find them.
    recover_tasks(shared, &conn);
    shared.install(conn);
    tracing::info!(plugin = %shared.config_name, pid = process.pid, "plugin restarted");
    Ok(process)
}

/// SetConfig with `config` encoded against the plugin's schema.
pub fn apply_config(conn: &Conn, config: &serde_json::Value) -> Result<(), String> {
    let msgpack_config = conn
        .plugin_schema
        .encode(config)
        .map_err(|e| e.to_string())?;
    let mut base = conn.base.clone();
    let request = SetConfigRequest {
        msgpack_config,
        nomad_config: Some(convert::nomad_config()),
        plugin_api_version: drover_plugin_proto::DRIVER_API_VERSION.to_string(),
    };
    match block(async move { base.set_config(request).await }) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(s)) => Err(s.message().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// RecoverTask for every task the plugin had; a task it cannot recover is left for the agent
/// to find gone on its next call.
fn recover_tasks(shared: &Shared, conn: &Conn) {
    let handles: Vec<_> = lock(&shared.handles).values().cloned().collect();
    for handle in handles {
        let plugin_handle = match convert::plugin_handle(&handle.state) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(task = %handle.config.id, error = %e, "cannot recover task");
                continue;
            }
        };
        let mut driver = conn.driver.clone();
        let request = RecoverTaskRequest {
            task_id: handle.config.id.clone(),
            handle: Some(plugin_handle),
        };
        match block(async move { driver.recover_task(request).await }) {
            Ok(Ok(_)) => {
                tracing::info!(plugin = %shared.config_name, task = %handle.config.id, "task recovered after the plugin restarted")
            }
            Ok(Err(s)) => {
                tracing::warn!(plugin = %shared.config_name, task = %handle.config.id, error = %s.message(), "task could not be recovered after the plugin restarted")
            }
            Err(e) => tracing::warn!(task = %handle.config.id, error = %e, "task recovery failed"),
        }
    }
}
