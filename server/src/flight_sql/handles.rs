//! Server-side state that clients refer to by handle: planned statements
//! waiting for DoGet, prepared statements, running polled queries, client
//! sessions.
//!
//! Clients abandon handles (a crashed JDBC application, a script that
//! never closes its statements), so every map here is bounded twice: an
//! entry idle for the TTL is dropped (on each insert, and by the server's
//! reaper), and at most `capacity` entries exist at once; beyond that new
//! ones are refused with RESOURCE_EXHAUSTED rather than evicting live ones.

use std::time::{Duration, Instant};

use dashmap::DashMap;
use tonic::Status;

struct Slot<V> {
    value: V,
    last_used: Instant,
}

pub struct HandleMap<V> {
    entries: DashMap<String, Slot<V>>,
    ttl: Duration,
    capacity: usize,
    /// What the entries are, plural, for error messages.
    what: &'static str,
}

impl<V> HandleMap<V> {
    pub fn new(what: &'static str, ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: DashMap::new(),
            ttl,
            capacity,
            what,
        }
    }

    /// Keeps `value` under a new, unguessable handle.
    pub fn insert(&self, value: V) -> Result<String, Status> {
        let handle = uuid::Uuid::new_v4().to_string();
        self.insert_at(handle.clone(), value)?;
        Ok(handle)
    }

    /// Keeps `value` under `key`, replacing what was there.
    pub fn insert_at(&self, key: String, value: V) -> Result<(), Status> {
        self.expire();
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            return Err(Status::resource_exhausted(format!(
                "{} {} are open; close some or let them expire",
                self.capacity, self.what
            )));
        }
        let slot = Slot {
            value,
            last_used: Instant::now(),
        };
        self.entries.insert(key, slot);
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

    /// How many live entries `matches`.
    pub fn count(&self, matches: impl Fn(&V) -> bool) -> usize {
        self.entries
            .iter()
            .filter(|slot| slot.last_used.elapsed() <= self.ttl && matches(&slot.value))
            .count()
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
        let a = map.insert(1).unwrap();
        let b = map.insert(2).unwrap();
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
        let a = map.insert(1).unwrap();
        map.insert(2).unwrap();
        let err = map.insert(3).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(err.message().contains("2 things are open"));
        // Replacing an existing key is not growth.
        map.insert_at(a, 4).unwrap();
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn idle_entries_expire_and_use_keeps_them_alive() {
        let map = HandleMap::new("things", Duration::from_millis(40), 100);
        let kept = map.insert(1).unwrap();
        let abandoned: Vec<String> = (0..50).map(|i| map.insert(i).unwrap()).collect();
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(15));
            assert!(map.get(&kept).is_some(), "used entries stay");
        }
        assert_eq!(map.get(&abandoned[0]), None);
        assert_eq!(map.expire(), 49);
        assert_eq!(map.len(), 1);
        assert_eq!(map.take(&kept), Some(1));
    }
}
