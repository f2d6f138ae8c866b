//! The service mesh's data plane (Nomad's Connect, without Consul or Envoy): Drover's
//! sidecar proxy and the file that drives it. Each connect-enabled service gets a proxy in its
//! allocation's network namespace with:
//! - an inbound listener (mutual TLS with certificates of the cluster's mesh CA) that checks
//!   the caller's identity against the intentions and forwards to the service's local port;
//! - an upstream listener on the allocation's loopback per `upstreams` block, dialing the
//!   destination's proxies over mutual TLS and checking they are that destination;
//! - plain-text listeners for `expose` paths, which forward only those HTTP paths.
//!
//! The client writes a [`config::ProxyConfig`] (identity, certificates, where each upstream's
//! proxies are, intentions) into the proxy task's secrets directory and rewrites it when any
//! of that changes; the proxy reads it again within a second. So the proxy needs no API, no
//! token and no Drover crate but drover-tls.
//!
//! Must not depend on: any Drover crate but drover-tls (the proxy runs as its own process).

pub mod config;
pub mod identity;
pub mod intentions;
pub mod proxy;

pub use config::ProxyConfig;
pub use identity::Identity;
