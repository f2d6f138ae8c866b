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

/// A `Write` that feeds a channel body in pieces of `PIECE_BYTES`, for producers that write
/// (an encoder on a thread of its own): it blocks while the connection is behind, and fails
/// with `BrokenPipe` once the client went away. `flush` sends what is buffered.
pub(crate) struct PieceWriter {
    tx: mpsc::Sender<Piece>,
    buf: Vec<u8>,
}

/// The size of the pieces a [`PieceWriter`] sends.
const PIECE_BYTES: usize = 1024 * 1024;

impl PieceWriter {
    /// Must be used off the async runtime: writing blocks the calling thread.
    pub(crate) fn new(tx: mpsc::Sender<Piece>) -> PieceWriter {
        PieceWriter {
            tx,
            buf: Vec::with_capacity(PIECE_BYTES),
        }
    }

    fn send_buffered(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(PIECE_BYTES),
        ));
        self.tx
            .blocking_send(Ok(piece))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl io::Write for PieceWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= PIECE_BYTES {
            self.send_buffered()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_buffered()
    }
}
