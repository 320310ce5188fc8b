//! `CREATE DATABASE` (a catalog), `CREATE SCHEMA` and `DROP SCHEMA`.
//! DataFusion keeps catalogs and schemas in the catalog list every session
//! shares; the persisted catalog records their CREATE so they are there
//! again after a restart, before the schemas, tables and views created in
//! them (entries replay in the order they were made).

use datafusion::common::{SchemaReference, TableReference};
use datafusion::logical_expr::{
    CreateCatalog, CreateCatalogSchema, DropCatalogSchema, LogicalPlan,
};
use squadron_common::error::Error;

use crate::catalog::persisted::Entry;
use crate::catalog::system::SYSTEM_SCHEMA;
use crate::engine::Engine;
use crate::warehouse::changes::Change;
use squadron_coordinator::session::Session;

/// A catalog held in memory like DataFusion's own (its tables are files
/// like any created table's). There is no DROP DATABASE in DataFusion.
pub async fn create_catalog(
    coord: &Engine,
    session: &Session,
    create: &CreateCatalog,
    plan: LogicalPlan,
) -> Result<u64, Error> {
    session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(Error::from)?;
    let name = format!("catalog {}", quoted(&create.catalog_name));
    let sql = format!(
        "CREATE DATABASE IF NOT EXISTS {}",
        quoted(&create.catalog_name)
    );
    record_once(coord, name, sql).await
}

pub async fn create_schema(
    coord: &Engine,
    session: &Session,
    create: &CreateCatalogSchema,
    plan: LogicalPlan,
) -> Result<u64, Error> {
    // DataFusion's own reading of the name: `schema` or `catalog.schema`.
    let (catalog, schema) = match create.schema_name.split_once('.') {
        Some((catalog, schema)) => (catalog.to_string(), schema.to_string()),
        None => (session.catalog(), create.schema_name.clone()),
    };
    refuse_system(&schema)?;
    let existed = coord
        .session()
        .catalog(&catalog)
        .and_then(|c| c.schema(&schema))
        .is_some();
    session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(Error::from)?;
    let sql = format!(
        "CREATE SCHEMA IF NOT EXISTS {}.{}",
        quoted(&catalog),
        quoted(&schema)
    );
    let recorded = record_once(coord, entry_name(&catalog, &schema), sql).await;
    if recorded.is_err() && !existed {
        // Not committed: not shown either.
        if let Some(provider) = coord.session().catalog(&catalog) {
            let _ = provider.deregister_schema(&schema, false);
        }
    }
    recorded
}

/// Commits the statement creating a catalog or schema, unless recorded
/// already: the entry keeps its place, to replay before the schemas and
/// tables made in it since.
async fn record_once(coord: &Engine, name: String, sql: String) -> Result<u64, Error> {
    if let Some(catalog) = coord.catalog().filter(|c| c.get(&name).is_none()) {
        let entry = Entry::Defined {
            name: name.clone(),
            sql,
            schema: None,
        };
        let change = Change::Define { entry, once: true };
        catalog
            .commit_shown(coord.session(), change, Some(name))
            .await?;
    }
    Ok(0)
}

/// DataFusion refuses a schema with tables unless CASCADE; with CASCADE
/// the created tables in it are forgotten and their files removed, as a
/// DROP TABLE of each would.
pub async fn drop_schema(
    coord: &Engine,
    session: &Session,
    drop: &DropCatalogSchema,
    plan: LogicalPlan,
) -> Result<u64, Error> {
    let (catalog, schema) = match &drop.name {
        SchemaReference::Full { catalog, schema } => (catalog.to_string(), schema.to_string()),
        SchemaReference::Bare { schema } => (session.catalog(), schema.to_string()),
    };
    refuse_system(&schema)?;
    let tables = coord
        .session()
        .catalog(&catalog)
        .and_then(|c| c.schema(&schema))
        .map(|s| s.table_names());
    // DataFusion refuses a missing schema, or one with tables without
    // CASCADE, and changes nothing: let it say so in its words.
    let refused = tables
        .as_ref()
        .is_none_or(|tables| !tables.is_empty() && !drop.cascade);
    let persisted = coord.catalog().filter(|_| !refused);
    if let Some(persisted) = persisted {
        // Committed first: a DROP SCHEMA that cannot be committed drops
        // nothing.
        let names = tables
            .unwrap_or_default()
            .into_iter()
            .map(|table| {
                TableReference::full(catalog.as_str(), schema.as_str(), table).to_quoted_string()
            })
            .chain([entry_name(&catalog, &schema)])
            .collect();
        persisted
            .commit_shown(coord.session(), Change::Remove { names }, None)
            .await?;
    }
    session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(Error::from)?;
    Ok(0)
}

fn refuse_system(schema: &str) -> Result<(), Error> {
    if schema == SYSTEM_SCHEMA {
        return Err(Error::permission_denied(format!(
            "the {SYSTEM_SCHEMA} schema belongs to the server"
        )));
    }
    Ok(())
}

/// Schemas share the persisted catalog with tables and views, whose
/// entries are named by qualified table names: this cannot be one.
fn entry_name(catalog: &str, schema: &str) -> String {
    format!("schema {}.{}", quoted(catalog), quoted(schema))
}

/// An identifier as SQL reads it back exactly (case and dots kept).
fn quoted(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}
