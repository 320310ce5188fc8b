//! One file on one engine: every record through sqllogictest's runner with
//! DataFusion's validators, each statement's outcome kept by location.

use std::collections::BTreeMap;
use std::path::Path;

use sqllogictest::{
    parse_file, strict_column_validator, AsyncDB, MakeConnection, Record, RecordOutput, Runner,
};

use crate::by_design;
use crate::format::SltType;

/// What became of one statement or query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The first line of the difference or error.
    Failed(String),
    /// Not compared on this engine, and why.
    Skipped(&'static str),
}

/// Outcomes by `file:line` (records pulled in by `include` keep their
/// own file's name).
pub type Outcomes = BTreeMap<String, Outcome>;

/// Whether a record is left out on an engine (e.g. `EXPLAIN` on Squadron,
/// whose plans are cut into stages), and why.
pub type RecordFilter = fn(&str) -> Option<&'static str>;

/// Runs every record of `file` (stopping at `halt`).
pub async fn run_file<D, M>(
    file: &Path,
    make_connection: M,
    skip: RecordFilter,
) -> anyhow::Result<Outcomes>
where
    D: AsyncDB<ColumnType = SltType>,
    M: MakeConnection<Conn = D>,
{
    let records = parse_file::<SltType>(file)?;
    let mut runner = Runner::new(make_connection);
    // The label DataFusion's runner uses for `onlyif`/`skipif`.
    runner.add_label("Datafusion");
    runner.with_column_validator(strict_column_validator);
    runner.with_normalizer(trimmed_end);
    runner.with_validator(lines_match);
    let mut outcomes = Outcomes::new();
    for record in records {
        let (loc, sql) = match &record {
            Record::Halt { .. } => break,
            Record::Statement { loc, sql, .. } | Record::Query { loc, sql, .. } => {
                (loc.clone(), sql.clone())
            }
            _ => {
                // Control records (sort mode, variables) still apply.
                let _ = runner.run_async(record).await;
                continue;
            }
        };
        let key = format!("{}:{}", file_name(loc.file()), loc.line());
        if let Some(reason) = skip(&sql) {
            outcomes.insert(key, Outcome::Skipped(reason));
            continue;
        }
        let outcome = match runner.run_async(record.clone()).await {
            Ok(RecordOutput::Nothing) => continue, // `onlyif` another engine
            Ok(_) => Outcome::Passed,
            Err(e) => match in_another_order(&e.kind())
                .or_else(|| by_design::squadron_defaults(&e.kind()))
                .or_else(|| by_design::system_schema_listed(&e.kind()))
                .or_else(|| by_design::plain_parquet_types(&e.kind()))
                .or_else(|| by_design::limit_read_other_rows(&e.kind()))
                .or_else(|| by_design::upstream_sort_key_substitution(&e.kind()))
            {
                Some(note) => Outcome::Failed(note),
                None if only_encoded_columns_differ(&e.kind()) => {
                    Outcome::Failed(same_values_decoded(&mut runner, record).await)
                }
                None => Outcome::Failed(first_difference(&e.display(false).to_string())),
            },
        };
        outcomes.insert(key, outcome);
    }
    runner.shutdown_async().await;
    Ok(outcomes)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// DataFusion's runner ignores trailing whitespace of expected lines.
#[allow(clippy::ptr_arg)] // sqllogictest's `Normalizer` signature
fn trimmed_end(line: &String) -> String {
    line.trim_end().to_string()
}

/// DataFusion's validation: a row is its cells joined by spaces, trailing
/// whitespace ignored, and `<slt:ignore>` in the expected text matches
/// anything.
fn lines_match(
    normalizer: sqllogictest::Normalizer,
    actual: &[Vec<String>],
    expected: &[String],
) -> bool {
    const IGNORE: &str = "<slt:ignore>";
    let actual: Vec<String> = actual
        .iter()
        .map(|row| row.join(" ").trim_end().to_string())
        .collect();
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    if !expected.iter().any(|line| line.contains(IGNORE)) {
        return actual == expected;
    }
    // Fragments between the markers appear in order; the first one at
    // the very start.
    let actual = actual.join("\n");
    let expected = expected.join("\n");
    let mut at = 0;
    for (n, fragment) in expected.split(IGNORE).enumerate() {
        if fragment.is_empty() {
            continue;
        }
        match actual[at..].find(fragment) {
            Some(found) if n > 0 || found == 0 => at += found + fragment.len(),
            _ => return false,
        }
    }
    true
}

/// Marks a mismatch that is only the order of an unordered query's rows:
/// without ORDER BY, SQL promises no order, and the expected files record
/// single-node DataFusion's, which follows its partitions where
/// Squadron's follows which task answers first. Kept apart from real
/// differences (see `gaps.rs`), never counted as a pass.
fn in_another_order(kind: &sqllogictest::TestErrorKind) -> Option<String> {
    let crate::by_design::Mismatch {
        sql,
        expected,
        actual,
    } = crate::by_design::Mismatch::of(kind)?;
    if sql.to_ascii_lowercase().contains("order by") {
        return None;
    }
    fn sorted(text: &str) -> Vec<&str> {
        let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        lines.sort_unstable();
        lines
    }
    (sorted(expected) == sorted(actual)).then(|| {
        format!(
            "unordered result: the same rows in another order ⏎ [SQL] {}",
            sql.lines().next().unwrap_or_default()
        )
    })
}

/// Whether a query's column letters differ only where DataFusion's runner
/// wrote `?` for an encoded column (a dictionary of numbers, a run-end
/// encoded column): Squadron sends such columns decoded, as the Flight
/// encoders do, so its client sees the values' own type.
fn only_encoded_columns_differ(kind: &sqllogictest::TestErrorKind) -> bool {
    let sqllogictest::TestErrorKind::QueryResultColumnsMismatch {
        expected, actual, ..
    } = kind
    else {
        return false;
    };
    expected.len() == actual.len()
        && expected
            .chars()
            .zip(actual.chars())
            .all(|(e, a)| e == a || e == '?')
}

/// Runs a query again, its `?` columns accepting any type, to tell a
/// decoded column with the expected values (marked as such, kept apart
/// from real differences, never a pass) from a real difference.
async fn same_values_decoded<D, M>(runner: &mut Runner<D, M>, record: Record<SltType>) -> String
where
    D: AsyncDB<ColumnType = SltType>,
    M: MakeConnection<Conn = D>,
{
    let sql = match &record {
        Record::Query { sql, .. } => sql.lines().next().unwrap_or_default().to_string(),
        _ => String::new(),
    };
    runner.with_column_validator(encoded_columns_validator);
    let again = runner.run_async(record).await;
    runner.with_column_validator(strict_column_validator);
    match again {
        Ok(_) => format!("decoded column: the same values, sent decoded ⏎ [SQL] {sql}"),
        Err(e) => first_difference(&e.display(false).to_string()),
    }
}

#[allow(clippy::ptr_arg)] // sqllogictest's `ColumnTypeValidator` signature
fn encoded_columns_validator(actual: &Vec<SltType>, expected: &Vec<SltType>) -> bool {
    actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|(a, e)| a == e || *e == SltType::Other)
}

/// The part of a runner error that says what differed: its first lines,
/// without the SQL it repeats.
fn first_difference(error: &str) -> String {
    let text: String = error
        .lines()
        .filter(|line| !line.trim().is_empty())
        .take(6)
        .collect::<Vec<_>>()
        .join(" ⏎ ");
    let mut text = text.replace('|', "\\|");
    if text.len() > 300 {
        let mut end = 300;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(lines: &[&str]) -> Vec<Vec<String>> {
        lines.iter().map(|l| vec![l.to_string()]).collect()
    }

    fn lines(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn ignore_markers_match_any_text_between_fragments() {
        let actual = rows(&["a plan with details", "done"]);
        assert!(lines_match(
            trimmed_end,
            &actual,
            &lines(&["a plan<slt:ignore>done"])
        ));
        assert!(!lines_match(
            trimmed_end,
            &actual,
            &lines(&["plan<slt:ignore>"])
        ));
        assert!(lines_match(
            trimmed_end,
            &actual,
            &lines(&["a plan with details  ", "done"])
        ));
        assert!(!lines_match(
            trimmed_end,
            &actual,
            &lines(&["a plan", "done"])
        ));
    }
}

#[cfg(test)]
mod order_tests {
    use super::in_another_order;
    use crate::by_design::mismatch;

    #[test]
    fn only_an_unordered_query_with_the_same_rows_is_in_another_order() {
        assert!(in_another_order(&mismatch("SELECT a FROM t", "1\n2", "2\n1")).is_some());
        // Ordered: the order is the answer.
        assert!(
            in_another_order(&mismatch("SELECT a FROM t ORDER BY a", "1\n2", "2\n1")).is_none()
        );
        // Other rows are a real difference.
        assert!(in_another_order(&mismatch("SELECT a FROM t", "1\n2", "1\n3")).is_none());
        assert!(in_another_order(&mismatch("SELECT a FROM t", "1\n1", "1")).is_none());
    }
}
