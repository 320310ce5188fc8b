//! Per-user limits: how many queries one user (or, without
//! authentication, one client address) has running or queued at once, so
//! one client cannot take every admission slot from the others.

use std::sync::Arc;

use dashmap::DashMap;
use tonic::Status;

use super::sessions::Caller;

pub struct UserQuotas {
    max_queries: usize,
    /// Users with at least one query; an entry leaves with its last query,
    /// so the map is bounded by the queries in flight.
    queries: Arc<DashMap<String, usize>>,
}

/// One query counted against its user until dropped (with the query's
/// result stream, or when an update finishes).
pub struct QuotaSlot {
    user: String,
    queries: Arc<DashMap<String, usize>>,
}

impl UserQuotas {
    pub fn new(max_queries: usize) -> Self {
        Self {
            max_queries: max_queries.max(1),
            queries: Arc::default(),
        }
    }

    /// Counts a query of `caller`, or RESOURCE_EXHAUSTED when they have
    /// `max_queries` already.
    pub fn admit(&self, caller: &Caller) -> Result<QuotaSlot, Status> {
        let user = caller.quota_key();
        let mut count = self.queries.entry(user.clone()).or_insert(0);
        if *count >= self.max_queries {
            return Err(Status::resource_exhausted(format!(
                "{} has {} queries running or queued, the most one user may have \
                 (--max-queries-per-user); wait for one to finish",
                describe(&user),
                self.max_queries
            )));
        }
        *count += 1;
        Ok(QuotaSlot {
            user,
            queries: Arc::clone(&self.queries),
        })
    }

    /// Users with queries in flight.
    pub fn users(&self) -> usize {
        self.queries.len()
    }
}

fn describe(key: &str) -> String {
    match key.strip_prefix('@') {
        Some(address) => format!("client address {address}"),
        None => format!("user {key}"),
    }
}

impl Drop for QuotaSlot {
    fn drop(&mut self) {
        if let Some(mut count) = self.queries.get_mut(&self.user) {
            *count = count.saturating_sub(1);
        }
        self.queries.remove_if(&self.user, |_, count| *count == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_at_most_the_quota_and_entries_leave_with_their_queries() {
        let quotas = UserQuotas::new(2);
        let alice = Caller::for_user("alice");
        let bob = Caller::for_user("bob");
        let first = quotas.admit(&alice).unwrap();
        let second = quotas.admit(&alice).unwrap();
        let refused = quotas.admit(&alice).err().unwrap();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("user alice"), "{refused}");
        // Another user is not affected.
        let bobs = quotas.admit(&bob).unwrap();
        drop(first);
        let third = quotas.admit(&alice).unwrap();
        assert_eq!(quotas.users(), 2);
        drop((second, third, bobs));
        assert_eq!(quotas.users(), 0, "no entry outlives its queries");
    }
}
