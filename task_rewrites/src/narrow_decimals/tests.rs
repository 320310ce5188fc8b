//! The narrow form against Arrow's own arithmetic: the same values, nulls
//! and type, or the same error, for operands that fit and that do not.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Decimal128Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, ScalarValue};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{col, lit, BinaryExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;

use super::{with_narrow_decimals, NarrowDecimalExpr};

/// Deterministic values spread over `-magnitude..magnitude`, every
/// seventh null.
fn decimals(n: usize, magnitude: i128, seed: u64, p: u8, s: i8) -> Decimal128Array {
    let mut state = seed;
    let values = (0..n).map(|i| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let high = state;
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let wide = (u128::from(high) << 64 | u128::from(state)) >> 2;
        let v = (wide % magnitude as u128) as i128;
        let v = if state & 1 == 0 { v } else { -v };
        (i % 7 != 3).then_some(v)
    });
    Decimal128Array::from_iter(values)
        .with_precision_and_scale(p, s)
        .unwrap()
}

fn batch(a: Decimal128Array, b: Decimal128Array) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("a", a.data_type().clone(), true),
        Field::new("b", b.data_type().clone(), true),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(a), Arc::new(b)]).unwrap()
}

/// `left op right` as planned, and its narrow form.
fn both(
    left: Arc<dyn PhysicalExpr>,
    op: Operator,
    right: Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> (Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>) {
    let binary = BinaryExpr::new(left, op, right);
    let wide: Arc<dyn PhysicalExpr> = Arc::new(binary.clone());
    let narrow = NarrowDecimalExpr::try_wrap(&binary, &wide, schema)
        .unwrap()
        .expect("a decimal operation");
    (wide, Arc::new(narrow))
}

/// `a op b` over the batch's two columns, as planned and narrow.
fn columns_a_b(op: Operator, schema: &Schema) -> (Arc<dyn PhysicalExpr>, Arc<dyn PhysicalExpr>) {
    both(
        col("a", schema).unwrap(),
        op,
        col("b", schema).unwrap(),
        schema,
    )
}

fn evaluated(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    expr.evaluate(batch)?.into_array(batch.num_rows())
}

fn is_narrow(narrow: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> bool {
    let narrow = narrow.downcast_ref::<NarrowDecimalExpr>().unwrap();
    narrow.is_narrow_for(batch).unwrap()
}

fn assert_same(wide: &Arc<dyn PhysicalExpr>, narrow: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) {
    let expected = evaluated(wide, batch).unwrap();
    let got = evaluated(narrow, batch).unwrap();
    assert_eq!(got.data_type(), expected.data_type());
    assert_eq!(&got, &expected, "{wide}");
}

#[test]
fn products_of_money_equal_arrows() {
    let b = batch(
        decimals(10_000, 10_495_000, 1, 15, 2),
        decimals(10_000, 11, 2, 15, 2),
    );
    let schema = b.schema();
    let (wide, narrow) = columns_a_b(Operator::Multiply, &schema);
    assert!(is_narrow(&narrow, &b));
    assert_same(&wide, &narrow, &b);
}

#[test]
fn sums_and_differences_rescale_as_arrow_does() {
    let b = batch(
        decimals(5_000, 1_000_000_000, 3, 15, 2),
        decimals(5_000, 1_000_000_000, 4, 12, 5),
    );
    let schema = b.schema();
    for op in [Operator::Plus, Operator::Minus] {
        let (wide, narrow) = columns_a_b(op, &schema);
        assert!(is_narrow(&narrow, &b));
        assert_same(&wide, &narrow, &b);
    }
}

#[test]
fn constants_on_either_side_equal_arrows() {
    let b = batch(
        decimals(4_000, 11, 5, 15, 2),
        decimals(4_000, 9_000, 6, 15, 2),
    );
    let schema = b.schema();
    let one = || lit(ScalarValue::Decimal128(Some(1), 20, 0));
    for (left, right) in [
        (one(), col("a", &schema).unwrap()),
        (col("a", &schema).unwrap(), one()),
    ] {
        for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
            let (wide, narrow) = both(Arc::clone(&left), op, Arc::clone(&right), &schema);
            assert!(is_narrow(&narrow, &b));
            assert_same(&wide, &narrow, &b);
        }
    }
    // A null constant makes every row null, as planned.
    let null = lit(ScalarValue::Decimal128(None, 20, 0));
    let (wide, narrow) = both(
        null,
        Operator::Multiply,
        col("b", &schema).unwrap(),
        &schema,
    );
    assert_same(&wide, &narrow, &b);
}

#[test]
fn values_past_64_bits_are_computed_as_planned() {
    // Products up to 10^30: past i64, within i128.
    let b = batch(
        decimals(2_000, 10i128.pow(18), 7, 38, 2),
        decimals(2_000, 10i128.pow(12), 8, 38, 2),
    );
    let schema = b.schema();
    let (wide, narrow) = columns_a_b(Operator::Multiply, &schema);
    assert!(!is_narrow(&narrow, &b));
    assert_same(&wide, &narrow, &b);
    // Past i128: the same error either way.
    let b = batch(
        decimals(100, 10i128.pow(30), 9, 38, 0),
        decimals(100, 10i128.pow(30), 10, 38, 0),
    );
    let schema = b.schema();
    let (wide, narrow) = columns_a_b(Operator::Multiply, &schema);
    let expected = evaluated(&wide, &b).unwrap_err().to_string();
    assert_eq!(evaluated(&narrow, &b).unwrap_err().to_string(), expected);
}

#[test]
fn only_decimal_arithmetic_is_wrapped() {
    let schema = Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("d", DataType::Decimal128(15, 2), true),
    ]);
    let ints = BinaryExpr::new(
        col("i", &schema).unwrap(),
        Operator::Multiply,
        col("i", &schema).unwrap(),
    );
    let wide: Arc<dyn PhysicalExpr> = Arc::new(ints.clone());
    assert!(NarrowDecimalExpr::try_wrap(&ints, &wide, &schema)
        .unwrap()
        .is_none());
    // Division rounds: left as planned.
    let quotient = BinaryExpr::new(
        col("d", &schema).unwrap(),
        Operator::Divide,
        col("d", &schema).unwrap(),
    );
    let wide: Arc<dyn PhysicalExpr> = Arc::new(quotient.clone());
    assert!(NarrowDecimalExpr::try_wrap(&quotient, &wide, &schema)
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_projection_computes_nested_arithmetic_narrow_with_the_same_answer() {
    let b = batch(
        decimals(20_000, 10_495_000, 11, 15, 2),
        decimals(20_000, 11, 12, 15, 2),
    );
    let schema = b.schema();
    // a * (1 - b), as TPC-H writes a discounted price.
    let discounted = Arc::new(BinaryExpr::new(
        col("a", &schema).unwrap(),
        Operator::Multiply,
        Arc::new(BinaryExpr::new(
            lit(ScalarValue::Decimal128(Some(1), 20, 0)),
            Operator::Minus,
            col("b", &schema).unwrap(),
        )),
    ));
    let input =
        MemorySourceConfig::try_new_exec(&[vec![b.clone()]], Arc::clone(&schema), None).unwrap();
    let projection: Arc<dyn ExecutionPlan> = Arc::new(
        ProjectionExec::try_new(
            vec![ProjectionExpr {
                expr: discounted,
                alias: "discounted".into(),
            }],
            input,
        )
        .unwrap(),
    );
    let narrowed = with_narrow_decimals(Arc::clone(&projection)).unwrap();
    assert_eq!(narrowed.schema(), projection.schema());
    let narrowed_projection = narrowed.downcast_ref::<ProjectionExec>().unwrap();
    let expr = &narrowed_projection.expr()[0].expr;
    let narrow = expr.downcast_ref::<NarrowDecimalExpr>().expect("wrapped");
    assert_eq!(narrow.children().len(), 2);
    assert!(narrow.children()[1]
        .downcast_ref::<NarrowDecimalExpr>()
        .is_some());
    // Shown as planned.
    assert_eq!(
        expr.to_string(),
        projection.downcast_ref::<ProjectionExec>().unwrap().expr()[0]
            .expr
            .to_string()
    );

    let ctx = SessionContext::new().task_ctx();
    let expected = collect(projection, Arc::clone(&ctx)).await.unwrap();
    let got = collect(narrowed, ctx).await.unwrap();
    assert_eq!(got, expected);
}
