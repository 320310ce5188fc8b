//! Output streams of running tasks, waiting to be fetched.
//!
//! A task registers one bounded channel per output channel before it is
//! ACCEPTED; a consumer's `DoGet` takes the receiving end exactly once. The
//! bound is the backpressure: a producer whose consumer is slow (or has not
//! connected yet) waits instead of buffering without limit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use squadron_proto::StreamKey;
use tokio::sync::mpsc;
use tonic::Status;

/// Batches buffered per output channel before the producer waits.
pub const CHANNEL_CAPACITY: usize = 4;

pub type BatchResult = Result<RecordBatch, Status>;

/// A registered stream not yet fetched.
pub struct PendingStream {
    pub schema: SchemaRef,
    pub receiver: mpsc::Receiver<BatchResult>,
    registered: Instant,
}

#[derive(Clone, Default)]
pub struct StreamManager {
    // Entries leave when fetched, or when their job is cleaned up.
    pending: Arc<DashMap<StreamKey, PendingStream>>,
}

impl std::fmt::Debug for StreamManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamManager")
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl StreamManager {
    /// Registers an output channel; returns the producer's end.
    pub fn register(&self, key: StreamKey, schema: SchemaRef) -> mpsc::Sender<BatchResult> {
        let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let stream = PendingStream {
            schema,
            receiver,
            registered: Instant::now(),
        };
        self.pending.insert(key, stream);
        sender
    }

    /// Takes a stream for its one consumer.
    pub fn take(&self, key: &StreamKey) -> Option<PendingStream> {
        self.pending.remove(key).map(|(_, stream)| stream)
    }

    /// Drops every unfetched stream of a job; returns how many.
    pub fn drop_job(&self, job_id: &str) -> usize {
        let before = self.pending.len();
        self.pending.retain(|key, _| key.job_id != job_id);
        before.saturating_sub(self.pending.len())
    }

    /// Drops streams registered more than `age` ago; returns how many.
    pub fn drop_older_than(&self, age: Duration) -> usize {
        let before = self.pending.len();
        self.pending.retain(|_, s| s.registered.elapsed() <= age);
        before.saturating_sub(self.pending.len())
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;

    fn key(job: &str, channel: u32) -> StreamKey {
        StreamKey {
            job_id: job.into(),
            stage_id: 0,
            partition: 0,
            attempt: 0,
            channel,
        }
    }

    #[test]
    fn a_stream_is_taken_once() {
        let m = StreamManager::default();
        let _tx = m.register(key("j", 0), Arc::new(Schema::empty()));
        assert!(m.take(&key("j", 0)).is_some());
        assert!(m.take(&key("j", 0)).is_none());
        assert!(m.is_empty());
    }

    #[test]
    fn cleaning_a_job_drops_only_its_streams() {
        let m = StreamManager::default();
        let _a = m.register(key("a", 0), Arc::new(Schema::empty()));
        let _b = m.register(key("a", 1), Arc::new(Schema::empty()));
        let _c = m.register(key("b", 0), Arc::new(Schema::empty()));
        assert_eq!(m.drop_job("a"), 2);
        assert_eq!(m.len(), 1);
        assert_eq!(m.drop_older_than(Duration::from_secs(3600)), 0);
        assert_eq!(m.drop_older_than(Duration::ZERO), 1);
    }

    #[tokio::test]
    async fn a_full_channel_makes_the_producer_wait() {
        let m = StreamManager::default();
        let schema = Arc::new(Schema::empty());
        let tx = m.register(key("j", 0), schema.clone());
        let batch = RecordBatch::new_empty(schema);
        for _ in 0..CHANNEL_CAPACITY {
            tx.try_send(Ok(batch.clone())).expect("room in the buffer");
        }
        assert!(tx.try_send(Ok(batch)).is_err(), "the buffer is bounded");
    }
}
