//! Adaptive conjunctions keep exactly the rows the planned filter keeps, in
//! whatever order they settle on, and settle on the cheap selective term.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, Int64Array, StringArray};
use datafusion::arrow::compute::prep_null_mask_filter;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{col, lit, BinaryExpr, LikeExpr};
use datafusion::physical_expr::{conjunction, PhysicalExpr};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion::prelude::SessionContext;

use super::{cannot_fail, with_adaptive_conjunctions, AdaptiveConjunction};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]))
}

/// `rows` rows from `seed`: `k` in 0..1000, `v` in 0..100 with some
/// nulls, `s` a short string with some nulls.
fn batch(rows: usize, seed: u64) -> RecordBatch {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut k = Vec::with_capacity(rows);
    let mut v = Vec::with_capacity(rows);
    let mut s = Vec::with_capacity(rows);
    for _ in 0..rows {
        k.push(Some((next() % 1000) as i64));
        let x = next();
        v.push((x % 11 != 0).then_some((x % 100) as i64));
        let y = next();
        s.push((y % 13 != 0).then(|| format!("item-{}-x{}", y % 50, y % 7)));
    }
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(v)),
            Arc::new(StringArray::from(s)),
        ],
    )
    .unwrap()
}

fn compare(column: &str, op: Operator, value: i64) -> Arc<dyn PhysicalExpr> {
    Arc::new(BinaryExpr::new(
        col(column, &schema()).unwrap(),
        op,
        lit(ScalarValue::Int64(Some(value))),
    ))
}

fn like(pattern: &str) -> Arc<dyn PhysicalExpr> {
    Arc::new(LikeExpr::new(
        false,
        false,
        col("s", &schema()).unwrap(),
        lit(pattern),
    ))
}

/// The planned predicate's kept rows: true, nulls dropped.
fn planned_kept(terms: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> BooleanArray {
    let planned = conjunction(terms.to_vec());
    let array = planned
        .evaluate(batch)
        .unwrap()
        .into_array(batch.num_rows())
        .unwrap();
    let mask = array.as_any().downcast_ref::<BooleanArray>().unwrap();
    match mask.null_count() {
        0 => mask.clone(),
        _ => prep_null_mask_filter(mask),
    }
}

#[test]
fn keeps_exactly_the_rows_the_planned_filter_keeps() {
    // Selective and not, nullable terms, a term that drops everything on
    // some batches (k < 2 with few rows), in an order that is not the best.
    let term_sets: Vec<Vec<Arc<dyn PhysicalExpr>>> = vec![
        vec![
            like("%x3%"),
            compare("v", Operator::Lt, 50),
            compare("k", Operator::Lt, 100),
        ],
        vec![
            compare("v", Operator::GtEq, 10),
            compare("k", Operator::Lt, 2),
            like("item-1%"),
        ],
        vec![like("%"), compare("k", Operator::NotEq, 5)],
    ];
    for terms in term_sets {
        let adaptive = AdaptiveConjunction::new(terms.clone());
        for seed in 0..200 {
            let b = batch(1 + (seed as usize * 37) % 3000, seed);
            let got = adaptive
                .evaluate(&b)
                .unwrap()
                .into_array(b.num_rows())
                .unwrap();
            assert_eq!(got.null_count(), 0);
            assert_eq!(
                got.as_any().downcast_ref::<BooleanArray>().unwrap(),
                &planned_kept(&terms, &b),
                "terms in order {adaptive}, batch {seed}"
            );
        }
    }
}

#[test]
fn the_cheap_selective_term_moves_first() {
    // A pattern match that keeps nearly every row, then a comparison that
    // keeps one in a hundred.
    let terms = vec![like("item-%"), compare("k", Operator::Lt, 10)];
    let adaptive = AdaptiveConjunction::new(terms.clone());
    assert_eq!(
        adaptive.ordered_terms()[0].to_string(),
        terms[0].to_string()
    );
    for seed in 0..8 {
        adaptive.evaluate(&batch(8192, seed)).unwrap();
    }
    assert_eq!(
        adaptive.ordered_terms()[0].to_string(),
        terms[1].to_string()
    );
    assert!(adaptive.to_string().starts_with("k@0 < 10 AND"));

    // A disjunction shows in parentheses.
    let either: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        compare("k", Operator::Lt, 3),
        Operator::Or,
        compare("v", Operator::Gt, 5),
    ));
    let shown = AdaptiveConjunction::new(vec![either, like("a%")]).to_string();
    assert_eq!(shown, "(k@0 < 3 OR v@1 > 5) AND s@2 LIKE a%");
}

#[test]
fn terms_that_can_fail_are_recognised() {
    let s = schema();
    let sum: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        col("k", &s).unwrap(),
        Operator::Plus,
        col("v", &s).unwrap(),
    ));
    let overflowing = Arc::new(BinaryExpr::new(sum, Operator::Gt, lit(10i64)));
    let quotient: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        col("k", &s).unwrap(),
        Operator::Divide,
        col("v", &s).unwrap(),
    ));
    let dividing = Arc::new(BinaryExpr::new(quotient, Operator::Lt, lit(3i64)));
    assert!(!cannot_fail(&(overflowing as Arc<dyn PhysicalExpr>)));
    assert!(!cannot_fail(&(dividing as Arc<dyn PhysicalExpr>)));
    assert!(cannot_fail(&compare("k", Operator::Lt, 3)));
    assert!(cannot_fail(&like("%a%")));
}

#[tokio::test]
async fn a_filter_of_safe_terms_is_made_adaptive_with_the_same_answer() {
    let batches: Vec<RecordBatch> = (0..20).map(|seed| batch(4096, seed)).collect();
    let input = || {
        MemorySourceConfig::try_new_exec(std::slice::from_ref(&batches), schema(), None).unwrap()
    };
    let predicate = conjunction(vec![
        like("%x2%"),
        compare("v", Operator::Lt, 70),
        compare("k", Operator::LtEq, 50),
    ]);
    let planned: Arc<dyn ExecutionPlan> =
        Arc::new(FilterExec::try_new(Arc::clone(&predicate), input()).unwrap());
    let adaptive = with_adaptive_conjunctions(Arc::clone(&planned)).unwrap();
    let filter = adaptive.downcast_ref::<FilterExec>().unwrap();
    assert!(filter
        .predicate()
        .downcast_ref::<AdaptiveConjunction>()
        .is_some());
    let ctx = SessionContext::new().task_ctx();
    let expected = collect(planned, Arc::clone(&ctx)).await.unwrap();
    let got = collect(adaptive, ctx).await.unwrap();
    let rows = |b: &[RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
    assert!(rows(&expected) > 0);
    assert_eq!(
        datafusion::arrow::compute::concat_batches(&schema(), &got).unwrap(),
        datafusion::arrow::compute::concat_batches(&schema(), &expected).unwrap()
    );

    // One term that can fail: left as planned.
    let sum: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        col("k", &schema()).unwrap(),
        Operator::Plus,
        col("v", &schema()).unwrap(),
    ));
    let risky = conjunction(vec![
        compare("k", Operator::Lt, 10),
        Arc::new(BinaryExpr::new(sum, Operator::Gt, lit(3i64))),
    ]);
    let planned: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(risky, input()).unwrap());
    let kept = with_adaptive_conjunctions(Arc::clone(&planned)).unwrap();
    assert!(kept
        .downcast_ref::<FilterExec>()
        .unwrap()
        .predicate()
        .downcast_ref::<AdaptiveConjunction>()
        .is_none());
}
