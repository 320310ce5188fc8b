//! Authentication of Flight SQL calls.
//!
//! - Handshake with `authorization: Basic …` checks the password and
//!   answers `authorization: Bearer <token>` (the JDBC driver's and ADBC's
//!   username/password path).
//! - Handshake with a Bearer token checks it and echoes it (JDBC `token=`).
//! - Every other call carries `authorization: Bearer <token>` (ADBC's
//!   `authorization_header` needs no handshake); `layer` checks it.
//!
//! Failures are UNAUTHENTICATED with a reason that names no secret, and
//! failed logins are limited per client address.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use base64::Engine;
use dashmap::DashMap;
use http::HeaderMap;
use tonic::Status;

use super::tokens::{ExternalIssuer, TokenIssuer};
use super::users::Users;

/// Failed logins allowed per client address in `FAILURE_WINDOW`.
const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses remembered at most; older windows are dropped first.
const MAX_TRACKED_ADDRESSES: usize = 10_000;

/// Who a call comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user: String,
}

pub struct Authenticator {
    users: Option<Users>,
    tokens: TokenIssuer,
    external: Option<ExternalIssuer>,
    failures: DashMap<IpAddr, (u32, Instant)>,
}

enum Credentials {
    Basic { user: String, password: String },
    Bearer(String),
}

/// Basic credentials as clients send them: padded or not (Go's Flight
/// client pads none), standard or URL-safe alphabet.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::alphabet::{STANDARD, URL_SAFE};
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    let config =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    [
        GeneralPurpose::new(&STANDARD, config),
        GeneralPurpose::new(&URL_SAFE, config),
    ]
    .iter()
    .find_map(|engine| engine.decode(text).ok())
}

fn credentials(headers: &HeaderMap) -> Result<Credentials, Status> {
    let value = headers
        .get(http::header::AUTHORIZATION)
        .ok_or_else(|| Status::unauthenticated("no credentials: log in or send a bearer token"))?
        .to_str()
        .map_err(|_| Status::unauthenticated("malformed authorization header"))?;
    let (scheme, rest) = value
        .split_once(' ')
        .ok_or_else(|| Status::unauthenticated("malformed authorization header"))?;
    match scheme.to_ascii_lowercase().as_str() {
        "bearer" => Ok(Credentials::Bearer(rest.trim().to_string())),
        "basic" => {
            let decoded = decode_base64(rest.trim())
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .ok_or_else(|| Status::unauthenticated("malformed basic credentials"))?;
            let (user, password) = decoded
                .split_once(':')
                .ok_or_else(|| Status::unauthenticated("malformed basic credentials"))?;
            Ok(Credentials::Basic {
                user: user.to_string(),
                password: password.to_string(),
            })
        }
        _ => Err(Status::unauthenticated(
            "unsupported authorization scheme: use Basic (handshake) or Bearer",
        )),
    }
}

impl std::fmt::Debug for Authenticator {
    // Never the keys or hashes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("users", &self.users.as_ref().map_or(0, Users::len))
            .field("external_issuer", &self.external.is_some())
            .finish()
    }
}

impl Authenticator {
    pub fn new(
        users: Option<Users>,
        tokens: TokenIssuer,
        external: Option<ExternalIssuer>,
    ) -> Self {
        Self {
            users,
            tokens,
            external,
            failures: DashMap::new(),
        }
    }

    /// Checks a bearer token (any call but Handshake).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Status> {
        match credentials(headers)? {
            Credentials::Bearer(token) => self.verify_token(&token),
            Credentials::Basic { .. } => Err(Status::unauthenticated(
                "basic credentials are for the handshake; send the bearer token it returned",
            )),
        }
    }

    fn verify_token(&self, token: &str) -> Result<Principal, Status> {
        let own = self.tokens.verify(token);
        let user = match (&own, &self.external) {
            (Ok(user), _) => Ok(user.clone()),
            (Err(_), Some(external)) => external.verify(token),
            (Err(e), None) => Err(e.clone()),
        };
        user.map(|user| Principal { user }).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            let why = match e.kind() {
                ErrorKind::ExpiredSignature => "the token expired: log in again",
                ErrorKind::InvalidSignature => "the token's signature is not valid",
                ErrorKind::InvalidIssuer => "the token's issuer is not accepted",
                ErrorKind::InvalidAudience => "the token's audience is not accepted",
                _ => "the token is not valid",
            };
            Status::unauthenticated(why)
        })
    }

    /// A Handshake: returns who logged in and the token to answer with.
    pub fn handshake(
        &self,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Result<(Principal, String), Status> {
        match credentials(headers)? {
            Credentials::Bearer(token) => {
                let principal = self.verify_token(&token).inspect_err(|_| {
                    metrics::counter!(squadron_coordinator::metrics::AUTH_FAILURES, "kind" => "token")
                        .increment(1);
                })?;
                Ok((principal, token))
            }
            Credentials::Basic { user, password } => {
                self.check_rate(client)?;
                let ok = self
                    .users
                    .as_ref()
                    .is_some_and(|users| users.verify(&user, &password));
                if !ok {
                    self.record_failure(client);
                    metrics::counter!(squadron_coordinator::metrics::AUTH_FAILURES, "kind" => "login")
                        .increment(1);
                    tracing::info!(client = ?client, "failed login");
                    return Err(Status::unauthenticated("wrong user name or password"));
                }
                let token = self
                    .tokens
                    .mint(&user)
                    .map_err(|e| Status::internal(format!("{e:#}")))?;
                Ok((Principal { user }, token))
            }
        }
    }

    fn check_rate(&self, client: Option<IpAddr>) -> Result<(), Status> {
        let Some(ip) = client else { return Ok(()) };
        match self.failures.get(&ip) {
            Some(entry) if entry.1.elapsed() < FAILURE_WINDOW && entry.0 >= MAX_FAILURES => {
                let wait = FAILURE_WINDOW.saturating_sub(entry.1.elapsed());
                Err(Status::resource_exhausted(format!(
                    "too many failed logins from this address; retry in {}s",
                    wait.as_secs().max(1)
                )))
            }
            _ => Ok(()),
        }
    }

    fn record_failure(&self, client: Option<IpAddr>) {
        let Some(ip) = client else { return };
        if self.failures.len() >= MAX_TRACKED_ADDRESSES {
            self.failures
                .retain(|_, (_, since)| since.elapsed() < FAILURE_WINDOW);
        }
        if self.failures.len() >= MAX_TRACKED_ADDRESSES {
            return;
        }
        let mut entry = self.failures.entry(ip).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= FAILURE_WINDOW {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authenticator() -> Authenticator {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.toml");
        super::super::users::add_user(&path, "alice", "wonderland").unwrap();
        let users = Users::load(&path).unwrap();
        Authenticator::new(
            Some(users),
            TokenIssuer::random(Duration::from_secs(60)).unwrap(),
            None,
        )
    }

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    fn basic(user: &str, password: &str) -> HeaderMap {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers(&format!("Basic {encoded}"))
    }

    #[test]
    fn login_then_bearer() {
        let auth = authenticator();
        let (who, token) = auth.handshake(&basic("alice", "wonderland"), None).unwrap();
        assert_eq!(who.user, "alice");
        let again = auth
            .authenticate(&headers(&format!("Bearer {token}")))
            .unwrap();
        assert_eq!(again.user, "alice");
        let (_, echoed) = auth
            .handshake(&headers(&format!("Bearer {token}")), None)
            .unwrap();
        assert_eq!(echoed, token);
        for bad in [
            HeaderMap::new(),
            headers("Bearer nonsense"),
            headers("Digest x"),
            basic("alice", "wonderland"),
        ] {
            assert_eq!(
                auth.authenticate(&bad).unwrap_err().code(),
                tonic::Code::Unauthenticated
            );
        }
    }

    #[test]
    fn failed_logins_are_limited_per_address() {
        let auth = authenticator();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..MAX_FAILURES {
            let err = auth
                .handshake(&basic("alice", "guess"), Some(ip))
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::Unauthenticated);
        }
        let err = auth
            .handshake(&basic("alice", "wonderland"), Some(ip))
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
        // Another address is not affected.
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(auth
            .handshake(&basic("alice", "wonderland"), Some(other))
            .is_ok());
    }
}
