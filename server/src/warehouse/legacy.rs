//! The catalog of earlier versions: `<data-dir>/catalog.json`, rewritten
//! in place on every change, with each created table a directory whose
//! every Parquet (or Arrow) file was its rows. Read once, when a warehouse
//! has no catalog version yet, and committed as version 1; the file itself
//! is left as it was.

use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use serde::Deserialize;

use super::Warehouse;
use crate::catalog::persisted::{encode_schema, DataFile, Entry, Managed};

#[derive(Deserialize)]
struct CatalogFile {
    entries: Vec<Entry>,
}

/// The entries of `<dir>/catalog.json` with every created table's files
/// and columns read from its directory; `None` when there is no such file.
pub fn read(dir: Option<&Path>, warehouse: &Warehouse) -> anyhow::Result<Option<Vec<Entry>>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    let file = dir.join("catalog.json");
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => anyhow::bail!("{}: {e}", file.display()),
    };
    let catalog: CatalogFile =
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut entries = Vec::with_capacity(catalog.entries.len());
    for entry in catalog.entries {
        entries.push(match entry {
            Entry::Managed(table) if table.files.is_empty() => {
                Entry::Managed(with_files(table, warehouse)?)
            }
            other => other,
        });
    }
    tracing::info!(
        file = %file.display(),
        entries = entries.len(),
        "moving the catalog of an earlier version into the warehouse"
    );
    Ok(Some(entries))
}

/// A table of the earlier catalog with the files of its directory, its
/// columns read from the first, and its location relative to the
/// warehouse when it lies inside it.
fn with_files(mut table: Managed, warehouse: &Warehouse) -> anyhow::Result<Managed> {
    let dir = PathBuf::from(&table.location);
    let mut files: Vec<(PathBuf, DataFile)> = std::fs::read_dir(&dir)
        .map_err(|e| anyhow::anyhow!("table {}: {}: {e}", table.name, dir.display()))?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().to_string();
            let data = name.ends_with(".parquet") || name.ends_with(".arrow");
            if !data || name.starts_with('.') {
                return None;
            }
            let meta = entry.metadata().ok()?;
            Some((
                entry.path(),
                DataFile {
                    name,
                    bytes: meta.len(),
                    rows: 0,
                },
            ))
        })
        .collect();
    files.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    let Some((first, _)) = files.first() else {
        anyhow::bail!("table {}: no files in {}", table.name, dir.display());
    };
    let arrow = first.extension().is_some_and(|e| e == "arrow");
    let schema = schema_of(first, arrow)?;
    for (path, file) in &mut files {
        file.rows = rows_of(path, arrow)?;
    }
    table.schema = encode_schema(&schema).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    table.format = if arrow { "arrow" } else { "parquet" }.to_string();
    table.files = files.into_iter().map(|(_, f)| f).collect();
    if table.id.is_empty() {
        table.id = uuid::Uuid::new_v4().simple().to_string();
    }
    if let Some(relative) = warehouse
        .local_dir()
        .and_then(|root| dir.strip_prefix(root).ok())
    {
        table.location = format!("{}/", relative.display());
    }
    Ok(table)
}

fn schema_of(path: &Path, arrow: bool) -> anyhow::Result<SchemaRef> {
    let file = std::fs::File::open(path)?;
    if arrow {
        let reader = datafusion::arrow::ipc::reader::FileReader::try_new(file, None)?;
        return Ok(reader.schema());
    }
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?;
    Ok(builder.schema().clone())
}

fn rows_of(path: &Path, arrow: bool) -> anyhow::Result<u64> {
    let file = std::fs::File::open(path)?;
    if arrow {
        let reader = datafusion::arrow::ipc::reader::FileReader::try_new(file, None)?;
        let mut rows = 0;
        for batch in reader {
            rows += batch?.num_rows() as u64;
        }
        return Ok(rows);
    }
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)?;
    Ok(builder.metadata().file_metadata().num_rows() as u64)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use super::super::janitor::{Janitor, JanitorOptions};
    use super::super::WarehouseCatalog;
    use super::*;

    #[tokio::test]
    async fn a_catalog_json_of_an_earlier_version_moves_into_the_warehouse() {
        let dir = tempfile::tempdir().unwrap();
        let table_dir = dir.path().join("tables").join("t-1");
        std::fs::create_dir_all(&table_dir).unwrap();
        let writer = SessionContext::new();
        for (n, values) in [(0, "(1, 'a'), (2, 'b')"), (1, "(3, 'c')")] {
            let file = table_dir.join(format!("part-{n}.parquet"));
            let sql = format!(
                "COPY (SELECT column1 AS k, column2 AS s FROM (VALUES {values})) TO '{}' \
                 STORED AS PARQUET",
                file.display()
            );
            writer.sql(&sql).await.unwrap().collect().await.unwrap();
        }
        // A file being written by the old writer, never finished.
        std::fs::write(table_dir.join(".part-2.parquet.tmp"), b"half").unwrap();
        let catalog_json = serde_json::json!({"entries": [
            {"kind": "managed", "name": "datafusion.public.t",
             "location": table_dir.display().to_string(), "keys": [{"primary_key": [0]}]},
            {"kind": "defined", "name": "datafusion.public.v",
             "sql": "CREATE VIEW v AS SELECT sum(k) AS total FROM t",
             "schema": ["datafusion", "public"]},
        ]});
        std::fs::write(dir.path().join("catalog.json"), catalog_json.to_string()).unwrap();

        let runtime = Arc::new(RuntimeEnv::default());
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), Arc::clone(&runtime));
        let warehouse = Warehouse::open(dir.path().to_str().unwrap(), &runtime).unwrap();
        let janitor = Janitor::new(runtime, JanitorOptions::default());
        let catalog = WarehouseCatalog::open(warehouse, Some(dir.path()), janitor, &ctx)
            .await
            .unwrap();
        assert_eq!(catalog.current().version, 1);
        let Some(Entry::Managed(table)) = catalog.get("datafusion.public.t") else {
            panic!("the table was not moved in");
        };
        assert_eq!(table.location, "tables/t-1/");
        assert_eq!(table.rows(), 3);
        assert_eq!(
            table.files.len(),
            2,
            "the unfinished file is not the table's"
        );
        let rows = ctx
            .sql("SELECT total FROM v")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string();
        assert!(text.contains("| 6     |"), "{text}");
        // Once moved in, the warehouse's versions are the catalog.
        std::fs::remove_file(dir.path().join("catalog.json")).unwrap();
        let again = SessionContext::new();
        let runtime = again.runtime_env();
        let warehouse = Warehouse::open(dir.path().to_str().unwrap(), &runtime).unwrap();
        let janitor = Janitor::new(runtime, JanitorOptions::default());
        let reopened = WarehouseCatalog::open(warehouse, Some(dir.path()), janitor, &again)
            .await
            .unwrap();
        assert_eq!(
            reopened.get("datafusion.public.t"),
            Some(Entry::Managed(table))
        );
    }
}
