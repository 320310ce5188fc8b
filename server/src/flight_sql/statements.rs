//! Statements planned by GetFlightInfo, waiting for their DoGet.
//!
//! A ticket is redeemed once: DoGet removes the statement, so no query runs
//! twice. Statements not fetched within the TTL expire, and the store holds
//! at most `capacity` of them, so a client that never calls DoGet cannot
//! grow it without bound.

use std::time::{Duration, Instant};

use dashmap::DashMap;
use tonic::Status;

use crate::coordinator::PlannedQuery;

pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_CAPACITY: usize = 1024;

struct Entry {
    query: PlannedQuery,
    created: Instant,
}

pub struct StatementStore {
    entries: DashMap<String, Entry>,
    ttl: Duration,
    capacity: usize,
}

impl Default for StatementStore {
    fn default() -> Self {
        Self::new(DEFAULT_TTL, DEFAULT_CAPACITY)
    }
}

impl StatementStore {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: DashMap::new(),
            ttl,
            capacity,
        }
    }

    /// Stores a planned statement under a new handle.
    pub fn insert(&self, query: PlannedQuery) -> Result<String, Status> {
        self.expire();
        if self.entries.len() >= self.capacity {
            return Err(Status::resource_exhausted(format!(
                "{} statements are waiting for DoGet; fetch or let them expire",
                self.capacity
            )));
        }
        let handle = uuid::Uuid::new_v4().to_string();
        self.entries.insert(
            handle.clone(),
            Entry {
                query,
                created: Instant::now(),
            },
        );
        Ok(handle)
    }

    /// Takes the statement for its one DoGet.
    pub fn take(&self, handle: &str) -> Result<PlannedQuery, Status> {
        match self.entries.remove(handle) {
            Some((_, entry)) if entry.created.elapsed() <= self.ttl => Ok(entry.query),
            Some(_) => Err(Status::not_found("the statement expired before DoGet")),
            None => Err(Status::not_found(
                "unknown statement handle (already fetched, expired, or never issued)",
            )),
        }
    }

    /// Drops a statement not fetched yet (a cancel before DoGet); false
    /// when there is none.
    pub fn discard(&self, handle: &str) -> bool {
        self.entries.remove(handle).is_some()
    }

    fn expire(&self) {
        self.entries.retain(|_, e| e.created.elapsed() <= self.ttl);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::Work;
    use datafusion::arrow::datatypes::Schema;
    use std::sync::Arc;

    fn query() -> PlannedQuery {
        PlannedQuery {
            schema: Arc::new(Schema::empty()),
            work: Work::Immediate(vec![]),
        }
    }

    #[test]
    fn a_handle_is_redeemed_once() {
        let store = StatementStore::default();
        let h = store.insert(query()).unwrap();
        assert!(store.take(&h).is_ok());
        assert_eq!(store.take(&h).unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            store.take("forged").unwrap_err().code(),
            tonic::Code::NotFound
        );
    }

    #[test]
    fn the_store_is_bounded() {
        let store = StatementStore::new(DEFAULT_TTL, 2);
        store.insert(query()).unwrap();
        store.insert(query()).unwrap();
        let err = store.insert(query()).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    }

    #[test]
    fn expired_statements_are_dropped() {
        let store = StatementStore::new(Duration::ZERO, 2);
        let h = store.insert(query()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(store.take(&h).unwrap_err().code(), tonic::Code::NotFound);
        store.insert(query()).unwrap();
        store.insert(query()).unwrap();
        assert_eq!(store.len(), 1, "expired entries are purged on insert");
    }
}
