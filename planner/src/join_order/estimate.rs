//! What each leaf of a join region is expected to hold: its rows and the
//! distinct values of its join keys, from the statistics of its physical
//! plan (Parquet footers, narrowed by its filters), with
//! `squadron.join_reorder_samples` its rows measured on a sample where a
//! filter the statistics cannot weigh decides them (`sample`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Column, ColumnStatistics};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{ExecutionPlan, StatisticsArgs, StatisticsContext};
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};

use squadron_exec::squadron_options::SquadronOptions;

use super::sample::sampled_rows;

/// A leaf's expected rows and its columns' distinct values, and where
/// the leaf reads one table, those values in the whole table (before the
/// leaf's filters).
#[derive(Debug, Clone)]
pub struct LeafEstimate {
    pub rows: f64,
    pub distinct: HashMap<Column, f64>,
    pub table_distinct: HashMap<Column, f64>,
}

/// The estimates of `leaf`, or `None` when its plan gives no row count.
pub async fn estimate_leaf(leaf: &LogicalPlan, session: &dyn Session) -> Option<LeafEstimate> {
    let physical = DefaultPhysicalPlanner::default()
        .create_physical_plan(leaf, session)
        .await
        .ok()?;
    // Before the statistics: their context is not `Send`.
    let sampled = match SquadronOptions::of(session.config_options()).join_reorder_samples {
        true => sampled_rows(&physical, session).await,
        false => None,
    };
    let context = StatisticsContext::new();
    let statistics = context
        .compute(physical.as_ref(), &StatisticsArgs::new())
        .ok()?;
    let estimated = *statistics.num_rows.get_value()? as f64;
    let rows = sampled.unwrap_or(estimated).max(1.0);
    let columns = leaf.schema().columns();
    if columns.len() != statistics.column_statistics.len() {
        return None;
    }
    let mut table_distinct = HashMap::new();
    if let [table] = scans(&physical).as_slice() {
        if let Ok(whole) = context.compute(table.as_ref(), &StatisticsArgs::new()) {
            let table_rows = whole.num_rows.get_value().map(|n| *n as f64);
            let schema = table.schema();
            for column in &columns {
                let index = schema.index_of(&column.name).ok();
                let stats = index.and_then(|i| whole.column_statistics.get(i));
                if let (Some(stats), Some(table_rows)) = (stats, table_rows) {
                    table_distinct
                        .insert(column.clone(), distinct_values(stats, table_rows.max(1.0)));
                }
            }
        }
    }
    let distinct = columns
        .into_iter()
        .zip(&statistics.column_statistics)
        .map(|(column, stats)| (column, distinct_values(stats, rows)))
        .collect();
    Some(LeafEstimate {
        rows,
        distinct,
        table_distinct,
    })
}

/// The nodes of `plan` without children: its table reads.
fn scans(plan: &Arc<dyn ExecutionPlan>) -> Vec<Arc<dyn ExecutionPlan>> {
    if plan.children().is_empty() {
        return vec![Arc::clone(plan)];
    }
    plan.children().into_iter().flat_map(scans).collect()
}

/// A column's distinct values: its count where the statistics hold one,
/// else the width of its range for integers and dates (key columns are
/// dense), else every row distinct (what a key is). Never more than the
/// rows.
pub fn distinct_values(stats: &ColumnStatistics, rows: f64) -> f64 {
    let known = match (&stats.distinct_count, &stats.min_value, &stats.max_value) {
        (Precision::Exact(n) | Precision::Inexact(n), _, _) => Some(*n as f64),
        (_, min, max) => match (min.get_value(), max.get_value()) {
            (Some(min), Some(max)) if is_discrete(&min.data_type()) => {
                min.distance(max).map(|d| d as f64 + 1.0)
            }
            _ => None,
        },
    };
    known.unwrap_or(rows).clamp(1.0, rows)
}

fn is_discrete(data_type: &datafusion::arrow::datatypes::DataType) -> bool {
    use datafusion::arrow::datatypes::DataType;
    data_type.is_integer() || matches!(data_type, DataType::Date32 | DataType::Date64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::ScalarValue;

    fn ranged(min: ScalarValue, max: ScalarValue) -> ColumnStatistics {
        ColumnStatistics {
            min_value: Precision::Inexact(min),
            max_value: Precision::Inexact(max),
            ..ColumnStatistics::new_unknown()
        }
    }

    #[test]
    fn integer_ranges_bound_the_distinct_values_and_rows_bound_both() {
        let nation_keys = ranged(ScalarValue::Int32(Some(0)), ScalarValue::Int32(Some(24)));
        assert_eq!(distinct_values(&nation_keys, 1_500_000.0), 25.0);
        assert_eq!(distinct_values(&nation_keys, 5.0), 5.0);
    }

    #[test]
    fn a_known_count_wins_and_unknown_columns_count_as_keys() {
        let counted = ColumnStatistics {
            distinct_count: Precision::Exact(7),
            ..ranged(ScalarValue::Int64(Some(0)), ScalarValue::Int64(Some(1000)))
        };
        assert_eq!(distinct_values(&counted, 100.0), 7.0);
        let names = ranged(
            ScalarValue::Utf8(Some("a".into())),
            ScalarValue::Utf8(Some("z".into())),
        );
        assert_eq!(distinct_values(&names, 100.0), 100.0);
        assert_eq!(
            distinct_values(&ColumnStatistics::new_unknown(), 42.0),
            42.0
        );
        let prices = ranged(
            ScalarValue::Float64(Some(0.0)),
            ScalarValue::Float64(Some(1.0)),
        );
        assert_eq!(distinct_values(&prices, 100.0), 100.0);
    }
}
