//! Statements planned by GetFlightInfo, waiting for their DoGet.
//!
//! A ticket is redeemed once: DoGet removes the statement, so no query runs
//! twice. Statements not fetched within the TTL expire, and the store holds
//! at most `capacity` of them, so a client that never calls DoGet cannot
//! grow it without bound; one user may hold at most a quarter of them (see
//! `HandleMap`), so a client calling GetFlightInfo without DoGet cannot
//! lock the others out.

use std::time::Duration;

use tonic::Status;

use super::handles::HandleMap;
use crate::coordinator::PlannedQuery;

pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_CAPACITY: usize = 1024;

pub struct StatementStore {
    entries: HandleMap<PlannedQuery>,
}

impl Default for StatementStore {
    fn default() -> Self {
        Self::new(DEFAULT_TTL, DEFAULT_CAPACITY)
    }
}

impl StatementStore {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: HandleMap::new("statements waiting for DoGet", ttl, capacity),
        }
    }

    /// Stores a statement planned for `user` (a quota key) under a new
    /// handle.
    pub fn insert(&self, query: PlannedQuery, user: &str) -> Result<String, Status> {
        self.entries.insert(query, user)
    }

    /// Takes the statement for its one DoGet.
    pub fn take(&self, handle: &str) -> Result<PlannedQuery, Status> {
        self.entries.take(handle).ok_or_else(|| {
            Status::not_found(
                "unknown statement handle (already fetched, expired, or never issued)",
            )
        })
    }

    /// Drops a statement not fetched yet (a cancel before DoGet); false
    /// when there is none.
    pub fn discard(&self, handle: &str) -> bool {
        self.entries.remove(handle)
    }

    /// Drops the statements not fetched within the TTL.
    pub fn expire(&self) -> usize {
        self.entries.expire()
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
            settings: vec![],
        }
    }

    #[test]
    fn a_handle_is_redeemed_once() {
        let store = StatementStore::default();
        let h = store.insert(query(), "alice").unwrap();
        assert!(store.take(&h).is_ok());
        assert_eq!(store.take(&h).unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            store.take("forged").unwrap_err().code(),
            tonic::Code::NotFound
        );
    }

    #[test]
    fn one_user_cannot_fill_the_store_for_everyone() {
        let store = StatementStore::new(DEFAULT_TTL, 8);
        let mine: Vec<String> = (0..2)
            .map(|_| store.insert(query(), "@10.0.0.1").unwrap())
            .collect();
        let refused = store.insert(query(), "@10.0.0.1").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("@10.0.0.1 has 2"), "{refused}");
        // Others still get in, and a fetched statement frees a place.
        assert!(store.insert(query(), "bob").is_ok());
        store.take(&mine[0]).unwrap();
        assert!(store.insert(query(), "@10.0.0.1").is_ok());
    }
}
