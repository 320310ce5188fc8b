//! The comparison: per file, how many statements pass on single-node
//! DataFusion and through Squadron, and the first statement that passes on
//! the one and not on the other.

use std::fmt::Write;

use crate::gaps::known_gap;
use crate::run::{Outcome, Outcomes};

/// One file's result on the baseline and on each cluster mode.
pub struct FileResult {
    pub file: String,
    /// Why the file was not run, if it was not.
    pub skipped: Option<&'static str>,
    pub baseline: Outcomes,
    /// (mode name, outcomes), in the order the modes ran.
    pub squadron: Vec<(&'static str, Outcomes)>,
}

/// A statement that passes on the baseline and not through Squadron.
pub struct Regression {
    pub mode: &'static str,
    pub location: String,
    pub difference: String,
    /// The known gap it falls under, if any (see `gaps`).
    pub gap: Option<&'static str>,
}

impl FileResult {
    pub fn statements(&self) -> usize {
        compared(&self.baseline)
    }

    pub fn baseline_passed(&self) -> usize {
        passed(&self.baseline)
    }

    pub fn regressions(&self) -> Vec<Regression> {
        let mut found = vec![];
        for (mode, outcomes) in &self.squadron {
            let not_created = tables_not_created(outcomes);
            let refused = settings_refused(outcomes);
            for (location, outcome) in &self.baseline {
                if *outcome != Outcome::Passed {
                    continue;
                }
                let difference = match outcomes.get(location) {
                    Some(Outcome::Passed) => continue,
                    Some(Outcome::Failed(difference)) => difference.clone(),
                    Some(Outcome::Skipped(reason)) => reason.to_string(),
                    None => "not run (an earlier statement stopped the file)".into(),
                };
                let gap = known_gap(&difference)
                    .or_else(|| {
                        not_created
                            .iter()
                            .any(|table| names_missing_table(&difference, table))
                            .then_some(FOLLOWS_A_GAP)
                    })
                    .or_else(|| follows_refused_setting(&difference, &refused));
                found.push(Regression {
                    mode,
                    location: location.clone(),
                    gap,
                    difference,
                });
            }
        }
        found
    }
}

const FOLLOWS_A_GAP: &str =
    "reads a table whose CREATE is a known gap, so the table does not exist";

/// Tables (lower case) whose `CREATE TABLE` failed as a known gap: the
/// statements that use them fail for that one reason.
fn tables_not_created(outcomes: &Outcomes) -> Vec<String> {
    outcomes
        .values()
        .filter_map(|outcome| match outcome {
            Outcome::Failed(difference) if known_gap(difference).is_some() => {
                created_table(difference)
            }
            _ => None,
        })
        .collect()
}

const FOLLOWS_A_REFUSED_SETTING: &str =
    "shows or depends on a server setting whose SET was refused (a known gap), so it keeps the server's value";

/// Settings (lower case) whose `SET` Squadron refused as the operator's.
fn settings_refused(outcomes: &Outcomes) -> Vec<String> {
    outcomes
        .values()
        .filter_map(|outcome| match outcome {
            Outcome::Failed(difference) if known_gap(difference).is_some() => {
                let (before, _) = difference.split_once(" is a server setting a client cannot")?;
                let key = before.rsplit(' ').next()?;
                Some(key.to_ascii_lowercase())
            }
            _ => None,
        })
        .collect()
}

/// Whether `difference` follows from a refused setting: `SHOW` of it
/// answers the server's value, and a statement expected to run out of a
/// refused memory limit succeeds.
fn follows_refused_setting(difference: &str, refused: &[String]) -> Option<&'static str> {
    let lower = difference.to_ascii_lowercase();
    let shows_one = refused
        .iter()
        .any(|key| lower.contains(&format!("[sql] show {key}")));
    let no_memory_limit = refused
        .iter()
        .any(|key| key == "datafusion.runtime.memory_limit")
        && lower.starts_with("query is expected to fail, but actually succeed");
    (shows_one || no_memory_limit).then_some(FOLLOWS_A_REFUSED_SETTING)
}

/// The table a failed statement's `[SQL] CREATE TABLE name …` creates.
fn created_table(difference: &str) -> Option<String> {
    let sql = difference.split("[SQL] ").nth(1)?.to_ascii_lowercase();
    let mut words = sql.split_whitespace();
    if words.next()? != "create" {
        return None;
    }
    let mut word = words.next()?;
    if word == "or" {
        words.next()?; // replace
        word = words.next()?;
    }
    if word != "table" {
        return None;
    }
    let mut name = words.next()?;
    if name == "if" {
        words.next()?; // not
        words.next()?; // exists
        name = words.next()?;
    }
    let name = name.split('(').next()?.trim_matches('"');
    (!name.is_empty()).then(|| name.to_string())
}

/// Whether `difference` is DataFusion's "no such table" naming `table`.
fn names_missing_table(difference: &str, table: &str) -> bool {
    let lower = difference.to_ascii_lowercase();
    let not_found = format!(".{table}' not found");
    let missing = format!("table '{table}' doesn't exist");
    lower.contains(&not_found) || lower.contains(&missing)
}

fn compared(outcomes: &Outcomes) -> usize {
    outcomes
        .values()
        .filter(|o| !matches!(o, Outcome::Skipped(_)))
        .count()
}

fn passed(outcomes: &Outcomes) -> usize {
    outcomes.values().filter(|o| **o == Outcome::Passed).count()
}

/// Totals over every file, one line.
pub fn summary(results: &[FileResult], modes: &[&'static str]) -> String {
    let run: Vec<&FileResult> = results.iter().filter(|r| r.skipped.is_none()).collect();
    let statements: usize = run.iter().map(|r| r.statements()).sum();
    let baseline: usize = run.iter().map(|r| r.baseline_passed()).sum();
    let mut line = format!(
        "{} files run ({} skipped), {statements} statements: single-node DataFusion passes {baseline}",
        run.len(),
        results.len() - run.len(),
    );
    for (n, mode) in modes.iter().enumerate() {
        let squadron: usize = run
            .iter()
            .filter_map(|r| r.squadron.get(n))
            .map(|(_, outcomes)| passed(outcomes))
            .sum();
        let (mut gaps, mut differences) = (0, 0);
        for regression in run.iter().flat_map(|r| r.regressions()) {
            match (regression.mode == *mode, regression.gap) {
                (false, _) => {}
                (true, Some(_)) => gaps += 1,
                (true, None) => differences += 1,
            }
        }
        let _ = write!(
            line,
            "; Squadron ({mode}) passes {squadron} ({gaps} known gaps, {differences} other differences)"
        );
    }
    line
}

/// The per-file table in Markdown.
pub fn table(results: &[FileResult], modes: &[&'static str]) -> String {
    let mut out = String::from("| file | statements | DataFusion |");
    for mode in modes {
        let _ = write!(out, " Squadron ({mode}) |");
    }
    out.push_str(" first difference |\n|---|---:|---:|");
    for _ in modes {
        out.push_str("---:|");
    }
    out.push_str("---|\n");
    for result in results {
        if let Some(reason) = result.skipped {
            let _ = write!(out, "| {} | – | skipped |", result.file);
            for _ in modes {
                out.push_str(" – |");
            }
            let _ = writeln!(out, " {reason} |");
            continue;
        }
        let _ = write!(
            out,
            "| {} | {} | {} |",
            result.file,
            result.statements(),
            result.baseline_passed()
        );
        for (_, outcomes) in &result.squadron {
            let _ = write!(out, " {} |", passed(outcomes));
        }
        // The first difference that is not a known gap, else the first gap.
        let regressions = result.regressions();
        let first = regressions
            .iter()
            .find(|g| g.gap.is_none())
            .map(|g| format!("{} ({}): {}", g.location, g.mode, g.difference))
            .or_else(|| {
                regressions.first().map(|g| {
                    format!(
                        "{} ({}): known gap: {}",
                        g.location,
                        g.mode,
                        g.gap.unwrap_or("")
                    )
                })
            })
            .unwrap_or_default();
        let _ = writeln!(out, " {first} |");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_on_a_table_a_known_gap_left_uncreated_follow_that_gap() {
        let create = "statement failed: DataFusion error: column d (Dictionary(Int32, \
                      Dictionary(UInt32, Utf8))): a dictionary of dictionaries cannot be stored \
                      in a table's files ⏎ [SQL] CREATE TABLE IF NOT EXISTS Dict_T AS ⏎ SELECT 1";
        let other_create = "statement failed: boom ⏎ [SQL] CREATE TABLE other AS SELECT 1";
        let outcomes: Outcomes = [
            ("f.slt:1".to_string(), Outcome::Failed(create.into())),
            ("f.slt:2".to_string(), Outcome::Failed(other_create.into())),
        ]
        .into();
        assert_eq!(tables_not_created(&outcomes), vec!["dict_t".to_string()]);
        let select = "query failed: DataFusion error: Error during planning: table \
                      'datafusion.public.dict_t' not found ⏎ [SQL] SELECT * FROM dict_t";
        let drop = "statement failed: DataFusion error: Execution error: Table 'dict_t' \
                    doesn't exist. ⏎ [SQL] DROP TABLE dict_t";
        assert!(names_missing_table(select, "dict_t"));
        assert!(names_missing_table(drop, "dict_t"));
        assert!(!names_missing_table(select, "t"));
        assert!(!names_missing_table("query result mismatch", "dict_t"));
    }
}

#[cfg(test)]
mod refused_setting_tests {
    use super::*;

    #[test]
    fn statements_after_a_refused_setting_follow_its_gap() {
        let set = "statement failed: DataFusion error: datafusion.runtime.memory_limit is a \
                   server setting a client cannot change ⏎ [SQL] SET datafusion.runtime.memory_limit = '1M'";
        let outcomes: Outcomes = [("f.slt:1".to_string(), Outcome::Failed(set.into()))].into();
        let refused = settings_refused(&outcomes);
        assert_eq!(refused, vec!["datafusion.runtime.memory_limit".to_string()]);
        let show = "query result mismatch: ⏎ [SQL] SHOW datafusion.runtime.memory_limit ⏎ [Diff]";
        assert!(follows_refused_setting(show, &refused).is_some());
        let spill = "query is expected to fail, but actually succeed: ⏎ [SQL] SELECT v1 FROM t";
        assert!(follows_refused_setting(spill, &refused).is_some());
        let other = "query result mismatch: ⏎ [SQL] SHOW datafusion.runtime.metadata_cache_limit";
        assert!(follows_refused_setting(other, &refused).is_none());
        assert!(follows_refused_setting(spill, &[]).is_none());
    }
}
