//! The fault-tolerant mode's fast path for final tasks that read no other
//! stage (a scan, filtered or projected: `SELECT * FROM t WHERE …`, the
//! long export): such a task produces the same messages, in the same
//! order, every time it runs, since it reads the same file ranges with the
//! same batch size. Its rows go to the client as they come; an attempt run
//! after a failure replays the messages already sent, which are skipped,
//! and goes on from there. Each replayed message must have the rows and
//! body size of the one it replays, or the query fails rather than send a
//! wrong answer.

use tonic::Status;

/// What identifies a message on replay: its rows and its body's bytes.
type Shape = (u64, usize);

/// The messages sent of each final task, and how far its current attempt
/// has replayed them.
pub struct Replay {
    sent: Vec<Vec<Shape>>,
    replayed: Vec<usize>,
}

impl Replay {
    pub fn new(partitions: usize) -> Self {
        Self {
            sent: vec![vec![]; partitions],
            replayed: vec![0; partitions],
        }
    }

    /// Whether a message of `partition` is new (to send), or `false`: a
    /// replay of one already sent (to skip).
    pub fn admit(&mut self, partition: usize, rows: u64, bytes: usize) -> Result<bool, Status> {
        let at = self.replayed[partition];
        let sent = &mut self.sent[partition];
        if at == sent.len() {
            sent.push((rows, bytes));
            self.replayed[partition] += 1;
            return Ok(true);
        }
        if sent[at] != (rows, bytes) {
            return Err(differs(partition));
        }
        self.replayed[partition] += 1;
        Ok(false)
    }

    /// The task's next attempt replays from its first message.
    pub fn restart(&mut self, partition: usize) {
        self.replayed[partition] = 0;
    }

    /// The task's stream ended: it must have replayed all that was sent.
    pub fn finish(&self, partition: usize) -> Result<(), Status> {
        if self.replayed[partition] < self.sent[partition].len() {
            return Err(differs(partition));
        }
        Ok(())
    }
}

fn differs(partition: usize) -> Status {
    Status::internal(format!(
        "final task {partition} produced other rows when run again after a failure; \
         the rows sent so far cannot be completed"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_skips_what_was_sent_and_goes_on() {
        let mut replay = Replay::new(2);
        assert!(replay.admit(0, 10, 100).unwrap());
        assert!(replay.admit(0, 5, 50).unwrap());
        assert!(replay.admit(1, 7, 70).unwrap());
        replay.restart(0);
        assert!(!replay.admit(0, 10, 100).unwrap(), "a replay is skipped");
        assert!(!replay.admit(0, 5, 50).unwrap());
        assert!(replay.admit(0, 3, 30).unwrap(), "then new rows are sent");
        replay.finish(0).unwrap();
        replay.finish(1).unwrap();
    }

    #[test]
    fn a_replay_that_differs_fails() {
        let mut replay = Replay::new(1);
        replay.admit(0, 10, 100).unwrap();
        replay.admit(0, 10, 100).unwrap();
        replay.restart(0);
        assert!(replay.admit(0, 9, 100).is_err());
        replay.restart(0);
        replay.admit(0, 10, 100).unwrap();
        assert!(
            replay.finish(0).is_err(),
            "a shorter replay is not a complete answer"
        );
    }
}
