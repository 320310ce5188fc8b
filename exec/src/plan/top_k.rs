//! The window top-N operator on the wire.
//!
//! With `datafusion.optimizer.enable_window_topn` DataFusion rewrites
//! `ROW_NUMBER()`/`RANK() OVER (PARTITION BY .. ORDER BY ..)` under a
//! `rn <= K` filter into a `PartitionedTopKExec` that keeps K rows per window
//! partition. datafusion-proto has no encoding for it, so a stage holding
//! one would be refused; it is partition-local (its input is hash-partitioned
//! on the window keys), so it is sent as its parts and rebuilt.

use std::sync::Arc;

use datafusion::common::{internal_datafusion_err, internal_err, Result};
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::sorts::partitioned_topk::{PartitionedTopKExec, WindowFnKind};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_sort_exprs;
use datafusion_proto::physical_plan::to_proto::serialize_physical_sort_exprs;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::PhysicalSortExprNodeCollection;
use prost::Message;
use squadron_proto::v1::{PartitionedTopKNode, TopKWindowFunction};

pub fn encode(
    top_k: &PartitionedTopKExec,
    codec: &dyn PhysicalExtensionCodec,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<PartitionedTopKNode> {
    let sort_exprs = PhysicalSortExprNodeCollection {
        physical_sort_expr_nodes: serialize_physical_sort_exprs(
            top_k.expr().iter().cloned(),
            codec,
            proto_converter,
        )?,
    };
    let function = match top_k.fn_kind() {
        WindowFnKind::RowNumber => TopKWindowFunction::RowNumber,
        WindowFnKind::Rank => TopKWindowFunction::Rank,
    };
    Ok(PartitionedTopKNode {
        sort_exprs: sort_exprs.encode_to_vec(),
        partition_prefix_len: u32::try_from(top_k.partition_prefix_len())
            .map_err(|_| internal_datafusion_err!("too many window partition keys"))?,
        fetch: top_k.fetch() as u64,
        function: function as i32,
    })
}

pub fn decode(
    node: PartitionedTopKNode,
    input: &Arc<dyn ExecutionPlan>,
    ctx: &PhysicalPlanDecodeContext<'_>,
    proto_converter: &dyn PhysicalProtoConverterExtension,
) -> Result<Arc<dyn ExecutionPlan>> {
    let sort_exprs = PhysicalSortExprNodeCollection::decode(node.sort_exprs.as_slice())
        .map_err(|e| internal_datafusion_err!("bad PartitionedTopKNode sort keys: {e}"))?;
    let exprs = parse_physical_sort_exprs(
        &sort_exprs.physical_sort_expr_nodes,
        ctx,
        &input.schema(),
        proto_converter,
    )?;
    let Some(expr) = LexOrdering::new(exprs) else {
        return internal_err!("PartitionedTopKNode without sort keys");
    };
    let prefix = node.partition_prefix_len as usize;
    if prefix == 0 || prefix > expr.len() {
        return internal_err!(
            "PartitionedTopKNode: {prefix} partition keys of {} sort keys",
            expr.len()
        );
    }
    let fn_kind = match TopKWindowFunction::try_from(node.function) {
        Ok(TopKWindowFunction::RowNumber) => WindowFnKind::RowNumber,
        Ok(TopKWindowFunction::Rank) => WindowFnKind::Rank,
        _ => return internal_err!("bad PartitionedTopKNode function {}", node.function),
    };
    let fetch = usize::try_from(node.fetch)
        .map_err(|_| internal_datafusion_err!("PartitionedTopKNode fetch too large"))?;
    Ok(Arc::new(PartitionedTopKExec::try_new(
        Arc::clone(input),
        expr,
        prefix,
        fetch,
        fn_kind,
    )?))
}
