//! The key of one task output stream, and its Flight ticket encoding.

use prost::Message;

use crate::v1::TaskStreamTicket;

/// Identifies one output channel of one task attempt. Including the attempt
/// means streams of an old attempt are never mixed with a retry's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey {
    pub job_id: String,
    pub stage_id: u32,
    pub partition: u32,
    pub attempt: u32,
    pub channel: u32,
}

impl StreamKey {
    /// Encodes the key with its `signature` as the bytes of a Flight ticket.
    pub fn to_ticket(&self, signature: Vec<u8>) -> Vec<u8> {
        TaskStreamTicket {
            job_id: self.job_id.clone(),
            stage_id: self.stage_id,
            partition: self.partition,
            attempt: self.attempt,
            channel: self.channel,
            signature,
        }
        .encode_to_vec()
    }

    /// Decodes a Flight ticket into the key and its signature; `None` for
    /// bytes that are not a ticket.
    pub fn from_ticket(bytes: &[u8]) -> Option<(Self, Vec<u8>)> {
        let t = TaskStreamTicket::decode(bytes).ok()?;
        if t.job_id.is_empty() {
            return None;
        }
        let key = Self {
            job_id: t.job_id,
            stage_id: t.stage_id,
            partition: t.partition,
            attempt: t.attempt,
            channel: t.channel,
        };
        Some((key, t.signature))
    }

    /// The bytes a signature covers: every field, unambiguously.
    pub fn signed_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.job_id.len() + 24);
        for n in [self.stage_id, self.partition, self.attempt, self.channel] {
            bytes.extend_from_slice(&n.to_be_bytes());
        }
        bytes.extend_from_slice(self.job_id.as_bytes());
        bytes
    }
}

impl std::fmt::Display for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/s{}/p{}/a{}/c{}",
            self.job_id, self.stage_id, self.partition, self.attempt, self.channel
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticket_round_trips() {
        let key = StreamKey {
            job_id: "j1".into(),
            stage_id: 3,
            partition: 2,
            attempt: 1,
            channel: 7,
        };
        assert_eq!(
            StreamKey::from_ticket(&key.to_ticket(vec![1, 2])),
            Some((key, vec![1, 2]))
        );
    }

    #[test]
    fn garbage_is_not_a_ticket() {
        assert_eq!(StreamKey::from_ticket(b"\xff\xff\xff garbage"), None);
        assert_eq!(StreamKey::from_ticket(b""), None);
    }
}
