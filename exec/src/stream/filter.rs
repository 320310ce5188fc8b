//! A consumer's filter on a task output stream, on the wire and applied by
//! the producer (see `channel::ChannelFilter`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{plan_err, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr_common::physical_expr::proto_decode::PhysicalExprDecodeCtx;
use datafusion::physical_expr_common::physical_expr::proto_encode::PhysicalExprEncodeCtx;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_physical_expr;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use datafusion_proto::protobuf::PhysicalExprNode;
use prost::Message;
use squadron_proto::v1::filter_expression::Kind;
use squadron_proto::v1::{FilterExpression, KeyBloomFilter};

use crate::key_filters::KeyBloomExpr;

/// `filter` as the bytes of a `StreamFilter`'s `filter`.
pub fn encode_filter(filter: &Arc<dyn PhysicalExpr>) -> Result<Vec<u8>> {
    Ok(serialize_physical_expr(filter, &FilterCodec)?.encode_to_vec())
}

/// Encodes the expressions of filters that datafusion-proto does not (a
/// join's Bloom filter of its build keys); a filter holds no plans.
#[derive(Debug)]
struct FilterCodec;

impl PhysicalExtensionCodec for FilterCodec {
    fn try_decode(
        &self,
        _buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan_err!("a stream filter holds no plans")
    }

    fn try_encode(
        &self,
        _node: Arc<dyn ExecutionPlan>,
        _buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        plan_err!("a stream filter holds no plans")
    }

    fn try_encode_expr(
        &self,
        node: &Arc<dyn PhysicalExpr>,
        buf: &mut Vec<u8>,
        _ctx: &PhysicalExprEncodeCtx<'_>,
    ) -> Result<()> {
        let Some(bloom) = node.downcast_ref::<KeyBloomExpr>() else {
            return plan_err!("a stream filter cannot hold {node}");
        };
        let kind = Kind::KeyBloom(KeyBloomFilter {
            bitset: bloom.encode()?,
        });
        FilterExpression { kind: Some(kind) }
            .encode(buf)
            .map_err(|e| {
                datafusion::common::DataFusionError::Internal(format!("a filter expression: {e}"))
            })
    }

    fn try_decode_expr(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn PhysicalExpr>],
        _ctx: &PhysicalExprDecodeCtx<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let expression = FilterExpression::decode(buf).map_err(|e| {
            datafusion::common::DataFusionError::Plan(format!("a filter expression: {e}"))
        })?;
        match expression.kind {
            Some(Kind::KeyBloom(bloom)) => {
                Ok(Arc::new(KeyBloomExpr::decode(&bloom.bitset, inputs)?))
            }
            None => plan_err!("a filter expression of no known kind"),
        }
    }
}

/// The filter in `bytes`, checked to be a boolean expression over `schema`.
pub fn decode_filter(bytes: &[u8], schema: &Schema) -> Result<Arc<dyn PhysicalExpr>> {
    let node = PhysicalExprNode::decode(bytes)
        .map_err(|e| datafusion::common::DataFusionError::Plan(format!("a stream filter: {e}")))?;
    let filter = parse_physical_expr(&node, &TaskContext::default(), schema, &FilterCodec)?;
    match filter.data_type(schema)? {
        DataType::Boolean => Ok(filter),
        other => plan_err!("a stream filter must be boolean, not {other}"),
    }
}

/// The rows of `batch` that `filter` keeps, and how many it dropped. A
/// filter that cannot be evaluated drops nothing: the consumer filters
/// anyway, so this only costs the work it would have saved.
pub fn apply_filter(filter: &dyn PhysicalExpr, batch: RecordBatch) -> (RecordBatch, usize) {
    let keep = filter
        .evaluate(&batch)
        .and_then(|value| value.into_array(batch.num_rows()));
    let Some(keep) = keep
        .ok()
        .and_then(|array| array.as_any().downcast_ref::<BooleanArray>().cloned())
    else {
        return (batch, 0);
    };
    if keep.null_count() == 0 && keep.true_count() == batch.num_rows() {
        return (batch, 0);
    }
    match filter_record_batch(&batch, &keep) {
        Ok(kept) => {
            let dropped = batch.num_rows() - kept.num_rows();
            (kept, dropped)
        }
        Err(_) => (batch, 0),
    }
}

/// Rows a filter is tried on before it is judged.
pub const TRIAL_ROWS: u64 = 65_536;

/// The verdict on a filter that kept `kept` of the `seen` rows it was
/// tried on: given up when its trial is over and it kept more than nine
/// rows in ten.
pub fn given_up(seen: u64, kept: u64) -> bool {
    seen >= TRIAL_ROWS && kept * 10 > seen * 9
}

/// A producer's record of how its channels' filters do: a filter that
/// keeps more than nine rows in ten of the first `TRIAL_ROWS` it sees on a
/// channel costs more to evaluate than it saves in sending, and is given
/// up on that channel (TPC-H q7: 32 ranges of customer keys kept 99.6 % of
/// the orders, and evaluating them made the query 1.5 times slower). The
/// consumer's own filter still drops those rows.
#[derive(Default)]
pub struct FilterTrials {
    /// By channel and filter (its address: filters are never replaced).
    trials: HashMap<(usize, usize), Trial>,
}

#[derive(Default, Clone, Copy)]
struct Trial {
    seen: u64,
    kept: u64,
}

impl FilterTrials {
    /// `batch` after `filter` on `channel`, and how many rows it dropped.
    pub fn apply(
        &mut self,
        channel: usize,
        filter: &Arc<dyn PhysicalExpr>,
        batch: RecordBatch,
    ) -> (RecordBatch, usize) {
        let id = (channel, Arc::as_ptr(filter) as *const () as usize);
        let trial = self.trials.entry(id).or_default();
        if given_up(trial.seen, trial.kept) {
            return (batch, 0);
        }
        let rows = batch.num_rows() as u64;
        let (kept, dropped) = apply_filter(filter.as_ref(), batch);
        if trial.seen < TRIAL_ROWS {
            trial.seen += rows;
            trial.kept += rows - dropped as u64;
        }
        (kept, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, in_list, lit};

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), Some(5), None, Some(9)])),
                Arc::new(StringArray::from(vec!["a", "b", "c", "d"])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_filter_survives_the_wire_and_keeps_only_matching_rows() {
        let batch = batch();
        let schema = batch.schema();
        let k = col("k", &schema).unwrap();
        let listed = in_list(
            Arc::clone(&k),
            vec![
                lit(ScalarValue::Int64(Some(5))),
                lit(ScalarValue::Int64(Some(9))),
            ],
            &false,
            &schema,
        )
        .unwrap();
        let bounded = binary(k, Operator::GtEq, lit(ScalarValue::Int64(Some(6))), &schema).unwrap();
        let filter = binary(listed, Operator::And, bounded, &schema).unwrap();
        let decoded = decode_filter(&encode_filter(&filter).unwrap(), &schema).unwrap();
        let (kept, dropped) = apply_filter(decoded.as_ref(), batch);
        assert_eq!(dropped, 3, "NULL and the keys outside the filter go");
        let s = kept
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![Some("d")]);
    }

    #[test]
    fn a_join_filter_with_its_bloom_filter_survives_the_wire() {
        use crate::key_filters::{BuildKeys, Membership};
        use datafusion::arrow::array::ArrayRef;
        // More build keys than an IN list takes: ranges and a Bloom filter.
        let build: ArrayRef = Arc::new(Int64Array::from_iter_values((0..20_000).map(|k| k * 3)));
        let mut keys =
            BuildKeys::new(&[DataType::Int64], Membership::over_stage_reads(true)).unwrap();
        keys.update(&[build]).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let filter = keys
            .probe_filter(&[col("k", &schema).unwrap()], &schema)
            .unwrap();
        assert!(filter.to_string().contains("bloom_filter"), "{filter}");
        let decoded = decode_filter(&encode_filter(&filter).unwrap(), &schema).unwrap();
        let probe = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..60_000))],
        )
        .unwrap();
        let (sent, dropped) = apply_filter(decoded.as_ref(), probe.clone());
        let (here, _) = apply_filter(filter.as_ref(), probe);
        assert_eq!(sent, here, "the same rows on both sides of the wire");
        let kept = sent
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert!(kept.values().iter().filter(|k| *k % 3 == 0).count() == 20_000);
        // 40,000 keys not built, about 1 % of them false positives.
        assert!(dropped > 39_000 - 1_200, "{dropped} dropped");
    }

    #[test]
    fn bad_bytes_and_non_boolean_filters_are_refused() {
        let schema = batch().schema();
        assert!(decode_filter(b"\xff\xff not protobuf", &schema).is_err());
        let not_boolean = encode_filter(&col("k", &schema).unwrap()).unwrap();
        let err = decode_filter(&not_boolean, &schema).unwrap_err();
        assert!(err.to_string().contains("boolean"), "{err}");
        let other = Schema::new(vec![Field::new("x", DataType::Int64, true)]);
        let on_k = encode_filter(&col("k", &schema).unwrap()).unwrap();
        assert!(
            decode_filter(&on_k, &other).is_err(),
            "a column the stream lacks"
        );
    }

    #[test]
    fn a_filter_that_fails_drops_nothing() {
        let batch = batch();
        // Evaluated against a batch without the column it names.
        let elsewhere = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
        ]));
        let third = col("c", &elsewhere).unwrap();
        let filter = binary(
            third,
            Operator::Eq,
            lit(ScalarValue::Int64(Some(1))),
            &elsewhere,
        )
        .unwrap();
        let (kept, dropped) = apply_filter(filter.as_ref(), batch);
        assert_eq!((kept.num_rows(), dropped), (4, 0));
    }

    #[test]
    fn a_filter_that_keeps_nearly_every_row_is_given_up_and_a_selective_one_kept() {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let rows = |from: i64| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int64Array::from_iter_values(from..from + 8192))],
            )
            .unwrap()
        };
        let k = col("k", &schema).unwrap();
        let ten = lit(ScalarValue::Int64(Some(10)));
        let rest = binary(k, Operator::Modulo, ten, &schema).unwrap();
        let zero = lit(ScalarValue::Int64(Some(0)));
        let one = lit(ScalarValue::Int64(Some(1)));
        // Keeps 9 rows in 10 (not more): kept. Keeps 1 in 10: kept.
        let nine_in_ten = binary(Arc::clone(&rest), Operator::NotEq, zero, &schema).unwrap();
        let one_in_ten =
            binary(Arc::clone(&rest), Operator::Eq, Arc::clone(&one), &schema).unwrap();
        // Keeps all but 1 in 10,000: given up after its trial.
        let k = col("k", &schema).unwrap();
        let most = binary(k, Operator::Gt, one, &schema).unwrap();
        let mut trials = FilterTrials::default();
        let mut dropped = [0; 3];
        for n in 0..20 {
            for (i, filter) in [&nine_in_ten, &one_in_ten, &most].into_iter().enumerate() {
                dropped[i] += trials.apply(0, filter, rows(n * 8192)).1;
            }
        }
        assert_eq!(dropped[0], 20 * 8192 / 10, "every tenth row, always");
        assert!(dropped[1] > 20 * 8192 * 8 / 10, "{}", dropped[1]);
        assert_eq!(
            dropped[2], 2,
            "rows 0 and 1, in the trial; then no more work"
        );
        // Another channel tries the same filter afresh.
        assert_eq!(trials.apply(1, &most, rows(0)).1, 2);
    }
}
