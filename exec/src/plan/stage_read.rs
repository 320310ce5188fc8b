//! `StageReadExec`: where a stage reads the output of an upstream stage.
//!
//! The coordinator puts an unbound `StageReadExec` wherever it cut the plan.
//! On the worker, the task runner binds it to the upstream task locations of
//! this task attempt; executing a partition then fetches the matching task
//! output streams from peers over Flight `DoGet`.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::ScalarValue;
use datafusion::common::{exec_err, internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{
    AcrossPartitions, ConstExpr, EquivalenceProperties, Partitioning, PhysicalExpr,
};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use squadron_proto::v1::ReadMode;
use squadron_proto::StreamKey;

use super::node_children::recomputed;
use super::producer_filter::{send_when_complete, Producers};
use crate::stream::manager::REGISTRATION_WAIT;
use crate::stream::{PendingStream, StreamManager};
use squadron_common::error::upstream_error;
use squadron_net::client::PeerClients;
use squadron_net::stream::fetch::fetch_stream;
use squadron_net::stream::StreamSecret;

/// The upstream task locations one task attempt reads from.
#[derive(Debug, Clone)]
pub struct StageBinding {
    pub job_id: String,
    /// The partition of the consuming task.
    pub consumer_partition: u32,
    /// Indexed by upstream partition: (peer URL, attempt).
    pub upstream: Vec<(String, u32)>,
    pub clients: PeerClients,
    /// This worker's own task streams: an upstream task that ran here is
    /// read straight from its channel, without a Flight round trip.
    pub local: StreamManager,
    /// The URL the coordinator knows this worker by: upstream tasks there
    /// ran here, even if they have not registered their streams yet.
    pub own_url: String,
    /// Signs the tickets of streams read from peers.
    pub secret: StreamSecret,
}

/// The metric of the Arrow bytes a stage read received.
pub const BYTES_RECEIVED: &str = "bytes_received";

#[derive(Debug)]
pub struct StageReadExec {
    stage_id: u32,
    mode: ReadMode,
    partitions: usize,
    /// MERGE mode: the consumer tasks that read the upstream stage, in
    /// channel order (task `readers[c]` reads channel `first_channel + c`).
    readers: Vec<u32>,
    /// MERGE mode: the first channel this consumer stage reads; other
    /// consumer stages of the same upstream stage read the channels before
    /// or after its range.
    first_channel: u32,
    properties: Arc<PlanProperties>,
    binding: Option<StageBinding>,
    /// Joins' filters over this read's rows, each sent to the producers of
    /// the streams it reads once complete (see `producer_filter`).
    producer_filters: Vec<Arc<dyn PhysicalExpr>>,
    /// Rows and bytes read, per partition (a task's input, for EXPLAIN
    /// ANALYZE and `system.tasks`).
    metrics: ExecutionPlanMetricsSet,
}

impl StageReadExec {
    pub fn new(stage_id: u32, mode: ReadMode, partitions: usize, schema: SchemaRef) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Self {
            stage_id,
            mode,
            partitions,
            readers: vec![],
            first_channel: 0,
            properties: Arc::new(properties),
            binding: None,
            producer_filters: vec![],
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// A copy that also sends `filter` (a dynamic filter over this read's
    /// columns, published by a join above) to the tasks producing the
    /// streams it reads, once the filter is complete.
    pub fn with_producer_filter(&self, filter: Arc<dyn PhysicalExpr>) -> Self {
        let mut filters = self.producer_filters.clone();
        let id = filter.expression_id();
        if id.is_none() || filters.iter().all(|f| f.expression_id() != id) {
            filters.push(filter);
        }
        Self {
            binding: self.binding.clone(),
            producer_filters: filters,
            ..self.clone_unbound()
        }
    }

    /// A copy that knows which of its columns hold one value in every row
    /// (`column`, value when known). Only such whole-stream constants are
    /// kept: a value constant per upstream partition is not constant once
    /// partitions are merged or shuffled.
    pub fn with_constants(&self, constants: &[(usize, Option<ScalarValue>)]) -> Result<Self> {
        let exprs = constants
            .iter()
            .map(|(index, value)| {
                let column = self.column(*index)?;
                Ok(ConstExpr::new(
                    column,
                    AcrossPartitions::Uniform(value.clone()),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut properties = EquivalenceProperties::new(self.schema());
        properties.add_constants(exprs)?;
        // A known value joins the column's class as a literal, as a filter
        // `k = 1` below the cut made it: DataFusion merges the classes of
        // two sides' columns through that literal, and planned the
        // operators above knowing them equal (a join's partitioning on one
        // side's key passed on through the other's).
        for (index, value) in constants {
            if let Some(value) = value {
                let literal: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(value.clone()));
                properties.add_equal_conditions(self.column(*index)?, literal)?;
            }
        }
        Ok(self.with_equivalences(properties))
    }

    /// A copy that knows which of its columns hold equal values in every
    /// row (each class of `classes`: a join's keys below the cut). The
    /// operators above were planned knowing it: a join's hash partitioning
    /// on one key is passed on through a projection that keeps only the
    /// other, and a union over such inputs became an interleave. A read
    /// that forgot it would leave those operators unable to be rebuilt.
    pub fn with_equal_columns(&self, classes: &[Vec<usize>]) -> Result<Self> {
        let mut equal = self.properties.equivalence_properties().clone();
        for class in classes {
            let Some((first, others)) = class.split_first() else {
                continue;
            };
            for other in others {
                equal.add_equal_conditions(self.column(*first)?, self.column(*other)?)?;
            }
        }
        Ok(self.with_equivalences(equal))
    }

    /// A copy with `equivalences` and this read's partitioning.
    fn with_equivalences(&self, equivalences: EquivalenceProperties) -> Self {
        let partitioning = self.properties.output_partitioning().clone();
        Self {
            properties: Arc::new(PlanProperties::new(
                equivalences,
                partitioning,
                EmissionType::Incremental,
                Boundedness::Bounded,
            )),
            ..self.clone_unbound()
        }
    }

    /// A copy whose partitions are the hash partitions of `columns` (see
    /// `hash_columns`); none for the default, unknown partitioning.
    pub fn hashed_on(&self, columns: &[usize]) -> Result<Self> {
        if columns.is_empty() {
            return Ok(self.clone_unbound());
        }
        let exprs = columns
            .iter()
            .map(|index| self.column(*index))
            .collect::<Result<Vec<_>>>()?;
        let mut properties = PlanProperties::clone(&self.properties);
        properties.partitioning = Partitioning::Hash(exprs, self.partitions);
        Ok(Self {
            properties: Arc::new(properties),
            ..self.clone_unbound()
        })
    }

    /// Column `index` of the read's schema, as an expression.
    fn column(&self, index: usize) -> Result<Arc<dyn PhysicalExpr>> {
        let schema = self.schema();
        match schema.fields().get(index) {
            Some(field) => Ok(Arc::new(Column::new(field.name(), index))),
            None => internal_err!("column {index} of a {}-column read", schema.fields().len()),
        }
    }

    /// The columns the read is hash-partitioned on (see `hashed_on`).
    pub fn hash_columns(&self) -> Vec<usize> {
        hash_partition_columns(self.properties.output_partitioning(), self.partitions)
    }

    /// The whole-stream constant columns (see `with_constants`).
    pub fn constants(&self) -> Vec<(usize, Option<ScalarValue>)> {
        uniform_constant_columns(self.properties.equivalence_properties())
    }

    /// A copy read by the given consumer tasks (MERGE mode), on the
    /// channels from `first_channel` on; in SHUFFLE mode `readers` is
    /// empty and partition `p` reads channel `first_channel + p`.
    pub fn with_readers(&self, readers: Vec<u32>, first_channel: u32) -> Self {
        Self {
            readers,
            first_channel,
            binding: None,
            ..self.clone_unbound()
        }
    }

    fn clone_unbound(&self) -> Self {
        Self {
            stage_id: self.stage_id,
            mode: self.mode,
            partitions: self.partitions,
            readers: self.readers.clone(),
            first_channel: self.first_channel,
            properties: Arc::clone(&self.properties),
            binding: None,
            producer_filters: self.producer_filters.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn readers(&self) -> &[u32] {
        &self.readers
    }

    pub fn first_channel(&self) -> u32 {
        self.first_channel
    }

    pub fn stage_id(&self) -> u32 {
        self.stage_id
    }

    pub fn mode(&self) -> ReadMode {
        self.mode
    }

    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// The classes of columns equal in every row (see `with_equal_columns`).
    pub fn equal_columns(&self) -> Vec<Vec<usize>> {
        equal_column_classes(self.properties.equivalence_properties())
    }

    /// A copy of this placeholder that reads from the given upstream tasks.
    pub fn bind(&self, binding: StageBinding) -> Result<Self> {
        // A merge read has one partition per upstream task; a shuffle read
        // reads every upstream task, however many there are.
        let wrong_count = match self.mode {
            ReadMode::Merge => binding.upstream.len() != self.partitions,
            _ => binding.upstream.is_empty(),
        };
        if wrong_count {
            return internal_err!(
                "stage {} input has {} upstream tasks ({} partitions)",
                self.stage_id,
                binding.upstream.len(),
                self.partitions
            );
        }
        // A task that is not a reader of a merge still binds it: the read may
        // sit under a union branch this task never executes (a union's
        // partitions are its inputs' partitions side by side). Executing it
        // is refused in `streams_for`.
        Ok(Self {
            binding: Some(binding),
            ..self.clone_unbound()
        })
    }

    /// The upstream streams that make up one output partition.
    fn streams_for(
        &self,
        binding: &StageBinding,
        partition: usize,
    ) -> Result<Vec<(String, StreamKey)>> {
        let key = |upstream: usize, attempt: u32, channel: u32| StreamKey {
            job_id: binding.job_id.clone(),
            stage_id: self.stage_id,
            partition: upstream as u32,
            attempt,
            channel,
        };
        match self.mode {
            ReadMode::Merge => {
                let (url, attempt) = &binding.upstream[partition];
                // Only a union branch of another task holds such a read.
                let Some(channel) = self
                    .readers
                    .iter()
                    .position(|r| *r == binding.consumer_partition)
                else {
                    return internal_err!(
                        "task {} is not a reader of stage {}",
                        binding.consumer_partition,
                        self.stage_id
                    );
                };
                Ok(vec![(
                    url.clone(),
                    key(partition, *attempt, self.first_channel + channel as u32),
                )])
            }
            _ => Ok(binding
                .upstream
                .iter()
                .enumerate()
                .map(|(p, (url, attempt))| {
                    let channel = self.first_channel + partition as u32;
                    (url.clone(), key(p, *attempt, channel))
                })
                .collect()),
        }
    }
}

impl DisplayAs for StageReadExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let mode = match self.mode {
            ReadMode::Merge => "merge",
            _ => "shuffle",
        };
        write!(
            f,
            "StageReadExec: stage={}, mode={mode}, partitions={}",
            self.stage_id, self.partitions
        )?;
        if self.mode == ReadMode::Merge {
            write!(f, ", readers={:?}", self.readers)?;
        }
        if self.first_channel > 0 {
            write!(f, ", first_channel={}", self.first_channel)?;
        }
        if !self.producer_filters.is_empty() {
            write!(f, ", filters_producers=true")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for StageReadExec {
    fn name(&self) -> &str {
        "StageReadExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        recomputed(self, children)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(binding) = &self.binding else {
            return exec_err!("StageReadExec for stage {} is not bound", self.stage_id);
        };
        if partition >= self.partitions {
            return exec_err!(
                "StageReadExec for stage {} has no partition {partition}",
                self.stage_id
            );
        }
        let streams = self.streams_for(binding, partition)?;
        let producers = Producers {
            clients: binding.clients.clone(),
            local: binding.local.clone(),
            own_url: binding.own_url.clone(),
            secret: binding.secret.clone(),
        };
        let senders: Vec<_> = self
            .producer_filters
            .iter()
            .map(|filter| {
                send_when_complete(Arc::clone(filter), producers.clone(), streams.clone())
            })
            .collect();
        let fetches = streams
            .into_iter()
            .map(|(url, key)| match binding.local.take(&key) {
                // Stream keys name the job, so a local hit is this stream.
                Some(pending) => local_stream(pending, key).boxed(),
                None if url == binding.own_url => {
                    late_local_stream(binding.local.clone(), key).boxed()
                }
                None => {
                    let ticket = binding.secret.ticket(&key);
                    fetch_stream(binding.clients.clone(), url, key, ticket, self.schema()).boxed()
                }
            });
        // Read all upstream streams at once: a producer blocked on one
        // consumer's full buffer must never wait for a stream read later.
        let merged = futures::stream::select_all(fetches);
        let rows = BaselineMetrics::new(&self.metrics, partition);
        let bytes = MetricBuilder::new(&self.metrics).counter(BYTES_RECEIVED, partition);
        let counted = merged.inspect(move |item| {
            // The filters' senders live as long as the read.
            let _ = &senders;
            if let Ok(batch) = item {
                rows.record_output(batch.num_rows());
                bytes.add(crate::stream::batch_bytes(batch) as usize);
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            counted,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// The columns of a hash partitioning into `partitions` partitions, when it
/// is one over plain columns: what a read of a stream partitioned so may
/// promise (see `StageReadExec::hashed_on`). Empty otherwise.
pub fn hash_partition_columns(partitioning: &Partitioning, partitions: usize) -> Vec<usize> {
    match partitioning {
        Partitioning::Hash(exprs, n) if *n == partitions => exprs
            .iter()
            .map(|e| e.downcast_ref::<Column>().map(Column::index))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
        _ => vec![],
    }
}

/// The columns `properties` knows to hold one value across all partitions:
/// what a read of a stream with these properties may promise.
pub fn uniform_constant_columns(
    properties: &EquivalenceProperties,
) -> Vec<(usize, Option<ScalarValue>)> {
    properties
        .constants()
        .into_iter()
        .filter_map(|constant| {
            let column = constant.expr.downcast_ref::<Column>()?;
            match constant.across_partitions {
                AcrossPartitions::Uniform(value) => Some((column.index(), value)),
                AcrossPartitions::Heterogeneous => None,
            }
        })
        .collect()
}

/// The classes of two or more plain columns `properties` knows to be
/// equal in every row: what a read of a stream with these properties may
/// promise. Members that are not plain columns are left out.
pub fn equal_column_classes(properties: &EquivalenceProperties) -> Vec<Vec<usize>> {
    properties
        .eq_group()
        .iter()
        .map(|class| {
            class
                .iter()
                .filter_map(|e| e.downcast_ref::<Column>().map(Column::index))
                .collect::<Vec<_>>()
        })
        .filter(|columns| columns.len() > 1)
        .collect()
}

/// The batches of a task stream produced on this worker by a task that
/// has not registered it yet.
fn late_local_stream(
    local: StreamManager,
    key: StreamKey,
) -> impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static {
    futures::stream::once(async move {
        match local
            .take_when_registered(&key, REGISTRATION_WAIT, None)
            .await
        {
            Ok(Some(pending)) => local_stream(pending, key).boxed(),
            Ok(None) | Err(_) => {
                let status = tonic::Status::not_found(format!(
                    "task stream {key} was not registered within {REGISTRATION_WAIT:?}"
                ));
                futures::stream::once(async move {
                    Err(upstream_error(&format!("{key} on this worker"), &status))
                })
                .boxed()
            }
        }
    })
    .flatten()
}

/// The batches of a task stream produced on this worker.
fn local_stream(
    pending: PendingStream,
    key: StreamKey,
) -> impl futures::Stream<Item = Result<RecordBatch>> + Send + 'static {
    let describe = format!("{key} on this worker");
    pending
        .reader
        .map(move |item| item.map_err(|status| upstream_error(&describe, &status)))
}
