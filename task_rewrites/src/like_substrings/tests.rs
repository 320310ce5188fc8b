//! Substring search against DataFusion's own `LIKE` over every short
//! string of a small alphabet and many patterns.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, LargeStringArray, StringArray, StringViewArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_expr::expressions::{col, lit, LikeExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::ExecutionPlan;

use super::{substrings_like, with_substring_likes, Parts, SubstringsLikeExpr};

/// Every string of `a`, `b`, `c` up to five long, and a NULL.
fn strings() -> Vec<Option<String>> {
    let mut all = vec![None, Some(String::new())];
    let mut level = vec![String::new()];
    for _ in 0..5 {
        level = level
            .iter()
            .flat_map(|s| ["a", "b", "c"].map(|c| format!("{s}{c}")))
            .collect();
        all.extend(level.iter().cloned().map(Some));
    }
    all
}

fn columns(values: &[Option<String>]) -> Vec<ArrayRef> {
    let refs: Vec<Option<&str>> = values.iter().map(|v| v.as_deref()).collect();
    vec![
        Arc::new(StringArray::from(refs.clone())),
        Arc::new(StringViewArray::from(refs.clone())),
        Arc::new(LargeStringArray::from(refs)),
    ]
}

const PATTERNS: &[&str] = &[
    "a%b",
    "a%a",
    "%a%b%",
    "%ab%ba%",
    "a%b%c",
    "%a%a%a%",
    "ab%%ba",
    "%b%c",
    "c%a%",
    "aa%aa",
    "%abc%cab%",
];

/// `pattern` as a constant of the column's string type.
fn pattern_of_type(pattern: &str, data_type: &DataType) -> ScalarValue {
    let p = Some(pattern.to_string());
    match data_type {
        DataType::Utf8View => ScalarValue::Utf8View(p),
        DataType::LargeUtf8 => ScalarValue::LargeUtf8(p),
        _ => ScalarValue::Utf8(p),
    }
}

#[test]
fn matches_exactly_what_like_matches() {
    let values = strings();
    for column in columns(&values) {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            column.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).unwrap();
        for pattern in PATTERNS {
            for negated in [false, true] {
                let planned: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
                    negated,
                    false,
                    col("s", &schema).unwrap(),
                    lit(pattern_of_type(pattern, schema.field(0).data_type())),
                ));
                let fast = substrings_like(&planned).expect("a pattern of literals and %");
                let expected = planned
                    .evaluate(&batch)
                    .unwrap()
                    .into_array(batch.num_rows())
                    .unwrap();
                let got = fast
                    .evaluate(&batch)
                    .unwrap()
                    .into_array(batch.num_rows())
                    .unwrap();
                assert_eq!(&got, &expected, "{planned} over {}", schema.field(0));
            }
        }
    }
}

#[test]
fn patterns_arrow_matches_as_fast_or_that_need_more_are_left_alone() {
    for pattern in [
        "abc", "abc%", "%abc", "%abc%", "%%", "a_b%c", "a\\%b%c", "%",
    ] {
        assert!(Parts::of(pattern).is_none(), "{pattern}");
    }
    let schema = Schema::new(vec![Field::new("s", DataType::Utf8, true)]);
    let case_insensitive: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
        false,
        true,
        col("s", &schema).unwrap(),
        lit("a%b%c"),
    ));
    assert!(substrings_like(&case_insensitive).is_none());
}

#[test]
fn a_filter_over_comments_uses_the_search_and_shows_as_planned() {
    let comments = [
        "carefully special ideas sleep; requests haggle",
        "requests are special",
        "special requests",
        "specialrequests",
        "nothing to see",
    ];
    let schema = Arc::new(Schema::new(vec![Field::new("c", DataType::Utf8, false)]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(StringArray::from(comments.to_vec()))],
    )
    .unwrap();
    let predicate: Arc<dyn PhysicalExpr> = Arc::new(LikeExpr::new(
        true,
        false,
        col("c", &schema).unwrap(),
        lit("%special%requests%"),
    ));
    let input = MemorySourceConfig::try_new_exec(&[vec![batch]], schema, None).unwrap();
    let planned: Arc<dyn ExecutionPlan> =
        Arc::new(FilterExec::try_new(Arc::clone(&predicate), input).unwrap());
    let rewritten = with_substring_likes(planned).unwrap();
    let filter = rewritten.downcast_ref::<FilterExec>().unwrap();
    let fast = filter
        .predicate()
        .downcast_ref::<SubstringsLikeExpr>()
        .expect("rewritten");
    assert_eq!(fast.to_string(), predicate.to_string());
    let parts = Parts::of("%special%requests%").unwrap();
    let kept: Vec<bool> = comments.iter().map(|c| !parts.matches(c)).collect();
    assert_eq!(kept, [false, true, false, false, true]);
}
