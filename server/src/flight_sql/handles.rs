//! Server-side state that clients refer to by handle: planned statements
//! waiting for DoGet, prepared statements, running polled queries, client
//! sessions.
//!
//! Clients abandon handles (a crashed JDBC application, a script that
//! never closes its statements), so every map here is bounded twice: an
//! entry idle for the TTL is dropped (on each insert, and by the server's
//! reaper), and at most `capacity` entries exist at once; beyond that new
//! ones are refused with RESOURCE_EXHAUSTED rather than evicting live ones.
//!
//! Each entry has an owner (a user, see `Caller::quota_key`), and one owner
//! may hold at most a quarter of the capacity: otherwise one client that
//! opens handles and never closes them fills the map, and every other
//! user is refused until its entries expire.

use std::time::{Duration, Instant};

use dashmap::DashMap;
use tonic::Status;

struct Slot<V> {
    value: V,
    owner: String,
    last_used: Instant,
}

pub struct HandleMap<V> {
    entries: DashMap<String, Slot<V>>,
    ttl: Duration,
    capacity: usize,
    /// The most entries one owner may hold.
    per_owner: usize,
    /// What the entries are, plural, for error messages.
    what: &'static str,
}

impl<V> HandleMap<V> {
    pub fn new(what: &'static str, ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: DashMap::new(),
            ttl,
            capacity,
            per_owner: (capacity / 4).max(1),
            what,
        }
    }

    /// Keeps `value`, owned by `owner`, under a new, unguessable handle.
    pub fn insert(&self, value: V, owner: &str) -> Result<String, Status> {
        let handle = uuid::Uuid::new_v4().to_string();
        self.insert_at(handle.clone(), value, owner)?;
        Ok(handle)
    }

    /// Keeps `value`, owned by `owner`, under `key`, replacing what was
    /// there.
    pub fn insert_at(&self, key: String, value: V, owner: &str) -> Result<(), Status> {
        self.expire();
        if !self.entries.contains_key(&key) {
            self.refuse_when_full(owner)?;
        }
        let slot = Slot {
            value,
            owner: owner.to_string(),
            last_used: Instant::now(),
        };
        self.entries.insert(key, slot);
        Ok(())
    }

    /// Whether a new entry of `owner` would be let in now (without
    /// keeping a place for it).
    pub fn check_room(&self, owner: &str) -> Result<(), Status> {
        self.expire();
        self.refuse_when_full(owner)
    }

    /// Refuses a new entry of `owner` when the map, or the owner's share
    /// of it, is full.
    fn refuse_when_full(&self, owner: &str) -> Result<(), Status> {
        if self.entries.len() >= self.capacity {
            return Err(Status::resource_exhausted(format!(
                "{} {} are open; close some or let them expire (after {:?} idle)",
                self.capacity, self.what, self.ttl
            )));
        }
        let owned = self.entries.iter().filter(|s| s.owner == owner).count();
        if owned >= self.per_owner {
            return Err(Status::resource_exhausted(format!(
                "{owner} has {owned} {} open, the most one user may have; close some or \
                 let them expire (after {:?} idle)",
                self.what, self.ttl
            )));
        }
        Ok(())
    }

    /// Runs `f` on the live entry under `key`, which counts as a use;
    /// `None` when there is none (never issued, removed, or expired).
    pub fn with<R>(&self, key: &str, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let mut slot = self.entries.get_mut(key)?;
        if slot.last_used.elapsed() > self.ttl {
            drop(slot);
            self.entries.remove(key);
            return None;
        }
        slot.last_used = Instant::now();
        Some(f(&mut slot.value))
    }

    /// Removes and returns the live entry under `key`.
    pub fn take(&self, key: &str) -> Option<V> {
        let (_, slot) = self.entries.remove(key)?;
        (slot.last_used.elapsed() <= self.ttl).then_some(slot.value)
    }

    /// Removes the entry under `key`; false when there was none.
    pub fn remove(&self, key: &str) -> bool {
        self.entries.remove(key).is_some()
    }

    /// Drops the entries idle for longer than the TTL; returns how many.
    pub fn expire(&self) -> usize {
        let before = self.entries.len();
        self.entries
            .retain(|_, slot| slot.last_used.elapsed() <= self.ttl);
        before.saturating_sub(self.entries.len())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<V: Clone> HandleMap<V> {
    /// A copy of the live entry under `key` (a use).
    pub fn get(&self, key: &str) -> Option<V> {
        self.with(key, |v| v.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_unknown_ones_find_nothing() {
        let map = HandleMap::new("things", Duration::from_secs(60), 8);
        let a = map.insert(1, "alice").unwrap();
        let b = map.insert(2, "alice").unwrap();
        assert_ne!(a, b);
        assert_eq!(map.get(&a), Some(1));
        assert_eq!(map.get("forged"), None);
        assert_eq!(map.take(&b), Some(2));
        assert_eq!(map.take(&b), None, "a taken entry is gone");
        assert!(map.remove(&a));
        assert!(!map.remove(&a));
    }

    #[test]
    fn the_map_is_bounded() {
        let map = HandleMap::new("things", Duration::from_secs(60), 2);
        let a = map.insert(1, "alice").unwrap();
        map.insert(2, "bob").unwrap();
        let err = map.insert(3, "carol").unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("2 things are open"));
        // Replacing an existing key is not growth.
        map.insert_at(a, 4, "alice").unwrap();
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn idle_entries_expire_and_use_keeps_them_alive() {
        let map = HandleMap::new("things", Duration::from_millis(40), 100);
        let kept = map.insert(1, "alice").unwrap();
        let abandoned: Vec<String> = (0..50)
            .map(|i| map.insert(i, &format!("user{i}")).unwrap())
            .collect();
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(15));
            assert!(map.get(&kept).is_some(), "used entries stay");
        }
        assert_eq!(map.get(&abandoned[0]), None);
        assert_eq!(map.expire(), 49);
        assert_eq!(map.len(), 1);
        assert_eq!(map.take(&kept), Some(1));
    }

    #[test]
    fn one_owner_holds_at_most_a_quarter() {
        let map = HandleMap::new("things", Duration::from_secs(60), 8);
        let mine: Vec<String> = (0..2)
            .map(|i| map.insert(i, "@10.0.0.1").unwrap())
            .collect();
        let refused = map.insert(2, "@10.0.0.1").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("@10.0.0.1 has 2 things open"),
            "{refused}"
        );
        // Replacing one of its own keys is not growth; others still get
        // in; a freed entry frees a place.
        map.insert_at(mine[1].clone(), 3, "@10.0.0.1").unwrap();
        assert!(map.insert(4, "bob").is_ok());
        assert!(map.remove(&mine[0]));
        assert!(map.insert(5, "@10.0.0.1").is_ok());
    }
}
