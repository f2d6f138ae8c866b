//! Streamed response bodies fed from a channel: a producer task sends pieces; when the client
//! goes away the body is dropped, the channel closes, and the producer sees that and stops.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use tokio::sync::mpsc;

/// Pieces of a streamed body; an `Err` aborts the response mid-way so the client sees a broken
/// transfer, not a short but seemingly complete one.
pub(crate) type Piece = Result<Bytes, io::Error>;

/// How many pieces may wait between producer and connection.
const STREAM_BUFFER: usize = 8;

struct ChannelStream(mpsc::Receiver<Piece>);

impl futures_core::Stream for ChannelStream {
    type Item = Piece;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        self.0.poll_recv(cx)
    }
}

/// A body and the sender that feeds it.
pub(crate) fn channel_body() -> (mpsc::Sender<Piece>, Body) {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    (tx, Body::from_stream(ChannelStream(rx)))
}
