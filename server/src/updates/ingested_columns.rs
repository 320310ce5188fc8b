//! Ingested rows as the columns of the table they are appended to.
//!
//! A bulk ingest names its columns; the table has its own. They are matched
//! by name (the order may differ), each value converted to the table's type
//! as a cast that fails rather than gives NULL, and a table column the
//! upload lacks is NULL where the table allows it. A column the table lacks,
//! a missing column the table requires, or a value that does not convert
//! is refused (INVALID_ARGUMENT) and the upload commits nothing: storing
//! NULL instead would acknowledge rows the client did not send.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::util::display::FormatOptions;
use datafusion::common::TableReference;
use squadron_common::error::Error;

/// Where each of a table's columns comes from in the ingested rows.
#[derive(Debug)]
pub struct IngestedColumns {
    table: SchemaRef,
    name: String,
    /// Per table column, the ingested column holding it (`None`: NULL).
    sources: Vec<Option<usize>>,
}

impl IngestedColumns {
    /// Matches `ingested` to `table`'s columns by name, or says why not.
    pub fn match_names(
        name: &TableReference,
        table: SchemaRef,
        ingested: &Schema,
    ) -> Result<Self, Error> {
        if let Some(extra) = ingested
            .fields()
            .iter()
            .find(|f| table.field_with_name(f.name()).is_err())
        {
            return Err(Error::invalid_argument(format!(
                "{name} has no column {:?} (its columns: {})",
                extra.name(),
                column_names(&table)
            )));
        }
        let mut sources = Vec::with_capacity(table.fields().len());
        for field in table.fields() {
            let source = ingested.index_of(field.name()).ok();
            if source.is_none() && !field.is_nullable() {
                return Err(Error::invalid_argument(format!(
                    "the ingested rows lack column {:?}, which {name} requires",
                    field.name()
                )));
            }
            sources.push(source);
        }
        Ok(Self {
            table,
            name: name.to_string(),
            sources,
        })
    }

    /// `batch` (of the ingested schema) as the table's columns.
    pub fn convert(&self, batch: &RecordBatch) -> Result<RecordBatch, Error> {
        let strict = CastOptions {
            safe: false,
            format_options: FormatOptions::default(),
        };
        let columns = self
            .table
            .fields()
            .iter()
            .zip(&self.sources)
            .map(|(field, source)| match source {
                None => Ok(new_null_array(field.data_type(), batch.num_rows())),
                Some(i) => {
                    let column: &ArrayRef = batch.column(*i);
                    cast_with_options(column, field.data_type(), &strict).map_err(|e| {
                        Error::invalid_argument(format!(
                            "column {:?} of {}: a {} value does not convert to {}: {e}",
                            field.name(),
                            self.name,
                            column.data_type(),
                            field.data_type()
                        ))
                    })
                }
            })
            .collect::<Result<Vec<_>, Error>>()?;
        RecordBatch::try_new(Arc::clone(&self.table), columns)
            .map_err(|e| Error::invalid_argument(format!("rows ingested into {}: {e}", self.name)))
    }
}

fn column_names(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use squadron_common::error::ErrorKind;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("z", DataType::Float64, true),
        ]))
    }

    fn name() -> TableReference {
        TableReference::bare("t")
    }

    fn refused(ingested: RecordBatch) -> String {
        let result = IngestedColumns::match_names(&name(), table(), &ingested.schema())
            .and_then(|columns| columns.convert(&ingested));
        let error = result.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        error.to_string()
    }

    #[test]
    fn columns_match_by_name_and_convert() {
        let ingested = RecordBatch::try_from_iter([
            (
                "z",
                Arc::new(StringArray::from(vec!["1.5", "2"])) as ArrayRef,
            ),
            ("k", Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef),
        ])
        .unwrap();
        let columns = IngestedColumns::match_names(&name(), table(), &ingested.schema()).unwrap();
        let converted = columns.convert(&ingested).unwrap();
        assert_eq!(converted.schema(), table());
        let z = converted.column(1).as_any().downcast_ref::<Float64Array>();
        assert_eq!(z.unwrap().values().to_vec(), vec![1.5, 2.0]);
        // A nullable column the rows lack is NULL.
        let keys_only =
            RecordBatch::try_from_iter([("k", Arc::new(Int64Array::from(vec![7])) as ArrayRef)])
                .unwrap();
        let columns = IngestedColumns::match_names(&name(), table(), &keys_only.schema()).unwrap();
        assert_eq!(
            columns.convert(&keys_only).unwrap().column(1).null_count(),
            1
        );
    }

    #[test]
    fn unknown_missing_or_unconvertible_columns_are_refused() {
        let unknown = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("q", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        ])
        .unwrap();
        assert!(refused(unknown).contains("\"q\""));
        let missing = RecordBatch::try_from_iter([(
            "z",
            Arc::new(Float64Array::from(vec![1.0])) as ArrayRef,
        )])
        .unwrap();
        assert!(refused(missing).contains("\"k\""));
        let not_a_number = RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (
                "z",
                Arc::new(StringArray::from(vec!["not a number"])) as ArrayRef,
            ),
        ])
        .unwrap();
        assert!(refused(not_a_number).contains("\"z\""));
        let null_key = RecordBatch::try_from_iter([(
            "k",
            Arc::new(Int64Array::from(vec![Some(1), None])) as ArrayRef,
        )])
        .unwrap();
        refused(null_key);
    }
}
