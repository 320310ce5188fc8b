//! Fewer, larger socket writes for streams sent to clients.
//!
//! h2 writes each DATA frame with a `writev` of its own and flushes after
//! it: a frame can be no larger than the peer allows, and most clients
//! (tonic, grpc-go, grpc-java) allow 16 KiB. A 1 GB result is then about
//! 66,000 system calls and as many TCP segments, and those calls were
//! over half the coordinator's CPU while it streamed `lineitem`
//! (docs/history/benchmarks-2026-12.md). h2 cannot take a second frame before the first
//! is written (hyperium/h2#902), so the merging is done here, under it.
//!
//! Writes of a frame's size are copied into a buffer (smaller ones, with
//! nothing held, and larger ones go straight to the socket). A flush that
//! follows a full-size frame returns at once while the buffer is under
//! [`FLUSH_AT`]: h2 is in
//! the middle of a burst, and always flushes again once it has no frame
//! left to send, which this layer then carries out. Any other flush
//! (after headers, trailers, small messages, or a second flush with
//! nothing written in between) writes everything out, so small replies
//! leave as soon as before.
//!
//! Under TLS it sits between TLS and the socket, where the records are
//! already written (encrypting a merged buffer once more cost more than
//! the calls saved), and only once the handshake is done: a handshake
//! writes its flight and flushes once before it waits to read.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes held back at most before they are written, whatever h2 asks.
pub const FLUSH_AT: usize = 256 * 1024;

/// A write at least this large is a frame of a burst (h2 hands frames
/// larger than its 256-byte chaining threshold to the socket on their own;
/// this one is well above headers and trailers, well below a 16 KiB frame).
pub const BURST_WRITE: usize = 8 * 1024;

/// `inner` with its writes merged as described in the module comment.
pub struct CoalescedWrites<T> {
    inner: T,
    buffer: Vec<u8>,
    /// Bytes of `buffer` already written to `inner`.
    sent: usize,
    /// The last write was part of a burst and no flush has come since.
    in_burst: bool,
    /// Off: every call goes straight to `inner`.
    merging: bool,
}

impl<T> CoalescedWrites<T> {
    pub fn new(inner: T) -> Self {
        Self {
            merging: true,
            ..Self::passthrough(inner)
        }
    }

    /// Writes go straight through until [`Self::start_merging`].
    pub fn passthrough(inner: T) -> Self {
        Self {
            inner,
            buffer: Vec::new(),
            sent: 0,
            in_burst: false,
            merging: false,
        }
    }

    pub fn start_merging(&mut self) {
        self.merging = true;
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    fn pending(&self) -> usize {
        self.buffer.len() - self.sent
    }
}

impl<T: AsyncWrite + Unpin> CoalescedWrites<T> {
    /// Writes the buffer out; ready once all of it has been taken.
    fn poll_send_buffer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buffer.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.merging {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        let size: usize = bufs.iter().map(|b| b.len()).sum();
        if this.pending() > 0 && this.pending() + size > FLUSH_AT {
            ready!(this.poll_send_buffer(cx))?;
        }
        if this.pending() == 0 && !(BURST_WRITE..FLUSH_AT).contains(&size) {
            // Large enough on its own, or too small to start a burst: no
            // copy, and an idle connection holds no buffer.
            this.in_burst = false;
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        if this.buffer.capacity() == 0 {
            // Once, not by doubling: regrowing would copy a burst again.
            this.buffer.reserve_exact(FLUSH_AT);
        }
        for buf in bufs {
            this.buffer.extend_from_slice(buf);
        }
        this.in_burst = size >= BURST_WRITE;
        Poll::Ready(Ok(size))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if std::mem::take(&mut this.in_burst) && this.pending() < FLUSH_AT {
            // h2 flushes again when the burst ends; the wake-up makes
            // sure a flush comes even if that ever changes.
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_send_buffer(cx))?;
        // Given back between bursts: idle connections hold none.
        this.buffer = Vec::new();
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send_buffer(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
#[path = "coalesced_writes_tests.rs"]
mod tests;
