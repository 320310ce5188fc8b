//! Bulk ingest (`CommandStatementIngest`, ADBC's `adbc_ingest`): a stream
//! of batches written as a table, created, appended to or replaced as the
//! table definition options say.
//!
//! The coordinator receives the rows, so it writes them: as part files in
//! the table's directory while they arrive (a new file every
//! `MAX_PART_BYTES`; never the whole upload in memory), committed when the
//! upload ends. An upload cut short commits nothing and leaves no file;
//! so does one appending rows that do not fit the table's columns
//! (`ingested_columns`).

use arrow_flight::sql::CommandStatementIngest;
use arrow_flight::sql::{TableExistsOption, TableNotExistOption};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::TableReference;
use futures::{Stream, TryStreamExt};
use squadron_common::error::Error;
use squadron_exec::write::{PartitionWriter, WriteTarget};
use squadron_storage::format::Written;

use super::ingested_columns::IngestedColumns;
use super::names::{already_exists, exists, full_name};
use super::table_writes::{catalog_of as catalog, Append};
use super::NewTable;
use crate::catalog::persisted::{Declared, Entry};
use crate::engine::Engine;
use squadron_coordinator::session::Session;

/// What to do with the rows, given whether the table exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Create,
    Append,
    Replace,
}

fn action(
    command: &CommandStatementIngest,
    exists: bool,
    name: &TableReference,
) -> Result<Action, Error> {
    let options = command.table_definition_options.unwrap_or_default();
    if exists {
        match TableExistsOption::try_from(options.if_exists) {
            Ok(TableExistsOption::Append) => Ok(Action::Append),
            Ok(TableExistsOption::Replace) => Ok(Action::Replace),
            // Unspecified: the safe reading.
            _ => Err(already_exists(name)),
        }
    } else {
        match TableNotExistOption::try_from(options.if_not_exist) {
            Ok(TableNotExistOption::Create) => Ok(Action::Create),
            _ => Err(Error::not_found(format!(
                "table {name} does not exist (and the ingest does not create it)"
            ))),
        }
    }
}

fn table_name(command: &CommandStatementIngest) -> Result<TableReference, Error> {
    if command.table.is_empty() {
        return Err(Error::invalid_argument("the ingest names no table"));
    }
    let table = command.table.clone();
    Ok(match (&command.catalog, &command.schema) {
        (Some(catalog), Some(schema)) => {
            TableReference::full(catalog.clone(), schema.clone(), table)
        }
        (None, Some(schema)) => TableReference::partial(schema.clone(), table),
        _ => TableReference::bare(table),
    })
}

/// Writes the ingested rows; returns how many.
pub async fn ingest<S>(
    coord: &Engine,
    session: &Session,
    command: &CommandStatementIngest,
    schema: SchemaRef,
    batches: S,
) -> Result<u64, Error>
where
    S: Stream<Item = Result<RecordBatch, Error>>,
{
    if command.transaction_id.is_some() {
        return Err(Error::unimplemented("transactions are not supported"));
    }
    let name = full_name(session, &table_name(command)?)?;
    match action(command, exists(coord, &name), &name)? {
        action @ (Action::Create | Action::Replace) => {
            let new = NewTable::start(coord, &name, command.temporary, schema)?;
            let written = write_here(coord, new.target(), batches).await?;
            let replace = action == Action::Replace;
            new.commit(coord, &written, Declared::default(), replace)
                .await
        }
        Action::Append => {
            let table = match catalog(coord)?.get(&name.to_quoted_string()) {
                Some(Entry::Managed(table)) => table,
                _ => {
                    return Err(Error::failed_precondition(format!(
                        "{name} is not a table created through Squadron; ingest appends to those"
                    )))
                }
            };
            let columns = IngestedColumns::match_names(&name, table.schema()?, &schema)?;
            let append = Append::start(coord, table)?;
            let rows = batches.and_then(|batch| std::future::ready(columns.convert(&batch)));
            let written = write_here(coord, append.target(), rows).await?;
            append.commit(coord, &written).await
        }
    }
}

/// Writes `batches` as part files of `target`, here, as they arrive.
async fn write_here<S>(coord: &Engine, target: WriteTarget, batches: S) -> Result<Written, Error>
where
    S: Stream<Item = Result<RecordBatch, Error>>,
{
    let runtime = coord.session().runtime_env();
    let writer = PartitionWriter::new(target, 0, 0, &runtime).map_err(Error::from)?;
    let rows =
        batches.map_err(|status| datafusion::error::DataFusionError::External(Box::new(status)));
    writer
        .write(std::pin::pin!(rows))
        .await
        .map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::sql::TableDefinitionOptions;
    use squadron_common::error::ErrorKind;

    fn command(
        if_not_exist: TableNotExistOption,
        if_exists: TableExistsOption,
    ) -> CommandStatementIngest {
        CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: if_not_exist as i32,
                if_exists: if_exists as i32,
            }),
            table: "t".into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_options_decide_create_append_replace_or_refuse() {
        let t = TableReference::bare("t");
        use TableExistsOption as E;
        use TableNotExistOption as N;
        assert_eq!(
            action(&command(N::Create, E::Fail), false, &t).unwrap(),
            Action::Create
        );
        assert_eq!(
            action(&command(N::Create, E::Fail), true, &t)
                .unwrap_err()
                .kind(),
            ErrorKind::AlreadyExists
        );
        assert_eq!(
            action(&command(N::Fail, E::Append), true, &t).unwrap(),
            Action::Append
        );
        assert_eq!(
            action(&command(N::Fail, E::Append), false, &t)
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            action(&command(N::Create, E::Replace), true, &t).unwrap(),
            Action::Replace
        );
        assert_eq!(
            action(&command(N::Create, E::Append), false, &t).unwrap(),
            Action::Create
        );
        let unspecified = CommandStatementIngest {
            table: "t".into(),
            ..Default::default()
        };
        assert_eq!(
            action(&unspecified, true, &t).unwrap_err().kind(),
            ErrorKind::AlreadyExists
        );
    }
}
