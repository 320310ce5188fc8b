//! Output streams of running tasks, waiting to be fetched.
//!
//! A task registers one reader per output channel before it is ACCEPTED; a
//! consumer's `DoGet` (or a task on this worker, directly) takes it exactly
//! once. An entry's owner is its task's RunTask stream: when the coordinator
//! drops that stream (job end, cancel, coordinator gone) the task's unread
//! streams go with it. Entries never expire by age, so a stream read late
//! (a probe side waiting behind a long build) is still there.
//!
//! A *retained* stream (the fault-tolerant mode) is not taken: each take
//! hands out a new reader from its start, so a consumer run again reads it
//! again; it stays until its owner drops it.
//!
//! Beside each stream it keeps, until the stream's owner drops it, where
//! the stream's consumer may set a filter (`set_filter`): the consumer
//! fetches at once, so the stream is taken long before the filter exists.
//!
//! All tasks of a job are dispatched at once, so a consumer may ask for a
//! stream before its producer registered it. Such a lookup waits, bounded
//! by `REGISTRATION_WAIT`, on one notification shared by all waiters: a
//! waiter adds nothing to any map, so bogus tickets cannot grow one.

use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use datafusion::arrow::datatypes::SchemaRef;
use squadron_common::error::Error;
use squadron_proto::StreamKey;
use tokio::sync::Notify;

use datafusion::physical_expr::PhysicalExpr;

use super::channel::{ChannelFilter, OutputReader};
use squadron_net::stream::StreamSecret;

/// A registered stream not yet fetched.
pub struct PendingStream {
    pub schema: SchemaRef,
    pub reader: OutputReader,
    /// Signs the tickets of the stream's job attempt.
    secret: StreamSecret,
}

/// How long a lookup waits for a stream's producer to register it.
pub const REGISTRATION_WAIT: Duration = Duration::from_secs(30);

/// Where a stream's filter goes, with what checks a filter for it.
struct FilterSlot {
    slot: ChannelFilter,
    schema: SchemaRef,
    secret: StreamSecret,
}

#[derive(Clone, Default)]
pub struct StreamManager {
    pending: Arc<DashMap<StreamKey, PendingStream>>,
    /// The non-retained streams registered and not yet dropped by their
    /// owner, taken or not.
    filters: Arc<DashMap<StreamKey, FilterSlot>>,
    registered: Arc<Notify>,
}

impl std::fmt::Debug for StreamManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamManager")
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl StreamManager {
    /// Registers the readers of one task's channels, all or none: a key
    /// that is already registered is refused, never overwritten. Tickets
    /// for them must be signed with `secret`.
    pub fn register(
        &self,
        streams: Vec<(StreamKey, OutputReader)>,
        schema: &SchemaRef,
        secret: &StreamSecret,
    ) -> Result<(), Error> {
        let mut registered = Vec::with_capacity(streams.len());
        for (key, reader) in streams {
            // The entry guard locks its shard: it must be gone before the
            // rollback touches the map, or a key in the same shard deadlocks.
            let inserted = match self.pending.entry(key.clone()) {
                Entry::Occupied(_) => false,
                Entry::Vacant(slot) => {
                    if let Some(filter) = reader.filter_slot() {
                        self.filters.insert(
                            key.clone(),
                            FilterSlot {
                                slot: filter,
                                schema: Arc::clone(schema),
                                secret: secret.clone(),
                            },
                        );
                    }
                    slot.insert(PendingStream {
                        schema: Arc::clone(schema),
                        reader,
                        secret: secret.clone(),
                    });
                    true
                }
            };
            if !inserted {
                self.drop_keys(&registered);
                return Err(Error::already_exists(format!(
                    "task stream {key} is already registered"
                )));
            }
            registered.push(key);
        }
        self.registered.notify_waiters();
        Ok(())
    }

    /// Takes a stream for its one consumer (a retained stream: a new
    /// reader of it).
    pub fn take(&self, key: &StreamKey) -> Option<PendingStream> {
        if let Some(again) = self.reread(key, None) {
            return again.ok();
        }
        self.pending.remove(key).map(|(_, stream)| stream)
    }

    /// A new reader of a retained stream, when `key` is one (refused when
    /// `signature` is given and does not verify).
    fn reread(
        &self,
        key: &StreamKey,
        signature: Option<&[u8]>,
    ) -> Option<Result<PendingStream, Error>> {
        let stream = self.pending.get(key)?;
        let reader = stream.reader.reread()?;
        if signature.is_some_and(|signature| !stream.secret.verifies(key, signature)) {
            return Some(Err(not_signed(key)));
        }
        Some(Ok(PendingStream {
            schema: Arc::clone(&stream.schema),
            reader,
            secret: stream.secret.clone(),
        }))
    }

    /// Takes a stream for a ticket signed with `signature` (a peer's
    /// DoGet), or for a task of this worker (`None`). A wrong signature
    /// leaves the stream to its rightful reader.
    fn take_signed(
        &self,
        key: &StreamKey,
        signature: Option<&[u8]>,
    ) -> Result<Option<PendingStream>, Error> {
        let Some(signature) = signature else {
            return Ok(self.take(key));
        };
        if let Some(again) = self.reread(key, Some(signature)) {
            return again.map(Some);
        }
        loop {
            if let Some((_, stream)) = self
                .pending
                .remove_if(key, |_, stream| stream.secret.verifies(key, signature))
            {
                return Ok(Some(stream));
            }
            // Not taken: absent, or signed by another secret — or
            // registered just after the look above, so look again rather
            // than call a good ticket forged.
            let verifies = self
                .pending
                .get(key)
                .map(|stream| stream.secret.verifies(key, signature));
            match verifies {
                None => return Ok(None),
                Some(false) => return Err(not_signed(key)),
                Some(true) => continue,
            }
        }
    }

    /// Takes a stream as `take_signed` does, waiting up to `within` for it
    /// to be registered.
    pub async fn take_when_registered(
        &self,
        key: &StreamKey,
        within: Duration,
        signature: Option<&[u8]>,
    ) -> Result<Option<PendingStream>, Error> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Listen before looking, so a registration in between is not
            // missed.
            let notified = self.registered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(stream) = self.take_signed(key, signature)? {
                return Ok(Some(stream));
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.take_signed(key, signature);
            }
        }
    }

    /// The schema of a stream whose filter may still be set (to decode a
    /// filter against), waiting up to `within` for its producer to register
    /// it: a consumer's filter may be ready before its producer started.
    /// `None` when it never came, once its owner dropped it, or for a
    /// retained stream.
    pub async fn filterable_schema(&self, key: &StreamKey, within: Duration) -> Option<SchemaRef> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Listen before looking, as in `take_when_registered`.
            let notified = self.registered.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(slot) = self.filters.get(key) {
                return Some(Arc::clone(&slot.schema));
            }
            if self.pending.contains_key(key) {
                // Registered, but retained: no filter.
                return None;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.filters.get(key).map(|slot| Arc::clone(&slot.schema));
            }
        }
    }

    /// Gives a stream a filter of its consumer: for a ticket signed with
    /// `signature` (a peer), or for a task of this worker (`None`). False
    /// when the stream is gone (or was never here, or is retained), or has
    /// all the filters it takes.
    pub fn set_filter(
        &self,
        key: &StreamKey,
        signature: Option<&[u8]>,
        filter: Arc<dyn PhysicalExpr>,
    ) -> Result<bool, Error> {
        let Some(slot) = self.filters.get(key) else {
            return Ok(false);
        };
        if signature.is_some_and(|signature| !slot.secret.verifies(key, signature)) {
            return Err(not_signed(key));
        }
        Ok(slot.slot.add(filter))
    }

    /// Drops the given streams if still unread; returns how many.
    pub fn drop_keys(&self, keys: &[StreamKey]) -> usize {
        for key in keys {
            self.filters.remove(key);
        }
        keys.iter()
            .filter(|k| self.pending.remove(*k).is_some())
            .count()
    }

    /// Drops every unread stream of one attempt of a job; returns how many.
    pub fn drop_job(&self, job_id: &str, attempt: u32) -> usize {
        let of_job = |key: &StreamKey| key.job_id == job_id && key.attempt == attempt;
        self.filters.retain(|key, _| !of_job(key));
        let before = self.pending.len();
        self.pending.retain(|key, _| !of_job(key));
        before.saturating_sub(self.pending.len())
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

fn not_signed(key: &StreamKey) -> Error {
    Error::permission_denied(format!(
        "the ticket for task stream {key} is not signed by its job"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::channel::output_channels;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, UnboundedMemoryPool};
    use squadron_common::error::ErrorKind;

    fn key(job: &str, attempt: u32, channel: u32) -> StreamKey {
        StreamKey {
            job_id: job.into(),
            stage_id: 0,
            partition: 0,
            attempt,
            channel,
        }
    }

    fn readers(n: usize) -> Vec<OutputReader> {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        output_channels(n, MemoryConsumer::new("t").register(&pool)).1
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::empty())
    }

    fn secret() -> StreamSecret {
        StreamSecret::generate()
    }

    #[test]
    fn a_stream_is_taken_once() {
        let m = StreamManager::default();
        let r = readers(1).pop().unwrap();
        m.register(vec![(key("j", 0, 0), r)], &schema(), &secret())
            .unwrap();
        assert!(m.take(&key("j", 0, 0)).is_some());
        assert!(m.take(&key("j", 0, 0)).is_none());
        assert!(m.is_empty());
    }

    #[tokio::test]
    async fn a_lookup_waits_for_a_late_registration_but_not_forever() {
        let m = StreamManager::default();
        let waiting = {
            let m = m.clone();
            tokio::spawn(async move {
                m.take_when_registered(&key("j", 0, 0), Duration::from_secs(10), None)
                    .await
                    .unwrap()
                    .is_some()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Another stream's registration wakes the waiter, which keeps waiting.
        m.register(
            vec![(key("other", 0, 0), readers(1).pop().unwrap())],
            &schema(),
            &secret(),
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        m.register(
            vec![(key("j", 0, 0), readers(1).pop().unwrap())],
            &schema(),
            &secret(),
        )
        .unwrap();
        assert!(waiting.await.unwrap(), "the late stream was handed over");
        assert_eq!(m.len(), 1);

        let start = std::time::Instant::now();
        let bogus = m
            .take_when_registered(&key("never", 0, 0), Duration::from_millis(50), None)
            .await
            .unwrap();
        assert!(bogus.is_none());
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(m.len(), 1, "a waiter leaves nothing behind");
    }

    #[test]
    fn a_duplicate_key_is_refused_and_nothing_is_half_registered() {
        let m = StreamManager::default();
        let r = readers(1).pop().unwrap();
        m.register(vec![(key("j", 0, 1), r)], &schema(), &secret())
            .unwrap();
        let mut two = readers(2);
        let (b, a) = (two.pop().unwrap(), two.pop().unwrap());
        let err = m
            .register(
                vec![(key("j", 0, 0), a), (key("j", 0, 1), b)],
                &schema(),
                &secret(),
            )
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert_eq!(
            m.len(),
            1,
            "the first key of the refused task is rolled back"
        );
    }

    #[tokio::test]
    async fn a_ticket_not_signed_by_the_job_gets_nothing_and_leaves_the_stream() {
        let m = StreamManager::default();
        let (job, other) = (secret(), secret());
        m.register(
            vec![(key("j", 0, 0), readers(1).pop().unwrap())],
            &schema(),
            &job,
        )
        .unwrap();
        let wait = Duration::from_millis(10);
        let forged = other.sign(&key("j", 0, 0));
        let err = m
            .take_when_registered(&key("j", 0, 0), wait, Some(&forged))
            .await
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        assert_eq!(m.len(), 1, "the stream waits for its rightful reader");
        let signed = job.sign(&key("j", 0, 0));
        let taken = m
            .take_when_registered(&key("j", 0, 0), wait, Some(&signed))
            .await
            .unwrap();
        assert!(taken.is_some());
    }

    #[tokio::test]
    async fn a_retained_stream_is_read_by_every_take_until_dropped() {
        use crate::stream::channel::{output_channels_with, OutputMode, RetainedMemory};
        use futures::StreamExt;
        let m = StreamManager::default();
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let mode = OutputMode {
            retained: Some(RetainedMemory::new(1 << 20)),
            disk: None,
            spilled_total: None,
        };
        let (writer, readers) =
            output_channels_with(1, MemoryConsumer::new("t").register(&pool), mode);
        let job = secret();
        let k = key("j", 0, 0);
        m.register(
            vec![(k.clone(), readers.into_iter().next().unwrap())],
            &schema(),
            &job,
        )
        .unwrap();
        writer.finish();
        for _ in 0..2 {
            let taken = m
                .take_when_registered(&k, Duration::from_millis(10), Some(&job.sign(&k)))
                .await
                .unwrap()
                .expect("a retained stream is there for every reader");
            assert!(taken.reader.collect::<Vec<_>>().await.is_empty());
        }
        let forged = secret().sign(&k);
        let err = m.take_signed(&k, Some(&forged)).err().unwrap();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied);
        assert!(m.take(&k).is_some());
        assert_eq!(
            m.drop_keys(std::slice::from_ref(&k)),
            1,
            "its owner drops it"
        );
        assert!(m.take(&k).is_none());
    }

    #[test]
    fn cleaning_an_attempt_drops_only_its_streams() {
        let m = StreamManager::default();
        for (job, attempt) in [("a", 0), ("a", 1), ("b", 0)] {
            let r = readers(1).pop().unwrap();
            m.register(vec![(key(job, attempt, 0), r)], &schema(), &secret())
                .unwrap();
        }
        assert_eq!(m.drop_job("a", 0), 1);
        assert_eq!(m.len(), 2);
        assert_eq!(m.drop_keys(&[key("a", 1, 0), key("a", 1, 0)]), 1);
        assert_eq!(m.len(), 1);
    }
}
