//! The entries of the catalog kept in the warehouse (`crate::warehouse`):
//! created tables with the files their last commit named, external
//! tables and views by the statements that defined them, and catalogs and
//! schemas. Each catalog version is all of them, as JSON.

use squadron_coordinator::session::Session;
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{Constraint, Constraints, DFSchema, Result as DFResult};
use datafusion::logical_expr::Expr;
use datafusion::prelude::SessionContext;
use datafusion::sql::unparser::expr_to_sql;
use serde::{Deserialize, Serialize};
use squadron_common::error::Error;

/// One catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A table whose files Squadron wrote and owns (`CREATE TABLE`,
    /// ingest): dropping it deletes them.
    Managed(Managed),
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

/// A created table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Managed {
    pub name: String,
    /// Its identity, new on every CREATE [OR REPLACE]: a write planned
    /// against one identity never commits into another.
    #[serde(default)]
    pub id: String,
    /// Its directory: relative to the warehouse (`tables/t-…/`), or, for
    /// tables of catalogs before the warehouse, an absolute path.
    pub location: String,
    /// `parquet` or `arrow`.
    #[serde(default)]
    pub format: String,
    /// Its columns: datafusion-proto `Schema` bytes, base64.
    #[serde(default)]
    pub schema: String,
    /// The part files its rows are in, named relative to `location`.
    #[serde(default)]
    pub files: Vec<DataFile>,
    /// The keys its `CREATE TABLE` declared: DataFusion plans with them
    /// (functional dependencies let `GROUP BY key` select other columns;
    /// a correlated subquery on a key returns at most one row); like
    /// DataFusion's own tables, nothing enforces them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<Key>,
    /// The column defaults it declared (`DEFAULT expr`), which an
    /// INSERT naming fewer columns fills in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defaults: Vec<ColumnDefault>,
}

/// One part file of a created table (the catalog stores them as
/// `ManagedTable` reads them).
pub use squadron_storage::managed_table::DataFile;

impl Managed {
    /// What it declared besides its columns.
    pub fn declared(&self) -> Declared {
        Declared {
            keys: self.keys.clone(),
            defaults: self.defaults.clone(),
        }
    }

    /// Its columns.
    pub fn schema(&self) -> Result<SchemaRef, Error> {
        decode_schema(&self.schema)
            .map_err(|e| Error::internal(format!("the catalog's columns of {}: {e}", self.name)))
    }

    /// The rows of its files.
    pub fn rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }
}

/// A schema as the catalog keeps it.
pub fn encode_schema(schema: &SchemaRef) -> Result<String, Error> {
    use base64::Engine;
    use prost::Message;
    let proto = datafusion_proto::protobuf::Schema::try_from(schema.as_ref())
        .map_err(|e| Error::internal(format!("encoding a table's columns: {e}")))?;
    Ok(base64::engine::general_purpose::STANDARD.encode(proto.encode_to_vec()))
}

fn decode_schema(text: &str) -> anyhow::Result<SchemaRef> {
    use base64::Engine;
    use prost::Message;
    let bytes = base64::engine::general_purpose::STANDARD.decode(text)?;
    let proto = datafusion_proto::protobuf::Schema::decode(bytes.as_slice())?;
    Ok(Arc::new(datafusion::arrow::datatypes::Schema::try_from(
        &proto,
    )?))
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
    pub fn of(constraints: &Constraints, defaults: &[(String, Expr)]) -> Result<Self, Error> {
        let defaults = defaults
            .iter()
            .map(|(column, expr)| {
                let sql = expr_to_sql(expr).map_err(|e| {
                    Error::unimplemented(format!("the DEFAULT of column {column}: {e}"))
                })?;
                Ok(ColumnDefault {
                    column: column.clone(),
                    sql: sql.to_string(),
                })
            })
            .collect::<Result<_, Error>>()?;
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
            Entry::Managed(table) => &table.name,
            Entry::Defined { name, .. } => name,
        }
    }
}

/// Registers an external table or view in `ctx` by running the statement
/// that defined it, in the catalog and schema it was defined in.
pub async fn register_defined(
    ctx: &SessionContext,
    sql: &str,
    schema: &Option<(String, String)>,
) -> Result<(), Error> {
    let session = Session::derived_from(ctx);
    if let Some((catalog, schema)) = schema {
        session.set("datafusion.catalog.default_catalog", catalog)?;
        session.set("datafusion.catalog.default_schema", schema)?;
    }
    session
        .ctx()
        .sql(sql)
        .await
        .map_err(|e| Error::internal(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_as_written_and_old_ones_still_read() {
        let table = Entry::Managed(Managed {
            name: "t".into(),
            id: "1".into(),
            location: "tables/t-1/".into(),
            format: "parquet".into(),
            schema: String::new(),
            files: vec![DataFile {
                name: "part-a-00000-0-0.parquet".into(),
                bytes: 10,
                rows: 2,
            }],
            keys: vec![Key::PrimaryKey(vec![0]), Key::Unique(vec![1, 2])],
            defaults: vec![ColumnDefault {
                column: "c".into(),
                sql: "lower('X')".into(),
            }],
        });
        let json = serde_json::to_string(&table).unwrap();
        assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), table);
        // An entry of a catalog.json written before the warehouse.
        let old: Entry =
            serde_json::from_str(r#"{"kind":"managed","name":"old","location":"/x"}"#).unwrap();
        assert!(matches!(old, Entry::Managed(m) if m.files.is_empty() && m.keys.is_empty()));
    }

    #[test]
    fn a_schema_survives_the_catalog() {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Utf8View, false),
            Field::new(
                "d",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                true,
            ),
        ]));
        let table = Managed {
            name: "t".into(),
            id: String::new(),
            location: String::new(),
            format: String::new(),
            schema: encode_schema(&schema).unwrap(),
            files: vec![],
            keys: vec![],
            defaults: vec![],
        };
        assert_eq!(table.schema().unwrap(), schema);
    }
}
