//! A statement that reads a table that does not exist is NOT_FOUND.
//! DataFusion reports it only as a plan error in words; rather than read
//! the words, a statement that failed to plan is looked at again: its table
//! references (DataFusion's own resolution, without CTE names) are checked
//! against the session's catalogs.

use datafusion::common::TableReference;
use datafusion::execution::SessionState;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::planner::object_name_to_table_reference;
use datafusion::sql::sqlparser::ast::{CreateTable, ObjectName, Statement};
use squadron_common::error::{Error, ErrorKind};

/// `error`, DataFusion's failure to plan `sql`, as NOT_FOUND (its words
/// kept) when `sql` reads a table the session cannot find.
pub(super) async fn or_not_found(state: &SessionState, sql: &str, error: Error) -> Error {
    match missing_table(state, sql).await {
        Some(_) => Error::new(ErrorKind::NotFound, error.message()),
        None => error,
    }
}

/// The first table `sql` reads that the session cannot find; `None` when
/// it reads none such (or does not parse).
async fn missing_table(state: &SessionState, sql: &str) -> Option<TableReference> {
    let options = state.config_options();
    let statement = state
        .sql_to_statement(sql, &options.sql_parser.dialect)
        .ok()?;
    let normalize = options.sql_parser.enable_ident_normalization;
    let created = created_name(&statement)
        .and_then(|name| object_name_to_table_reference(name.clone(), normalize).ok());
    let references = state.resolve_table_references(&statement).ok()?;
    for reference in references {
        if created.as_ref() == Some(&reference) {
            continue;
        }
        if !exists(state, &reference).await {
            return Some(reference);
        }
    }
    None
}

/// The table or view a statement creates: a name it does not read.
fn created_name(statement: &DFStatement) -> Option<&ObjectName> {
    match statement {
        DFStatement::CreateExternalTable(create) => Some(&create.name),
        DFStatement::Statement(statement) => match statement.as_ref() {
            Statement::CreateTable(CreateTable { name, .. }) => Some(name),
            Statement::CreateView(view) => Some(&view.name),
            _ => None,
        },
        _ => None,
    }
}

async fn exists(state: &SessionState, reference: &TableReference) -> bool {
    match state.schema_for_ref(reference.clone()) {
        Ok(schema) => schema.table_exist(reference.table()),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn missing(sql: &str) -> Option<TableReference> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t AS VALUES (1)").await.unwrap();
        missing_table(&ctx.state(), sql).await
    }

    #[tokio::test]
    async fn a_read_table_that_does_not_exist_is_missing() {
        let missing_one = missing("SELECT * FROM t JOIN nowhere ON true").await;
        assert_eq!(missing_one.unwrap().table(), "nowhere");
        assert!(missing("INSERT INTO nowhere VALUES (1)").await.is_some());
        assert!(missing("SELECT * FROM no_schema.t").await.is_some());
    }

    #[tokio::test]
    async fn existing_tables_ctes_and_created_names_are_not_missing() {
        assert!(missing("SELECT nope FROM t").await.is_none());
        assert!(missing("WITH w AS (SELECT 1) SELECT * FROM w")
            .await
            .is_none());
        assert!(missing("CREATE TABLE fresh AS SELECT * FROM t")
            .await
            .is_none());
        assert!(missing("CREATE VIEW v AS SELECT * FROM t").await.is_none());
        let read = missing("CREATE TABLE fresh AS SELECT * FROM nowhere").await;
        assert_eq!(read.unwrap().table(), "nowhere");
    }

    #[tokio::test]
    async fn the_error_keeps_datafusions_words_and_changes_its_kind() {
        let ctx = SessionContext::new();
        let sql = "SELECT * FROM nowhere";
        let planned = ctx.state().create_logical_plan(sql).await.unwrap_err();
        let error = or_not_found(&ctx.state(), sql, Error::from(planned)).await;
        assert_eq!(error.kind(), ErrorKind::NotFound);
        assert!(
            error
                .message()
                .contains("table 'datafusion.public.nowhere' not found"),
            "{error}"
        );
        let bad_column = "SELECT nope FROM (VALUES (1)) AS v(a)";
        let planned = ctx
            .state()
            .create_logical_plan(bad_column)
            .await
            .unwrap_err();
        let error = or_not_found(&ctx.state(), bad_column, Error::from(planned)).await;
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    }
}
