//! `SinkWriteExec`: DataFusion's own file sinks (COPY, INSERT into an
//! external table) run by every task on its partition of the rows.
//!
//! DataFusion's `DataSinkExec` reads its whole input as one stream, so a
//! COPY would funnel every row through one process. Here each task hands
//! its partition to the same sink: a file sink names every file it writes
//! afresh (a random id per write), so the tasks write their own files side
//! by side into the target directory, in the sink's format, options and
//! `PARTITIONED BY` layout, and answer the rows they wrote. A COPY into a
//! single file keeps one writer: its input has one partition.
//!
//! The sink travels as a `DataSinkExec` over an empty input (the
//! `holder`), which datafusion-proto encodes for the Parquet, CSV and JSON
//! sinks.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, Result};
use datafusion::datasource::sink::DataSinkExec;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};

use crate::plan::node_children::{one_input, recomputed};

#[derive(Debug)]
pub struct SinkWriteExec {
    /// A `DataSinkExec` over an empty input: the sink, and the schema of
    /// what it answers (one `count` row).
    holder: Arc<dyn ExecutionPlan>,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl SinkWriteExec {
    /// The writes of `sink` (a `DataSinkExec`), done by each partition of
    /// `input` (which yields the rows the sink expects).
    pub fn new(sink: &Arc<dyn ExecutionPlan>, input: Arc<dyn ExecutionPlan>) -> Result<Self> {
        let empty: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(input.schema()));
        #[allow(deprecated)]
        let holder = Arc::clone(sink).with_new_children(vec![empty])?;
        Self::from_holder(holder, input)
    }

    /// From a holder made by `new` (decoded).
    pub fn from_holder(
        holder: Arc<dyn ExecutionPlan>,
        input: Arc<dyn ExecutionPlan>,
    ) -> Result<Self> {
        if holder.downcast_ref::<DataSinkExec>().is_none() {
            return internal_err!(
                "SinkWriteExec holds a {}, not a DataSinkExec",
                holder.name()
            );
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(holder.schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Self {
            holder,
            input,
            properties: Arc::new(properties),
        })
    }

    /// The `DataSinkExec` (over an empty input) holding the sink.
    pub fn holder(&self) -> &Arc<dyn ExecutionPlan> {
        &self.holder
    }

    pub fn sink(&self) -> &DataSinkExec {
        self.holder
            .downcast_ref::<DataSinkExec>()
            .expect("checked when made")
    }
}

impl DisplayAs for SinkWriteExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "SinkWriteExec: ")?;
        self.sink().sink().fmt_as(t, f)
    }
}

impl ExecutionPlan for SinkWriteExec {
    fn name(&self) -> &str {
        "SinkWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_input(children, "SinkWriteExec")?;
        Ok(Arc::new(Self::from_holder(
            Arc::clone(&self.holder),
            input,
        )?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        recomputed(self, children)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let rows = self.input.execute(partition, Arc::clone(&context))?;
        let holder = Arc::clone(&self.holder);
        let schema = self.holder.schema();
        let answer = futures::stream::once(async move {
            let sink = holder
                .downcast_ref::<DataSinkExec>()
                .expect("checked when made")
                .sink();
            let count = sink.write_all(rows, &context).await?;
            count_batch(&holder.schema(), count)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, answer)))
    }
}

/// The one-row `count` answer of a sink.
fn count_batch(
    schema: &datafusion::arrow::datatypes::SchemaRef,
    count: u64,
) -> Result<datafusion::arrow::array::RecordBatch> {
    use datafusion::arrow::array::UInt64Array;
    Ok(datafusion::arrow::array::RecordBatch::try_new(
        Arc::clone(schema),
        vec![Arc::new(UInt64Array::from(vec![count]))],
    )?)
}
