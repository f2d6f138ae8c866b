//! Regions: each region is its own Raft cluster with its own state, and the regions' servers
//! know of each other (Nomad's WAN pool) so that a request for another region is sent to one
//! of its servers. Drover has no gossip: servers swap what they know (`METHOD_FEDERATION`)
//! when an operator joins two regions (`server join` with an address in the other region) and
//! then every few seconds with their own region's peers and one server of each other region,
//! so what one server learns reaches every server of every region.
//!
//! Nothing here is in the Raft log: like Nomad's serf, the view is per server and rebuilt by
//! the exchanges. Each server keeps its view of the other regions in `federation.json` in its
//! data dir (serf's `remote.snapshot`), so a restarted server finds the other regions again
//! even if none of them remembers it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::rpc::{EndpointResult, METHOD_ENDPOINT, Reply, Request, decode, encode};
use crate::server::Server;

/// `Call` method swapping [`FederationView`]s: the caller sends its own, the callee merges it
/// and answers with its own.
pub const METHOD_FEDERATION: &str = "Federation";

/// Nomad's text when a request names a region no server knows.
pub const NO_REGION_PATH: &str = "No path to region";

const EXCHANGE_EVERY: Duration = Duration::from_secs(2);
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a write sent to another region may take there.
const REGION_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What one server knows of the regions: its own region and, for every region it knows, the
/// RPC addresses of that region's servers (its own region's from its Raft configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FederationView {
    pub region: String,
    pub regions: BTreeMap<String, Vec<String>>,
}

/// The other regions' servers as this server knows them.
#[derive(Debug, Default)]
pub struct Federation {
    remote: Mutex<BTreeMap<String, Vec<String>>>,
    /// Where the view is kept (`None`: nowhere, in tests).
    file: Option<std::path::PathBuf>,
}

impl Federation {
    /// Takes in what a server of region `view.region` said: its own region's list replaces
    /// ours (it knows its region), what it heard of others is added to ours. `own` is this
    /// server's region, never stored as remote.
    pub fn merge(&self, own: &str, view: &FederationView) {
        let mut remote = self.remote.lock().unwrap_or_else(|p| p.into_inner());
        let before = known(&remote);
        for (region, servers) in &view.regions {
            if region == own || servers.is_empty() {
                continue;
            }
            if *region == view.region {
                remote.insert(region.clone(), servers.clone());
            } else {
                let known = remote.entry(region.clone()).or_default();
                for s in servers {
                    if !known.contains(s) {
                        known.push(s.clone());
                    }
                }
            }
        }
        if known(&remote) != before
            && let Some(file) = &self.file
            && let Err(e) = save(file, &remote)
        {
            tracing::warn!(path = %file.display(), error = %e, "keeping the regions' servers failed");
        }
    }

    /// The view kept at `path`, or an empty one (a missing or unreadable file: the exchanges
    /// rebuild it).
    pub fn load(path: &std::path::Path) -> Federation {
        let remote = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Federation {
            remote: Mutex::new(remote),
            file: Some(path.to_path_buf()),
        }
    }

    /// The servers of `region`, in the order to try them.
    pub fn servers_of(&self, region: &str) -> Vec<String> {
        let remote = self.remote.lock().unwrap_or_else(|p| p.into_inner());
        remote.get(region).cloned().unwrap_or_default()
    }

    /// Moves `address` to the back of its region's list after it failed to answer, so the
    /// next call tries another server first.
    fn demote(&self, region: &str, address: &str) {
        let mut remote = self.remote.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(list) = remote.get_mut(region)
            && let Some(i) = list.iter().position(|a| a == address)
        {
            let a = list.remove(i);
            list.push(a);
        }
    }

    fn remote_regions(&self) -> BTreeMap<String, Vec<String>> {
        self.remote
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What is known, whatever the order a region's servers are tried in (it moves with
/// failures).
fn known(v: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, BTreeSet<String>> {
    v.iter()
        .map(|(r, s)| (r.clone(), s.iter().cloned().collect()))
        .collect()
}

/// Writes the view to `path` (through a temporary file, so a crash leaves the old one).
fn save(path: &std::path::Path, view: &BTreeMap<String, Vec<String>>) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(view)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

impl Server {
    /// This server's region.
    pub fn region(&self) -> &str {
        &self.inner.config.region
    }

    /// Every region this server knows, its own included, sorted (`/v1/regions`).
    pub fn regions(&self) -> Vec<String> {
        let mut all: BTreeSet<String> =
            self.inner.federation.remote_regions().into_keys().collect();
        all.insert(self.inner.config.region.clone());
        all.into_iter().collect()
    }

    /// The RPC addresses of `region`'s servers (empty for an unknown region; this server's
    /// region answers with its Raft configuration).
    pub fn region_servers(&self, region: &str) -> Vec<String> {
        if region == self.inner.config.region {
            return self.own_region_servers();
        }
        self.inner.federation.servers_of(region)
    }

    fn own_region_servers(&self) -> Vec<String> {
        let (members, _) = self.raft_configuration();
        let mut out: Vec<String> = members
            .into_iter()
            .map(|m| m.address)
            .filter(|a| !a.is_empty())
            .collect();
        if !out.contains(&self.inner.own.address) {
            out.push(self.inner.own.address.clone());
        }
        out
    }

    /// What this server tells others.
    pub fn federation_view(&self) -> FederationView {
        let mut regions = self.inner.federation.remote_regions();
        regions.insert(self.inner.config.region.clone(), self.own_region_servers());
        FederationView {
            region: self.inner.config.region.clone(),
            regions,
        }
    }

    /// Answers a `METHOD_FEDERATION` call: merges the caller's view, returns this one's.
    pub(crate) fn serve_federation(&self, body: &[u8]) -> Result<Vec<u8>, ServerError> {
        let theirs: FederationView = decode("federation view", body)?;
        self.inner
            .federation
            .merge(&self.inner.config.region, &theirs);
        Ok(encode(&self.federation_view()))
    }

    /// Swaps views with the server at `address`; returns its region.
    pub(crate) async fn exchange_federation(&self, address: &str) -> Result<String, ServerError> {
        let answer = self
            .inner
            .net
            .call(
                address,
                METHOD_FEDERATION,
                encode(&self.federation_view()),
                EXCHANGE_TIMEOUT,
            )
            .await
            .map_err(|e| ServerError::BadRequest(format!("joining {address}: {e}")))?;
        let theirs: FederationView = decode("federation view", &answer)?;
        self.inner
            .federation
            .merge(&self.inner.config.region, &theirs);
        Ok(theirs.region)
    }

    /// Sends `request` to a server of `region`, which routes it to its leader; tries the
    /// region's servers in turn while the request certainly was not delivered.
    pub async fn call_region(&self, region: &str, request: &Request) -> Result<Reply, ServerError> {
        let servers = self.inner.federation.servers_of(region);
        if servers.is_empty() {
            return Err(ServerError::BadRequest(NO_REGION_PATH.to_string()));
        }
        let body = encode(request);
        let mut last = String::new();
        for address in &servers {
            match self
                .inner
                .net
                .call(address, METHOD_ENDPOINT, body.clone(), REGION_CALL_TIMEOUT)
                .await
            {
                Ok(answer) => {
                    return decode::<EndpointResult>("endpoint answer", &answer)?
                        .map_err(ServerError::from);
                }
                Err(e) if e.is_not_sent() => {
                    self.inner.federation.demote(region, address);
                    last = e.to_string();
                }
                Err(e) => {
                    return Err(ServerError::Internal(format!(
                        "calling region {region:?} at {address}: {e}; the request may or may not have been applied"
                    )));
                }
            }
        }
        Err(ServerError::Internal(format!(
            "no server of region {region:?} answered: {last}"
        )))
    }
}

/// Every few seconds, swaps views with this region's other servers and one server of each
/// other region. Runs on every server until shutdown.
pub(crate) async fn keep_federation(server: Server) {
    let mut shutdown = server.inner.shutdown_rx.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EXCHANGE_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        let own = server.inner.own.address.clone();
        let mut targets: Vec<(Option<String>, String)> = server
            .own_region_servers()
            .into_iter()
            .filter(|a| *a != own)
            .map(|a| (None, a))
            .collect();
        for (region, servers) in server.inner.federation.remote_regions() {
            if let Some(first) = servers.first() {
                targets.push((Some(region), first.clone()));
            }
        }
        for (region, address) in targets {
            if let Err(e) = server.exchange_federation(&address).await {
                tracing::debug!(%address, error = %e, "federation exchange failed");
                if let Some(region) = region {
                    server.inner.federation.demote(&region, &address);
                }
            }
        }
    }
}

/// Where a server keeps its view of the other regions.
pub(crate) fn federation_file(data_dir: &std::path::Path) -> std::path::PathBuf {
    data_dir.join("federation.json")
}

/// The join of two regions' servers, for `Server::join_server`: `Some(region)` when the server
/// at `address` is in another region (the views were swapped and nothing else is to do).
/// `None` when it is in this region, or does not swap views yet (a server still discovering
/// its cluster answers only the discovery call, which the join then uses).
pub(crate) async fn join_other_region(server: &Server, address: &str) -> Option<String> {
    match server.exchange_federation(address).await {
        Ok(region) => (region != server.inner.config.region).then_some(region),
        Err(e) => {
            tracing::debug!(%address, error = %e, "no federation answer: joining as a peer");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(region: &str, regions: &[(&str, &[&str])]) -> FederationView {
        FederationView {
            region: region.into(),
            regions: regions
                .iter()
                .map(|(r, s)| (r.to_string(), s.iter().map(|a| a.to_string()).collect()))
                .collect(),
        }
    }

    #[test]
    fn a_region_s_own_list_replaces_ours_and_hearsay_adds_to_it() {
        let f = Federation::default();
        f.merge("a", &view("b", &[("b", &["b1", "b2"]), ("a", &["a1"])]));
        assert_eq!(f.servers_of("b"), ["b1", "b2"]);
        assert!(f.servers_of("a").is_empty(), "our own region is not remote");
        // A server of c heard of b's b3: added, b's own word stays.
        f.merge("a", &view("c", &[("c", &["c1"]), ("b", &["b3"])]));
        assert_eq!(f.servers_of("b"), ["b1", "b2", "b3"]);
        assert_eq!(f.servers_of("c"), ["c1"]);
        // b itself says it is b2 alone now.
        f.merge("a", &view("b", &[("b", &["b2"])]));
        assert_eq!(f.servers_of("b"), ["b2"]);
    }

    #[test]
    fn the_view_is_kept_on_disk_and_read_back() {
        let dir = std::env::temp_dir().join(format!("federation-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = federation_file(&dir);
        let f = Federation::load(&path);
        f.merge("a", &view("b", &[("b", &["b1"])]));
        assert_eq!(Federation::load(&path).servers_of("b"), ["b1"]);
        std::fs::write(&path, b"not json").unwrap();
        assert!(Federation::load(&path).remote_regions().is_empty());
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_server_that_failed_is_tried_last() {
        let f = Federation::default();
        f.merge("a", &view("b", &[("b", &["b1", "b2"])]));
        f.demote("b", "b1");
        assert_eq!(f.servers_of("b"), ["b2", "b1"]);
    }
}
