//! Which file format a created table's rows are kept in, and rows made to
//! fit the table's columns before they are written.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, IntervalUnit, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use squadron_common::error::Error;

/// The format of a created table's part files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredFormat {
    Parquet,
    /// Arrow IPC files, for a column Parquet cannot hold.
    Arrow,
}

impl StoredFormat {
    /// Parquet, unless a column has a type Parquet cannot hold (an
    /// interval with nanoseconds, a union); then Arrow IPC, which holds
    /// every Arrow type.
    pub fn for_schema(schema: &Schema) -> Self {
        if schema.fields().iter().all(|f| parquet_holds(f.data_type())) {
            Self::Parquet
        } else {
            Self::Arrow
        }
    }

    /// The extension of its files.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Parquet => ".parquet",
            Self::Arrow => ".arrow",
        }
    }

    /// How it is named in the catalog and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Parquet => "parquet",
            Self::Arrow => "arrow",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "parquet" => Some(Self::Parquet),
            "arrow" => Some(Self::Arrow),
            _ => None,
        }
    }
}

fn parquet_holds(data_type: &DataType) -> bool {
    match data_type {
        DataType::Interval(IntervalUnit::MonthDayNano) | DataType::Union(..) => false,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => parquet_holds(f.data_type()),
        DataType::Struct(fields) => fields.iter().all(|f| parquet_holds(f.data_type())),
        DataType::Dictionary(_, values) => parquet_holds(values),
        DataType::RunEndEncoded(_, values) => parquet_holds(values.data_type()),
        _ => true,
    }
}

/// Refuses a column no file format holds: a dictionary whose values are
/// dictionaries (neither Parquet nor Arrow IPC encodes one).
pub fn check_storable(schema: &Schema) -> Result<(), Error> {
    fn nested_dictionary(data_type: &DataType) -> bool {
        match data_type {
            DataType::Dictionary(_, values) => {
                matches!(**values, DataType::Dictionary(..)) || nested_dictionary(values)
            }
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::FixedSizeList(f, _)
            | DataType::Map(f, _) => nested_dictionary(f.data_type()),
            DataType::Struct(fields) => fields.iter().any(|f| nested_dictionary(f.data_type())),
            _ => false,
        }
    }
    match schema
        .fields()
        .iter()
        .find(|f| nested_dictionary(f.data_type()))
    {
        Some(field) => Err(Error::unimplemented(format!(
            "column {} ({}): a dictionary of dictionaries cannot be stored in a table's files",
            field.name(),
            field.data_type()
        ))),
        None => Ok(()),
    }
}

/// `batch` under the table's `schema`: its columns may be nullable where
/// the table's are not (a computed value), as long as they hold no NULL,
/// and may come as clients receive them (a dictionary hydrated, a view as
/// a plain string), cast back to the table's types here.
pub fn as_table_rows(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema().fields() == schema.fields() {
        return Ok(batch);
    }
    let invalid =
        |message: String| DataFusionError::External(Box::new(Error::invalid_argument(message)));
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (i, (field, column)) in schema.fields().iter().zip(batch.columns()).enumerate() {
        if !field.is_nullable() && column.null_count() > 0 {
            // DataFusion's words (clients and its tests match them).
            return Err(invalid(format!(
                "Execution error: Invalid batch column at '{i}' has null but schema specifies non-nullable"
            )));
        }
        if column.data_type() == field.data_type() {
            columns.push(Arc::clone(column));
        } else {
            columns.push(
                cast(column, field.data_type())
                    .map_err(|e| invalid(format!("rows do not match the table's columns: {e}")))?,
            );
        }
    }
    RecordBatch::try_new(schema.clone(), columns)
        .map_err(|e| invalid(format!("rows do not match the table's columns: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::Field;
    use squadron_common::error::ErrorKind;

    #[test]
    fn a_type_parquet_cannot_hold_goes_to_arrow_ipc() {
        let interval = Schema::new(vec![Field::new(
            "i",
            DataType::Interval(IntervalUnit::MonthDayNano),
            true,
        )]);
        assert_eq!(StoredFormat::for_schema(&interval), StoredFormat::Arrow);
        let plain = Schema::new(vec![Field::new("a", DataType::Int64, true)]);
        assert_eq!(StoredFormat::for_schema(&plain), StoredFormat::Parquet);
        for format in [StoredFormat::Parquet, StoredFormat::Arrow] {
            assert_eq!(StoredFormat::from_name(format.name()), Some(format));
        }
    }

    #[test]
    fn a_dictionary_of_dictionaries_is_refused() {
        let utf8 = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        let nested = DataType::Dictionary(Box::new(DataType::Int32), Box::new(utf8.clone()));
        assert!(check_storable(&Schema::new(vec![Field::new("d", utf8, true)])).is_ok());
        let err = check_storable(&Schema::new(vec![Field::new("n", nested, true)])).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unimplemented);
        assert!(err.message().contains("column n"), "{}", err.message());
    }

    #[test]
    fn rows_are_cast_to_the_table_and_nulls_in_non_null_columns_refused() {
        let table: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("s", DataType::Utf8View, true),
        ]));
        let rows = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![1, 2])) as _),
            ("s", Arc::new(StringArray::from(vec!["x", "y"])) as _),
        ])
        .unwrap();
        let cast = as_table_rows(rows, &table).unwrap();
        assert_eq!(cast.schema(), table);
        let with_null = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from(vec![Some(1), None])) as _),
            ("s", Arc::new(StringArray::from(vec!["x", "y"])) as _),
        ])
        .unwrap();
        let err = as_table_rows(with_null, &table).unwrap_err();
        assert!(err.to_string().contains("non-nullable"), "{err}");
    }
}
