//! The datafusion-proto extension codec for the plan nodes it does not
//! encode itself.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::{internal_datafusion_err, internal_err, Result, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::sorts::partitioned_topk::PartitionedTopKExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use prost::Message;
use squadron_proto::v1::output_distribution::Kind;
use squadron_proto::v1::squadron_plan_node::Node;
use squadron_proto::v1::{
    ConstantColumn, EqualColumns, OrderUnknownNode, OutputDistribution, ReadMode,
    RecursiveQueryNode, RowFlag as WireRowFlag, SinkWriteNode, SquadronPlanNode, StageReadNode,
    StageWriteNode, TableWriteNode, WorkTableNode,
};

use super::grouping_sets::OrderUnknownExec;
use super::stage_read::StageReadExec;
use super::stage_write::{StageOutput, StageWriteExec};
use super::top_k;
use crate::write::{RowFlag, SinkWriteExec, TableWriteExec, WriteTarget};
use squadron_storage::format::StoredFormat;

/// Encodes and decodes the nodes datafusion-proto leaves to extensions:
/// `StageReadExec` placeholders, a recursive query's two nodes (which
/// then run inside one task: a work table lives in one process), the
/// window top-N operator, and the writes of created tables.
#[derive(Debug, Default)]
pub struct SquadronCodec;

impl PhysicalExtensionCodec for SquadronCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let node = SquadronPlanNode::decode(buf)
            .map_err(|e| internal_datafusion_err!("bad SquadronPlanNode: {e}"))?;
        match node.node {
            Some(Node::StageRead(read)) => decode_stage_read(read, inputs),
            Some(Node::RecursiveQuery(query)) => {
                let [static_term, recursive_term] = inputs else {
                    return internal_err!(
                        "RecursiveQueryExec has two inputs, got {}",
                        inputs.len()
                    );
                };
                Ok(Arc::new(RecursiveQueryExec::try_new(
                    query.name,
                    decode_schema(&query.schema)?,
                    Arc::clone(static_term),
                    Arc::clone(recursive_term),
                    query.is_distinct,
                )?))
            }
            Some(Node::WorkTable(table)) => Ok(Arc::new(WorkTableExec::new(
                table.name,
                decode_schema(&table.schema)?,
                None,
            )?)),
            Some(Node::PartitionedTopK(top_k)) => {
                let [input] = inputs else {
                    return internal_err!(
                        "PartitionedTopKExec has one input, got {}",
                        inputs.len()
                    );
                };
                let decode = PhysicalPlanDecodeContext::new(ctx, self);
                top_k::decode(top_k, input, &decode, proto_converter)
            }
            Some(Node::TableWrite(write)) => {
                let [input] = inputs else {
                    return internal_err!("TableWriteExec has one input, got {}", inputs.len());
                };
                decode_table_write(write, input)
            }
            Some(Node::SinkWrite(write)) => {
                let [input] = inputs else {
                    return internal_err!("SinkWriteExec has one input, got {}", inputs.len());
                };
                let holder =
                    datafusion_proto::bytes::physical_plan_from_bytes_with_proto_converter(
                        &write.holder,
                        ctx,
                        self,
                        proto_converter,
                    )?;
                Ok(Arc::new(SinkWriteExec::from_holder(
                    holder,
                    Arc::clone(input),
                )?))
            }
            Some(Node::StageWrite(write)) => {
                let [input] = inputs else {
                    return internal_err!("StageWriteExec has one input, got {}", inputs.len());
                };
                let output = decode_stage_output(write.output.unwrap_or_default())?;
                Ok(Arc::new(StageWriteExec::try_new(
                    Arc::clone(input),
                    output,
                )?))
            }
            Some(Node::OrderUnknown(OrderUnknownNode {})) => {
                let [input] = inputs else {
                    return internal_err!("OrderUnknownExec has one input, got {}", inputs.len());
                };
                Ok(Arc::new(OrderUnknownExec::new(Arc::clone(input))))
            }
            None => internal_err!("empty SquadronPlanNode"),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        let node = if let Some(read) = node.downcast_ref::<StageReadExec>() {
            Node::StageRead(encode_stage_read(read)?)
        } else if let Some(query) = node.downcast_ref::<RecursiveQueryExec>() {
            Node::RecursiveQuery(RecursiveQueryNode {
                name: query.name().to_string(),
                is_distinct: query.is_distinct(),
                schema: encode_schema(&query.schema())?,
            })
        } else if let Some(table) = node.downcast_ref::<WorkTableExec>() {
            Node::WorkTable(WorkTableNode {
                name: table.name().to_string(),
                schema: encode_schema(&table.schema())?,
            })
        } else if let Some(top_k) = node.downcast_ref::<PartitionedTopKExec>() {
            Node::PartitionedTopK(top_k::encode(top_k, self, proto_converter)?)
        } else if let Some(write) = node.downcast_ref::<StageWriteExec>() {
            Node::StageWrite(StageWriteNode {
                output: Some(encode_stage_output(write.output())),
            })
        } else if node.is::<OrderUnknownExec>() {
            Node::OrderUnknown(OrderUnknownNode {})
        } else if let Some(write) = node.downcast_ref::<TableWriteExec>() {
            Node::TableWrite(encode_table_write(write.target())?)
        } else if let Some(write) = node.downcast_ref::<SinkWriteExec>() {
            let holder = datafusion_proto::bytes::physical_plan_to_bytes_with_proto_converter(
                Arc::clone(write.holder()),
                self,
                proto_converter,
            )?;
            Node::SinkWrite(SinkWriteNode {
                holder: holder.to_vec(),
            })
        } else {
            return internal_err!("cannot encode {} with the Squadron codec", node.name());
        };
        SquadronPlanNode { node: Some(node) }
            .encode(buf)
            .map_err(|e| internal_datafusion_err!("encoding SquadronPlanNode: {e}"))
    }
}

fn decode_stage_read(
    node: StageReadNode,
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Result<Arc<dyn ExecutionPlan>> {
    if !inputs.is_empty() {
        return internal_err!("StageReadExec has no inputs, got {}", inputs.len());
    }
    let mode = ReadMode::try_from(node.mode)
        .ok()
        .filter(|m| *m != ReadMode::Unspecified)
        .ok_or_else(|| internal_datafusion_err!("bad read mode {}", node.mode))?;
    let read = StageReadExec::new(
        node.stage_id,
        mode,
        node.partitions as usize,
        decode_schema(&node.schema)?,
    );
    let constants = node
        .constants
        .iter()
        .map(|c| Ok((c.column as usize, decode_scalar(&c.value)?)))
        .collect::<Result<Vec<_>>>()?;
    let hash_columns: Vec<usize> = node.hash_columns.iter().map(|c| *c as usize).collect();
    let equal_columns: Vec<Vec<usize>> = node
        .equal_columns
        .iter()
        .map(|class| class.columns.iter().map(|c| *c as usize).collect())
        .collect();
    Ok(Arc::new(
        read.with_readers(node.readers, node.first_channel)
            .with_constants(&constants)?
            .with_equal_columns(&equal_columns)?
            .hashed_on(&hash_columns)?,
    ))
}

fn encode_stage_output(output: StageOutput) -> OutputDistribution {
    let (kind, channels) = match output {
        StageOutput::JobOutput => (Kind::JobOutput, 1),
        StageOutput::Repartition { channels } => (Kind::Repartition, channels),
        StageOutput::Broadcast { channels: 1 } => (Kind::Single, 1),
        StageOutput::Broadcast { channels } => (Kind::Broadcast, channels),
    };
    OutputDistribution {
        kind: kind as i32,
        channels: channels as u32,
    }
}

fn decode_stage_output(output: OutputDistribution) -> Result<StageOutput> {
    let channels = output.channels as usize;
    Ok(match output.kind() {
        Kind::JobOutput => StageOutput::JobOutput,
        Kind::Single => StageOutput::Broadcast { channels: 1 },
        Kind::Repartition => StageOutput::Repartition { channels },
        Kind::Broadcast if channels > 0 => StageOutput::Broadcast { channels },
        Kind::Broadcast => return internal_err!("a broadcast to no channel"),
    })
}

fn encode_stage_read(read: &StageReadExec) -> Result<StageReadNode> {
    Ok(StageReadNode {
        stage_id: read.stage_id(),
        mode: read.mode() as i32,
        partitions: read.partitions() as u32,
        schema: encode_schema(&read.schema())?,
        readers: read.readers().to_vec(),
        first_channel: read.first_channel(),
        hash_columns: read.hash_columns().into_iter().map(|c| c as u32).collect(),
        equal_columns: read
            .equal_columns()
            .into_iter()
            .map(|class| EqualColumns {
                columns: class.into_iter().map(|c| c as u32).collect(),
            })
            .collect(),
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
    })
}

fn decode_table_write(
    node: TableWriteNode,
    input: &Arc<dyn ExecutionPlan>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let format = StoredFormat::from_name(&node.format)
        .ok_or_else(|| internal_datafusion_err!("bad table format {:?}", node.format))?;
    let flag = match WireRowFlag::try_from(node.flag) {
        Ok(WireRowFlag::None) => RowFlag::None,
        Ok(WireRowFlag::Count) => RowFlag::Count,
        Ok(WireRowFlag::CountAndDrop) => RowFlag::CountAndDrop,
        Err(_) => return internal_err!("bad row flag {}", node.flag),
    };
    let target = WriteTarget {
        table_url: node.table_url,
        write_id: node.write_id,
        format,
        table_schema: decode_schema(&node.table_schema)?,
        flag,
    };
    Ok(Arc::new(TableWriteExec::new(Arc::clone(input), target)))
}

fn encode_table_write(target: &WriteTarget) -> Result<TableWriteNode> {
    let flag = match target.flag {
        RowFlag::None => WireRowFlag::None,
        RowFlag::Count => WireRowFlag::Count,
        RowFlag::CountAndDrop => WireRowFlag::CountAndDrop,
    };
    Ok(TableWriteNode {
        table_url: target.table_url.clone(),
        write_id: target.write_id.clone(),
        format: target.format.name().to_string(),
        table_schema: encode_schema(&target.table_schema)?,
        flag: flag as i32,
    })
}

pub(crate) fn encode_schema(schema: &Schema) -> Result<Vec<u8>> {
    Ok(datafusion_proto::protobuf::Schema::try_from(schema)?.encode_to_vec())
}

pub(crate) fn decode_schema(bytes: &[u8]) -> Result<SchemaRef> {
    let schema = datafusion_proto::protobuf::Schema::decode(bytes)
        .map_err(|e| internal_datafusion_err!("bad schema in a Squadron plan node: {e}"))?;
    Ok(Arc::new(Schema::try_from(&schema)?))
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
    datafusion_proto::bytes::physical_plan_to_bytes_with_proto_converter(
        plan,
        &SquadronCodec,
        &super::float16_literals::Float16Literals,
    )
    .map(|b| b.to_vec())
}

/// A copy of `plan` that shares nothing with it, as a worker would decode
/// it: a plan executed again and again (the coordinator's kept plans)
/// needs fresh metrics each time, and DataFusion's Parquet scan keeps its
/// metrics in its source, which every clone shares.
pub fn unshared_copy(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    let bytes = encode_plan(plan)?;
    let plan = datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
        &bytes,
        ctx,
        &SquadronCodec,
    )?;
    super::wire::repaired(plan)
}

/// Decodes a stage plan from a `TaskDefinition`.
pub fn decode_plan(bytes: &[u8], ctx: &TaskContext) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = datafusion_proto::bytes::physical_plan_from_bytes_with_extension_codec(
        bytes,
        ctx,
        &SquadronCodec,
    )?;
    let plan = super::wire::repaired(plan)?;
    super::ready_to_execute(plan, ctx)
}
