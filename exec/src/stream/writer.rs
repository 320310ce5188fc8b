//! Routes a task's output batches to its output channels.

use datafusion::arrow::compute::BatchCoalescer;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::metrics;
use datafusion::physical_plan::repartition::BatchPartitioner;
use datafusion::physical_plan::{Partitioning, SendableRecordBatchStream};
use futures::StreamExt;

use super::channel::OutputWriter;
use squadron_common::error::to_status;

/// How batches are assigned to channels.
pub enum Router {
    /// One channel gets every batch.
    Single,
    /// Every channel gets every batch.
    Broadcast,
    /// Rows are split by the partitioning of the RepartitionExec the planner
    /// cut at (hash or round robin).
    Repartition(Box<BatchPartitioner>),
}

impl Router {
    pub fn repartition(
        partitioning: Partitioning,
        input_partition: usize,
        input_partitions: usize,
    ) -> Result<Self> {
        let partitioner = BatchPartitioner::try_new(
            partitioning,
            metrics::Time::new(),
            input_partition,
            input_partitions,
        )?;
        Ok(Self::Repartition(Box::new(partitioner)))
    }
}

/// The bytes of `batch`'s rows: of a slice, only the slice (a batch cut
/// from a larger one would otherwise count the whole buffer).
pub fn batch_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|column| {
            let data = column.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| column.get_array_memory_size()) as u64
        })
        .sum()
}

/// What a task wrote to its output channels.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OutputCount {
    pub rows: u64,
    /// Batches sent (a broadcast batch counts once per channel).
    pub batches: u64,
    /// Arrow in-memory bytes sent, likewise.
    pub bytes: u64,
    /// Bytes its channels spilled to disk while it wrote.
    pub spilled_bytes: u64,
}

/// Writes a task's output to its channels and returns what it wrote.
///
/// Small batches are first coalesced to about `batch_size` rows: operators
/// such as a cross join emit one batch per build row, and sending those
/// one by one made a large result thousands of tiny messages. Batches of
/// at least half that size pass through without a copy.
///
/// A channel whose reader went away (a satisfied LIMIT, a join that needs
/// no more probe rows, a cancelled job) is skipped from then on; when no
/// reader is left the task stops early. An execution error ends every
/// channel with that error, so consumers fail with the cause.
pub async fn write_output(
    mut input: SendableRecordBatchStream,
    mut router: Router,
    output: OutputWriter,
    batch_size: usize,
) -> Result<OutputCount> {
    let batch_size = batch_size.max(1);
    let mut coalescer = BatchCoalescer::new(input.schema(), batch_size)
        .with_biggest_coalesce_batch_size(Some(batch_size / 2));
    let mut count = OutputCount::default();
    let mut done = false;
    while !done {
        match input.next().await {
            Some(Ok(batch)) => {
                count.rows += batch.num_rows() as u64;
                coalescer.push_batch(batch)?;
            }
            Some(Err(e)) => {
                output.fail(to_status(&e));
                return Err(e);
            }
            None => {
                coalescer.finish_buffered_batch()?;
                done = true;
            }
        }
        while let Some(batch) = coalescer.next_completed_batch() {
            if let Err(e) = send(&mut router, &output, batch, &mut count).await {
                output.fail(to_status(&e));
                return Err(e);
            }
        }
        if output.open_channels() == 0 {
            break;
        }
    }
    count.spilled_bytes = output.spilled_bytes();
    output.finish();
    Ok(count)
}

async fn send(
    router: &mut Router,
    output: &OutputWriter,
    batch: RecordBatch,
    count: &mut OutputCount,
) -> Result<()> {
    let channels = output.channel_count();
    for (channel, part) in route(router, batch, channels)? {
        if part.num_rows() > 0 {
            count.batches += 1;
            count.bytes += batch_bytes(&part);
            output.send(channel, part).await?;
        }
    }
    Ok(())
}

fn route(
    router: &mut Router,
    batch: RecordBatch,
    channels: usize,
) -> Result<Vec<(usize, RecordBatch)>> {
    match router {
        Router::Single => Ok(vec![(0, batch)]),
        Router::Broadcast => Ok((0..channels).map(|c| (c, batch.clone())).collect()),
        Router::Repartition(partitioner) => {
            let parts = partitioner
                .partition_iter(batch)?
                .collect::<Result<Vec<_>>>()?;
            if let Some((c, _)) = parts.iter().find(|(c, _)| *c >= channels) {
                return Err(DataFusionError::Internal(format!(
                    "partitioner chose channel {c} of {channels}"
                )));
            }
            Ok(parts)
        }
    }
}
