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
                found.push(Regression {
                    mode,
                    location: location.clone(),
                    gap: known_gap(&difference),
                    difference,
                });
            }
        }
        found
    }
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
