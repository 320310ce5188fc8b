//! A file's statistics reach the Parquet reader as bounds, not values,
//! where the reader would otherwise take them for the data.
//!
//! DataFusion's Parquet reader takes a column whose exact min equals its
//! exact max (with no nulls), or whose exact null count is the file's row
//! count, for a constant: it answers that literal for every row without
//! decoding the column. Two ways that goes wrong, both seen in DataFusion's
//! sqllogictest corpus once created tables are Parquet files:
//! - Parquet writers leave NaN out of a float column chunk's min/max, so a
//!   column holding NaN and one other value has min == max, and the NaN
//!   rows were answered as that value (functions.slt: `greatest(a, b, c)`
//!   answered Infinity for NaN).
//! - The literal is not the column: functions of the column's field see a
//!   literal's (`arrow_field(x)['name']` answered `lit`).
//!
//! So float min/max, and the statistics of any column they would make a
//! constant, are passed on as inexact. Row groups are still pruned by
//! their own statistics; only this file-level shortcut is given up.

use std::sync::Arc;

use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use datafusion::datasource::physical_plan::FileGroup;

/// `groups` with every file's (and group's) statistics made bounds where
/// the reader would take them for the data.
pub fn bounds_not_values(groups: Vec<FileGroup>) -> Vec<FileGroup> {
    groups
        .into_iter()
        .map(|group| {
            let statistics = group
                .file_statistics(None)
                .map(|s| as_bounds(s).unwrap_or_else(|| s.clone()));
            let files = group.into_inner().into_iter().map(|mut file| {
                if let Some(changed) = file.statistics.as_deref().and_then(as_bounds) {
                    file.statistics = Some(Arc::new(changed));
                }
                file
            });
            let group = FileGroup::new(files.collect());
            match statistics {
                Some(statistics) => group.with_statistics(Arc::new(statistics)),
                None => group,
            }
        })
        .collect()
}

/// `statistics` made bounds where the reader (or, on the coordinator, the
/// planner: a column it takes for a constant, an aggregate it answers from
/// them) would take them for the data; None when nothing changes.
pub fn as_bounds(statistics: &Statistics) -> Option<Statistics> {
    let rows = statistics.num_rows;
    let changes = |c: &ColumnStatistics| misleading_bounds(c) || all_null(c, rows);
    if !statistics.column_statistics.iter().any(changes) {
        return None;
    }
    let mut statistics = statistics.clone();
    for column in statistics.column_statistics.iter_mut() {
        if misleading_bounds(column) {
            column.min_value = column.min_value.clone().to_inexact();
            column.max_value = column.max_value.clone().to_inexact();
        }
        if all_null(column, rows) {
            column.null_count = column.null_count.to_inexact();
        }
    }
    Some(statistics)
}

/// Exact min/max that are a float's (NaN left out) or one value.
fn misleading_bounds(column: &ColumnStatistics) -> bool {
    let (Precision::Exact(min), Precision::Exact(max)) = (&column.min_value, &column.max_value)
    else {
        return false;
    };
    is_float(min) || is_float(max) || min == max
}

fn all_null(column: &ColumnStatistics, rows: Precision<usize>) -> bool {
    matches!((column.null_count, rows), (Precision::Exact(nulls), Precision::Exact(rows)) if nulls == rows)
}

fn is_float(value: &ScalarValue) -> bool {
    matches!(
        value,
        ScalarValue::Float16(_) | ScalarValue::Float32(_) | ScalarValue::Float64(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(min: ScalarValue, max: ScalarValue, nulls: usize) -> ColumnStatistics {
        ColumnStatistics {
            min_value: Precision::Exact(min),
            max_value: Precision::Exact(max),
            null_count: Precision::Exact(nulls),
            ..ColumnStatistics::new_unknown()
        }
    }

    #[test]
    fn only_statistics_the_reader_would_take_for_data_become_bounds() {
        let statistics = Statistics {
            num_rows: Precision::Exact(3),
            total_byte_size: Precision::Absent,
            column_statistics: vec![
                column(ScalarValue::from(1i32), ScalarValue::from(5i32), 0),
                column(ScalarValue::from(2i32), ScalarValue::from(2i32), 0),
                column(ScalarValue::from(1.0f64), ScalarValue::from(3.0f64), 0),
                column(ScalarValue::Int32(None), ScalarValue::Int32(None), 3),
            ],
        };
        let bounds = as_bounds(&statistics).expect("changed");
        let [range, constant, float, nulls] = &bounds.column_statistics[..] else {
            panic!("four columns");
        };
        assert_eq!(range, &statistics.column_statistics[0]);
        assert_eq!(
            constant.min_value,
            Precision::Inexact(ScalarValue::from(2i32))
        );
        assert_eq!(
            constant.max_value,
            Precision::Inexact(ScalarValue::from(2i32))
        );
        assert_eq!(
            float.max_value,
            Precision::Inexact(ScalarValue::from(3.0f64))
        );
        assert_eq!(nulls.null_count, Precision::Inexact(3));
        assert_eq!(constant.null_count, Precision::Exact(0));

        let plain = Statistics {
            column_statistics: vec![statistics.column_statistics[0].clone()],
            ..statistics
        };
        assert!(as_bounds(&plain).is_none());
    }
}
