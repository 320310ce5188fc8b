//! A Flight stream read back as record batches, with Squadron's errors: a
//! status in the stream keeps its kind; anything the decoder refuses is
//! internal (Squadron encoded it).

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{Stream, TryStreamExt};
use squadron_common::error::Error;
use tonic::Status;

/// The batches of `stream`, a job's answer as Flight messages.
pub fn decoded_batches(
    stream: impl Stream<Item = Result<FlightData, Status>> + Send + 'static,
) -> impl Stream<Item = Result<RecordBatch, Error>> + Send + 'static {
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .map_err(flight_error)
}

/// The error a Flight decoding failure stands for.
pub fn flight_error(e: FlightError) -> Error {
    match e {
        FlightError::Tonic(status) => Error::from(*status),
        other => Error::internal(format!("decoding a Flight stream: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use squadron_common::error::ErrorKind;

    #[tokio::test]
    async fn a_status_in_the_stream_keeps_its_kind() {
        let failed = futures::stream::iter([Err(Status::not_found("gone"))]);
        let first = decoded_batches(failed).next().await.unwrap().unwrap_err();
        assert_eq!(first.kind(), ErrorKind::NotFound);
        assert_eq!(first.message(), "gone");
        let garbage = futures::stream::iter([Ok(FlightData::default())]);
        let refused = decoded_batches(garbage).next().await.unwrap().unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::Internal, "{refused}");
    }
}
