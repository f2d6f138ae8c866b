//! A single leading server on a temporary data dir, for this crate's tests.

use std::time::Duration;

use crate::{Server, ServerConfig};

/// Shut down when dropped; derefs to the server.
pub(crate) struct LeadingServer {
    pub server: Server,
    _dir: tempfile::TempDir,
}

impl Drop for LeadingServer {
    fn drop(&mut self) {
        self.server.shutdown();
    }
}

impl std::ops::Deref for LeadingServer {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.server
    }
}

/// One scheduler worker and a fast Raft tick; returns once the server leads.
pub(crate) async fn start_leading() -> LeadingServer {
    start_leading_with(|_| {}).await
}

/// As `start_leading`, with the configuration changed by `f` first.
pub(crate) async fn start_leading_with(f: impl FnOnce(&mut ServerConfig)) -> LeadingServer {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::new(dir.path().join("server"));
    config.num_schedulers = 1;
    config.raft_tick = Duration::from_millis(20);
    f(&mut config);
    let server = Server::start(config).await.unwrap();
    server
        .wait_for_leadership(Duration::from_secs(20))
        .await
        .unwrap();
    LeadingServer { server, _dir: dir }
}
