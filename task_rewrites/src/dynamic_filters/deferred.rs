//! A probe side opened when first read, not when its join is executed.
//!
//! A hash join executes its probe side as it starts, and DataFusion's
//! Parquet scan may plan its files (and prune their row groups) as soon as
//! it is executed, before the build side, hence the filter, is complete:
//! row groups the filter rules out were then read anyway. Executed only
//! once the join asks for its first probe batch, which it does after
//! building, the scan opens with the published filter.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::ReplaceChildrenOptions;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, RecordBatchStream,
    SendableRecordBatchStream,
};
use futures::{Stream, StreamExt};

use squadron_exec::plan::node_children::{one_input, recomputed};

/// `input`, executed on the first poll of its stream.
#[derive(Debug)]
pub struct DeferredExec {
    input: Arc<dyn ExecutionPlan>,
}

impl DeferredExec {
    pub fn new(input: Arc<dyn ExecutionPlan>) -> Self {
        Self { input }
    }
}

impl DisplayAs for DeferredExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DeferredExec")
    }
}

impl ExecutionPlan for DeferredExec {
    fn name(&self) -> &str {
        "DeferredExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
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
        let input = one_input(children, "DeferredExec")?;
        Ok(Arc::new(Self::new(input)))
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

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        Ok(Box::pin(DeferredStream {
            state: State::NotStarted {
                input: Arc::clone(&self.input),
                partition,
                context,
            },
            schema: self.input.schema(),
        }))
    }
}

enum State {
    NotStarted {
        input: Arc<dyn ExecutionPlan>,
        partition: usize,
        context: Arc<TaskContext>,
    },
    Started(SendableRecordBatchStream),
    Failed,
}

struct DeferredStream {
    state: State,
    schema: SchemaRef,
}

impl Stream for DeferredStream {
    type Item = Result<RecordBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let State::NotStarted {
            input,
            partition,
            context,
        } = &self.state
        {
            match input.execute(*partition, Arc::clone(context)) {
                Ok(stream) => self.state = State::Started(stream),
                Err(e) => {
                    self.state = State::Failed;
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
        match &mut self.state {
            State::Started(stream) => stream.poll_next_unpin(cx),
            _ => Poll::Ready(None),
        }
    }
}

impl RecordBatchStream for DeferredStream {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }
}
