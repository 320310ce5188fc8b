//! Output streams of running tasks, waiting to be fetched.
//!
//! A task registers one bounded channel per output channel before it is
//! ACCEPTED; a consumer's `DoGet` takes the receiving end exactly once. The
//! bound is the backpressure: a producer whose consumer is slow (or has not
//! connected yet) waits instead of buffering without limit.

use std::sync::Arc;

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
}

#[derive(Clone, Default)]
pub struct StreamManager {
    // Entries leave when fetched, or when their job is cleaned up.
    pending: Arc<DashMap<StreamKey, PendingStream>>,
}

impl StreamManager {
    /// Registers an output channel; returns the producer's end.
    pub fn register(&self, key: StreamKey, schema: SchemaRef) -> mpsc::Sender<BatchResult> {
        let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        self.pending.insert(key, PendingStream { schema, receiver });
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

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}
