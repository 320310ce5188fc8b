//! Tables and views created through Flight SQL (DDL, DML, bulk ingest),
//! kept across restarts.
//!
//! Created tables are directories of Parquet files under
//! `<data-dir>/tables/`, which workers read like any other table. The list
//! of created tables, external tables and views is `<data-dir>/catalog.json`,
//! rewritten atomically (a temporary file renamed over it) after every
//! change, and registered again when the server starts.

use crate::session::Session;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use datafusion::common::{Constraint, Constraints, DFSchema, Result as DFResult};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion::sql::unparser::expr_to_sql;
use serde::{Deserialize, Serialize};
use tonic::Status;

use super::tables::TableSpec;

/// One persisted catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A table whose files Squadron wrote and owns (`CREATE TABLE`,
    /// ingest): dropping it deletes them.
    Managed {
        name: String,
        location: PathBuf,
        /// The keys its `CREATE TABLE` declared (see
        /// `TableSpec::register_created`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        keys: Vec<Key>,
        /// The column defaults it declared (`DEFAULT expr`), which an
        /// INSERT naming fewer columns fills in.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        defaults: Vec<ColumnDefault>,
    },
    /// An external table or a view: the statement that defined it
    /// (`CREATE EXTERNAL TABLE …`, `CREATE VIEW …`), run again at start-up
    /// so every option it gave is kept.
    Defined {
        name: String,
        sql: String,
        /// The catalog and schema the statement's names resolved in.
        #[serde(default)]
        schema: Option<(String, String)>,
    },
}

/// A primary key or unique constraint, by column positions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    PrimaryKey(Vec<usize>),
    Unique(Vec<usize>),
}

/// A column's `DEFAULT`, as SQL text (parsed again at start-up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDefault {
    pub column: String,
    pub sql: String,
}

/// What a `CREATE TABLE` declared besides its columns, kept with the table
/// through rewrites and restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    pub keys: Vec<Key>,
    pub defaults: Vec<ColumnDefault>,
}

impl Declared {
    /// The keys and defaults of a `CREATE TABLE`.
    pub fn of(constraints: &Constraints, defaults: &[(String, Expr)]) -> Result<Self, Status> {
        let defaults = defaults
            .iter()
            .map(|(column, expr)| {
                let sql = expr_to_sql(expr).map_err(|e| {
                    Status::unimplemented(format!("the DEFAULT of column {column}: {e}"))
                })?;
                Ok(ColumnDefault {
                    column: column.clone(),
                    sql: sql.to_string(),
                })
            })
            .collect::<Result<_, Status>>()?;
        Ok(Self {
            keys: keys_of(constraints),
            defaults,
        })
    }

    /// The defaults as DataFusion's table takes them.
    pub fn default_exprs(&self, ctx: &SessionContext) -> DFResult<HashMap<String, Expr>> {
        let state = ctx.state();
        let no_columns = DFSchema::empty();
        self.defaults
            .iter()
            .map(|d| {
                Ok((
                    d.column.clone(),
                    state.create_logical_expr(&d.sql, &no_columns)?,
                ))
            })
            .collect()
    }
}

/// The keys of DataFusion's `constraints`, to persist.
pub fn keys_of(constraints: &Constraints) -> Vec<Key> {
    constraints
        .iter()
        .map(|c| match c {
            Constraint::PrimaryKey(columns) => Key::PrimaryKey(columns.clone()),
            Constraint::Unique(columns) => Key::Unique(columns.clone()),
        })
        .collect()
}

/// DataFusion's constraints for persisted `keys`.
pub fn constraints_of(keys: &[Key]) -> Constraints {
    Constraints::new_unverified(
        keys.iter()
            .map(|k| match k {
                Key::PrimaryKey(columns) => Constraint::PrimaryKey(columns.clone()),
                Key::Unique(columns) => Constraint::Unique(columns.clone()),
            })
            .collect(),
    )
}

impl Entry {
    pub fn name(&self) -> &str {
        match self {
            Entry::Managed { name, .. } | Entry::Defined { name, .. } => name,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CatalogFile {
    entries: Vec<Entry>,
}

/// The persisted part of the catalog.
pub struct PersistedCatalog {
    dir: PathBuf,
    entries: Mutex<Vec<Entry>>,
}

impl PersistedCatalog {
    /// Opens (or starts) the catalog kept in `data_dir`.
    pub fn open(data_dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir.join("tables"))?;
        // Temporary tables live until the server stops.
        let temporary = data_dir.join("temporary");
        if temporary.exists() {
            std::fs::remove_dir_all(&temporary)?;
        }
        let file = data_dir.join("catalog.json");
        let entries = match std::fs::read(&file) {
            Ok(bytes) => {
                serde_json::from_slice::<CatalogFile>(&bytes)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
                    .entries
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(anyhow::anyhow!("{}: {e}", file.display())),
        };
        Ok(Self {
            dir: std::path::absolute(data_dir)?,
            entries: Mutex::new(entries),
        })
    }

    /// Where a new managed table's files go: a fresh directory, so a
    /// replaced or re-created table never mixes with old files.
    /// Temporary tables go under `temporary/`, emptied at start-up.
    pub fn new_table_dir(&self, name: &str, temporary: bool) -> PathBuf {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.dir
            .join(if temporary { "temporary" } else { "tables" })
            .join(format!("{name}-{}", uuid::Uuid::new_v4().simple()))
    }

    /// Registers every persisted entry in `ctx` (at start-up).
    pub async fn register_all(&self, ctx: &SessionContext) -> anyhow::Result<()> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // In order, but an entry read before one it needs (a view kept
        // before the table it reads, which moved to the end when it was
        // replaced or rewritten) is tried again once the others are in.
        let mut pending = entries;
        loop {
            let tried = pending.len();
            let mut failed = vec![];
            for entry in pending {
                if let Err(e) = register(ctx, &entry).await {
                    failed.push((entry, e));
                }
            }
            match failed.first() {
                None => return Ok(()),
                Some((entry, e)) if failed.len() == tried => {
                    anyhow::bail!("catalog entry {}: {}", entry.name(), e.message())
                }
                Some(_) => pending = failed.into_iter().map(|(entry, _)| entry).collect(),
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<Entry> {
        self.lock().iter().find(|e| e.name() == name).cloned()
    }

    /// Adds or replaces the entry of that name, and saves.
    pub fn put(&self, entry: Entry) -> Result<(), Status> {
        let mut entries = self.lock();
        entries.retain(|e| e.name() != entry.name());
        entries.push(entry);
        self.save(&entries)
    }

    /// Removes the entry of that name (if any), and saves.
    pub fn remove(&self, name: &str) -> Result<Option<Entry>, Status> {
        let mut entries = self.lock();
        let found = entries.iter().position(|e| e.name() == name);
        let removed = found.map(|i| entries.remove(i));
        self.save(&entries)?;
        Ok(removed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self, entries: &[Entry]) -> Result<(), Status> {
        let file = CatalogFile {
            entries: entries.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&file)
            .map_err(|e| Status::internal(format!("encoding the catalog: {e}")))?;
        let tmp = self.dir.join("catalog.json.tmp");
        std::fs::write(&tmp, json)
            .and_then(|_| std::fs::rename(&tmp, self.dir.join("catalog.json")))
            .map_err(|e| Status::internal(format!("saving the catalog: {e}")))
    }
}

/// Registers one entry in `ctx`.
pub async fn register(ctx: &SessionContext, entry: &Entry) -> Result<(), Status> {
    let internal = |e: datafusion::error::DataFusionError| Status::internal(e.to_string());
    match entry {
        Entry::Managed {
            name,
            location,
            keys,
            defaults,
        } => {
            let declared = Declared {
                keys: keys.clone(),
                defaults: defaults.clone(),
            };
            TableSpec {
                name: name.clone(),
                location: location.to_string_lossy().to_string(),
                format: Some(crate::updates::write::format_in(location)),
            }
            .register_created(ctx, &declared)
            .await
            .map_err(internal)
        }
        Entry::Defined { sql, schema, .. } => {
            let session = Session::derived_from(ctx);
            if let Some((catalog, schema)) = schema {
                session.set("datafusion.catalog.default_catalog", catalog)?;
                session.set("datafusion.catalog.default_schema", schema)?;
            }
            session.ctx().sql(sql).await.map_err(internal)?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = PersistedCatalog::open(dir.path()).unwrap();
        let view = Entry::Defined {
            name: "v".into(),
            sql: "CREATE VIEW v AS SELECT 1".into(),
            schema: None,
        };
        let table = Entry::Managed {
            name: "t".into(),
            location: catalog.new_table_dir("t", false),
            keys: vec![Key::PrimaryKey(vec![0]), Key::Unique(vec![1, 2])],
            defaults: vec![ColumnDefault {
                column: "c".into(),
                sql: "lower('X')".into(),
            }],
        };
        catalog.put(view.clone()).unwrap();
        catalog.put(table.clone()).unwrap();
        catalog.remove("v").unwrap();
        let reopened = PersistedCatalog::open(dir.path()).unwrap();
        assert_eq!(reopened.get("t"), Some(table));
        // A catalog written before keys were kept still opens.
        std::fs::write(
            dir.path().join("catalog.json"),
            r#"{"entries":[{"kind":"managed","name":"old","location":"/x"}]}"#,
        )
        .unwrap();
        let old = PersistedCatalog::open(dir.path()).unwrap().get("old");
        assert!(matches!(old, Some(Entry::Managed { keys, .. }) if keys.is_empty()));
        assert_eq!(reopened.get("v"), None);
    }

    #[test]
    fn a_corrupt_catalog_is_a_start_up_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("catalog.json"), "{not json").unwrap();
        let err = PersistedCatalog::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains("catalog.json"), "{err}");
    }
}
