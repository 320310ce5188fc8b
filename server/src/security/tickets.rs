//! Handles clients hold (statement tickets, prepared statement handles,
//! polled queries, session cookies) are signed and bound to the user they
//! were issued to: `<id>.<tag>`, the tag an HMAC-SHA256 of user and id
//! under a key that never leaves the process. Another user's handle, a
//! guessed one or one with a byte changed opens to nothing, which the
//! caller reports as NOT_FOUND (it does not tell whether the id exists).
//!
//! Internal job ids are derived from the id with the same key, so nothing a
//! client sees names a job on the workers.

use ring::hmac;

/// Bytes of the HMAC kept in a handle: 128 bits.
const TAG_BYTES: usize = 16;

pub struct HandleSigner {
    key: hmac::Key,
}

impl std::fmt::Debug for HandleSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleSigner")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl HandleSigner {
    /// A signer with a fresh random key (handles end with the process).
    pub fn random() -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .expect("system randomness for the handle key");
        Self { key }
    }

    fn tag(&self, purpose: &str, user: &str, id: &str) -> String {
        // Lengths first, so ("ab", "c") and ("a", "bc") differ.
        let message = format!("{}:{purpose}:{}:{user}:{id}", purpose.len(), user.len());
        hex(&hmac::sign(&self.key, message.as_bytes()).as_ref()[..TAG_BYTES])
    }

    /// The handle for `id`, issued to `user` ("" when no one logs in).
    pub fn sign(&self, user: &str, id: &str) -> String {
        format!("{id}.{}", self.tag("handle", user, id))
    }

    /// The id inside `handle` if it was issued to `user`.
    pub fn open<'a>(&self, user: &str, handle: &'a str) -> Option<&'a str> {
        let (id, tag) = handle.rsplit_once('.')?;
        let expected = self.tag("handle", user, id);
        // Constant time: the comparison must not leak how much matched.
        let same = expected.len() == tag.len()
            && expected
                .bytes()
                .zip(tag.bytes())
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0;
        same.then_some(id)
    }

    /// The internal job id of the query with statement id `id`.
    pub fn job_id(&self, id: &str) -> String {
        self.tag("job", "", id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_open_only_for_their_user_and_unaltered() {
        let signer = HandleSigner::random();
        let handle = signer.sign("alice", "1234");
        assert_eq!(signer.open("alice", &handle), Some("1234"));
        assert_eq!(signer.open("bob", &handle), None);
        assert_eq!(signer.open("alice", "1234"), None);
        let mut altered = handle.clone().into_bytes();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(
            signer.open("alice", std::str::from_utf8(&altered).unwrap()),
            None
        );
        let forged = format!("1235.{}", handle.rsplit_once('.').unwrap().1);
        assert_eq!(signer.open("alice", &forged), None);
        assert_eq!(HandleSigner::random().open("alice", &handle), None);
        assert_ne!(signer.job_id("1234"), "1234");
        assert!(!handle.contains(&signer.job_id("1234")));
    }
}
