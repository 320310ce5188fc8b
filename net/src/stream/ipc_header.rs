//! What an Arrow IPC message in a `FlightData` is, read from its
//! flatbuffer header alone (the body is never touched).

use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use datafusion::arrow::ipc::{root_as_message, MessageHeader};

#[derive(Debug, PartialEq)]
pub enum MessageKind {
    Schema,
    RecordBatch {
        rows: u64,
    },
    /// Dictionary batches and tensors: Squadron's encoders send none.
    Other(&'static str),
}

pub fn message_kind(data: &FlightData) -> Result<MessageKind, FlightError> {
    let message = root_as_message(&data.data_header)
        .map_err(|e| FlightError::protocol(format!("a malformed IPC message header: {e}")))?;
    Ok(match message.header_type() {
        MessageHeader::Schema => MessageKind::Schema,
        MessageHeader::RecordBatch => {
            let rows = message
                .header_as_record_batch()
                .map(|b| b.length())
                .unwrap_or(0);
            MessageKind::RecordBatch {
                rows: u64::try_from(rows)
                    .map_err(|_| FlightError::protocol(format!("a record batch of {rows} rows")))?,
            }
        }
        MessageHeader::DictionaryBatch => MessageKind::Other("dictionary batch"),
        _ => MessageKind::Other("non-data"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::encode::FlightDataEncoderBuilder;
    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use futures::TryStreamExt;
    use std::sync::Arc;

    #[tokio::test]
    async fn headers_name_the_schema_and_the_rows_of_each_batch() {
        let batch =
            RecordBatch::try_from_iter([("a", Arc::new(Int32Array::from(vec![1, 2, 3])) as _)])
                .unwrap();
        let messages: Vec<FlightData> = FlightDataEncoderBuilder::new()
            .build(futures::stream::iter([
                Ok(batch.clone()),
                Ok(batch.slice(0, 1)),
            ]))
            .try_collect()
            .await
            .unwrap();
        let kinds: Vec<MessageKind> = messages.iter().map(|m| message_kind(m).unwrap()).collect();
        assert_eq!(
            kinds,
            vec![
                MessageKind::Schema,
                MessageKind::RecordBatch { rows: 3 },
                MessageKind::RecordBatch { rows: 1 }
            ]
        );
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        let data = FlightData {
            data_header: vec![1, 2, 3].into(),
            ..Default::default()
        };
        assert!(message_kind(&data).is_err());
    }
}
