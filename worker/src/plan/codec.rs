//! The datafusion-proto extension codec for Squadron's own plan nodes.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::common::{internal_datafusion_err, internal_err, Result, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;
use squadron_proto::v1::{ConstantColumn, ReadMode, StageReadNode};

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
        let constants = node
            .constants
            .iter()
            .map(|c| Ok((c.column as usize, decode_scalar(&c.value)?)))
            .collect::<Result<Vec<_>>>()?;
        let hash_columns: Vec<usize> = node.hash_columns.iter().map(|c| *c as usize).collect();
        Ok(Arc::new(
            read.with_readers(node.readers)
                .with_constants(&constants)?
                .hashed_on(&hash_columns)?,
        ))
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
            hash_columns: read.hash_columns().into_iter().map(|c| c as u32).collect(),
            constants: read
                .constants()
                .into_iter()
                .map(|(column, value)| {
                    Ok(ConstantColumn {
                        column: column as u32,
                        value: encode_scalar(value.as_ref())?,
                    })
                })
                .collect::<Result<_>>()?,
        }
        .encode(buf)
        .map_err(|e| internal_datafusion_err!("encoding StageReadNode: {e}"))
    }
}

fn encode_scalar(value: Option<&ScalarValue>) -> Result<Vec<u8>> {
    let Some(value) = value else {
        return Ok(vec![]);
    };
    let proto = datafusion_proto::protobuf::ScalarValue::try_from(value)
        .map_err(|e| internal_datafusion_err!("encoding constant {value}: {e}"))?;
    Ok(proto.encode_to_vec())
}

fn decode_scalar(bytes: &[u8]) -> Result<Option<ScalarValue>> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let proto = datafusion_proto::protobuf::ScalarValue::decode(bytes)
        .map_err(|e| internal_datafusion_err!("bad constant: {e}"))?;
    ScalarValue::try_from(&proto)
        .map(Some)
        .map_err(|e| internal_datafusion_err!("bad constant: {e}"))
}

/// Encodes a stage plan for a `TaskDefinition`.
pub fn encode_plan(plan: Arc<dyn ExecutionPlan>) -> Result<Vec<u8>> {
    let plan = super::wire::encodable(plan)?;
    datafusion_proto::bytes::physical_plan_to_bytes_with_extension_codec(plan, &SquadronCodec)
        .map(|b| b.to_vec())
}

/// Decodes a stage plan from a `TaskDefinition`.
pub fn decode_plan(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
        bytes,
        ctx,
        &SquadronCodec,
    )?;
    let plan = super::wire::repaired(plan)?;
    super::plain_strings::read_plain_strings(plan, ctx)
}
