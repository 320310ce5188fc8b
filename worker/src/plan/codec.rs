//! The datafusion-proto extension codec for Squadron's own plan nodes.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::{internal_datafusion_err, internal_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use squadron_proto::v1::{ReadMode, StageReadNode};

use super::stage_read::StageReadExec;

/// Encodes and decodes `StageReadExec` placeholders inside stage plans.
#[derive(Debug, Default)]
pub struct SquadronCodec;

impl PhysicalExtensionCodec for SquadronCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return internal_err!("StageReadExec has no inputs, got {}", inputs.len());
        }
        let node = StageReadNode::decode(buf)
            .map_err(|e| internal_datafusion_err!("bad StageReadNode: {e}"))?;
        let mode = ReadMode::try_from(node.mode)
            .ok()
            .filter(|m| *m != ReadMode::Unspecified)
            .ok_or_else(|| internal_datafusion_err!("bad read mode {}", node.mode))?;
        let schema = datafusion_proto::protobuf::Schema::decode(node.schema.as_slice())
            .map_err(|e| internal_datafusion_err!("bad StageReadNode schema: {e}"))?;
        let schema = Schema::try_from(&schema)?;
        let read = StageReadExec::new(
            node.stage_id,
            mode,
            node.partitions as usize,
            Arc::new(schema),
        );
        Ok(Arc::new(read.with_readers(node.readers)))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let Some(read) = node.downcast_ref::<StageReadExec>() else {
            return internal_err!("cannot encode {} with the Squadron codec", node.name());
        };
        let schema = datafusion_proto::protobuf::Schema::try_from(read.schema().as_ref())?;
        StageReadNode {
            stage_id: read.stage_id(),
            mode: read.mode() as i32,
            partitions: read.partitions() as u32,
            schema: schema.encode_to_vec(),
            readers: read.readers().to_vec(),
        }
        .encode(buf)
        .map_err(|e| internal_datafusion_err!("encoding StageReadNode: {e}"))
    }
}

/// Encodes a stage plan for a `TaskDefinition`.
pub fn encode_plan(plan: Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
    datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(plan, &SquadronCodec)
        .map(|b| b.to_vec())
}

/// Decodes a stage plan from a `TaskDefinition`.
pub fn decode_plan(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
        bytes,
        ctx,
        &SquadronCodec,
    )
}
