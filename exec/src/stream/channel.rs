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
//!   such a channel's memory is accounted in the worker's memory pool; what
//!   the pool cannot hold is spilled to disk (`spill`) when the worker may
//!   spill, and fails the query otherwise, never the worker.
//! - A reader that is dropped releases its channel at once: its queue is
//!   freed and the producer stops writing to it.
//! - A channel ends cleanly only after the producer called `finish`; a
//!   producer dropped before that (aborted, panicked) ends every channel with
//!   an error, so a cut stream is never taken for a short success.
//!
//! - A consumer may give its channel a filter (`ChannelFilter`): the
//!   producer drops the rows it rules out before queueing them. The consumer
//!   filters what it reads itself, so this only saves the work of queueing,
//!   sending and decoding rows it would drop.
//!
//! A *retained* output (`OutputMode::retained`, the fault-tolerant mode) keeps
//! every batch until the task's owner lets it go at the job's end, so a
//! consumer that is run again reads it again from the start
//! (`OutputReader::reread`). Its producer never waits for readers: it keeps
//! batches in memory within the process's `RetainedMemory` and the memory
//! pool, and spills the rest.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::disk_manager::DiskManager;
use datafusion::execution::memory_pool::MemoryReservation;
use datafusion::physical_expr::PhysicalExpr;
use futures::Stream;
use tokio::sync::Notify;
use tonic::Status;

use super::spill::{read_spilled, ExchangeSpill, Spilled};
use squadron_common::error::to_status;
use squadron_net::stream::flight_batches::real_size;

/// Batches a channel holds before the producer waits (unless a reader starves).
pub const MAX_BATCHES: usize = 8;
/// Bytes a channel holds before the producer waits (unless a reader starves).
pub const MAX_BYTES: usize = 8 * 1024 * 1024;
/// Filters a channel takes from its reader (one per join above the read);
/// more are ignored, so a peer cannot grow a channel without bound.
pub const MAX_FILTERS: usize = 4;

/// The bytes retained outputs of one process may keep in memory in all;
/// beyond it they spill.
#[derive(Debug)]
pub struct RetainedMemory {
    limit: usize,
    used: AtomicUsize,
}

impl RetainedMemory {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + bytes <= self.limit).then_some(used + bytes)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// How a task's output is kept.
#[derive(Clone, Default)]
pub struct OutputMode {
    /// Keep every batch for re-reading until the output is dropped, in
    /// memory within this share of the process's memory.
    pub retained: Option<Arc<RetainedMemory>>,
    /// Where batches go that memory cannot hold; `None`: nowhere (the
    /// query fails instead).
    pub disk: Option<Arc<DiskManager>>,
    /// Counts every byte spilled (the process's total, for its metrics).
    pub spilled_total: Option<Arc<AtomicU64>>,
}

#[derive(Clone)]
enum Item {
    Memory(RecordBatch, usize),
    Disk(Spilled),
}

#[derive(Default)]
struct Channel {
    items: VecDeque<Item>,
    /// Items read off the front (never, when retained).
    base: usize,
    /// Bytes of the items held in memory.
    bytes: usize,
    reader_gone: bool,
    /// Readers waiting for the next item.
    wakers: Vec<Waker>,
    /// The reader's filters: rows one rules out are not queued.
    filters: Vec<Arc<dyn PhysicalExpr>>,
}

impl Channel {
    fn wake(&mut self) {
        for waker in self.wakers.drain(..) {
            waker.wake();
        }
    }
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
    mode: OutputMode,
    spill: Option<ExchangeSpill>,
}

impl State {
    /// Keeps `batch` on `channel`: in memory when there is room, else on
    /// disk when allowed.
    fn store(&mut self, channel: usize, batch: RecordBatch, size: usize) -> Result<()> {
        let grown = match &self.mode.retained {
            None => self.reservation.try_grow(size),
            Some(share) if share.try_take(size) => self
                .reservation
                .try_grow(size)
                .inspect_err(|_| share.give_back(size)),
            Some(_) => Err(DataFusionError::ResourcesExhausted(
                "the retained exchange memory is full".into(),
            )),
        };
        let item = match (grown, &self.mode.disk) {
            (Ok(()), _) => {
                self.channels[channel].bytes += size;
                Item::Memory(batch, size)
            }
            (Err(_), Some(disk)) => {
                if self.spill.is_none() {
                    self.spill = Some(ExchangeSpill::create(disk, "exchange output")?);
                }
                let spill = self.spill.as_mut().expect("created above");
                let spilled = spill.append(&batch)?;
                if let Some(total) = &self.mode.spilled_total {
                    total.fetch_add(spilled.len(), Ordering::Relaxed);
                }
                Item::Disk(spilled)
            }
            (Err(e), None) => return Err(e),
        };
        let ch = &mut self.channels[channel];
        ch.items.push_back(item);
        ch.wake();
        Ok(())
    }

    /// Frees `size` bytes of memory taken by `store`.
    fn release(&mut self, size: usize) {
        self.reservation.shrink(size);
        if let Some(share) = &self.mode.retained {
            share.give_back(size);
        }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let held: usize = self.channels.iter().map(|c| c.bytes).sum();
        self.release(held);
    }
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
    output_channels_with(channels, reservation, OutputMode::default())
}

/// `output_channels`, kept as `mode` says.
pub fn output_channels_with(
    channels: usize,
    reservation: MemoryReservation,
    mode: OutputMode,
) -> (OutputWriter, Vec<OutputReader>) {
    let retain = mode.retained.is_some();
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            channels: (0..channels).map(|_| Channel::default()).collect(),
            end: End::Running,
            reservation,
            mode,
            spill: None,
        }),
        producer: Notify::new(),
    });
    let readers = (0..channels)
        .map(|channel| OutputReader {
            shared: Arc::clone(&shared),
            channel,
            next: 0,
            retain,
            done: false,
        })
        .collect();
    let writer = OutputWriter {
        shared,
        retain,
        ended: false,
    };
    (writer, readers)
}

/// The producing task's end of its output channels.
pub struct OutputWriter {
    shared: Arc<Shared>,
    retain: bool,
    ended: bool,
}

impl OutputWriter {
    /// Queues a batch on a channel, waiting while the channel is full and no
    /// reader starves (never, when retained). `Ok(false)`: the channel's
    /// reader is gone.
    pub async fn send(&self, channel: usize, batch: RecordBatch) -> Result<bool> {
        let size = real_size(&batch);
        if self.retain {
            self.shared.lock().store(channel, batch, size)?;
            return Ok(true);
        }
        loop {
            // Created before the check so a wake-up in between is not lost.
            let notified = self.shared.producer.notified();
            {
                let mut state = self.shared.lock();
                let starving = state
                    .channels
                    .iter()
                    .any(|c| !c.reader_gone && !c.wakers.is_empty());
                let ch = &state.channels[channel];
                if ch.reader_gone {
                    return Ok(false);
                }
                let room = ch.items.len() < MAX_BATCHES && ch.bytes < MAX_BYTES;
                if room || starving {
                    state.store(channel, batch, size)?;
                    return Ok(true);
                }
            }
            notified.await;
        }
    }

    pub fn channel_count(&self) -> usize {
        self.shared.lock().channels.len()
    }

    /// The filters the reader of `channel` gave it.
    pub fn filters(&self, channel: usize) -> Vec<Arc<dyn PhysicalExpr>> {
        self.shared.lock().channels[channel].filters.clone()
    }

    /// Channels whose reader has not gone away (all, when retained: a
    /// consumer run again will read them).
    pub fn open_channels(&self) -> usize {
        let state = self.shared.lock();
        state.channels.iter().filter(|c| !c.reader_gone).count()
    }

    /// Bytes spilled to disk so far.
    pub fn spilled_bytes(&self) -> u64 {
        self.shared.lock().spill.as_ref().map_or(0, |s| s.bytes())
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
            ch.wake();
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

/// Sets the filter of one channel. Holds the channels weakly: a slot kept
/// after the task is gone keeps nothing alive.
#[derive(Clone)]
pub struct ChannelFilter {
    shared: Weak<Shared>,
    channel: usize,
}

impl ChannelFilter {
    /// Adds `filter` to the channel's; false when the task's channels are
    /// gone or the channel has `MAX_FILTERS` already.
    pub fn add(&self, filter: Arc<dyn PhysicalExpr>) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let filters = &mut shared.lock().channels[self.channel].filters;
        if filters.len() >= MAX_FILTERS {
            return false;
        }
        filters.push(filter);
        true
    }
}

/// One consumer's end of a channel: the batches, then a clean end, or an
/// error when the producer failed or stopped before finishing.
pub struct OutputReader {
    shared: Arc<Shared>,
    channel: usize,
    /// The next item to read, counted from the channel's first.
    next: usize,
    retain: bool,
    done: bool,
}

impl OutputReader {
    /// Where a filter for this channel can be set, even after the reader
    /// has been handed on; `None` for a retained channel (a consumer run
    /// again must find every row).
    pub fn filter_slot(&self) -> Option<ChannelFilter> {
        (!self.retain).then(|| ChannelFilter {
            shared: Arc::downgrade(&self.shared),
            channel: self.channel,
        })
    }

    /// A new reader of the same retained channel, from its start; `None`
    /// when the channel is not retained (its items are gone once read).
    pub fn reread(&self) -> Option<OutputReader> {
        self.retain.then(|| OutputReader {
            shared: Arc::clone(&self.shared),
            channel: self.channel,
            next: 0,
            retain: true,
            done: false,
        })
    }
}

impl Stream for OutputReader {
    type Item = Result<RecordBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let (channel, next, retain) = (self.channel, self.next, self.retain);
        let mut state = self.shared.lock();
        let ch = &mut state.channels[channel];
        if let Some(item) = ch.items.get(next - ch.base).cloned() {
            if !retain {
                ch.items.pop_front();
                ch.base += 1;
                if let Item::Memory(_, size) = &item {
                    ch.bytes -= size;
                    state.release(*size);
                }
            }
            let file = state.spill.as_ref().map(|spill| spill.file());
            drop(state);
            self.next += 1;
            if !retain {
                self.shared.producer.notify_one();
            }
            let batch = match item {
                Item::Memory(batch, _) => Ok(batch),
                // Read in place: a spilled batch is a few MB, mostly still
                // in the page cache.
                Item::Disk(at) => match file {
                    Some(file) => read_spilled(&file, at).map_err(|e| to_status(&e)),
                    None => Err(Status::internal("a spilled batch without its file")),
                },
            };
            if batch.is_err() {
                self.done = true;
            }
            return Poll::Ready(Some(batch));
        }
        let item = match &state.end {
            End::Running => {
                let waker = cx.waker();
                let ch = &mut state.channels[channel];
                if !ch.wakers.iter().any(|w| w.will_wake(waker)) {
                    ch.wakers.push(waker.clone());
                }
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
        if self.retain {
            // The batches stay for the next reader; only the wake-up goes.
            return;
        }
        let mut state = self.shared.lock();
        let ch = &mut state.channels[self.channel];
        ch.reader_gone = true;
        ch.wakers.clear();
        let freed = std::mem::take(&mut ch.bytes);
        ch.items.clear();
        state.release(freed);
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

    fn disk(dir: &std::path::Path) -> Arc<DiskManager> {
        use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
        let builder = DiskManagerBuilder::default()
            .with_mode(DiskManagerMode::Directories(vec![dir.to_path_buf()]));
        Arc::new(builder.build().unwrap())
    }

    async fn read_all(reader: &mut OutputReader) -> Vec<usize> {
        let mut rows = vec![];
        while let Some(batch) = within(reader.next()).await {
            rows.push(batch.unwrap().num_rows());
        }
        rows
    }

    #[tokio::test]
    async fn a_queue_past_the_memory_pool_spills_instead_of_failing() {
        let dir = tempfile::tempdir().unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(GreedyMemoryPool::new(1024));
        let mode = OutputMode {
            disk: Some(disk(dir.path())),
            ..OutputMode::default()
        };
        let reservation = MemoryConsumer::new("t").register(&pool);
        let (writer, mut readers) = output_channels_with(1, reservation, mode);
        writer.send(0, batch(10)).await.unwrap();
        writer.send(0, batch(1000)).await.unwrap();
        assert!(writer.spilled_bytes() > 0);
        writer.finish();
        assert_eq!(read_all(&mut readers[0]).await, vec![10, 1000]);
        assert_eq!(pool.reserved(), 0);
    }

    #[tokio::test]
    async fn a_retained_output_never_waits_and_is_read_again_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let memory = RetainedMemory::new(real_size(&batch(100)) * 3);
        let mode = OutputMode {
            retained: Some(Arc::clone(&memory)),
            disk: Some(disk(dir.path())),
            spilled_total: None,
        };
        let reservation = MemoryConsumer::new("t").register(&pool);
        let (writer, mut readers) = output_channels_with(2, reservation, mode);
        // Far past the queue bounds with nobody reading: nothing waits.
        for rows in 1..=(MAX_BATCHES as i64 * 2) {
            within(writer.send(0, batch(100 + rows))).await.unwrap();
        }
        writer.send(1, batch(5)).await.unwrap();
        assert!(
            writer.spilled_bytes() > 0,
            "past the retained memory it spills"
        );
        assert!(memory.used() <= real_size(&batch(100)) * 3);
        let expected: Vec<usize> = (1..=MAX_BATCHES * 2).map(|r| 100 + r).collect();
        let again = readers[0].reread().unwrap();
        let mut partial = readers.remove(0);
        // A reader that stops half-way leaves everything for the next one.
        for _ in 0..3 {
            within(partial.next()).await.unwrap().unwrap();
        }
        drop(partial);
        writer.finish();
        let mut again = again;
        assert_eq!(read_all(&mut again).await, expected);
        let mut third = again.reread().unwrap();
        assert_eq!(read_all(&mut third).await, expected);
        assert_eq!(read_all(&mut readers[0]).await, vec![5]);
        drop((again, third, readers));
        assert_eq!(memory.used(), 0, "the last holder gives the memory back");
        assert_eq!(pool.reserved(), 0);
        let left = std::fs::read_dir(dir.path()).unwrap().flatten();
        let files: usize = left
            .map(|d| std::fs::read_dir(d.path()).unwrap().count())
            .sum();
        assert_eq!(files, 0, "the spill file is gone with its output");
    }

    #[tokio::test]
    async fn a_retained_reader_waits_for_the_producer() {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let mode = OutputMode {
            retained: Some(RetainedMemory::new(1 << 30)),
            disk: None,
            spilled_total: None,
        };
        let reservation = MemoryConsumer::new("t").register(&pool);
        let (writer, mut readers) = output_channels_with(1, reservation, mode);
        let mut reader = readers.pop().unwrap();
        let read = tokio::spawn(async move {
            let mut seen = vec![];
            while let Some(item) = reader.next().await {
                seen.push(item.map(|b| b.num_rows()).map_err(|e| e.code()));
            }
            seen
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!read.is_finished(), "nothing to read yet");
        writer.send(0, batch(7)).await.unwrap();
        drop(writer);
        let seen = within(read).await.unwrap();
        assert_eq!(seen, vec![Ok(7), Err(tonic::Code::Aborted)]);
    }
}
