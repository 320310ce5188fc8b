//! The completion marker that ends every task output stream on the wire.
//!
//! The producer's last message is a `FlightData` with no data and a
//! `StreamEnd` in its `app_metadata`. A reader strips it, and a stream that
//! ends without it (a producer aborted, a connection reset by a proxy, a
//! worker shutting down) is an error: never a short success.

use std::sync::{Arc, Mutex};

use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use futures::{Stream, StreamExt};
use prost::Message;
use squadron_proto::v1::StreamEnd;

/// The final message of a complete stream.
pub fn end_message(rows: u64, batches: u64) -> FlightData {
    FlightData {
        app_metadata: StreamEnd {
            rows,
            batches,
            complete: true,
        }
        .encode_to_vec()
        .into(),
        ..Default::default()
    }
}

/// Squadron's producers send no other message without an IPC header.
fn is_end(data: &FlightData) -> bool {
    data.data_header.is_empty() && data.data_body.is_empty()
}

/// What a reader saw of a stream's end.
#[derive(Clone, Default)]
pub struct EndSeen(Arc<Mutex<Option<StreamEnd>>>);

impl EndSeen {
    /// The marker's row count, or an error naming what went wrong when the
    /// stream ended without one.
    pub fn rows(&self) -> Result<u64, FlightError> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(end) => Ok(end.rows),
            None => Err(FlightError::Tonic(Box::new(tonic::Status::aborted(
                "the stream ended without its completion marker (the producer stopped early)",
            )))),
        }
    }
}

/// Passes the data messages through and records the completion marker in
/// `seen`; anything after the marker is a protocol error.
pub fn strip_end<S>(
    messages: S,
    seen: EndSeen,
) -> impl Stream<Item = Result<FlightData, FlightError>> + Send + 'static
where
    S: Stream<Item = Result<FlightData, FlightError>> + Send + 'static,
{
    messages.filter_map(move |item| {
        let seen = seen.clone();
        async move {
            let data = match item {
                Ok(data) => data,
                Err(e) => return Some(Err(e)),
            };
            let mut end = seen.0.lock().unwrap_or_else(|e| e.into_inner());
            if end.is_some() {
                return Some(Err(FlightError::protocol(
                    "a message after the stream's completion marker",
                )));
            }
            if !is_end(&data) {
                return Some(Ok(data));
            }
            match StreamEnd::decode(data.app_metadata.as_ref()) {
                Ok(marker) if marker.complete => {
                    *end = Some(marker);
                    None
                }
                Ok(_) => Some(Err(FlightError::protocol(
                    "a message with no data and no completion marker",
                ))),
                Err(e) => Some(Err(FlightError::protocol(format!(
                    "a malformed completion marker: {e}"
                )))),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    fn data() -> FlightData {
        FlightData {
            data_header: vec![1u8].into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_marker_is_stripped_and_recorded() {
        let seen = EndSeen::default();
        let input = futures::stream::iter(vec![Ok(data()), Ok(end_message(5, 1))]);
        let out: Vec<FlightData> = strip_end(input, seen.clone()).try_collect().await.unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(seen.rows().unwrap(), 5);
    }

    #[tokio::test]
    async fn a_stream_without_marker_is_an_error() {
        let seen = EndSeen::default();
        let input = futures::stream::iter(vec![Ok(data())]);
        let out: Vec<FlightData> = strip_end(input, seen.clone()).try_collect().await.unwrap();
        assert_eq!(out.len(), 1);
        let err = seen.rows().unwrap_err().to_string();
        assert!(err.contains("without its completion marker"), "{err}");
    }

    #[tokio::test]
    async fn data_after_the_marker_is_refused() {
        let seen = EndSeen::default();
        let input = futures::stream::iter(vec![Ok(end_message(0, 0)), Ok(data())]);
        assert!(!end_message(0, 0).app_metadata.is_empty());
        let result: Result<Vec<FlightData>, _> = strip_end(input, seen).try_collect().await;
        assert!(result.is_err());
    }
}
