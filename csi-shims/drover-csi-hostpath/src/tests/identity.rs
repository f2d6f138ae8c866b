use super::*;
use crate::PLUGIN_NAME;

#[tokio::test]
async fn plugin_info_names_the_plugin_and_its_version() {
    let h = Harness::start().await;
    let info = h.client.plugin_info().await.unwrap();
    assert_eq!(info.name, PLUGIN_NAME);
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
}

#[tokio::test]
async fn plugin_capabilities_are_controller_topology_and_online_expansion() {
    let h = Harness::start().await;
    let caps = h.client.plugin_capabilities().await.unwrap();
    assert!(caps.controller_service);
    assert!(caps.volume_accessibility_constraints);
    assert!(caps.online_expansion);
    assert!(!caps.offline_expansion);
    assert!(!caps.group_controller_service);
}

#[tokio::test]
async fn probe_reports_ready() {
    let h = Harness::start().await;
    assert!(h.client.probe().await.unwrap());
}
