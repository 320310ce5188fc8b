use std::io::IoSlice;

use tokio::io::AsyncWriteExt;

use super::*;

/// A socket stand-in that records each write it is given, takes at most
/// `per_write` bytes of one, and says "not now" every `stall_every`th time.
#[derive(Default)]
struct Socket {
    writes: Vec<usize>,
    bytes: Vec<u8>,
    flushes: usize,
    per_write: Option<usize>,
    stall_every: Option<usize>,
    calls: usize,
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.calls += 1;
        if this
            .stall_every
            .is_some_and(|k| this.calls.is_multiple_of(k))
        {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = this.per_write.map_or(buf.len(), |max| buf.len().min(max));
        this.writes.push(n);
        this.bytes.extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().flushes += 1;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What h2 hands over for one DATA frame: a 9-byte header, then the payload.
async fn frame(out: &mut CoalescedWrites<Socket>, payload: &[u8]) {
    let header = [payload.len() as u8; 9];
    let mut slices = [IoSlice::new(&header), IoSlice::new(payload)];
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        let n = out.write_vectored(slices).await.unwrap();
        IoSlice::advance_slices(&mut slices, n);
    }
    out.flush().await.unwrap();
}

/// Frames one after the other, each flushed, as h2 sends a message.
async fn burst(out: &mut CoalescedWrites<Socket>, payloads: &[Vec<u8>]) {
    for payload in payloads {
        frame(out, payload).await;
    }
}

fn expected(frames: &[Vec<u8>]) -> Vec<u8> {
    frames
        .iter()
        .flat_map(|p| [p.len() as u8; 9].into_iter().chain(p.iter().copied()))
        .collect()
}

fn frames(count: usize, size: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| (0..size).map(|j| (i * 31 + j) as u8).collect())
        .collect()
}

#[tokio::test]
async fn a_burst_of_frames_goes_out_in_few_large_writes() {
    let payloads = frames(64, 16 * 1024);
    let mut out = CoalescedWrites::new(Socket::default());
    burst(&mut out, &payloads).await;
    // h2's flush once no frame is left.
    out.flush().await.unwrap();
    let socket = out.get_ref();
    assert_eq!(socket.bytes, expected(&payloads));
    // 1 MiB in writes of at most FLUSH_AT, not 64 of 16 KiB.
    assert!(socket.writes.len() <= 5, "{:?}", socket.writes);
    assert!(socket.writes.iter().all(|&n| n <= FLUSH_AT));
}

#[tokio::test]
async fn a_burst_is_all_written_when_h2_flushes_at_its_end() {
    let payloads = frames(3, 16 * 1024);
    let mut out = CoalescedWrites::new(Socket::default());
    burst(&mut out, &payloads).await;
    assert!(out.get_ref().bytes.is_empty(), "held back within the burst");
    out.flush().await.unwrap();
    assert_eq!(out.get_ref().bytes, expected(&payloads));
    assert_eq!(out.get_ref().writes.len(), 1);
}

#[tokio::test]
async fn small_writes_leave_at_their_flush() {
    let mut out = CoalescedWrites::new(Socket::default());
    out.write_all(b"headers").await.unwrap();
    out.flush().await.unwrap();
    assert_eq!(out.get_ref().bytes, b"headers");
    // Trailers after a burst frame end the burst too.
    let payload = vec![7u8; 16 * 1024];
    frame(&mut out, &payload).await;
    out.write_all(b"trailers").await.unwrap();
    out.flush().await.unwrap();
    let mut wanted = b"headers".to_vec();
    wanted.extend(expected(&[payload]));
    wanted.extend(b"trailers");
    assert_eq!(out.get_ref().bytes, wanted);
}

#[tokio::test]
async fn partial_and_stalled_socket_writes_lose_and_reorder_nothing() {
    let payloads = frames(40, 16 * 1024 + 5);
    let socket = Socket {
        per_write: Some(10_000),
        stall_every: Some(3),
        ..Socket::default()
    };
    let mut out = CoalescedWrites::new(socket);
    burst(&mut out, &payloads).await;
    out.write_all(&[1; FLUSH_AT + 1]).await.unwrap();
    out.shutdown().await.unwrap();
    let mut wanted = expected(&payloads);
    wanted.extend([1; FLUSH_AT + 1]);
    assert_eq!(out.get_ref().bytes, wanted);
}

#[tokio::test]
async fn an_idle_connection_gives_its_buffer_back() {
    let mut out = CoalescedWrites::new(Socket::default());
    burst(&mut out, &frames(8, 16 * 1024)).await;
    out.flush().await.unwrap();
    assert_eq!(out.buffer.capacity(), 0);
    assert!(out.get_ref().flushes >= 1);
}

#[tokio::test]
async fn before_merging_starts_every_call_goes_straight_through() {
    let mut out = CoalescedWrites::passthrough(Socket::default());
    frame(&mut out, &[3; 16 * 1024]).await;
    let sent = 9 + 16 * 1024;
    assert_eq!(out.get_ref().bytes.len(), sent, "written at once");
    out.start_merging();
    frame(&mut out, &[4; 16 * 1024]).await;
    assert_eq!(out.get_ref().bytes.len(), sent, "held back within a burst");
    out.flush().await.unwrap();
    assert_eq!(out.get_ref().bytes.len(), 2 * sent);
}
