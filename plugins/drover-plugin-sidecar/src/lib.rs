//! Sidecar mode: the same [`drover_plugin_sdk::Driver`] shipped as an executable that the agent
//! starts and talks to over Nomad's external plugin protocol (go-plugin over gRPC). Because the
//! protocol is Nomad's, the binary also runs under a Nomad agent as an external driver plugin.
//!
//! This crate, not the SDK, holds the async stack (tokio, tonic): only the sidecar binary
//! depends on it, so the cdylib of the same driver never builds with them, also when both are
//! built in one workspace (there is no SDK feature for cargo to unify).
//!
//! ```no_run
//! use drover_plugin_sidecar::{self as sidecar, spec::*, Schemas};
//!
//! /// A sidecar's whole `main` (yours passes `my_driver::MyDriver::new()`).
//! fn sidecar_main(driver: impl drover_plugin_sdk::Driver + 'static) -> std::process::ExitCode {
//!     sidecar::run(driver, Schemas {
//!         plugin_config: object([]),
//!         task_config: object([
//!             ("command", attr("command", "string", true)),
//!             ("args", attr("args", "list(string)", false)),
//!         ]),
//!     })
//! }
//! # fn main() {}
//! ```
//!
//! What [`serve`] does, as go-plugin's server does it:
//! 1. refuses to run without `NOMAD_PLUGIN_MAGIC_COOKIE` (a person ran the binary by hand);
//! 2. listens on a unix socket in a fresh private directory (`PLUGIN_UNIX_SOCKET_DIR` or the
//!    temp dir) and prints the handshake `1|2|unix|/path/plugin.sock|grpc|`; afterwards
//!    standard output goes to standard error, so a stray print cannot break the agent's pipe;
//! 3. serves gRPC health (service `plugin` is SERVING), go-plugin's controller (Shutdown ends
//!    the process), broker and stdio, Nomad's BasePlugin (PluginInfo, ConfigSchema, SetConfig)
//!    and Driver service, calling the driver on blocking threads;
//! 4. absorbs SIGINT (a Ctrl-C meant for the agent), stops cleanly on SIGTERM, and logs as
//!    hclog JSON on stderr.
//!
//! Config arrives msgpack-encoded against the [`Schemas`] the plugin publishes; the driver sees
//! it as JSON, exactly as a cdylib's driver does, with properties the config left out absent.
#![deny(missing_docs)]

mod base;
mod convert;
mod driver;
mod exec_stream;
mod services;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use drover_plugin_proto::base::base_plugin_server::BasePluginServer;
use drover_plugin_proto::drivers::driver_server::DriverServer;
use drover_plugin_proto::goplugin::grpc_broker_server::GrpcBrokerServer;
use drover_plugin_proto::goplugin::grpc_controller_server::GrpcControllerServer;
use drover_plugin_proto::goplugin::grpc_stdio_server::GrpcStdioServer;
use drover_plugin_proto::handshake::{
    ENV_UNIX_SOCKET_DIR, Handshake, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE, RUN_BY_HAND_MESSAGE,
};
/// Compiles a spec and encodes config against it, as the agent will: for testing schemas.
pub use drover_plugin_proto::hcl::{ConfigError, ConfigSchema, spec};
pub use drover_plugin_proto::hclspec::Spec;
use drover_plugin_proto::health::health_server::HealthServer;

use drover_plugin_sdk::Driver;

/// The hclspecs a sidecar publishes: of its `plugin "NAME" { config {} }` block and of a task's
/// `config {}` block. Build them with [`spec`].
#[derive(Debug, Clone)]
pub struct Schemas {
    /// The spec of the `plugin "NAME" { config { ... } }` block.
    pub plugin_config: Spec,
    /// The spec of a task's `config { ... }` block.
    pub task_config: Spec,
}

/// Why [`serve`] stopped before or while serving.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// A person ran the binary (no `NOMAD_PLUGIN_MAGIC_COOKIE`): go-plugin's message.
    #[error("{RUN_BY_HAND_MESSAGE}")]
    RunByHand,
    /// One of the [`Schemas`] does not compile.
    #[error("the plugin's {which} schema is invalid: {source}")]
    Schema {
        /// `plugin` or `task`.
        which: &'static str,
        /// What is wrong with it.
        source: ConfigError,
    },
    /// Creating the socket directory, listening, or printing the handshake failed.
    #[error("{what}: {source}")]
    Io {
        /// What the plugin was doing.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The gRPC server failed.
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SidecarError {
    let what = what.into();
    move |source| SidecarError::Io { what, source }
}

/// Serves `driver` and returns the process's exit code: 0 after the agent's Shutdown, 1 (with
/// the reason on stderr) otherwise. Meant to be `main`'s whole body.
pub fn run(driver: impl Driver + 'static, schemas: Schemas) -> ExitCode {
    match serve(driver, schemas) {
        Ok(()) => ExitCode::SUCCESS,
        Err(SidecarError::RunByHand) => {
            eprint!("{RUN_BY_HAND_MESSAGE}");
            eprintln!(
                "(This is a Drover/Nomad task driver plugin: put it in the agent's plugin_dir.)"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            drover_plugin_sdk::log::error(&e);
            ExitCode::FAILURE
        }
    }
}

/// Serves `driver` until the agent asks the plugin to shut down (or the process is killed).
pub fn serve(driver: impl Driver + 'static, schemas: Schemas) -> Result<(), SidecarError> {
    if std::env::var(MAGIC_COOKIE_KEY).as_deref() != Ok(MAGIC_COOKIE_VALUE) {
        return Err(SidecarError::RunByHand);
    }
    let compile = |which, spec: &Spec| {
        ConfigSchema::compile(Some(spec)).map_err(|source| SidecarError::Schema { which, source })
    };
    let plugin_schema = compile("plugin config", &schemas.plugin_config)?;
    compile("task config", &schemas.task_config)?;
    drover_plugin_sdk::log::use_stderr_json();
    drover_plugin_sdk::log::set_source(leak_name(&driver));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io("starting the tokio runtime"))?;
    let dir = SocketDir::create()?;
    let result = runtime.block_on(serve_on(Arc::new(driver), schemas, plugin_schema, &dir));
    // Calls still blocked in the driver (a WaitTask) must not hold the exit up.
    runtime.shutdown_timeout(Duration::from_millis(500));
    drop(dir);
    result
}

/// The driver's name, for log lines; leaked once per process.
fn leak_name(driver: &dyn Driver) -> &'static str {
    Box::leak(driver.plugin_info().name.into_boxed_str())
}

/// How long in-flight calls get to finish once the plugin is asked to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Watches the process's signals: SIGINT is absorbed, as go-plugin servers do, so that a Ctrl-C
/// aimed at the agent's terminal does not take its plugins down (a handler, not SIG_IGN: an
/// ignored signal would stay ignored in the tasks the driver starts); SIGTERM stops the plugin
/// cleanly, its socket removed.
fn watch_signals(stop: watch::Sender<bool>) -> Result<(), SidecarError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupts = signal(SignalKind::interrupt()).map_err(io("catching SIGINT"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(io("catching SIGTERM"))?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = interrupts.recv() => drover_plugin_sdk::log::debug("ignoring SIGINT"),
                Some(()) = terminate.recv() => {
                    drover_plugin_sdk::log::info("SIGTERM: shutting down");
                    let _ = stop.send(true);
                }
                else => return,
            }
        }
    });
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn serve_on(
    driver: Arc<dyn Driver>,
    schemas: Schemas,
    plugin_schema: ConfigSchema,
    dir: &SocketDir,
) -> Result<(), SidecarError> {
    let (stop, stop_rx) = watch::channel(false);
    watch_signals(stop.clone())?;
    let listener = tokio::net::UnixListener::bind(&dir.socket)
        .map_err(io(format!("listening on {}", dir.socket.display())))?;
    let handshake = Handshake::unix(&dir.socket.to_string_lossy());
    announce(&handshake)?;

    let base = base::Base::new(Arc::clone(&driver), schemas.plugin_config, plugin_schema);
    let driver_service = driver::DriverService::new(driver, schemas.task_config);
    let server = tonic::transport::Server::builder()
        .add_service(HealthServer::new(services::Health))
        .add_service(GrpcControllerServer::new(services::Controller { stop }))
        .add_service(GrpcBrokerServer::new(services::Broker))
        .add_service(GrpcStdioServer::new(services::Stdio))
        .add_service(BasePluginServer::new(base))
        .add_service(DriverServer::new(driver_service))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::UnixListenerStream::new(listener),
            stopped(stop_rx.clone()),
        );
    // A graceful stop waits for every open stream, and the agent keeps some open for good
    // (stdio, broker, task events): give calls a moment, then go.
    tokio::select! {
        served = server => served?,
        () = async {
            stopped(stop_rx).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {}
    }
    Ok(())
}

/// Prints the handshake line, then points standard output at standard error: the agent stops
/// reading the pipe after the handshake (and is gone after it restarts).
fn announce(handshake: &Handshake) -> Result<(), SidecarError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{handshake}")
        .and_then(|()| out.flush())
        .map_err(io("printing the handshake"))?;
    // SAFETY: dup2 on the process's own standard descriptors; stdout is flushed and locked.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        return Err(io("redirecting stdout")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A private directory holding the plugin's socket, removed when the plugin exits.
struct SocketDir {
    dir: PathBuf,
    socket: PathBuf,
}

impl SocketDir {
    fn create() -> Result<SocketDir, SidecarError> {
        use std::os::unix::fs::DirBuilderExt;
        let parent = std::env::var_os(ENV_UNIX_SOCKET_DIR)
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = parent.join(format!("drover-plugin-{}-{nanos:x}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(io(format!("creating {}", dir.display())))?;
        let socket = dir.join("plugin.sock");
        Ok(SocketDir { dir, socket })
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(Path::new(&self.dir));
    }
}
