//! The node that watches a hash join's build side go by and, once it has
//! all of it, publishes the probe-side filter (`keys`) to the dynamic
//! filter the probe side's scans hold.
//!
//! DataFusion's hash join publishes that filter itself only once every
//! partition of the join's plan instance has built: in a task, one
//! partition runs and the others never would, so the join would wait
//! forever. This node publishes from the one partition that runs, which
//! is sound there (`super`); rows pass through untouched.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::{
    apply_expression_roots, DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties,
    RecordBatchStream, SendableRecordBatchStream,
};
use futures::{Stream, StreamExt};

use squadron_exec::key_filters::{BuildKeys, Membership};
use squadron_exec::plan::node_children::{one_input, recomputed};

/// Publishes `filter` from the build keys `build_keys` seen in its input.
#[derive(Debug)]
pub struct BuildSideFilterExec {
    input: Arc<dyn ExecutionPlan>,
    /// The join's build-side key expressions, over `input`'s schema.
    build_keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The join's probe-side key expressions, over `probe_schema`: the
    /// filter's own terms.
    probe_keys: Vec<Arc<dyn PhysicalExpr>>,
    probe_schema: SchemaRef,
    filter: Arc<DynamicFilterPhysicalExpr>,
    /// How the filter tests membership of the build keys: where it drops
    /// rows, not only prunes scans, it lists more of them or holds a Bloom
    /// filter of them, which pruning has no use for.
    membership: Membership,
    metrics: ExecutionPlanMetricsSet,
}

/// Metric: 1 for each filter published (0: the build side did not finish).
pub const FILTERS_PUBLISHED: &str = "dynamic_filters_published";

impl BuildSideFilterExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        build_keys: Vec<Arc<dyn PhysicalExpr>>,
        probe_keys: Vec<Arc<dyn PhysicalExpr>>,
        probe_schema: SchemaRef,
        filter: Arc<DynamicFilterPhysicalExpr>,
        membership: Membership,
    ) -> Self {
        Self {
            input,
            build_keys,
            probe_keys,
            probe_schema,
            filter,
            membership,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// The filter this node publishes.
    pub fn filter(&self) -> &Arc<DynamicFilterPhysicalExpr> {
        &self.filter
    }
}

impl DisplayAs for BuildSideFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let keys: Vec<String> = self.probe_keys.iter().map(|k| k.to_string()).collect();
        write!(f, "BuildSideFilterExec: probe keys=[{}]", keys.join(", "))?;
        if let Ok(current) = self.filter.current() {
            write!(f, ", filter={current}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for BuildSideFilterExec {
    fn name(&self) -> &str {
        "BuildSideFilterExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        apply_expression_roots(&self.build_keys, f)
    }

    fn dynamic_expressions_produced(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        vec![Arc::clone(&self.filter) as Arc<dyn PhysicalExpr>]
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_input(children, "BuildSideFilterExec")?;
        Ok(Arc::new(Self::new(
            input,
            self.build_keys.clone(),
            self.probe_keys.clone(),
            Arc::clone(&self.probe_schema),
            Arc::clone(&self.filter),
            self.membership,
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        recomputed(self, children)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let types = self
            .build_keys
            .iter()
            .map(|k| k.data_type(&input.schema()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::pin(BuildSideStream {
            input,
            build_keys: self.build_keys.clone(),
            probe_keys: self.probe_keys.clone(),
            probe_schema: Arc::clone(&self.probe_schema),
            keys: Some(BuildKeys::new(&types, self.membership)?),
            filter: Arc::clone(&self.filter),
            published: MetricBuilder::new(&self.metrics).counter(FILTERS_PUBLISHED, partition),
        }))
    }
}

struct BuildSideStream {
    input: SendableRecordBatchStream,
    build_keys: Vec<Arc<dyn PhysicalExpr>>,
    probe_keys: Vec<Arc<dyn PhysicalExpr>>,
    probe_schema: SchemaRef,
    /// Until published.
    keys: Option<BuildKeys>,
    filter: Arc<DynamicFilterPhysicalExpr>,
    published: Count,
}

impl BuildSideStream {
    fn observe(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(keys) = &mut self.keys else {
            return Ok(());
        };
        let columns = self
            .build_keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<_>>>()?;
        keys.update(&columns)
    }

    fn publish(&mut self) -> Result<()> {
        let Some(mut keys) = self.keys.take() else {
            return Ok(());
        };
        let filter = keys.probe_filter(&self.probe_keys, &self.probe_schema)?;
        tracing::debug!(
            build_rows = keys.rows(),
            %filter,
            "dynamic filter published"
        );
        self.filter.update(filter)?;
        self.filter.mark_complete();
        self.published.add(1);
        Ok(())
    }
}

impl Stream for BuildSideStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = ready!(self.input.poll_next_unpin(cx));
        Poll::Ready(match next {
            Some(Ok(batch)) => match self.observe(&batch) {
                Ok(()) => Some(Ok(batch)),
                Err(e) => {
                    // Keys missed: never publish from what was seen.
                    self.keys = None;
                    Some(Err(e))
                }
            },
            // Only a build side read to its end says what the probe side
            // may be pruned to.
            None => self.publish().err().map(Err),
            Some(Err(e)) => Some(Err(e)),
        })
    }
}

impl RecordBatchStream for BuildSideStream {
    fn schema(&self) -> SchemaRef {
        self.input.schema()
    }
}
