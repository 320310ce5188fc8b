//! `CommandGetPrimaryKeys`: the key a table declared with `PRIMARY KEY
//! (…)` in its CREATE TABLE, which the catalog keeps with the table
//! (DataFusion's constraints; it has no foreign keys, so the foreign key
//! commands stay empty).

use std::sync::Arc;

use arrow_flight::sql::CommandGetPrimaryKeys;
use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Constraint;
use datafusion::prelude::SessionContext;
use tonic::Status;

use super::metadata::schema_names;

/// The schema of `CommandGetPrimaryKeys` results, as the spec gives it.
pub fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// One row per column of the primary key of each table named
/// `query.table` (in `query.catalog` and `query.db_schema` where given:
/// the spec narrows by them only then), in key order.
pub async fn primary_keys(
    ctx: &SessionContext,
    query: CommandGetPrimaryKeys,
) -> Result<RecordBatch, Status> {
    let mut rows: Vec<(String, String, String, i32)> = vec![];
    for (catalog, schema) in schema_names(ctx) {
        let wanted =
            |given: &Option<String>, name: &str| given.as_deref().is_none_or(|g| g == name);
        if !wanted(&query.catalog, &catalog) || !wanted(&query.db_schema, &schema) {
            continue;
        }
        let Some(provider) = ctx.catalog(&catalog).and_then(|c| c.schema(&schema)) else {
            continue;
        };
        let table = provider
            .table(&query.table)
            .await
            .map_err(|e| Status::internal(format!("table {}: {e}", query.table)))?;
        let Some(table) = table else { continue };
        let columns = table.schema();
        let key = table.constraints().and_then(|constraints| {
            constraints.iter().find_map(|c| match c {
                Constraint::PrimaryKey(indices) => Some(indices.clone()),
                Constraint::Unique(_) => None,
            })
        });
        // A key naming a column the table lacks is left out, not a panic.
        let key_columns = key.unwrap_or_default().into_iter();
        let names = key_columns.filter_map(|index| columns.fields().get(index).map(|f| f.name()));
        for (sequence, name) in names.enumerate() {
            let column = name.clone();
            let sequence = i32::try_from(sequence + 1).unwrap_or(i32::MAX);
            rows.push((catalog.clone(), schema.clone(), column, sequence));
        }
    }
    let strings = |pick: fn(&(String, String, String, i32)) -> &str| {
        Arc::new(StringArray::from_iter_values(rows.iter().map(pick)))
    };
    RecordBatch::try_new(
        primary_keys_schema(),
        vec![
            strings(|r| &r.0),
            strings(|r| &r.1),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|_| query.table.as_str()),
            )),
            strings(|r| &r.2),
            // Keys are not named (`CONSTRAINT name PRIMARY KEY` is not kept).
            Arc::new(StringArray::new_null(rows.len())),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.3))),
        ],
    )
    .map_err(|e| Status::internal(format!("building the primary keys: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;

    async fn keys(ctx: &SessionContext, table: &str, schema: Option<&str>) -> Vec<(String, i32)> {
        let query = CommandGetPrimaryKeys {
            catalog: None,
            db_schema: schema.map(String::from),
            table: table.into(),
        };
        let batch = primary_keys(ctx, query).await.unwrap();
        let names = batch.column(3).as_string::<i32>();
        let sequence = batch
            .column(5)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        (0..batch.num_rows())
            .map(|i| (names.value(i).to_string(), sequence.value(i)))
            .collect()
    }

    #[tokio::test]
    async fn a_declared_key_is_listed_in_key_order() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, b INT NOT NULL, c INT NOT NULL, PRIMARY KEY (c, b))")
            .await
            .unwrap();
        ctx.sql("CREATE TABLE plain (a INT)").await.unwrap();
        assert_eq!(
            keys(&ctx, "t", None).await,
            [("c".to_string(), 1), ("b".to_string(), 2)]
        );
        assert_eq!(keys(&ctx, "t", Some("public")).await.len(), 2);
        assert!(keys(&ctx, "t", Some("other")).await.is_empty());
        assert!(keys(&ctx, "plain", None).await.is_empty());
        assert!(keys(&ctx, "missing", None).await.is_empty());
    }
}
