//! Figures read back from an `EXPLAIN ANALYZE VERBOSE` answer, which lists
//! every task's operators with their metrics.

use datafusion::arrow::array::AsArray;
use datafusion::arrow::record_batch::RecordBatch;

/// The rows the scans of files whose path contains `file` read, summed
/// over every task (`output_rows` of each `DataSourceExec` line); all
/// scans with an empty `file`.
pub fn rows_scanned(explained: &[RecordBatch], file: &str) -> u64 {
    rows_out(explained, &["DataSourceExec", file])
}

/// The rows the operators whose line contains every one of `texts`
/// produced, summed over every task.
pub fn rows_out(explained: &[RecordBatch], texts: &[&str]) -> u64 {
    lines(explained)
        .filter(|line| texts.iter().all(|t| line.contains(t)))
        .map(output_rows)
        .sum()
}

/// The `output_rows` metric of one operator's line.
fn output_rows(line: &str) -> u64 {
    let metrics = line.split("metrics=[").nth(1).unwrap_or_default();
    metrics
        .split(", ")
        .find_map(|m| m.strip_prefix("output_rows="))
        .and_then(|n| n.trim_end_matches(']').parse::<u64>().ok())
        .unwrap_or(0)
}

/// The rows into and out of the dynamic filters placed directly over
/// scans of files whose path contains `file` (`FilterExec: DynamicFilter`
/// lines each followed by its scan's), summed over every task.
pub fn dynamic_filters_over_scans(explained: &[RecordBatch], file: &str) -> (u64, u64) {
    let lines: Vec<&str> = lines(explained).collect();
    lines
        .windows(2)
        .filter(|pair| {
            pair[0]
                .trim_start()
                .starts_with("FilterExec: DynamicFilter")
        })
        .filter(|pair| pair[1].contains("DataSourceExec") && pair[1].contains(file))
        .map(|pair| (output_rows(pair[1]), output_rows(pair[0])))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

/// The rows producing tasks did not send because their consumers' filters
/// ruled them out, summed over every task attempt's line.
pub fn rows_dropped_for_consumers(explained: &[RecordBatch]) -> u64 {
    lines(explained)
        .filter(|line| line.trim_start().starts_with("task "))
        .filter_map(|line| {
            let (before, _) = line.split_once(" dropped by consumers' filters)")?;
            before.rsplit('(').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Every line of every text column of the answer.
fn lines(explained: &[RecordBatch]) -> impl Iterator<Item = &str> {
    explained
        .iter()
        .flat_map(|batch| batch.columns())
        .filter_map(|column| column.as_string_opt::<i32>())
        .flat_map(|text| text.iter().flatten().flat_map(str::lines))
}
