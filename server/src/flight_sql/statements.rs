//! Statements planned by GetFlightInfo, waiting for their DoGet: planned
//! only, or already started (see `SquadronFlightSql::start_early`).
//!
//! A ticket is redeemed once: DoGet removes the statement, so no query runs
//! twice; a started statement dropped unread (expired, cancelled) stops
//! its query with its stream. Statements not fetched within the TTL expire, and the store holds
//! at most `capacity` of them, so a client that never calls DoGet cannot
//! grow it without bound; one user may hold at most a quarter of them (see
//! `HandleMap`), so a client calling GetFlightInfo without DoGet cannot
//! lock the others out.

use std::sync::Mutex;
use std::time::Duration;

use tonic::Status;

use super::handles::HandleMap;
use squadron_coordinator::output::JobStream;
use squadron_coordinator::statements::PlannedQuery;

pub const DEFAULT_TTL: Duration = Duration::from_secs(300);
pub const DEFAULT_CAPACITY: usize = 1024;

pub struct StatementStore {
    entries: HandleMap<Pending>,
}

/// A statement waiting for its DoGet.
pub enum Pending {
    Planned(Box<PlannedQuery>),
    /// Running; the rows wait in its stream.
    Started(StartedQuery),
}

/// A running query's stream, behind a lock only so that the store can be
/// shared between threads.
pub struct StartedQuery(Mutex<JobStream>);

impl StartedQuery {
    pub fn new(stream: JobStream) -> Self {
        Self(Mutex::new(stream))
    }

    pub fn into_stream(self) -> JobStream {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
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

    /// Stores a statement of `user` (a quota key) under `handle`.
    pub fn insert_at(&self, handle: String, pending: Pending, user: &str) -> Result<(), Status> {
        self.entries.insert_at(handle, pending, user)
    }

    /// Refuses when `user` could not store one more statement (checked
    /// before a query is started for it).
    pub fn check_room(&self, user: &str) -> Result<(), Status> {
        self.entries.check_room(user)
    }

    /// Takes the statement under `handle` if it has started.
    pub fn take_started(&self, handle: &str) -> Option<JobStream> {
        let started = self
            .entries
            .with(handle, |p| matches!(p, Pending::Started(_)))?;
        if !started {
            return None;
        }
        match self.entries.take(handle)? {
            Pending::Started(started) => Some(started.into_stream()),
            Pending::Planned(_) => None,
        }
    }

    /// Takes the statement for its one DoGet.
    pub fn take(&self, handle: &str) -> Result<Pending, Status> {
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
    use datafusion::arrow::datatypes::Schema;
    use futures::StreamExt;
    use squadron_coordinator::statements::Work;
    use std::sync::Arc;

    fn planned() -> Pending {
        Pending::Planned(Box::new(PlannedQuery {
            schema: Arc::new(Schema::empty()),
            work: Work::Immediate(vec![]),
            settings: vec![],
            statement: None,
            origins: vec![],
        }))
    }

    fn insert(store: &StatementStore, pending: Pending, user: &str) -> Result<String, Status> {
        let handle = uuid::Uuid::new_v4().to_string();
        store.insert_at(handle.clone(), pending, user)?;
        Ok(handle)
    }

    #[test]
    fn a_handle_is_redeemed_once() {
        let store = StatementStore::default();
        let h = insert(&store, planned(), "alice").unwrap();
        assert!(store.take(&h).is_ok());
        for gone in [h.as_str(), "forged"] {
            let err = store.take(gone).err().expect("no statement");
            assert_eq!(err.code(), tonic::Code::NotFound);
        }
    }

    #[test]
    fn only_a_started_statement_is_taken_as_started() {
        let store = StatementStore::default();
        let planned = insert(&store, planned(), "alice").unwrap();
        assert!(store.take_started(&planned).is_none());
        assert!(
            matches!(store.take(&planned), Ok(Pending::Planned(_))),
            "a planned statement stays for its DoGet"
        );
        let stream = futures::stream::empty().boxed();
        let started = insert(&store, Pending::Started(StartedQuery::new(stream)), "alice").unwrap();
        assert!(store.take_started(&started).is_some());
        assert!(store.take_started(&started).is_none(), "taken once");
        assert!(store.take_started("forged").is_none());
    }

    #[test]
    fn one_user_cannot_fill_the_store_for_everyone() {
        let store = StatementStore::new(DEFAULT_TTL, 8);
        let mine: Vec<String> = (0..2)
            .map(|_| insert(&store, planned(), "@10.0.0.1").unwrap())
            .collect();
        // Checked before anything is started for it, and at insertion.
        let refused = store.check_room("@10.0.0.1").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(store.check_room("bob").is_ok());
        let refused = insert(&store, planned(), "@10.0.0.1").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("@10.0.0.1 has 2"), "{refused}");
        // Others still get in, and a fetched statement frees a place.
        assert!(insert(&store, planned(), "bob").is_ok());
        store.take(&mine[0]).unwrap();
        assert!(insert(&store, planned(), "@10.0.0.1").is_ok());
    }
}
