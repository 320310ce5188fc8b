//! Reduced failures kept as regression cases: a directory per case with
//! the tables' Parquet files (as the fuzzer wrote them: files, row groups
//! and recorded order are part of what a bug may need) and `case.sql`,
//! whose header says where it was found and how it failed, then the
//! statement. `--replay` runs every case in every mode against the oracle.

use std::path::{Path, PathBuf};

use crate::data::Table;
use crate::fuzzer::Finding;

/// The file a case's statement and header are in.
const CASE_FILE: &str = "case.sql";

/// A kept case, as read back.
pub struct Case {
    pub name: String,
    pub sql: String,
    /// A metamorphic case's second statement, which must answer the rows
    /// of the first as a multiset (the union of TLP's parts, NoREC's
    /// count of the predicate as a column).
    pub equivalent: Option<String>,
    /// Table name, location, and whether its files are sorted.
    pub tables: Vec<(String, PathBuf, bool)>,
}

/// Writes `finding` under `root/<name>/`.
pub fn save(root: &Path, name: &str, finding: &Finding) -> anyhow::Result<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let mut header = vec![
        format!("-- found: {} ({})", finding.origin, finding.check),
        format!("-- mode: {}", finding.mode.name()),
        format!("-- difference: {}", finding.why.replace('\n', " ")),
    ];
    let words: Vec<&str> = finding
        .sql
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .collect();
    // Only the tables the statement reads.
    for table in finding
        .tables
        .iter()
        .filter(|t| words.contains(&t.name.as_str()))
    {
        table.write(&dir)?;
        header.push(format!(
            "-- table: {}{}",
            table.name,
            if table.sorted { " sorted" } else { "" }
        ));
    }
    let text = format!("{}\n{}\n", header.join("\n"), finding.sql);
    std::fs::write(dir.join(CASE_FILE), text)?;
    Ok(dir)
}

/// The line before a metamorphic case's second statement (`-- equals:`,
/// `-- equals, as a multiset:`).
const EQUIVALENT: &str = "-- equals";

/// Every case under `root`, by name.
pub fn load(root: &Path) -> anyhow::Result<Vec<Case>> {
    let mut cases = vec![];
    if !root.exists() {
        return Ok(cases);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.sort();
    for dir in dirs.into_iter().filter(|d| d.join(CASE_FILE).exists()) {
        let text = std::fs::read_to_string(dir.join(CASE_FILE))?;
        let mut tables = vec![];
        // A metamorphic case keeps its second statement after an
        // `-- equals…` line; the first is the one replayed against the oracle.
        let mut statements: Vec<Vec<&str>> = vec![vec![]];
        for line in text.lines() {
            if let Some(table) = line.strip_prefix("-- table: ") {
                let mut words = table.split_whitespace();
                let name = words.next().unwrap_or_default().to_string();
                let sorted = words.next() == Some("sorted");
                tables.push((name.clone(), dir.join(&name), sorted));
            } else if line.starts_with(EQUIVALENT) {
                statements.push(vec![]);
            } else if !line.starts_with("-- ") {
                statements
                    .last_mut()
                    .expect("one statement at least")
                    .push(line);
            }
        }
        let mut statements = statements
            .into_iter()
            .map(|s| s.join("\n").trim().to_string());
        let first = statements.next().unwrap_or_default();
        let equivalent = statements.next().filter(|s| !s.is_empty());
        cases.push(Case {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            sql: first,
            equivalent,
            tables,
        });
    }
    Ok(cases)
}

/// The table a case names, with no rows of its own (its files are on disk).
pub fn table_entry(name: &str, sorted: bool) -> Table {
    Table {
        name: name.to_string(),
        files: vec![],
        sorted,
        row_group_rows: 0,
    }
}
