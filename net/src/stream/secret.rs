//! The key that signs one job attempt's stream tickets.
//!
//! The coordinator makes a random key per attempt and sends it with every
//! task (over the cluster's mTLS). Whoever reads a stream — the
//! coordinator, or a worker running a consumer task of the same attempt —
//! signs the ticket with it; the producing worker checks the signature
//! before handing the stream out. Without the key no ticket can be made
//! or altered, even by a process that learned a job id.

use std::fmt;
use std::sync::Arc;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use squadron_proto::StreamKey;
use tonic::Status;

/// Bytes of a stream secret.
pub const SECRET_BYTES: usize = 32;

#[derive(Clone)]
pub struct StreamSecret {
    key: Arc<hmac::Key>,
    bytes: Arc<[u8]>,
}

impl fmt::Debug for StreamSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StreamSecret(..)")
    }
}

impl StreamSecret {
    /// A fresh random secret.
    pub fn generate() -> Self {
        let mut bytes = vec![0u8; SECRET_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .expect("the system's random number generator");
        Self::from_bytes(&bytes)
    }

    fn from_bytes(bytes: &[u8]) -> Self {
        Self {
            key: Arc::new(hmac::Key::new(hmac::HMAC_SHA256, bytes)),
            bytes: bytes.into(),
        }
    }

    /// The secret's bytes, to send with the attempt's tasks.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The secret a task request carries; INVALID_ARGUMENT unless it has
    /// the expected length.
    pub fn from_request(bytes: &[u8]) -> Result<Self, Status> {
        if bytes.len() != SECRET_BYTES {
            return Err(Status::invalid_argument(format!(
                "RunTask needs a stream secret of {SECRET_BYTES} bytes"
            )));
        }
        Ok(Self::from_bytes(bytes))
    }

    pub fn sign(&self, key: &StreamKey) -> Vec<u8> {
        hmac::sign(&self.key, &key.signed_bytes()).as_ref().to_vec()
    }

    /// In constant time.
    pub fn verifies(&self, key: &StreamKey, signature: &[u8]) -> bool {
        hmac::verify(&self.key, &key.signed_bytes(), signature).is_ok()
    }

    /// `key`'s Flight ticket, signed.
    pub fn ticket(&self, key: &StreamKey) -> Vec<u8> {
        key.to_ticket(self.sign(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> StreamKey {
        StreamKey {
            job_id: "job".into(),
            stage_id: 1,
            partition: 2,
            attempt: 1,
            channel: 3,
        }
    }

    #[test]
    fn only_the_attempts_secret_signs_its_tickets() {
        let secret = StreamSecret::generate();
        let bytes = secret.bytes().to_vec();
        let other = StreamSecret::generate();
        let ticket = secret.ticket(&key());
        let (decoded, signature) = StreamKey::from_ticket(&ticket).unwrap();
        assert!(StreamSecret::from_request(&bytes)
            .unwrap()
            .verifies(&decoded, &signature));
        assert!(!other.verifies(&decoded, &signature));
        // Any field changed, or no signature: refused.
        let moved = StreamKey {
            channel: 4,
            ..key()
        };
        assert!(!secret.verifies(&moved, &signature));
        assert!(!secret.verifies(&decoded, &[]));
        assert!(StreamSecret::from_request(&bytes[..5]).is_err());
    }
}
