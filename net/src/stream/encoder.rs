//! Record batches as Flight messages, with their types as they are.
//!
//! arrow-flight's `FlightDataEncoder` (59.x) rewrites the schema before
//! sending it and casts each batch to the rewritten schema; its rewrite
//! turns `LargeList` into `List`. A `LargeList` column then reached the
//! next task or the client as a `List` (or, where the receiver had the
//! true schema, as a batch it could not decode). This encoder only
//! replaces dictionary columns by their values (what that encoder's
//! default did: no dictionary messages, which not every client reads) and
//! encodes the rest unchanged.

use std::sync::Arc;

use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, SchemaAsIpc};
use datafusion::arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::writer::{
    DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions,
};
use futures::{Stream, StreamExt};

/// The schema message, then one message per batch.
pub fn flight_data<S>(
    schema: SchemaRef,
    batches: S,
) -> impl Stream<Item = Result<FlightData, FlightError>> + Send + 'static
where
    S: Stream<Item = Result<RecordBatch, FlightError>> + Send + 'static,
{
    let sent_schema = without_dictionaries(&schema);
    let first = futures::stream::once({
        let schema = Arc::clone(&sent_schema);
        async move { Ok(schema_message(&schema)) }
    });
    let mut encoder = BatchEncoder::new(sent_schema);
    first.chain(batches.map(move |batch| encoder.encode(&batch?)))
}

/// The IPC schema message of `schema` (dictionaries replaced by values).
pub fn schema_message(schema: &Schema) -> FlightData {
    SchemaAsIpc::new(schema, &IpcWriteOptions::default()).into()
}

/// The schema batches are sent with: each dictionary type replaced by
/// its value type, at any depth.
pub fn without_dictionaries(schema: &SchemaRef) -> SchemaRef {
    if !changes_in_transit(schema) {
        return Arc::clone(schema);
    }
    let fields: Vec<FieldRef> = schema.fields().iter().map(plain_field).collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

struct BatchEncoder {
    schema: SchemaRef,
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
}

impl BatchEncoder {
    fn new(schema: SchemaRef) -> Self {
        // Each message's body is written into a `Vec` that starts empty and
        // doubles as it fills: a 1 MiB batch went through ~20 regrowths,
        // each a copy into fresh (kernel-zeroed) pages, about a tenth of a
        // worker's CPU when streaming a table. Reserving the last body's
        // size for the next one makes it one allocation per message.
        let mut context = IpcWriteContext::default();
        context.set_reserve_scratch(true);
        Self {
            schema,
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context,
        }
    }

    fn encode(&mut self, batch: &RecordBatch) -> Result<FlightData, FlightError> {
        // The sent schema: dictionary columns cast to their values.
        let batch = cast_to_schema(batch, &self.schema)?;
        let (dictionaries, data) = self.generator.encode(
            &batch,
            &mut self.dictionaries,
            &self.options,
            &mut self.context,
        )?;
        debug_assert!(dictionaries.is_empty(), "dictionaries were replaced");
        Ok(data.into())
    }
}

/// `batch` with `schema`'s column types, casting the columns whose type
/// differs. Senders use it to replace dictionaries by their values;
/// readers to turn them back into the dictionaries their plan expects.
pub fn cast_to_schema(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, ArrowError> {
    if Arc::ptr_eq(batch.schema_ref(), schema) || batch.schema_ref() == schema {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(Arc::clone(column))
            } else {
                cast(column, field.data_type())
            }
        })
        .collect::<Result<Vec<ArrayRef>, _>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
}

/// Whether batches of `schema` travel with other types (dictionaries).
pub fn changes_in_transit(schema: &SchemaRef) -> bool {
    schema
        .fields()
        .iter()
        .any(|f| has_dictionary(f.data_type()))
}

fn has_dictionary(data_type: &DataType) -> bool {
    match data_type {
        DataType::Dictionary(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_dictionary(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::RunEndEncoded(_, values) => has_dictionary(values.data_type()),
        _ => false,
    }
}

fn plain_field(field: &FieldRef) -> FieldRef {
    if !has_dictionary(field.data_type()) {
        return Arc::clone(field);
    }
    Arc::new(Field::clone(field).with_data_type(plain_type(field.data_type())))
}

fn plain_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Dictionary(_, values) => plain_type(values),
        DataType::List(f) => DataType::List(plain_field(f)),
        DataType::LargeList(f) => DataType::LargeList(plain_field(f)),
        DataType::ListView(f) => DataType::ListView(plain_field(f)),
        DataType::LargeListView(f) => DataType::LargeListView(plain_field(f)),
        DataType::FixedSizeList(f, n) => DataType::FixedSizeList(plain_field(f), *n),
        DataType::Map(f, sorted) => DataType::Map(plain_field(f), *sorted),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(plain_field).collect()),
        DataType::Union(fields, mode) => DataType::Union(
            fields.iter().map(|(id, f)| (id, plain_field(f))).collect(),
            *mode,
        ),
        DataType::RunEndEncoded(ends, values) => {
            DataType::RunEndEncoded(Arc::clone(ends), plain_field(values))
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::decode::FlightRecordBatchStream;
    use datafusion::arrow::array::{DictionaryArray, LargeListArray, StringArray};
    use datafusion::arrow::datatypes::{Int32Type, Int64Type};
    use futures::TryStreamExt;

    async fn round_trip(batch: RecordBatch) -> Vec<RecordBatch> {
        let messages = flight_data(batch.schema(), futures::stream::iter([Ok(batch)]));
        FlightRecordBatchStream::new_from_flight_data(messages)
            .try_collect()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn large_lists_arrive_as_large_lists_even_sliced() {
        let lists = LargeListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(2), Some(3)]),
            Some(vec![Some(4), None]),
            None,
            Some(vec![None, Some(10)]),
        ]);
        let batch = RecordBatch::try_from_iter([("c", Arc::new(lists) as ArrayRef)]).unwrap();
        for (offset, len) in [(0, 4), (1, 3), (3, 1)] {
            let slice = batch.slice(offset, len);
            assert_eq!(round_trip(slice.clone()).await, vec![slice]);
        }
    }

    #[tokio::test]
    async fn each_message_keeps_its_own_body_when_buffers_are_reused() {
        // Bodies of growing, then shrinking size: the encoder reuses its
        // scratch capacity between messages, so a later message must not
        // overwrite an earlier one still in flight.
        let batches: Vec<RecordBatch> = [10_000, 50, 30_000, 1, 0, 20_000]
            .into_iter()
            .enumerate()
            .map(|(i, rows)| {
                let values = (0..rows).map(|r| Some(format!("{i}-{r}")));
                let strings = StringArray::from_iter(values);
                RecordBatch::try_from_iter([("s", Arc::new(strings) as ArrayRef)]).unwrap()
            })
            .collect();
        let schema = batches[0].schema();
        let messages: Vec<FlightData> = flight_data(
            schema,
            futures::stream::iter(batches.clone().into_iter().map(Ok)),
        )
        .try_collect()
        .await
        .unwrap();
        let got: Vec<RecordBatch> = FlightRecordBatchStream::new_from_flight_data(
            futures::stream::iter(messages.into_iter().map(Ok)),
        )
        .try_collect()
        .await
        .unwrap();
        assert_eq!(got, batches);
    }

    #[tokio::test]
    async fn dictionaries_arrive_as_their_values() {
        let keys: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let batch = RecordBatch::try_from_iter([("d", Arc::new(keys) as ArrayRef)]).unwrap();
        let got = round_trip(batch).await;
        let expected = StringArray::from(vec!["a", "b", "a"]);
        assert_eq!(
            got[0].column(0).as_ref(),
            &expected as &dyn datafusion::arrow::array::Array
        );
        assert_eq!(got[0].schema().field(0).data_type(), &DataType::Utf8);
    }
}
