//! Answers to the Flight SQL metadata commands (catalogs, schemas, tables,
//! table types, keys, type info), computed on the coordinator from its
//! catalog: they read no data, so no worker is involved.

use std::sync::{Arc, LazyLock};

use arrow_flight::sql::metadata::{XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, Nullable,
    Searchable, XdbcDataType, XdbcDatetimeSubcode,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::TableType;
use datafusion::prelude::SessionContext;
use tonic::Status;

use squadron_planner::client_types::client_schema;
use squadron_planner::column_origins::ColumnOrigin;

use super::column_metadata::described_table;

/// The table types Squadron's catalog holds, as Flight SQL names them.
pub const TABLE_TYPES: [&str; 3] = ["TABLE", "VIEW", "LOCAL TEMPORARY"];

fn table_type_name(t: TableType) -> &'static str {
    match t {
        TableType::Base => TABLE_TYPES[0],
        TableType::View => TABLE_TYPES[1],
        TableType::Temporary => TABLE_TYPES[2],
    }
}

fn arrow_error(e: arrow_flight::error::FlightError) -> Status {
    Status::internal(format!("building a metadata result: {e}"))
}

pub fn catalogs(ctx: &SessionContext, query: CommandGetCatalogs) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    let mut names = ctx.catalog_names();
    names.sort();
    for name in names {
        builder.append(name);
    }
    builder.build().map_err(arrow_error)
}

pub fn db_schemas(ctx: &SessionContext, query: CommandGetDbSchemas) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for (catalog, schema) in schema_names(ctx) {
        builder.append(catalog, schema);
    }
    builder.build().map_err(arrow_error)
}

/// Every (catalog, schema) pair, sorted.
pub(super) fn schema_names(ctx: &SessionContext) -> Vec<(String, String)> {
    let mut all = vec![];
    for catalog_name in ctx.catalog_names() {
        if let Some(catalog) = ctx.catalog(&catalog_name) {
            for schema in catalog.schema_names() {
                all.push((catalog_name.clone(), schema));
            }
        }
    }
    all.sort();
    all
}

pub async fn tables(ctx: &SessionContext, query: CommandGetTables) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for (catalog_name, schema_name) in schema_names(ctx) {
        let Some(schema) = ctx
            .catalog(&catalog_name)
            .and_then(|c| c.schema(&schema_name))
        else {
            continue;
        };
        let mut names = schema.table_names();
        names.sort();
        for name in names {
            let table = schema
                .table(&name)
                .await
                .map_err(|e| Status::internal(format!("table {name}: {e}")))?;
            let Some(table) = table else { continue };
            let origin = ColumnOrigin {
                catalog: catalog_name.clone(),
                schema: schema_name.clone(),
                table: name.clone(),
            };
            let columns = described_table(&client_schema(&table.schema()), &origin);
            builder
                .append(
                    &catalog_name,
                    &schema_name,
                    &name,
                    table_type_name(table.table_type()),
                    &columns,
                )
                .map_err(arrow_error)?;
        }
    }
    builder.build().map_err(arrow_error)
}

pub fn table_types(query: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for t in TABLE_TYPES {
        builder.append(t);
    }
    builder.build().map_err(arrow_error)
}

/// The schema of imported/exported keys and cross references (always
/// empty: no foreign keys).
pub fn foreign_keys_schema() -> SchemaRef {
    let utf8 = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        utf8("pk_catalog_name", true),
        utf8("pk_db_schema_name", true),
        utf8("pk_table_name", false),
        utf8("pk_column_name", false),
        utf8("fk_catalog_name", true),
        utf8("fk_db_schema_name", true),
        utf8("fk_table_name", false),
        utf8("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        utf8("fk_key_name", true),
        utf8("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// The SQL types Squadron (DataFusion) accepts, for `GetXdbcTypeInfo`
/// (JDBC `getTypeInfo`).
pub static XDBC_TYPES: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
    let mut builder = XdbcTypeInfoDataBuilder::new();
    let plain = |name: &str, data_type: XdbcDataType| XdbcTypeInfo {
        type_name: name.into(),
        data_type,
        sql_data_type: data_type,
        nullable: Nullable::NullabilityNullable,
        searchable: Searchable::Full,
        local_type_name: Some(name.into()),
        ..Default::default()
    };
    let numeric = |name: &str, data_type: XdbcDataType, size: i32| XdbcTypeInfo {
        column_size: Some(size),
        num_prec_radix: Some(10),
        unsigned_attribute: Some(false),
        ..plain(name, data_type)
    };
    let text = |name: &str, data_type: XdbcDataType| XdbcTypeInfo {
        literal_prefix: Some("'".into()),
        literal_suffix: Some("'".into()),
        case_sensitive: true,
        ..plain(name, data_type)
    };
    let temporal = |name: &str, data_type: XdbcDataType, subcode| XdbcTypeInfo {
        literal_prefix: Some(format!("{name} '")),
        literal_suffix: Some("'".into()),
        datetime_subcode: Some(subcode),
        ..plain(name, data_type)
    };
    for info in [
        plain("BOOLEAN", XdbcDataType::XdbcBit),
        numeric("TINYINT", XdbcDataType::XdbcTinyint, 3),
        numeric("SMALLINT", XdbcDataType::XdbcSmallint, 5),
        numeric("INTEGER", XdbcDataType::XdbcInteger, 10),
        numeric("BIGINT", XdbcDataType::XdbcBigint, 19),
        numeric("REAL", XdbcDataType::XdbcReal, 7),
        numeric("DOUBLE", XdbcDataType::XdbcDouble, 15),
        XdbcTypeInfo {
            create_params: Some(vec!["precision".into(), "scale".into()]),
            fixed_prec_scale: true,
            minimum_scale: Some(0),
            maximum_scale: Some(38),
            ..numeric("DECIMAL", XdbcDataType::XdbcDecimal, 38)
        },
        text("VARCHAR", XdbcDataType::XdbcVarchar),
        plain("VARBINARY", XdbcDataType::XdbcVarbinary),
        temporal(
            "DATE",
            XdbcDataType::XdbcDate,
            XdbcDatetimeSubcode::XdbcSubcodeUnknown,
        ),
        temporal(
            "TIME",
            XdbcDataType::XdbcTime,
            XdbcDatetimeSubcode::XdbcSubcodeTime,
        ),
        temporal(
            "TIMESTAMP",
            XdbcDataType::XdbcTimestamp,
            XdbcDatetimeSubcode::XdbcSubcodeTimestamp,
        ),
    ] {
        builder.append(info);
    }
    builder.build().expect("static type info is valid")
});

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, StringArray};
    use datafusion::prelude::SessionConfig;

    async fn context() -> SessionContext {
        let ctx =
            SessionContext::new_with_config(SessionConfig::new().with_information_schema(true));
        ctx.sql("CREATE TABLE orders (id BIGINT, note VARCHAR) AS VALUES (1, 'a')")
            .await
            .unwrap();
        ctx.sql("CREATE VIEW big_orders AS SELECT * FROM orders WHERE id > 10")
            .await
            .unwrap();
        ctx
    }

    fn strings(batch: &RecordBatch, column: &str) -> Vec<String> {
        let col = batch.column_by_name(column).unwrap();
        let col = col.as_any().downcast_ref::<StringArray>().unwrap();
        (0..col.len()).map(|i| col.value(i).to_string()).collect()
    }

    #[tokio::test]
    async fn tables_are_listed_with_filters_types_and_schemas() {
        let ctx = context().await;
        let all = tables(&ctx, CommandGetTables::default()).await.unwrap();
        let names = strings(&all, "table_name");
        assert!(names.contains(&"orders".to_string()), "{names:?}");
        assert!(names.contains(&"big_orders".to_string()));

        let query = CommandGetTables {
            table_name_filter_pattern: Some("%orders".into()),
            table_types: vec!["TABLE".into()],
            include_schema: true,
            ..Default::default()
        };
        let only = tables(&ctx, query).await.unwrap();
        assert_eq!(strings(&only, "table_name"), ["orders"]);
        assert!(only.column_by_name("table_schema").is_some());

        let views = CommandGetTables {
            table_types: vec!["VIEW".into()],
            db_schema_filter_pattern: Some("public".into()),
            ..Default::default()
        };
        assert_eq!(
            strings(&tables(&ctx, views).await.unwrap(), "table_name"),
            ["big_orders"]
        );
    }

    #[tokio::test]
    async fn catalogs_and_schemas_come_from_the_session() {
        let ctx = context().await;
        let cats = catalogs(&ctx, CommandGetCatalogs {}).unwrap();
        assert_eq!(strings(&cats, "catalog_name"), ["datafusion"]);
        let schemas = db_schemas(
            &ctx,
            CommandGetDbSchemas {
                catalog: Some("datafusion".into()),
                db_schema_filter_pattern: Some("pub%".into()),
            },
        )
        .unwrap();
        assert_eq!(strings(&schemas, "db_schema_name"), ["public"]);
        let types = table_types(CommandGetTableTypes {}).unwrap();
        let mut expected = TABLE_TYPES.map(String::from).to_vec();
        expected.sort();
        assert_eq!(strings(&types, "table_type"), expected);
    }

    #[test]
    fn type_info_lists_the_sql_types() {
        let batch = XDBC_TYPES.record_batch(None).unwrap();
        let names = strings(&batch, "type_name");
        for t in ["BIGINT", "VARCHAR", "DATE", "DECIMAL"] {
            assert!(names.contains(&t.to_string()), "{names:?}");
        }
    }
}
