//! Flight SQL's column metadata (`ARROW:FLIGHT:SQL:*`) on the schemas a
//! client is told of: result sets, prepared statements' results and
//! parameters, and GetTables' table schemas. The JDBC driver builds
//! `ResultSetMetaData` from it (without it a DECIMAL(15,2) reads as
//! precision 0, scale 0 and no table), and ADBC's `xdbc_type_name` is its
//! type name. Only the schemas described change: the data streams keep
//! the schema the workers send.

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use squadron_planner::column_origins::ColumnOrigin;

const CATALOG_NAME: &str = "ARROW:FLIGHT:SQL:CATALOG_NAME";
const SCHEMA_NAME: &str = "ARROW:FLIGHT:SQL:SCHEMA_NAME";
const TABLE_NAME: &str = "ARROW:FLIGHT:SQL:TABLE_NAME";
const TYPE_NAME: &str = "ARROW:FLIGHT:SQL:TYPE_NAME";
const PRECISION: &str = "ARROW:FLIGHT:SQL:PRECISION";
const SCALE: &str = "ARROW:FLIGHT:SQL:SCALE";
const IS_AUTO_INCREMENT: &str = "ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT";
const IS_CASE_SENSITIVE: &str = "ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE";
const IS_READ_ONLY: &str = "ARROW:FLIGHT:SQL:IS_READ_ONLY";
const IS_SEARCHABLE: &str = "ARROW:FLIGHT:SQL:IS_SEARCHABLE";

/// `schema` with each field's Flight SQL metadata: its SQL type, precision
/// and scale, and for a column read unchanged from a table (`origins`, by
/// position; shorter where unknown) that table. Metadata a field has
/// already is kept.
pub fn described(schema: &Schema, origins: &[Option<ColumnOrigin>]) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let origin = origins.get(i).and_then(Option::as_ref);
            let mut metadata = column_metadata(field.data_type(), origin);
            metadata.extend(field.metadata().clone());
            Field::clone(field).with_metadata(metadata)
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// A table's columns, each described as read from `origin`.
pub fn described_table(schema: &Schema, origin: &ColumnOrigin) -> Schema {
    let origins = vec![Some(origin.clone()); schema.fields().len()];
    described(schema, &origins)
}

fn column_metadata(data_type: &DataType, origin: Option<&ColumnOrigin>) -> HashMap<String, String> {
    let flag = |on: bool| if on { "1" } else { "0" }.to_string();
    let mut metadata = HashMap::from([
        (TYPE_NAME.to_string(), sql_type_name(data_type)),
        (IS_AUTO_INCREMENT.to_string(), flag(false)),
        (IS_CASE_SENSITIVE.to_string(), flag(is_text(data_type))),
        // Result sets are read-only (no updatable cursors); every type
        // can stand in a WHERE.
        (IS_READ_ONLY.to_string(), flag(true)),
        (IS_SEARCHABLE.to_string(), flag(true)),
    ]);
    if let Some((precision, scale)) = precision_and_scale(data_type) {
        metadata.insert(PRECISION.to_string(), precision.to_string());
        metadata.insert(SCALE.to_string(), scale.to_string());
    }
    if let Some(origin) = origin {
        metadata.insert(CATALOG_NAME.to_string(), origin.catalog.clone());
        metadata.insert(SCHEMA_NAME.to_string(), origin.schema.clone());
        metadata.insert(TABLE_NAME.to_string(), origin.table.clone());
    }
    metadata
}

/// The SQL name of a column type, as GetXdbcTypeInfo lists the types.
pub fn sql_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "NULL".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INTEGER UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float16 | DataType::Float32 => "REAL".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "DECIMAL".into(),
        t if is_text(t) => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "VARBINARY".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMP WITH TIME ZONE".into(),
        DataType::Interval(_) => "INTERVAL".into(),
        DataType::Duration(_) => "DURATION".into(),
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::ListView(_)
        | DataType::LargeListView(_)
        | DataType::FixedSizeList(..) => "ARRAY".into(),
        DataType::Struct(_) => "STRUCT".into(),
        DataType::Map(..) => "MAP".into(),
        DataType::Dictionary(_, values) => sql_type_name(values),
        other => other.to_string(),
    }
}

fn is_text(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    )
}

/// Decimal digits and scale of a numeric type (JDBC's `getPrecision`,
/// `getScale`; the integer and float digits GetXdbcTypeInfo gives).
fn precision_and_scale(data_type: &DataType) -> Option<(u32, i32)> {
    Some(match data_type {
        DataType::Int8 | DataType::UInt8 => (3, 0),
        DataType::Int16 | DataType::UInt16 => (5, 0),
        DataType::Int32 | DataType::UInt32 => (10, 0),
        DataType::Int64 => (19, 0),
        DataType::UInt64 => (20, 0),
        DataType::Float16 | DataType::Float32 => (7, 0),
        DataType::Float64 => (15, 0),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => (u32::from(*p), i32::from(*s)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_carry_precision_scale_and_their_table() {
        let schema = Schema::new(vec![
            Field::new("l_extendedprice", DataType::Decimal128(15, 2), true),
            Field::new("total", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]);
        let origin = ColumnOrigin {
            catalog: "squadron".into(),
            schema: "public".into(),
            table: "lineitem".into(),
        };
        let described = described(&schema, &[Some(origin)]);
        let price = described.field(0).metadata();
        assert_eq!(price[TYPE_NAME], "DECIMAL");
        assert_eq!(price[PRECISION], "15");
        assert_eq!(price[SCALE], "2");
        assert_eq!(price[TABLE_NAME], "lineitem");
        assert_eq!(price[SCHEMA_NAME], "public");
        assert_eq!(price[IS_CASE_SENSITIVE], "0");
        let total = described.field(1).metadata();
        assert_eq!(total[TYPE_NAME], "BIGINT");
        assert_eq!(total[PRECISION], "19");
        assert!(!total.contains_key(TABLE_NAME));
        let name = described.field(2).metadata();
        assert_eq!(name[TYPE_NAME], "VARCHAR");
        assert_eq!(name[IS_CASE_SENSITIVE], "1");
        assert!(!name.contains_key(PRECISION));
        // Types and nullability unchanged.
        for (before, after) in schema.fields().iter().zip(described.fields()) {
            assert_eq!(before.data_type(), after.data_type());
            assert_eq!(before.is_nullable(), after.is_nullable());
        }
    }
}
