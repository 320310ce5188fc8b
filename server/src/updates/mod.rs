//! Statements that change the catalog or a table's rows: `CREATE TABLE
//! [AS SELECT]`, `INSERT INTO`, `CREATE EXTERNAL TABLE`, `CREATE VIEW`,
//! `DROP TABLE`, `DROP VIEW`, `CREATE DATABASE`, `CREATE SCHEMA`,
//! `DROP SCHEMA`, `UPDATE`, `DELETE`, `COPY … TO`, and bulk ingest.
//!
//! The rows a statement writes are computed by the same distributed
//! execution as any query, and written by the tasks that compute them into
//! the table's directory in the warehouse (`table_writes`); the statement
//! then commits a catalog version naming the new files
//! (`crate::warehouse`), and only then does any query see them. Created
//! tables, external tables, views and schemas are in the catalog and come
//! back after a restart, on any coordinator of the same warehouse.

pub mod copy;
mod empty_locations;
pub mod ingest;
mod ingested_columns;
mod names;
mod rewrite;
mod schemas;
mod sinks;
pub mod table_writes;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::{DFSchema, TableReference};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::TableType;
use datafusion::execution::cache::TableScopedPath;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DdlStatement, DmlStatement, LogicalPlan, WriteOp};
use empty_locations::or_not_found;
use squadron_common::error::Error;

use crate::catalog::persisted::{encode_schema, Declared, Entry, Managed};
use crate::engine::Engine;
use crate::warehouse::changes::Change;
use crate::warehouse::Warehouse;
pub use names::full_name;
use names::{already_exists, exists};
use squadron_coordinator::session::Session;
use squadron_exec::write::{RowFlag, WriteTarget};
use squadron_storage::format::{check_storable, StoredFormat, Written};
use table_writes::{catalog_of as catalog, write_rows, Append, PendingWrite};

/// Runs a DDL or DML statement now (after an admission slot); its
/// answer for `schema`: nothing for DDL, one `count` row for DML.
pub async fn run_update_now(
    coord: &Engine,
    schema: &SchemaRef,
    plan: LogicalPlan,
    session: &Arc<Session>,
) -> Result<Vec<RecordBatch>, Error> {
    let slot = coord.admit().await?;
    // Boxed: an update runs its input through `execute` again.
    let rows = Box::pin(run_update(coord, session, plan)).await?;
    drop(slot);
    if schema.fields().is_empty() {
        return Ok(vec![]);
    }
    let count = RecordBatch::try_new(
        Arc::clone(schema),
        vec![Arc::new(Int64Array::from(vec![rows as i64]))],
    )
    .map_err(|e| Error::internal(e.to_string()))?;
    Ok(vec![count])
}

/// Runs a DDL or DML statement; returns the rows it wrote (0 for DDL).
/// Names resolve in `session` (its catalog and schema).
pub async fn run_update(
    coord: &Engine,
    session: &Arc<Session>,
    plan: LogicalPlan,
) -> Result<u64, Error> {
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
            if create.if_not_exists && create.or_replace {
                return Err(Error::invalid_argument(
                    "Execution error: 'IF NOT EXISTS' cannot coexist with 'REPLACE'",
                ));
            }
            unique_column_names(create.input.schema())?;
            let name = full_name(session, &create.name)?;
            if exists(coord, &name) {
                if create.if_not_exists {
                    return Ok(0);
                }
                if !create.or_replace {
                    return Err(already_exists(&create.name));
                }
            }
            // Before any work: a DEFAULT that cannot be kept refuses the
            // statement.
            let declared = Declared::of(&create.constraints, &create.column_defaults)?;
            let rows = coord.plan_rows_to_write(session, &create.input).await?;
            let schema = rows.schema();
            let new = NewTable::start(coord, &name, create.temporary, schema)?;
            let written = write_rows(coord, session, rows, new.target()).await?;
            new.commit(coord, &written, declared, create.or_replace)
                .await
        }
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(ref create)) => {
            check_table_format(coord, &create.file_type)?;
            for location in &create.locations {
                coord.check_table_location(location)?;
            }
            let (name, definition, temporary) = (
                full_name(session, &create.name)?,
                create.definition.clone(),
                create.temporary,
            );
            // Only an inferred schema needs files to be there.
            let inferred = create.schema.fields().is_empty();
            let locations = create.locations.clone();
            match define(coord, session, &name, definition, temporary, plan).await {
                Err(e) if inferred => Err(or_not_found(session.ctx(), &locations, e).await),
                defined => defined,
            }
        }
        LogicalPlan::Ddl(DdlStatement::CreateView(ref view)) => {
            let (name, definition, temporary) = (
                full_name(session, &view.name)?,
                view.definition.clone(),
                view.temporary,
            );
            define(coord, session, &name, definition, temporary, plan).await
        }
        LogicalPlan::Ddl(DdlStatement::DropTable(drop)) => {
            let name = full_name(session, &drop.name)?;
            if !is_of_type(coord, &name, TableType::Base).await {
                return missing("Table", &drop.name, drop.if_exists);
            }
            drop_table(coord, &name).await
        }
        LogicalPlan::Ddl(DdlStatement::DropView(drop)) => {
            let name = full_name(session, &drop.name)?;
            if !is_of_type(coord, &name, TableType::View).await {
                return missing("View", &drop.name, drop.if_exists);
            }
            drop_table(coord, &name).await
        }
        LogicalPlan::Ddl(DdlStatement::CreateCatalog(ref create)) => {
            schemas::create_catalog(coord, session, create, plan.clone()).await
        }
        LogicalPlan::Ddl(DdlStatement::CreateCatalogSchema(ref create)) => {
            schemas::create_schema(coord, session, create, plan.clone()).await
        }
        LogicalPlan::Ddl(DdlStatement::DropCatalogSchema(ref drop)) => {
            schemas::drop_schema(coord, session, drop, plan.clone()).await
        }
        LogicalPlan::Dml(dml) if matches!(dml.op, WriteOp::Update | WriteOp::Delete) => {
            rewrite::update_or_delete(coord, session, dml).await
        }
        LogicalPlan::Dml(dml) => insert(coord, session, dml).await,
        LogicalPlan::Copy(copy) => copy::copy_to(coord, session, copy).await,
        other => Err(Error::unimplemented(format!(
            "not supported yet: {}",
            other.display()
        ))),
    }
}

/// INVALID_ARGUMENT naming the formats for one Squadron does not know;
/// UNIMPLEMENTED for Iceberg, a table format of its own it does not read. DataFusion would answer both with
/// an internal "unable to find factory".
fn check_table_format(coord: &Engine, file_type: &str) -> Result<(), Error> {
    let format = file_type.to_ascii_uppercase();
    match format.as_str() {
        // iceberg-datafusion 0.10 builds on DataFusion 53; Squadron is on 55.
        "ICEBERG" => Err(Error::unimplemented(
            "STORED AS ICEBERG: Apache Iceberg tables are not supported (no maintained \
             Iceberg crate builds on DataFusion 55 yet)",
        )),
        _ => {
            let state = coord.session().state();
            if state.table_factories().contains_key(&format) {
                return Ok(());
            }
            let mut known: Vec<&str> = state.table_factories().keys().map(String::as_str).collect();
            known.sort();
            Err(Error::invalid_argument(format!(
                // DataFusion's words first (clients and its tests match them).
                "Execution error: Unable to find factory for {format}: STORED AS takes one of {}",
                known.join(", ")
            )))
        }
    }
}

/// Whether `name` exists and is a table (`Base`) or a view: DROP TABLE
/// leaves views alone and DROP VIEW tables.
async fn is_of_type(coord: &Engine, name: &TableReference, kind: TableType) -> bool {
    match coord.session().table_provider(name.clone()).await {
        Ok(provider) => {
            let found = provider.table_type();
            found == kind || (kind == TableType::Base && found == TableType::Temporary)
        }
        Err(_) => false,
    }
}

/// A DROP of something that is not there: nothing with IF EXISTS, else
/// NOT_FOUND as DataFusion words it.
fn missing(kind: &str, name: &TableReference, if_exists: bool) -> Result<u64, Error> {
    if if_exists {
        Ok(0)
    } else {
        Err(Error::not_found(format!(
            "Execution error: {kind} '{name}' doesn't exist."
        )))
    }
}

/// A table keeps only unqualified column names: `a.x` and `b.x` would both
/// be `x` (DataFusion's check and words).
fn unique_column_names(schema: &DFSchema) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::new();
    match schema.fields().iter().find(|f| !seen.insert(f.name())) {
        Some(field) => Err(Error::invalid_argument(format!(
            "Schema error: Schema contains duplicate unqualified field name {}",
            field.name()
        ))),
        None => Ok(()),
    }
}

/// A table being created: where its files go, until it is committed.
pub struct NewTable {
    name: TableReference,
    temporary: bool,
    location: String,
    schema: SchemaRef,
    format: StoredFormat,
    write: PendingWrite,
}

impl NewTable {
    /// A new table `name` of `schema`, in a directory of its own.
    pub fn start(
        coord: &Engine,
        name: &TableReference,
        temporary: bool,
        schema: SchemaRef,
    ) -> Result<Self, Error> {
        check_storable(&schema)?;
        let catalog = catalog(coord)?;
        let location = Warehouse::new_table_location(name.table(), temporary);
        let dir = catalog.warehouse().table_url(&location)?;
        Ok(Self {
            name: name.clone(),
            temporary,
            location,
            format: StoredFormat::for_schema(&schema),
            schema,
            write: PendingWrite::start(coord, dir)?,
        })
    }

    /// What its writers write.
    pub fn target(&self) -> WriteTarget {
        self.write.target(self.format, &self.schema, RowFlag::None)
    }

    pub fn write(&self) -> &PendingWrite {
        &self.write
    }

    /// Commits the table with the files `written`, replacing one of its
    /// name only if `replace`; returns its rows.
    pub async fn commit(
        self,
        coord: &Engine,
        written: &Written,
        declared: Declared,
        replace: bool,
    ) -> Result<u64, Error> {
        let files = self.write.data_files(written)?;
        let table = Managed {
            name: self.name.to_quoted_string(),
            id: self.write.write_id().to_string(),
            location: self.location,
            format: self.format.name().to_string(),
            schema: encode_schema(&self.schema)?,
            files: files.clone(),
            keys: declared.keys,
            defaults: declared.defaults,
        };
        let ctx = coord.session();
        if self.temporary {
            self.write.create_temporary(ctx, table, &files).await?;
        } else {
            let change = Change::Create { table, replace };
            self.write.commit(ctx, change, &files).await?;
        }
        Ok(written.rows())
    }
}

/// An external table or view: DataFusion creates it from the statement;
/// the statement is committed to the catalog, to be run again at start-up
/// (and by other coordinators). If the commit fails, the server shows what
/// it showed before.
async fn define(
    coord: &Engine,
    session: &Session,
    name: &TableReference,
    definition: Option<String>,
    temporary: bool,
    plan: LogicalPlan,
) -> Result<u64, Error> {
    let catalog = if temporary {
        None
    } else {
        Some(catalog(coord)?)
    };
    let before = coord.session().table_provider(name.clone()).await.ok();
    session
        .ctx()
        .execute_logical_plan(plan)
        .await
        .map_err(Error::from)?;
    let Some(catalog) = catalog else {
        return Ok(0);
    };
    let committed = match definition {
        Some(sql) => {
            let entry = Entry::Defined {
                name: name.to_quoted_string(),
                sql,
                schema: Some((session.catalog(), session.schema())),
            };
            let change = Change::Define { entry, once: false };
            catalog
                .commit_shown(coord.session(), change, Some(name.to_quoted_string()))
                .await
        }
        None => Err(Error::internal(format!(
            "the statement defining {name} has no text"
        ))),
    };
    if let Err(e) = committed {
        let ctx = coord.session();
        let _ = ctx.deregister_table(name.clone());
        if let Some(before) = before {
            let _ = ctx.register_table(name.clone(), before);
        }
        return Err(e);
    }
    Ok(0)
}

async fn drop_table(coord: &Engine, name: &TableReference) -> Result<u64, Error> {
    let key = name.to_quoted_string();
    match coord.catalog().filter(|c| c.get(&key).is_some()) {
        // Committed first: a DROP that cannot be committed drops nothing.
        Some(catalog) => {
            let change = Change::Remove { names: vec![key] };
            catalog.commit(coord.session(), change).await?;
        }
        None => {
            coord
                .session()
                .deregister_table(name.clone())
                .map_err(Error::from)?;
        }
    }
    Ok(0)
}

async fn insert(coord: &Engine, session: &Arc<Session>, dml: DmlStatement) -> Result<u64, Error> {
    let table_name = full_name(session, &dml.table_name)?;
    if let WriteOp::MergeInto(_) = dml.op {
        // DataFusion's answer: its type checks of the statement, then the
        // table's own MERGE INTO, which none of Squadron's tables has.
        let plan = LogicalPlan::Dml(dml);
        session
            .ctx()
            .state()
            .create_physical_plan(&plan)
            .await
            .map_err(Error::from)?;
        return Err(Error::unimplemented("MERGE INTO is not supported yet"));
    }
    if !matches!(dml.op, WriteOp::Insert(InsertOp::Append)) {
        return Err(Error::unimplemented(format!(
            "{} is not supported yet; tables take INSERT INTO",
            dml.op
        )));
    }
    // Created tables take the rows as part files of theirs; an external
    // table a client defined (its location was checked then) by its own
    // sink, as on single node: its format, options and partition columns.
    match catalog(coord)?.get(&table_name.to_quoted_string()) {
        Some(Entry::Managed(table)) => insert_into_created(coord, session, &dml, table).await,
        Some(Entry::Defined { .. }) => {
            let table = coord
                .session()
                .table_provider(table_name)
                .await
                .map_err(Error::from)?;
            let rows = sinks::write_with_sink(coord, session, LogicalPlan::Dml(dml)).await?;
            forget_listing(coord, table.as_ref());
            Ok(rows)
        }
        None => Err(Error::failed_precondition(format!(
            "{} is not a table created through Squadron (CREATE TABLE, CREATE EXTERNAL \
             TABLE); INSERT INTO works on those",
            dml.table_name
        ))),
    }
}

/// Appends the rows of `dml` to created table `table` as new part files.
async fn insert_into_created(
    coord: &Engine,
    session: &Arc<Session>,
    dml: &DmlStatement,
    table: Managed,
) -> Result<u64, Error> {
    let append = Append::start(coord, table)?;
    let rows = coord.plan_rows_to_write(session, &dml.input).await?;
    let written = write_rows(coord, session, rows, append.target()).await?;
    append.commit(coord, &written).await
}

/// Drops the cached file listing of `table`, so the next query sees the
/// file just written (the cache never expires by itself).
pub fn forget_listing(coord: &Engine, table: &dyn TableProvider) {
    let Some(listing) = table.downcast_ref::<ListingTable>() else {
        return;
    };
    let runtime = coord.session().runtime_env();
    let Some(cache) = runtime.cache_manager.get_list_files_cache() else {
        return;
    };
    for url in listing.table_paths() {
        let _ = cache.remove(&TableScopedPath {
            table: url.get_table_ref().clone(),
            path: url.prefix().clone(),
        });
    }
}
