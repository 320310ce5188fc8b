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
    let mut rows = 0;
    for batch in explained {
        for column in batch.columns() {
            let Some(text) = column.as_string_opt::<i32>() else {
                continue;
            };
            for line in text.iter().flatten().flat_map(str::lines) {
                if !texts.iter().all(|t| line.contains(t)) {
                    continue;
                }
                let metrics = line.split("metrics=[").nth(1).unwrap_or_default();
                rows += metrics
                    .split(", ")
                    .find_map(|m| m.strip_prefix("output_rows="))
                    .and_then(|n| n.trim_end_matches(']').parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    rows
}

/// The rows producing tasks did not send because their consumers' filters
/// ruled them out, summed over every task attempt's line.
pub fn rows_dropped_for_consumers(explained: &[RecordBatch]) -> u64 {
    let mut rows = 0;
    for batch in explained {
        for column in batch.columns() {
            let Some(text) = column.as_string_opt::<i32>() else {
                continue;
            };
            for line in text.iter().flatten().flat_map(str::lines) {
                if !line.trim_start().starts_with("task ") {
                    continue;
                }
                rows += line
                    .split(" dropped by consumers' filters)")
                    .next()
                    .filter(|before| before.len() < line.len())
                    .and_then(|before| before.rsplit('(').next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    rows
}
