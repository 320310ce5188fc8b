//! Which client session a request belongs to.
//!
//! A client gets a session of its own the first time it changes
//! something (SetSessionOptions, `SET`); until then it uses the server's
//! shared session, so clients that change nothing cost nothing.
//!
//! Flight SQL identifies sessions by the `arrow_flight_session_id`
//! cookie, which the JDBC driver sends back; the ADBC driver sends no
//! cookies unless asked to, so a session is also found by the client's
//! connection (its address), which an ADBC connection keeps. Both maps are
//! bounded and forget sessions idle for the TTL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use datafusion::logical_expr::LogicalPlan;
use squadron_common::error::to_status;
use squadron_planner::current_user::with_current_user;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

use squadron_net::tls::conn::remote_addr;

use super::handles::HandleMap;
use crate::security::auth::Principal;
use crate::security::tickets::HandleSigner;
use squadron_coordinator::session::Session;

pub const SESSION_COOKIE: &str = "arrow_flight_session_id";
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(30 * 60);
pub const DEFAULT_CAPACITY: usize = 4096;

/// Who sends a request: its session cookie and its connection.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    cookie: Option<String>,
    peer: Option<SocketAddr>,
    /// Who logged in ("" when the server does not authenticate).
    user: String,
}

impl Caller {
    pub fn of<T>(request: &Request<T>) -> Self {
        Self {
            cookie: session_cookie(request.metadata()),
            peer: remote_addr(request),
            user: request
                .extensions()
                .get::<Principal>()
                .map(|p| p.user.clone())
                .unwrap_or_default(),
        }
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    /// `logical` as this caller runs it: its `current_user` answers the
    /// caller (see `planner::current_user`).
    pub fn bound(&self, logical: LogicalPlan) -> Result<LogicalPlan, Status> {
        with_current_user(logical, &self.user).map_err(|e| to_status(&e))
    }

    /// Whom per-user limits count: the user, or without authentication
    /// `@` and the client's IP address (every connection from it).
    pub fn quota_key(&self) -> String {
        if !self.user.is_empty() {
            return self.user.clone();
        }
        match self.peer {
            Some(peer) => format!("@{}", peer.ip()),
            None => "@unknown".to_string(),
        }
    }

    #[cfg(test)]
    pub fn for_user(user: &str) -> Self {
        Self {
            user: user.to_string(),
            ..Self::default()
        }
    }

    /// The key of the caller's connection: a user's session is never
    /// another's, even behind one address.
    fn peer_key(&self) -> Option<String> {
        self.peer.map(|peer| format!("{}@{peer}", self.user))
    }
}

fn session_cookie(metadata: &MetadataMap) -> Option<String> {
    metadata
        .get_all("cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|header| header.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim().to_string())
}

pub struct Sessions {
    shared: Arc<Session>,
    /// Session cookies are signed handles, bound to their user.
    signer: Arc<HandleSigner>,
    by_id: HandleMap<Arc<Session>>,
    /// Connection → session id.
    by_peer: HandleMap<String>,
}

impl Sessions {
    pub fn new(
        shared: Arc<Session>,
        signer: Arc<HandleSigner>,
        ttl: Duration,
        capacity: usize,
    ) -> Self {
        Self {
            shared,
            signer,
            by_id: HandleMap::new("client sessions", ttl, capacity),
            by_peer: HandleMap::new("client sessions", ttl, capacity),
        }
    }

    /// The caller's session id, if it has a live session.
    fn id_of(&self, caller: &Caller) -> Option<String> {
        let by_cookie = caller
            .cookie
            .as_deref()
            .and_then(|cookie| self.signer.open(&caller.user, cookie))
            .filter(|id| self.by_id.with(id, |_| ()).is_some())
            .map(str::to_string);
        let by_peer = || self.by_peer.get(&caller.peer_key()?);
        by_cookie.or_else(by_peer)
    }

    /// The caller's session, or the shared one when it has none.
    pub fn current(&self, caller: &Caller) -> Arc<Session> {
        self.id_of(caller)
            .and_then(|id| self.by_id.get(&id))
            .unwrap_or_else(|| Arc::clone(&self.shared))
    }

    /// The caller's own session, made now if it has none; with its cookie
    /// (the session id signed for the caller).
    pub fn open(&self, caller: &Caller) -> Result<(Arc<Session>, String), Status> {
        if let Some(id) = self.id_of(caller) {
            if let Some(session) = self.by_id.get(&id) {
                return Ok((session, self.signer.sign(&caller.user, &id)));
            }
        }
        let session = Arc::new(Session::derived_from(self.shared.ctx()));
        let owner = caller.quota_key();
        let id = self.by_id.insert(Arc::clone(&session), &owner)?;
        if let Some(peer) = caller.peer_key() {
            if let Err(e) = self.by_peer.insert_at(peer, id.clone(), &owner) {
                self.by_id.remove(&id);
                return Err(e);
            }
        }
        Ok((session, self.signer.sign(&caller.user, &id)))
    }

    /// Ends the caller's session; false when it had none.
    pub fn close(&self, caller: &Caller) -> bool {
        let Some(id) = self.id_of(caller) else {
            return false;
        };
        if let Some(peer) = caller.peer_key() {
            self.by_peer.remove(&peer);
        }
        self.by_id.remove(&id)
    }

    /// Forgets sessions idle for the TTL.
    pub fn expire(&self) -> usize {
        self.by_peer.expire();
        self.by_id.expire()
    }

    /// Client sessions open now.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    fn caller(cookie: Option<&str>, port: u16) -> Caller {
        Caller {
            cookie: cookie.map(str::to_string),
            peer: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            user: "alice".into(),
        }
    }

    fn sessions(ttl: Duration, capacity: usize) -> Sessions {
        let shared = Arc::new(Session::shared(SessionContext::new()));
        Sessions::new(shared, Arc::new(HandleSigner::random()), ttl, capacity)
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "cookie",
            "a=1; arrow_flight_session_id=abc ;b=2".parse().unwrap(),
        );
        assert_eq!(session_cookie(&metadata).as_deref(), Some("abc"));
        assert_eq!(session_cookie(&MetadataMap::new()), None);
    }

    #[test]
    fn a_session_is_found_by_cookie_or_by_connection() {
        let sessions = sessions(DEFAULT_IDLE_TTL, 8);
        let alice = caller(None, 1000);
        assert!(Arc::ptr_eq(&sessions.current(&alice), &sessions.shared));
        let (session, id) = sessions.open(&alice).unwrap();
        assert!(Arc::ptr_eq(&sessions.current(&alice), &session));
        // The same client on another connection, with the cookie.
        assert!(Arc::ptr_eq(
            &sessions.current(&caller(Some(&id), 2000)),
            &session
        ));
        // Another client, or a forged cookie, does not get it.
        assert!(Arc::ptr_eq(
            &sessions.current(&caller(None, 3000)),
            &sessions.shared
        ));
        assert!(Arc::ptr_eq(
            &sessions.current(&caller(Some("forged"), 3000)),
            &sessions.shared
        ));
        assert!(sessions.close(&alice));
        assert!(Arc::ptr_eq(&sessions.current(&alice), &sessions.shared));
        assert!(!sessions.close(&alice));
    }

    #[test]
    fn abandoned_sessions_are_reclaimed_and_bounded() {
        let sessions = sessions(Duration::from_millis(30), 16);
        let of = |user: &str, port| Caller {
            user: user.into(),
            ..caller(None, port)
        };
        for port in 0..4 {
            sessions.open(&of("alice", port)).unwrap();
        }
        // One user holds at most a quarter of the sessions.
        let refused = sessions.open(&of("alice", 99)).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(refused.message().contains("alice has 4"), "{refused}");
        for (user, port) in ["bob", "carol", "dave"]
            .iter()
            .flat_map(|u| (0..4).map(|p| (*u, p)))
        {
            sessions.open(&of(user, port)).unwrap();
        }
        let refused = sessions.open(&of("erin", 99)).unwrap_err();
        assert!(
            refused.message().contains("16 client sessions are open"),
            "{refused}"
        );
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(sessions.expire(), 16);
        assert!(sessions.is_empty());
        sessions.open(&of("alice", 99)).unwrap();
    }
}
