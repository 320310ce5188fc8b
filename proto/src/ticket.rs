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
    /// Encodes the key as the bytes of a Flight ticket.
    pub fn to_ticket(&self) -> Vec<u8> {
        TaskStreamTicket {
            job_id: self.job_id.clone(),
            stage_id: self.stage_id,
            partition: self.partition,
            attempt: self.attempt,
            channel: self.channel,
        }
        .encode_to_vec()
    }

    /// Decodes a Flight ticket; `None` for bytes that are not a ticket.
    pub fn from_ticket(bytes: &[u8]) -> Option<Self> {
        let t = TaskStreamTicket::decode(bytes).ok()?;
        if t.job_id.is_empty() {
            return None;
        }
        Some(Self {
            job_id: t.job_id,
            stage_id: t.stage_id,
            partition: t.partition,
            attempt: t.attempt,
            channel: t.channel,
        })
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
        assert_eq!(StreamKey::from_ticket(&key.to_ticket()), Some(key));
    }

    #[test]
    fn garbage_is_not_a_ticket() {
        assert_eq!(StreamKey::from_ticket(b"\xff\xff\xff garbage"), None);
        assert_eq!(StreamKey::from_ticket(b""), None);
    }
}
