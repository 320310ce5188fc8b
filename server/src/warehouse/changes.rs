//! What a statement changes in the catalog, as a function of the version
//! it commits on top of.
//!
//! A change is applied to the newest version at commit time, not to the
//! one its statement started from: when another commit came first, it is
//! applied again to that newer version. So two INSERTs both take effect,
//! an INSERT and an UPDATE of the same table both take effect (the UPDATE
//! replaces only the files it read and rewrote; rows inserted meanwhile
//! stay), and what cannot be merged is refused with ABORTED (two rewrites
//! of the same files, a write into a table replaced meanwhile).

use std::collections::HashSet;

use squadron_common::error::Error;

use crate::catalog::persisted::{DataFile, Entry, Managed};

#[derive(Debug, Clone)]
pub enum Change {
    /// A new table (`CREATE TABLE [AS]`, ingest), replacing one of that
    /// name only if `replace`.
    Create { table: Managed, replace: bool },
    /// Files added to the table `name` of identity `id` (INSERT, an
    /// appending ingest).
    Append {
        name: String,
        id: String,
        files: Vec<DataFile>,
    },
    /// The files a rewrite read (`removed`) replaced by those it wrote
    /// (UPDATE, DELETE).
    Rewrite {
        name: String,
        id: String,
        removed: Vec<String>,
        added: Vec<DataFile>,
    },
    /// Entries added or replaced: external tables, views, catalogs and
    /// schemas. `once`: kept where it is if one of that name exists.
    Define { entry: Entry, once: bool },
    /// Entries removed, if there (DROP TABLE, DROP VIEW, DROP SCHEMA).
    Remove { names: Vec<String> },
}

impl Change {
    /// The catalog `entries` with this change made.
    pub fn apply(&self, entries: &[Entry]) -> Result<Vec<Entry>, Error> {
        let mut next = entries.to_vec();
        let position = |name: &str| next.iter().position(|e| e.name() == name);
        match self {
            Change::Create { table, replace } => {
                if let Some(i) = position(&table.name) {
                    if !replace {
                        return Err(Error::already_exists(format!(
                            "Execution error: Table '{}' already exists",
                            table.name
                        )));
                    }
                    next.remove(i);
                }
                next.push(Entry::Managed(table.clone()));
            }
            Change::Append { name, id, files } => {
                let table = managed(&mut next, name, id, "INSERT")?;
                table.files.extend(files.iter().cloned());
            }
            Change::Rewrite {
                name,
                id,
                removed,
                added,
            } => {
                let table = managed(&mut next, name, id, "rewrite")?;
                let current: HashSet<&str> = table.files.iter().map(|f| f.name.as_str()).collect();
                if let Some(gone) = removed.iter().find(|f| !current.contains(f.as_str())) {
                    return Err(Error::aborted(format!(
                        "{name} was changed by another statement while this one ran (its file \
                         {gone} was rewritten or removed); run the statement again"
                    )));
                }
                let removed: HashSet<&str> = removed.iter().map(String::as_str).collect();
                table.files.retain(|f| !removed.contains(f.name.as_str()));
                table.files.extend(added.iter().cloned());
            }
            Change::Define { entry, once } => match position(entry.name()) {
                Some(_) if *once => {}
                Some(i) => {
                    next.remove(i);
                    next.push(entry.clone());
                }
                None => next.push(entry.clone()),
            },
            Change::Remove { names } => next.retain(|e| !names.iter().any(|n| n == e.name())),
        }
        Ok(next)
    }
}

/// The created table `name`, if it still has identity `id`.
fn managed<'a>(
    entries: &'a mut [Entry],
    name: &str,
    id: &str,
    statement: &str,
) -> Result<&'a mut Managed, Error> {
    let found = entries.iter_mut().find_map(|e| match e {
        Entry::Managed(table) if table.name == name => Some(table),
        _ => None,
    });
    match found {
        Some(table) if table.id == id => Ok(table),
        Some(_) => Err(Error::aborted(format!(
            "{name} was replaced by another statement while this {statement} ran; run it again"
        ))),
        None => Err(Error::not_found(format!(
            "{name} was dropped while this {statement} ran"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squadron_common::error::ErrorKind;

    fn file(name: &str) -> DataFile {
        DataFile {
            name: name.into(),
            bytes: 1,
            rows: 1,
        }
    }

    fn table(name: &str, id: &str, files: &[&str]) -> Managed {
        Managed {
            name: name.into(),
            id: id.into(),
            location: format!("tables/{name}-{id}/"),
            format: "parquet".into(),
            schema: String::new(),
            files: files.iter().map(|f| file(f)).collect(),
            keys: vec![],
            defaults: vec![],
        }
    }

    fn files_of(entries: &[Entry], name: &str) -> Vec<String> {
        entries
            .iter()
            .find_map(|e| match e {
                Entry::Managed(t) if t.name == name => {
                    Some(t.files.iter().map(|f| f.name.clone()).collect())
                }
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn inserts_and_a_rewrite_that_started_before_them_all_take_effect() {
        let start = vec![Entry::Managed(table("t", "1", &["a", "b"]))];
        let insert = Change::Append {
            name: "t".into(),
            id: "1".into(),
            files: vec![file("c")],
        };
        let update = Change::Rewrite {
            name: "t".into(),
            id: "1".into(),
            removed: vec!["a".into(), "b".into()],
            added: vec![file("a2")],
        };
        // The INSERT commits first; the UPDATE, planned on {a, b}, after.
        let after_insert = insert.apply(&start).unwrap();
        let after_both = update.apply(&after_insert).unwrap();
        assert_eq!(files_of(&after_both, "t"), vec!["c", "a2"]);
        // The other order gives the same rows.
        let other = insert.apply(&update.apply(&start).unwrap()).unwrap();
        assert_eq!(files_of(&other, "t"), vec!["a2", "c"]);
    }

    #[test]
    fn two_rewrites_of_the_same_files_are_refused() {
        let start = vec![Entry::Managed(table("t", "1", &["a"]))];
        let rewrite = |to: &str| Change::Rewrite {
            name: "t".into(),
            id: "1".into(),
            removed: vec!["a".into()],
            added: vec![file(to)],
        };
        let first = rewrite("x").apply(&start).unwrap();
        let err = rewrite("y").apply(&first).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Aborted, "{err}");
    }

    #[test]
    fn writes_into_a_replaced_or_dropped_table_are_refused() {
        let start = vec![Entry::Managed(table("t", "1", &["a"]))];
        let replaced = Change::Create {
            table: table("t", "2", &[]),
            replace: true,
        }
        .apply(&start)
        .unwrap();
        let insert = Change::Append {
            name: "t".into(),
            id: "1".into(),
            files: vec![file("b")],
        };
        assert_eq!(
            insert.apply(&replaced).unwrap_err().kind(),
            ErrorKind::Aborted
        );
        let dropped = Change::Remove {
            names: vec!["t".into()],
        }
        .apply(&start)
        .unwrap();
        assert_eq!(
            insert.apply(&dropped).unwrap_err().kind(),
            ErrorKind::NotFound
        );
        let again = Change::Create {
            table: table("t", "3", &[]),
            replace: false,
        };
        assert_eq!(
            again.apply(&start).unwrap_err().kind(),
            ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn a_definition_made_once_keeps_its_place() {
        let schema = |sql: &str| Entry::Defined {
            name: "schema s".into(),
            sql: sql.into(),
            schema: None,
        };
        let start = vec![
            schema("CREATE SCHEMA s"),
            Entry::Managed(table("s.t", "1", &[])),
        ];
        let once = Change::Define {
            entry: schema("CREATE SCHEMA IF NOT EXISTS s"),
            once: true,
        };
        assert_eq!(once.apply(&start).unwrap(), start);
        let replaced = Change::Define {
            entry: schema("CREATE SCHEMA s2"),
            once: false,
        }
        .apply(&start)
        .unwrap();
        assert_eq!(replaced.last().unwrap().name(), "schema s");
    }
}
