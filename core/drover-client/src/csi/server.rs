//! The server calls CSI work needs, as an object the allocation runners can share: a thin
//! adapter over the client's [`ServerConn`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use drover_structs::csi::{CsiVolumeClaim, CsiVolumeClaimRequest, CsiVolumeClaimResponse};

use crate::client::ServerConn;

pub type CallFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// Claiming and releasing volumes on the servers (Nomad's `CSIVolume.Claim` and
/// `CSIVolume.Unpublish`).
pub trait CsiServerCalls: Send + Sync + 'static {
    fn claim(&self, request: CsiVolumeClaimRequest) -> CallFuture<'_, CsiVolumeClaimResponse>;
    fn unpublish(
        &self,
        namespace: String,
        volume_id: String,
        claim: CsiVolumeClaim,
    ) -> CallFuture<'_, ()>;
}

/// [`CsiServerCalls`] through a [`ServerConn`].
pub struct ServerCsi<S>(pub Arc<S>);

impl<S: ServerConn> CsiServerCalls for ServerCsi<S> {
    fn claim(&self, request: CsiVolumeClaimRequest) -> CallFuture<'_, CsiVolumeClaimResponse> {
        Box::pin(self.0.claim_csi_volume(request))
    }

    fn unpublish(
        &self,
        namespace: String,
        volume_id: String,
        claim: CsiVolumeClaim,
    ) -> CallFuture<'_, ()> {
        Box::pin(async move {
            self.0
                .unpublish_csi_volume(&namespace, &volume_id, claim)
                .await
        })
    }
}
