//! The output channels of one task: one queue per consumer, fed by the task
//! and drained by the consumers' readers.
//!
//! The rules, and why:
//! - A channel holds at most `MAX_BATCHES` batches or `MAX_BYTES` bytes
//!   before the producer waits: a slow consumer slows the producer instead of
//!   growing memory.
//! - The producer never waits while some reader is *waiting* (it polled an
//!   empty channel): a reader that is busy elsewhere, or has not connected
//!   yet, must not starve the readers that are ready. Otherwise consumers
//!   that read their inputs in different orders (a sort-merge join reads two
//!   shuffles in step) deadlock on each other's producers. Past the bounds
//!   such a channel's memory is accounted in the worker's memory pool, so an
//!   overfill beyond `--memory-limit` fails the query instead of the worker.
//! - A reader that is dropped releases its channel at once: its queue is
//!   freed and the producer stops writing to it.
//! - A channel ends cleanly only after the producer called `finish`; a
//!   producer dropped before that (aborted, panicked) ends every channel with
//!   an error, so a cut stream is never taken for a short success.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::memory_pool::MemoryReservation;
use futures::Stream;
use tokio::sync::Notify;
use tonic::Status;

use squadron_net::stream::flight_batches::real_size;

/// Batches a channel holds before the producer waits (unless a reader starves).
pub const MAX_BATCHES: usize = 8;
/// Bytes a channel holds before the producer waits (unless a reader starves).
pub const MAX_BYTES: usize = 8 * 1024 * 1024;

#[derive(Default)]
struct Channel {
    queue: VecDeque<(RecordBatch, usize)>,
    bytes: usize,
    reader_gone: bool,
    /// Set while the reader waits on an empty queue.
    waker: Option<Waker>,
}

enum End {
    Running,
    Finished,
    Failed(Status),
    Aborted,
}

struct State {
    channels: Vec<Channel>,
    end: End,
    reservation: MemoryReservation,
}

struct Shared {
    state: Mutex<State>,
    producer: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every
        // update is a single step), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Creates `channels` channels: the producer's writer and one reader each.
/// Buffered bytes are accounted in `reservation`.
pub fn output_channels(
    channels: usize,
    reservation: MemoryReservation,
) -> (OutputWriter, Vec<OutputReader>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            channels: (0..channels).map(|_| Channel::default()).collect(),
            end: End::Running,
            reservation,
        }),
        producer: Notify::new(),
    });
    let readers = (0..channels)
        .map(|channel| OutputReader {
            shared: Arc::clone(&shared),
            channel,
            done: false,
        })
        .collect();
    let writer = OutputWriter {
        shared,
        ended: false,
    };
    (writer, readers)
}

/// The producing task's end of its output channels.
pub struct OutputWriter {
    shared: Arc<Shared>,
    ended: bool,
}

impl OutputWriter {
    /// Queues a batch on a channel, waiting while the channel is full and no
    /// reader starves. `Ok(false)`: the channel's reader is gone.
    pub async fn send(&self, channel: usize, batch: RecordBatch) -> Result<bool> {
        let size = real_size(&batch);
        loop {
            // Created before the check so a wake-up in between is not lost.
            let notified = self.shared.producer.notified();
            {
                let mut state = self.shared.lock();
                let starving = state
                    .channels
                    .iter()
                    .any(|c| !c.reader_gone && c.waker.is_some());
                let ch = &state.channels[channel];
                if ch.reader_gone {
                    return Ok(false);
                }
                let room = ch.queue.len() < MAX_BATCHES && ch.bytes < MAX_BYTES;
                if room || starving {
                    state.reservation.try_grow(size)?;
                    let ch = &mut state.channels[channel];
                    ch.queue.push_back((batch, size));
                    ch.bytes += size;
                    if let Some(waker) = ch.waker.take() {
                        waker.wake();
                    }
                    return Ok(true);
                }
            }
            notified.await;
        }
    }

    pub fn channel_count(&self) -> usize {
        self.shared.lock().channels.len()
    }

    /// Channels whose reader has not gone away.
    pub fn open_channels(&self) -> usize {
        let state = self.shared.lock();
        state.channels.iter().filter(|c| !c.reader_gone).count()
    }

    /// Ends every channel cleanly once its queue is read.
    pub fn finish(mut self) {
        self.end(End::Finished);
    }

    /// Ends every channel with `status` once its queue is read.
    pub fn fail(mut self, status: Status) {
        self.end(End::Failed(status));
    }

    fn end(&mut self, end: End) {
        self.ended = true;
        let mut state = self.shared.lock();
        state.end = end;
        for ch in &mut state.channels {
            if let Some(waker) = ch.waker.take() {
                waker.wake();
            }
        }
    }
}

impl Drop for OutputWriter {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // A panicking task is a fault of this worker, not a lost one: say
        // so, instead of looking like a stream cut by the network.
        if std::thread::panicking() {
            self.end(End::Failed(Status::internal("the producing task panicked")));
        } else {
            self.end(End::Aborted);
        }
    }
}

/// One consumer's end of a channel: the batches, then a clean end, or an
/// error when the producer failed or stopped before finishing.
pub struct OutputReader {
    shared: Arc<Shared>,
    channel: usize,
    done: bool,
}

impl Stream for OutputReader {
    type Item = Result<RecordBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let channel = self.channel;
        let mut state = self.shared.lock();
        if let Some((batch, size)) = state.channels[channel].queue.pop_front() {
            state.channels[channel].bytes -= size;
            state.reservation.shrink(size);
            drop(state);
            self.shared.producer.notify_one();
            return Poll::Ready(Some(Ok(batch)));
        }
        let item = match &state.end {
            End::Running => {
                state.channels[channel].waker = Some(cx.waker().clone());
                drop(state);
                // A waiting reader may unblock the producer (see the rules).
                self.shared.producer.notify_one();
                return Poll::Pending;
            }
            End::Finished => None,
            End::Failed(status) => Some(Err(status.clone())),
            End::Aborted => Some(Err(Status::aborted(
                "the producing task stopped before finishing its output",
            ))),
        };
        drop(state);
        self.done = true;
        Poll::Ready(item)
    }
}

impl Drop for OutputReader {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        let ch = &mut state.channels[self.channel];
        ch.reader_gone = true;
        ch.waker = None;
        let freed = std::mem::take(&mut ch.bytes);
        ch.queue.clear();
        state.reservation.shrink(freed);
        drop(state);
        self.shared.producer.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::{
        GreedyMemoryPool, MemoryConsumer, MemoryPool, UnboundedMemoryPool,
    };
    use futures::StreamExt;
    use std::time::Duration;

    fn batch(rows: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..rows))],
        )
        .unwrap()
    }

    fn channels(n: usize) -> (OutputWriter, Vec<OutputReader>) {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        output_channels(n, MemoryConsumer::new("test").register(&pool))
    }

    async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(5), f)
            .await
            .expect("must not block")
    }

    #[tokio::test]
    async fn a_full_channel_makes_the_producer_wait() {
        let (writer, _readers) = channels(1);
        for _ in 0..MAX_BATCHES {
            assert!(within(writer.send(0, batch(1))).await.unwrap());
        }
        let blocked = tokio::time::timeout(Duration::from_millis(50), writer.send(0, batch(1)));
        assert!(blocked.await.is_err(), "the buffer is bounded");
    }

    #[tokio::test]
    async fn a_waiting_reader_is_fed_past_an_absent_readers_full_channel() {
        let (writer, mut readers) = channels(2);
        let mut ready = readers.pop().unwrap();
        let _absent = readers.pop().unwrap();
        for _ in 0..MAX_BATCHES {
            within(writer.send(0, batch(1))).await.unwrap();
        }
        // Channel 0 is full and never read; channel 1's reader waits.
        let read = tokio::spawn(async move { ready.next().await.map(|b| b.unwrap().num_rows()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        within(writer.send(0, batch(1))).await.unwrap();
        within(writer.send(1, batch(7))).await.unwrap();
        assert_eq!(within(read).await.unwrap(), Some(7));
    }

    #[tokio::test]
    async fn a_dropped_reader_releases_its_channel() {
        let (writer, mut readers) = channels(2);
        for _ in 0..MAX_BATCHES {
            within(writer.send(0, batch(1))).await.unwrap();
        }
        drop(readers.remove(0));
        assert!(!within(writer.send(0, batch(1))).await.unwrap());
        assert_eq!(writer.open_channels(), 1);
    }

    #[tokio::test]
    async fn a_channel_ends_cleanly_only_after_finish() {
        let (writer, mut readers) = channels(1);
        writer.send(0, batch(3)).await.unwrap();
        writer.finish();
        let reader = &mut readers[0];
        assert_eq!(reader.next().await.unwrap().unwrap().num_rows(), 3);
        assert!(reader.next().await.is_none());

        let (writer, mut readers) = channels(1);
        writer.send(0, batch(3)).await.unwrap();
        drop(writer);
        let reader = &mut readers[0];
        assert!(reader.next().await.unwrap().is_ok());
        let err = reader.next().await.unwrap().unwrap_err();
        assert_eq!(err.code(), tonic::Code::Aborted);
        assert!(reader.next().await.is_none());
    }

    #[tokio::test]
    async fn buffered_bytes_are_accounted_in_the_memory_pool() {
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1024));
        let (writer, readers) = output_channels(1, MemoryConsumer::new("t").register(&pool));
        let err = writer.send(0, batch(1000)).await.unwrap_err();
        assert!(err.to_string().contains("Resources exhausted"), "{err}");
        writer.send(0, batch(10)).await.unwrap();
        assert!(pool.reserved() > 0);
        drop(readers);
        assert_eq!(pool.reserved(), 0, "a dropped reader frees its queue");
    }
}
