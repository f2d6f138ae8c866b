//! Test support shared by the runner tests: a temporary data dir, and a runner environment over
//! it with one driver and no CSI server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use drover_abi::Driver;
use drover_structs::{AllocClientUpdate, Node, csi};
use tokio::sync::mpsc;

use crate::alloc_runner::RunnerEnv;
use crate::csi::server::CallFuture;
use crate::csi::{CsiManager, CsiServerCalls};
use crate::state_db::ClientStateDb;

/// A directory under the system's temp dir, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("drover-{tag}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create the test's data dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Servers that answer no CSI call.
pub(crate) struct NoCsi;

impl CsiServerCalls for NoCsi {
    fn claim(&self, _: csi::CsiVolumeClaimRequest) -> CallFuture<'_, csi::CsiVolumeClaimResponse> {
        Box::pin(async { Err("no CSI in this test".to_string()) })
    }
    fn unpublish(&self, _: String, _: String, _: csi::CsiVolumeClaim) -> CallFuture<'_, ()> {
        Box::pin(async { Err("no CSI in this test".to_string()) })
    }
}

/// A runner environment on node "node-1" over `dir`, with `driver` registered as
/// `driver_name`; the receiver gets what the runners report.
pub(crate) fn runner_env(
    dir: &TempDir,
    driver_name: &str,
    driver: Arc<dyn Driver>,
) -> (RunnerEnv, mpsc::UnboundedReceiver<AllocClientUpdate>) {
    let db = ClientStateDb::open(&dir.0.join("state.db")).expect("open the client state");
    let mut drivers: BTreeMap<String, Arc<dyn Driver>> = BTreeMap::new();
    drivers.insert(driver_name.to_string(), driver);
    let (updates_tx, updates) = mpsc::unbounded_channel();
    let env = RunnerEnv {
        node: Arc::new(Node {
            id: "node-1".into(),
            ..Default::default()
        }),
        region: "global".into(),
        data_dir: dir.0.clone(),
        drivers: Arc::new(drivers),
        db,
        updates: updates_tx,
        csi: CsiManager::new(dir.0.join("csi")),
        csi_server: Arc::new(NoCsi),
        driver_events: Default::default(),
        agent_env: Default::default(),
        artifact: Default::default(),
        bridge: None,
        mesh_server: Arc::new(crate::mesh::NoMesh),
        catalog: Arc::new(crate::template::services::NoCatalog),
    };
    (env, updates)
}
