//! Float16 literals on the wire.
//!
//! datafusion-proto 55 writes a `Float16` scalar as a `Float32` one and
//! reads it back as `Float32`, so on a worker `f16_col + 1` met a `Float32`
//! literal ("Invalid arithmetic operation: Float16 + Float32") and
//! `f16_col IN (…)` failed to decode. Encoded through this converter, a
//! `Float16` literal travels as a cast of its (exact) `Float32` value.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::{Result, ScalarValue};
use datafusion::physical_expr::expressions::{CastExpr, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr_with_converter;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr_with_converter;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalPlanNodeExt,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::{PhysicalExprNode, PhysicalPlanNode};

/// DataFusion's own conversion, but for `Float16` literals (see above).
pub struct Float16Literals;

impl PhysicalProtoConverterExtension for Float16Literals {
    fn proto_to_execution_plan(
        &self,
        proto: &PhysicalPlanNode,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        proto.try_into_physical_plan_with_context(ctx, self)
    }

    fn execution_plan_to_proto(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalPlanNode> {
        PhysicalPlanNode::try_from_physical_plan_with_converter(Arc::clone(plan), codec, self)
    }

    fn proto_to_physical_expr(
        &self,
        proto: &PhysicalExprNode,
        input_schema: &Schema,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        parse_physical_expr_with_converter(proto, input_schema, ctx, self)
    }

    fn physical_expr_to_proto(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalExprNode> {
        if let Some(ScalarValue::Float16(Some(value))) =
            expr.downcast_ref::<Literal>().map(Literal::value)
        {
            let widened = Arc::new(Literal::new(ScalarValue::Float32(Some(value.to_f32()))));
            let cast: Arc<dyn PhysicalExpr> =
                Arc::new(CastExpr::new(widened, DataType::Float16, None));
            return serialize_physical_expr_with_converter(&cast, codec, self);
        }
        serialize_physical_expr_with_converter(expr, codec, self)
    }
}
