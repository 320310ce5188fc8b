//! An input that cannot be split by key range (its key is computed by a
//! join below, or read from a table not in key order) shuffled to the
//! partition of its key's range rather than of its key's hash: the same
//! shuffle, but its partition *j* now meets its split partner's range *j*,
//! so the partner, usually the larger table, is not shuffled at all
//! (TPC-H q18: `customer ⋈ orders` is shuffled, `lineitem` is not).
//!
//! The shuffle stays DataFusion's hash repartition, the one the workers'
//! writers run (DataFusion's range partitioner compares row by row, as
//! scalar values), over an expression that maps range *j* to a value
//! hashing to partition *j*: `CASE WHEN k < cut1 THEN v0 WHEN k < cut2
//! THEN v1 … ELSE vn END`. The values are found by running that
//! partitioner on candidates. A NULL key compares with no cut and goes to
//! the last partition: every row still goes to exactly one.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CaseExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::metrics;
use datafusion::physical_plan::repartition::{BatchPartitioner, RepartitionExec};
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

use super::ranges::Cuts;

/// `shuffle` (a hash repartition) routing rows by the range of `cuts`
/// their column `key` falls in; `None` when the key's type is not the
/// cuts' or the partition counts differ.
pub fn routed_by_range(
    shuffle: &RepartitionExec,
    key: usize,
    cuts: &Cuts,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let partitions = cuts.partitions();
    let input = shuffle.input();
    let schema = input.schema();
    let Some(field) = schema.fields().get(key) else {
        return Ok(None);
    };
    let typed_alike = cuts
        .values()
        .iter()
        .all(|cut| &cut.data_type() == field.data_type());
    if shuffle.partitioning().partition_count() != partitions || !typed_alike {
        return Ok(None);
    }
    let Some(values) = hashing_to_each_partition(partitions)? else {
        return Ok(None);
    };
    let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new(field.name(), key));
    let value =
        |v: i64| -> Arc<dyn PhysicalExpr> { Arc::new(Literal::new(ScalarValue::Int64(Some(v)))) };
    let when_then = cuts
        .values()
        .iter()
        .zip(&values)
        .map(|(cut, v)| {
            let below: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
                Arc::clone(&key),
                Operator::Lt,
                Arc::new(Literal::new(cut.clone())),
            ));
            (below, value(*v))
        })
        .collect();
    let range = CaseExpr::try_new(None, when_then, Some(value(values[partitions - 1])))?;
    let mut routed = RepartitionExec::try_new(
        Arc::clone(input),
        Partitioning::Hash(vec![Arc::new(range)], partitions),
    )?;
    if shuffle.preserve_order() {
        routed = routed.with_preserve_order();
    }
    Ok(Some(Arc::new(routed)))
}

/// For each of `partitions`, an `Int64` DataFusion's hash repartition
/// sends there.
fn hashing_to_each_partition(partitions: usize) -> Result<Option<Vec<i64>>> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let candidates: Int64Array = (0..(64 * partitions as i64).max(1024)).collect();
    let batch = RecordBatch::try_new(schema, vec![Arc::new(candidates)])?;
    let by_hash = Partitioning::Hash(vec![Arc::new(Column::new("v", 0))], partitions);
    let mut partitioner = BatchPartitioner::try_new(by_hash, metrics::Time::new(), 0, 1)?;
    let mut found: Vec<Option<i64>> = vec![None; partitions];
    partitioner.partition(batch, |partition, rows| {
        let values = rows.column(0).as_primitive::<Int64Type>();
        if found[partition].is_none() && !values.is_empty() {
            found[partition] = Some(values.value(0));
        }
        Ok(())
    })?;
    Ok(found.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_partition_gets_a_value_that_hashes_to_it() {
        for partitions in [2, 3, 8] {
            let values = hashing_to_each_partition(partitions).unwrap().unwrap();
            assert_eq!(values.len(), partitions);
            let mut sorted = values.clone();
            sorted.dedup();
            assert_eq!(sorted.len(), partitions, "distinct values");
        }
    }
}
