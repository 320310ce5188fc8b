//! The fault-tolerant mode's result spool: each final task's messages are
//! held until that task's stream ended cleanly, and only then sent to the
//! client, whole. A final task that is lost half-way is run again and its
//! held messages are dropped, so the client never sees a partial task's
//! rows: nothing is sent twice and nothing is missing, whatever order the
//! new attempt produces its rows in.
//!
//! Messages stay in memory up to `SPOOL_MEMORY` per query, then go to a
//! file of the coordinator's spool directory (`--spill-dir`, counted
//! against `--spill-limit`), deleted with the spool.

use std::sync::Arc;

use arrow_flight::FlightData;
use datafusion::execution::disk_manager::DiskManager;
use prost::Message;
use squadron_common::error::to_status;
use squadron_exec::stream::spill::{read_bytes, ExchangeSpill, Spilled};
use tonic::Status;

/// Bytes of held messages one query keeps in memory before spooling to disk.
pub const SPOOL_MEMORY: usize = 64 << 20;

enum Held {
    Memory(FlightData),
    Disk(Spilled),
}

/// The held messages of every final task of one job.
pub struct ResultSpool {
    disk: Option<Arc<DiskManager>>,
    file: Option<ExchangeSpill>,
    partitions: Vec<Vec<(Held, u64)>>,
    in_memory: usize,
    memory_limit: usize,
    /// Bytes written to disk, for the metrics.
    pub spooled_bytes: u64,
}

fn size(message: &FlightData) -> usize {
    message.data_header.len() + message.data_body.len() + message.app_metadata.len()
}

impl ResultSpool {
    pub fn new(partitions: usize, disk: Option<Arc<DiskManager>>) -> Self {
        Self::with_memory(partitions, disk, SPOOL_MEMORY)
    }

    fn with_memory(partitions: usize, disk: Option<Arc<DiskManager>>, memory: usize) -> Self {
        Self {
            disk,
            file: None,
            partitions: (0..partitions).map(|_| vec![]).collect(),
            in_memory: 0,
            memory_limit: memory,
            spooled_bytes: 0,
        }
    }

    /// Holds one message of `partition` (with its rows).
    pub fn hold(&mut self, partition: usize, message: FlightData, rows: u64) -> Result<(), Status> {
        let bytes = size(&message);
        let held = match &self.disk {
            Some(disk) if self.in_memory + bytes > self.memory_limit => {
                if self.file.is_none() {
                    let file =
                        ExchangeSpill::create(disk, "result spool").map_err(|e| to_status(&e))?;
                    self.file = Some(file);
                }
                let file = self.file.as_mut().expect("created above");
                let at = file
                    .append_bytes(&message.encode_to_vec())
                    .map_err(|e| to_status(&e))?;
                self.spooled_bytes += at.len();
                Held::Disk(at)
            }
            Some(_) => {
                self.in_memory += bytes;
                Held::Memory(message)
            }
            None if self.in_memory + bytes > self.memory_limit => {
                return Err(Status::resource_exhausted(format!(
                    "the fault-tolerant result spool holds {} bytes in memory and the \
                     coordinator has no spool directory",
                    self.in_memory
                )))
            }
            None => {
                self.in_memory += bytes;
                Held::Memory(message)
            }
        };
        self.partitions[partition].push((held, rows));
        Ok(())
    }

    /// Drops what `partition` held (its task runs again).
    pub fn discard(&mut self, partition: usize) {
        for (held, _) in self.partitions[partition].drain(..) {
            if let Held::Memory(message) = held {
                self.in_memory -= size(&message);
            }
        }
    }

    /// Takes what `partition` held, in order, for the client.
    pub fn release(&mut self, partition: usize) -> Vec<Result<(FlightData, u64), Status>> {
        let held = std::mem::take(&mut self.partitions[partition]);
        let file = self.file.as_ref().map(|f| f.file());
        held.into_iter()
            .map(|(held, rows)| match held {
                Held::Memory(message) => {
                    self.in_memory -= size(&message);
                    Ok((message, rows))
                }
                Held::Disk(at) => {
                    let file = file
                        .as_ref()
                        .ok_or_else(|| Status::internal("a spooled message without its file"))?;
                    let bytes = read_bytes(file, at).map_err(|e| to_status(&e))?;
                    let message = FlightData::decode(bytes.as_slice())
                        .map_err(|e| Status::internal(format!("a spooled message: {e}")))?;
                    Ok((message, rows))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};

    fn message(n: u8) -> FlightData {
        FlightData {
            data_header: vec![n; 10].into(),
            data_body: vec![n; 100].into(),
            ..FlightData::default()
        }
    }

    #[test]
    fn a_partition_is_released_whole_and_in_order_across_memory_and_disk() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskManagerBuilder::default()
            .with_mode(DiskManagerMode::Directories(vec![dir.path().into()]))
            .build()
            .unwrap();
        let mut spool = ResultSpool::with_memory(2, Some(Arc::new(disk)), 250);
        for n in 0..5 {
            spool.hold(0, message(n), n as u64).unwrap();
        }
        spool.hold(1, message(9), 1).unwrap();
        assert!(
            spool.spooled_bytes > 0,
            "past its memory the spool writes to disk"
        );
        spool.discard(1);
        let released: Vec<_> = spool.release(0).into_iter().map(|r| r.unwrap()).collect();
        let expected: Vec<_> = (0..5).map(|n| (message(n), n as u64)).collect();
        assert_eq!(released, expected);
        assert!(
            spool.release(1).is_empty(),
            "a discarded partition holds nothing"
        );
        assert_eq!(spool.in_memory, 0);
    }

    #[test]
    fn without_a_spool_directory_memory_is_the_limit() {
        let mut spool = ResultSpool::with_memory(1, None, 250);
        spool.hold(0, message(1), 1).unwrap();
        spool.hold(0, message(2), 1).unwrap();
        let err = spool.hold(0, message(3), 1).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    }
}
