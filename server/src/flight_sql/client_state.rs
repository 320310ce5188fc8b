//! What the server keeps for its clients, by handle: statements, prepared
//! statements, sessions, polled queries and quotas, reaped when idle.

use std::sync::Arc;
use std::time::Duration;

use squadron_coordinator::session::Session;

use super::poll_store::{new_poll_store, PollStore};
use super::prepared::PreparedStore;
use super::quotas::UserQuotas;
use super::sessions::{Sessions, DEFAULT_CAPACITY, DEFAULT_IDLE_TTL};
use super::statements::StatementStore;
use crate::security::tickets::HandleSigner;

/// What the server keeps for its clients, by handle.
pub struct ClientState {
    pub statements: StatementStore,
    pub prepared: PreparedStore,
    pub sessions: Sessions,
    pub polls: PollStore,
    /// Queries each user has in flight.
    pub quotas: UserQuotas,
    /// Signs the handles clients hold and binds them to their user.
    pub signer: Arc<HandleSigner>,
}

impl ClientState {
    /// No client yet; `shared` is the session of clients that change no
    /// setting. Idle entries are dropped in the background while the state
    /// lives.
    pub fn new(shared: Arc<Session>, max_queries_per_user: usize) -> Arc<Self> {
        let signer = Arc::new(HandleSigner::random());
        let state = Arc::new(ClientState {
            statements: StatementStore::default(),
            prepared: PreparedStore::default(),
            sessions: Sessions::new(
                shared,
                Arc::clone(&signer),
                DEFAULT_IDLE_TTL,
                DEFAULT_CAPACITY,
            ),
            polls: new_poll_store(),
            quotas: UserQuotas::new(max_queries_per_user),
            signer,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let state = Arc::downgrade(&state);
            runtime.spawn(async move {
                let mut tick = tokio::time::interval(REAP_EVERY);
                loop {
                    tick.tick().await;
                    match state.upgrade() {
                        Some(state) => state.expire(),
                        None => return,
                    }
                }
            });
        }
        state
    }

    /// Drops every entry idle for its TTL.
    fn expire(&self) {
        self.statements.expire();
        self.prepared.expire();
        self.sessions.expire();
        self.polls.expire();
    }
}

/// How often idle handles and sessions are looked for: they are dropped
/// even when no new one is made.
const REAP_EVERY: Duration = Duration::from_secs(15);
