//! Parquet statistics of float columns are bounds, not values.
//!
//! Parquet writers leave NaN out of a column chunk's min/max. A float
//! column holding NaN and one other value then has min == max, and
//! DataFusion's Parquet reader takes a column whose exact min equals its
//! exact max (and that has no nulls) for a constant: it answers that value
//! for every row without decoding the column, NaN rows included
//! (functions.slt: `greatest(a, b, c)` over a table answered Infinity for
//! NaN). A file's float min/max are therefore passed on as inexact: they
//! still prune, they no longer replace the data.

use std::sync::Arc;

use datafusion::common::{ColumnStatistics, ScalarValue, Statistics};
use datafusion::datasource::physical_plan::FileGroup;

/// `groups` with every file's (and group's) float min/max made inexact.
pub fn inexact_float_bounds(groups: Vec<FileGroup>) -> Vec<FileGroup> {
    groups
        .into_iter()
        .map(|group| {
            let statistics = group
                .file_statistics(None)
                .map(|s| inexact(s).unwrap_or_else(|| s.clone()));
            let files = group.into_inner().into_iter().map(|mut file| {
                if let Some(changed) = file.statistics.as_deref().and_then(inexact) {
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

/// `statistics` with float min/max inexact, or None when it has none exact.
fn inexact(statistics: &Statistics) -> Option<Statistics> {
    let exact_float = |c: &ColumnStatistics| {
        [&c.min_value, &c.max_value]
            .iter()
            .any(|v| v.is_exact() == Some(true) && is_float(v.get_value()))
    };
    if !statistics.column_statistics.iter().any(exact_float) {
        return None;
    }
    let mut statistics = statistics.clone();
    for column in statistics
        .column_statistics
        .iter_mut()
        .filter(|c| exact_float(c))
    {
        column.min_value = column.min_value.clone().to_inexact();
        column.max_value = column.max_value.clone().to_inexact();
    }
    Some(statistics)
}

fn is_float(value: Option<&ScalarValue>) -> bool {
    matches!(
        value,
        Some(ScalarValue::Float16(_) | ScalarValue::Float32(_) | ScalarValue::Float64(_))
    )
}
