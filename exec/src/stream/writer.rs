//! Routes a task's output batches to its output channels.

use datafusion::arrow::compute::BatchCoalescer;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::metrics;
use datafusion::physical_plan::repartition::BatchPartitioner;
use datafusion::physical_plan::{Partitioning, SendableRecordBatchStream};
use futures::StreamExt;

use super::channel::OutputWriter;
use super::filter::FilterTrials;
use squadron_common::error::to_status;

/// How batches are assigned to channels.
pub enum Router {
    /// One channel gets every batch.
    Single,
    /// Every channel gets every batch.
    Broadcast,
    /// Rows are split by the partitioning of the RepartitionExec the planner
    /// cut at (hash or round robin) into `partitions`; partition `p` goes to
    /// channels `p`, `p + partitions`, … (one range per consumer stage).
    Repartition {
        partitioner: Box<BatchPartitioner>,
        partitions: usize,
    },
}

impl Router {
    pub fn repartition(
        partitioning: Partitioning,
        input_partition: usize,
        input_partitions: usize,
    ) -> Result<Self> {
        let partitions = partitioning.partition_count();
        let partitioner = BatchPartitioner::try_new(
            partitioning,
            metrics::Time::new(),
            input_partition,
            input_partitions,
        )?;
        Ok(Self::Repartition {
            partitioner: Box::new(partitioner),
            partitions,
        })
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
    /// Rows its consumers' filters dropped before they were queued (a
    /// broadcast row counts once per channel that dropped it).
    pub rows_filtered: u64,
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
    let mut trials = FilterTrials::default();
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
            let sent = send(&mut router, &output, batch, &mut trials, &mut count).await;
            if let Err(e) = sent {
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
    trials: &mut FilterTrials,
    count: &mut OutputCount,
) -> Result<()> {
    let channels = output.channel_count();
    for (channel, part) in route(router, batch, channels)? {
        let mut part = part;
        for filter in output.filters(channel) {
            if part.num_rows() == 0 {
                break;
            }
            let (kept, dropped) = trials.apply(channel, &filter, part);
            count.rows_filtered += dropped as u64;
            part = kept;
        }
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
        Router::Repartition {
            partitioner,
            partitions,
        } => {
            let partitions = *partitions;
            if partitions == 0 || !channels.is_multiple_of(partitions) {
                return Err(DataFusionError::Internal(format!(
                    "{partitions} partitions routed to {channels} channels"
                )));
            }
            let parts = partitioner
                .partition_iter(batch)?
                .collect::<Result<Vec<_>>>()?;
            if let Some((c, _)) = parts.iter().find(|(c, _)| *c >= partitions) {
                return Err(DataFusionError::Internal(format!(
                    "partitioner chose partition {c} of {partitions}"
                )));
            }
            // Each consumer's range of channels gets every partition.
            Ok((0..channels / partitions)
                .flat_map(|copy| {
                    parts
                        .iter()
                        .map(move |(c, part)| (copy * partitions + c, part.clone()))
                })
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
    use datafusion::common::ScalarValue;
    use datafusion::execution::memory_pool::{MemoryConsumer, MemoryPool, UnboundedMemoryPool};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;

    use super::*;
    use crate::stream::channel::{output_channels, OutputReader};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]))
    }

    /// Keys `from..to`, as one batch.
    fn keys(from: i64, to: i64) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![Arc::new(Int64Array::from_iter_values(from..to))],
        )
        .unwrap()
    }

    /// `k % 10 = 0`: a tenth of the keys.
    fn tenth() -> Arc<dyn PhysicalExpr> {
        let schema = schema();
        let k = col("k", &schema).unwrap();
        let ten = lit(ScalarValue::Int64(Some(10)));
        let rest = binary(k, Operator::Modulo, ten, &schema).unwrap();
        binary(
            rest,
            Operator::Eq,
            lit(ScalarValue::Int64(Some(0))),
            &schema,
        )
        .unwrap()
    }

    async fn read_all(reader: &mut OutputReader) -> Vec<i64> {
        let mut got = vec![];
        while let Some(batch) = reader.next().await {
            got.extend(
                batch
                    .unwrap()
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter(),
            );
        }
        got
    }

    /// A task writing the batches it is handed to `channels` channels as
    /// `router` says, with their readers and the sender of its input.
    fn producer_with(
        router: Router,
        channels: usize,
    ) -> (
        mpsc::Sender<Result<RecordBatch>>,
        tokio::task::JoinHandle<Result<OutputCount>>,
        Vec<OutputReader>,
    ) {
        let pool: Arc<dyn MemoryPool> = Arc::new(UnboundedMemoryPool::default());
        let (writer, readers) = output_channels(channels, MemoryConsumer::new("t").register(&pool));
        let (tx, rx) = mpsc::channel(1);
        let input = Box::pin(RecordBatchStreamAdapter::new(
            schema(),
            ReceiverStream::new(rx),
        ));
        // A batch size of 1 passes every batch on as it comes.
        let task = tokio::spawn(write_output(input, router, writer, 1));
        (tx, task, readers)
    }

    /// A task writing the batches it is handed to one channel, with its
    /// reader and the sender of its input.
    fn producer() -> (
        mpsc::Sender<Result<RecordBatch>>,
        tokio::task::JoinHandle<Result<OutputCount>>,
        OutputReader,
    ) {
        let (tx, task, mut readers) = producer_with(Router::Single, 1);
        (tx, task, readers.remove(0))
    }

    #[tokio::test]
    async fn a_filter_set_before_the_rows_come_keeps_them_from_the_channel() {
        let (tx, task, mut reader) = producer();
        assert!(reader.filter_slot().unwrap().add(tenth()));
        tx.send(Ok(keys(0, 100))).await.unwrap();
        drop(tx);
        let got = read_all(&mut reader).await;
        assert_eq!(got, (0..100).step_by(10).collect::<Vec<_>>());
        let count = task.await.unwrap().unwrap();
        assert_eq!((count.rows, count.rows_filtered), (100, 90));
    }

    #[tokio::test]
    async fn a_filter_set_midway_applies_to_the_rows_after_it() {
        let (tx, task, mut reader) = producer();
        tx.send(Ok(keys(0, 100))).await.unwrap();
        let first = reader.next().await.unwrap().unwrap();
        assert_eq!(first.num_rows(), 100, "queued before the filter: whole");
        assert!(reader.filter_slot().unwrap().add(tenth()));
        tx.send(Ok(keys(100, 200))).await.unwrap();
        drop(tx);
        let got = read_all(&mut reader).await;
        assert_eq!(got, (100..200).step_by(10).collect::<Vec<_>>());
        assert_eq!(task.await.unwrap().unwrap().rows_filtered, 90);
    }

    #[tokio::test]
    async fn a_filter_set_after_the_producer_finished_changes_nothing() {
        let (tx, task, mut reader) = producer();
        let slot = reader.filter_slot().unwrap();
        tx.send(Ok(keys(0, 100))).await.unwrap();
        drop(tx);
        assert_eq!(task.await.unwrap().unwrap().rows_filtered, 0);
        assert!(slot.add(tenth()), "the channels are still there");
        assert_eq!(read_all(&mut reader).await, (0..100).collect::<Vec<_>>());
        drop(reader);
        assert!(!slot.add(tenth()), "the channels are gone");
    }

    #[tokio::test]
    async fn a_shuffle_read_by_two_consumers_gives_each_every_partition() {
        use datafusion::physical_plan::Partitioning;
        let hashed = Partitioning::Hash(vec![col("k", &schema()).unwrap()], 2);
        let router = Router::repartition(hashed, 0, 1).unwrap();
        // Two partitions, two consumers: channels 0-1 and 2-3.
        let (tx, task, mut readers) = producer_with(router, 4);
        // Far more batches than a channel holds before its producer waits.
        let feed = tokio::spawn(async move {
            for start in (0..50_000).step_by(1_000) {
                tx.send(Ok(keys(start, start + 1_000))).await.unwrap();
            }
        });
        // The first consumer reads all of its copy before the second
        // reads anything (a join's build side before its probe side).
        let (first, rest) = readers.split_at_mut(2);
        let mut copy_a = [read_all(&mut first[0]).await, read_all(&mut first[1]).await];
        let mut copy_b = [read_all(&mut rest[0]).await, read_all(&mut rest[1]).await];
        feed.await.unwrap();
        assert_eq!(task.await.unwrap().unwrap().rows, 50_000);
        for copy in [&mut copy_a, &mut copy_b] {
            copy.iter_mut().for_each(|keys| keys.sort_unstable());
        }
        assert_eq!(copy_a, copy_b, "each consumer reads the same partitions");
        let mut all: Vec<i64> = copy_a.concat();
        all.sort_unstable();
        assert_eq!(all, (0..50_000).collect::<Vec<_>>());
        assert!(!copy_a[0].is_empty() && !copy_a[1].is_empty());
    }
}
