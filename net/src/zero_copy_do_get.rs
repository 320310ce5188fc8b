//! DoGet answered without copying each message's body once more.
//!
//! tonic encodes every response message into a buffer of its own, so each
//! `FlightData` it sends is copied whole after the IPC encoder (or, on the
//! coordinator, the worker stream it was read from) produced it. A DoGet
//! answer is nearly all message body: a table streamed to a client, a
//! task's output read by the coordinator. Streaming `lineitem`, that copy
//! was 13 % of the coordinator's CPU and 5 % of each worker's.
//!
//! This service answers DoGet itself and leaves every other method to the
//! service it wraps. The request is decoded by tonic's own decoder, the
//! handler is the same `FlightService::do_get`, and statuses, metadata and
//! size limits behave as tonic's do. Only the framing of the answer
//! differs: each message goes out as two chunks, the gRPC prefix with the
//! message's small fields, then its body (`data_body`) as it is, shared
//! rather than copied. Its IPC header is padded with zeros so the body
//! starts 64-byte aligned within the message, which spares arrow-rs
//! readers a copy of it (`aligned_header`).

use std::convert::Infallible;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{FlightData, Ticket};
use bytes::{BufMut, Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use http::header::{HeaderValue, CONTENT_TYPE};
use http_body::Frame;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;
use tonic::body::Body;
use tonic::codec::{Codec, Streaming};
use tonic::server::NamedService;
use tonic::Status;
use tonic_prost::ProstCodec;
use tower_service::Service;

const DO_GET_PATH: &str = "/arrow.flight.protocol.FlightService/DoGet";

/// `FlightData.data_body`'s field number.
const DATA_BODY_TAG: u32 = 1000;

/// The gRPC prefix of a message: a compression flag and a 4-byte length.
const PREFIX_BYTES: usize = 5;

/// The largest messages taken and sent, as set on the wrapped service.
#[derive(Debug, Clone, Copy)]
pub struct MessageLimits {
    pub decoding: usize,
    pub encoding: usize,
}

/// `inner` (the Flight service as tonic serves it) with DoGet answered by
/// `flight` directly.
pub struct ZeroCopyDoGet<S, F> {
    inner: S,
    flight: Arc<F>,
    limits: MessageLimits,
}

impl<S: Clone, F> Clone for ZeroCopyDoGet<S, F> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            flight: Arc::clone(&self.flight),
            limits: self.limits,
        }
    }
}

impl<F: FlightService> ZeroCopyDoGet<FlightServiceServer<F>, F> {
    /// `flight` as tonic serves it, but for DoGet; the same limits on both.
    pub fn serving(flight: Arc<F>, limits: MessageLimits) -> Self {
        let inner = FlightServiceServer::from_arc(Arc::clone(&flight))
            .max_decoding_message_size(limits.decoding)
            .max_encoding_message_size(limits.encoding);
        Self {
            inner,
            flight,
            limits,
        }
    }
}

impl<S: NamedService, F> NamedService for ZeroCopyDoGet<S, F> {
    const NAME: &'static str = S::NAME;
}

impl<S, F> Service<http::Request<Body>> for ZeroCopyDoGet<S, F>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
    F: FlightService,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != DO_GET_PATH {
            return Box::pin(self.inner.call(request));
        }
        let flight = Arc::clone(&self.flight);
        let limits = self.limits;
        Box::pin(async move {
            Ok(do_get(flight.as_ref(), request, limits)
                .await
                .unwrap_or_else(Status::into_http))
        })
    }
}

async fn do_get<F: FlightService>(
    flight: &F,
    request: http::Request<Body>,
    limits: MessageLimits,
) -> Result<http::Response<Body>, Status> {
    let (parts, body) = request.into_parts();
    let mut codec = ProstCodec::<FlightData, Ticket>::default();
    let mut messages = pin!(Streaming::new_request(
        codec.decoder(),
        body,
        None,
        Some(limits.decoding),
    ));
    let ticket = messages
        .try_next()
        .await?
        .ok_or_else(|| Status::internal("Missing request message."))?;
    let request = tonic::Request::from_http(http::Request::from_parts(parts, ticket));
    let (metadata, answer, extensions) = flight.do_get(request).await?.into_parts();
    let body = FramedMessages {
        messages: answer.boxed(),
        body: None,
        ended: false,
        max_message: limits.encoding,
    };
    let mut response = http::Response::new(Body::new(body));
    *response.headers_mut() = metadata.into_headers();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    *response.extensions_mut() = extensions;
    Ok(response)
}

/// A DoGet answer as HTTP/2 data: per message its prefix, then its body;
/// the status in the trailers, as tonic sends it.
struct FramedMessages {
    messages: futures::stream::BoxStream<'static, Result<FlightData, Status>>,
    /// The body of the message whose prefix went last.
    body: Option<Bytes>,
    ended: bool,
    max_message: usize,
}

impl FramedMessages {
    fn end_with(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.ended = true;
        let mut trailers = http::HeaderMap::new();
        Poll::Ready(Some(
            status
                .add_header(&mut trailers)
                .map(|()| Frame::trailers(trailers)),
        ))
    }
}

impl http_body::Body for FramedMessages {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(body) = this.body.take() {
            return Poll::Ready(Some(Ok(Frame::data(body))));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        match ready!(this.messages.poll_next_unpin(cx)) {
            Some(Ok(message)) => match framed(message, this.max_message) {
                Ok((prefix, body)) => {
                    this.body = (!body.is_empty()).then_some(body);
                    Poll::Ready(Some(Ok(Frame::data(prefix))))
                }
                Err(status) => this.end_with(status),
            },
            Some(Err(status)) => this.end_with(status),
            None => this.end_with(Status::ok("")),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.body.is_none()
    }
}

/// `message` as gRPC frames it: the prefix and every field but the body,
/// encoded; then the body, untouched. Fields go out in field-number order,
/// the body's (1000) last, as prost itself orders them. The IPC header is
/// padded so the body starts 64-byte aligned in the message (see
/// `aligned_header`).
fn framed(mut message: FlightData, max_message: usize) -> Result<(Bytes, Bytes), Status> {
    let body = std::mem::take(&mut message.data_body);
    if !body.is_empty() && !message.data_header.is_empty() {
        message.data_header = aligned_header(&message, body.len());
    }
    let fields = message.encoded_len();
    let body_field = match body.len() {
        0 => 0,
        n => body_key_and_length(n) + n,
    };
    let len = fields + body_field;
    if len > max_message {
        // tonic's words and code for the same case.
        return Err(Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: {max_message} bytes"
        )));
    }
    let len = u32::try_from(len)
        .map_err(|_| Status::out_of_range(format!("a message of {len} bytes")))?;
    let mut prefix = BytesMut::with_capacity(PREFIX_BYTES + fields + 16);
    prefix.put_u8(0);
    prefix.put_u32(len);
    message
        .encode(&mut prefix)
        .map_err(|e| Status::internal(format!("encoding a message: {e}")))?;
    if !body.is_empty() {
        encode_key(DATA_BODY_TAG, WireType::LengthDelimited, &mut prefix);
        encode_varint(body.len() as u64, &mut prefix);
    }
    Ok((prefix.freeze(), body))
}

/// The bytes before a body of `len` bytes in its field: its key and length.
fn body_key_and_length(len: usize) -> usize {
    key_len(DATA_BODY_TAG) + encoded_len_varint(len as u64)
}

/// Alignment of Arrow buffers the IPC format recommends, and that
/// arrow-rs's Flight decoder needs to use a body where it lies.
const BODY_ALIGNMENT: usize = 64;

/// `message`'s IPC header with zeros after it, enough that a body of
/// `body_len` bytes starts at a multiple of `BODY_ALIGNMENT` from the start
/// of the encoded message. `message` comes with its body taken out and a
/// header that is not empty (prost encodes no field for an empty one).
///
/// A tonic receiver often decodes a large message from the start of a
/// fresh, aligned buffer (60 % of the messages of a `lineitem` stream),
/// but the body sits after the header and a few bytes of protobuf framing.
/// arrow-rs's Flight decoder copies a body that is not 64-byte aligned
/// into one that is, so each message a worker read from a peer, or a Rust
/// client from the coordinator, was copied whole once more (12 % of such a
/// client's CPU streaming `lineitem`). Arrow's IPC format pads its
/// metadata with zeros the same way; readers stop at the flatbuffer's end.
fn aligned_header(message: &FlightData, body_len: usize) -> Bytes {
    let header = &message.data_header;
    // The fields encoded before the body: all of `message` (its body is
    // already taken out), with the header's field sized as padded.
    let header_field = |len: usize| key_len(2) + encoded_len_varint(len as u64) + len;
    let other_fields = message.encoded_len() - header_field(header.len());
    let body_start =
        |header_len: usize| other_fields + header_field(header_len) + body_key_and_length(body_len);
    // A varint's length can grow with the padding, so look for the
    // smallest padding that works rather than computing it.
    let padding = (0..2 * BODY_ALIGNMENT)
        .find(|pad| body_start(header.len() + pad) % BODY_ALIGNMENT == 0)
        .unwrap_or(0);
    if padding == 0 {
        return header.clone();
    }
    let mut padded = BytesMut::with_capacity(header.len() + padding);
    padded.extend_from_slice(header);
    padded.put_bytes(0, padding);
    padded.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::FlightDescriptor;

    fn tonic_framing(message: &FlightData) -> Vec<u8> {
        let encoded = message.encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(encoded.len() as u32).to_be_bytes());
        framed.extend_from_slice(&encoded);
        framed
    }

    /// `message` framed by us, as one byte string, with its body checked
    /// to be the message's own buffer, not a copy.
    fn ours(message: &FlightData) -> Vec<u8> {
        let (prefix, body) = framed(message.clone(), usize::MAX).unwrap();
        if !message.data_body.is_empty() {
            assert_eq!(body.as_ptr(), message.data_body.as_ptr());
        }
        let mut ours = prefix.to_vec();
        ours.extend_from_slice(&body);
        ours
    }

    #[test]
    fn a_message_without_header_or_body_is_framed_byte_for_byte_as_tonic_frames_it() {
        let messages = [
            FlightData::default(),
            FlightData {
                data_header: Bytes::from_static(b"header"),
                app_metadata: Bytes::from_static(b"meta"),
                ..Default::default()
            },
            FlightData {
                data_body: Bytes::from_static(b"x"),
                flight_descriptor: Some(FlightDescriptor::new_path(vec!["a".into()])),
                ..Default::default()
            },
        ];
        for message in messages {
            assert_eq!(ours(&message), tonic_framing(&message));
        }
    }

    #[test]
    fn a_body_starts_64_byte_aligned_after_a_header_padded_with_zeros() {
        // Header lengths around the varint boundary (128), bodies on both
        // sides of theirs (16 KiB), with and without the other fields.
        for header_len in [1, 59, 60, 63, 64, 100, 120, 126, 127, 128, 300, 1000] {
            for body_len in [1, 200, 16_383, 16_384, 200_000] {
                for others in [false, true] {
                    let message = FlightData {
                        data_header: Bytes::from(vec![7u8; header_len]),
                        data_body: Bytes::from(vec![1u8; body_len]),
                        app_metadata: if others {
                            Bytes::from_static(b"meta")
                        } else {
                            Bytes::new()
                        },
                        flight_descriptor: others
                            .then(|| FlightDescriptor::new_path(vec!["a".into()])),
                    };
                    let framed = ours(&message);
                    // What the receiver decodes: the same message, its
                    // header followed by fewer than 128 zeros.
                    let decoded = FlightData::decode(&framed[PREFIX_BYTES..]).unwrap();
                    let padding = decoded.data_header.len() - header_len;
                    assert!(padding < 128, "{padding} bytes of padding");
                    assert_eq!(decoded.data_header[..header_len], message.data_header[..]);
                    assert!(decoded.data_header[header_len..].iter().all(|b| *b == 0));
                    assert_eq!(
                        FlightData {
                            data_header: message.data_header.clone(),
                            ..decoded
                        },
                        message
                    );
                    // The body is the end of the message; where it starts
                    // within the message is a multiple of 64.
                    let body_start = framed.len() - PREFIX_BYTES - body_len;
                    assert_eq!(body_start % 64, 0, "header {header_len}, body {body_len}");
                }
            }
        }
    }

    #[test]
    fn a_message_over_the_limit_is_refused_as_tonic_refuses_it() {
        let message = FlightData {
            data_body: Bytes::from(vec![0u8; 1000]),
            ..Default::default()
        };
        let status = framed(message, 999).unwrap_err();
        assert_eq!(status.code(), tonic::Code::OutOfRange);
        assert!(status.message().contains("too large"), "{status}");
    }

    /// A Flight service whose DoGet answers two batches, then the status
    /// the ticket names (ok, or a failure mid-stream); a ticket "refuse" is
    /// refused outright. Nothing else is implemented.
    struct TwoBatches;

    type Answer<T> =
        Result<tonic::Response<futures::stream::BoxStream<'static, Result<T, Status>>>, Status>;

    fn batch(first: i64) -> datafusion::arrow::record_batch::RecordBatch {
        use datafusion::arrow::array::{Int64Array, StringArray};
        let keys = Int64Array::from_iter_values(first..first + 1000);
        let names =
            StringArray::from_iter_values((first..first + 1000).map(|k| format!("name {k}")));
        datafusion::arrow::record_batch::RecordBatch::try_from_iter([
            ("k", Arc::new(keys) as _),
            ("name", Arc::new(names) as _),
        ])
        .unwrap()
    }

    #[tonic::async_trait]
    impl FlightService for TwoBatches {
        type HandshakeStream =
            futures::stream::BoxStream<'static, Result<arrow_flight::HandshakeResponse, Status>>;
        type ListFlightsStream =
            futures::stream::BoxStream<'static, Result<arrow_flight::FlightInfo, Status>>;
        type DoGetStream = futures::stream::BoxStream<'static, Result<FlightData, Status>>;
        type DoPutStream =
            futures::stream::BoxStream<'static, Result<arrow_flight::PutResult, Status>>;
        type DoExchangeStream = futures::stream::BoxStream<'static, Result<FlightData, Status>>;
        type DoActionStream =
            futures::stream::BoxStream<'static, Result<arrow_flight::Result, Status>>;
        type ListActionsStream =
            futures::stream::BoxStream<'static, Result<arrow_flight::ActionType, Status>>;

        async fn handshake(
            &self,
            _: tonic::Request<tonic::Streaming<arrow_flight::HandshakeRequest>>,
        ) -> Answer<arrow_flight::HandshakeResponse> {
            Err(Status::unimplemented("handshake"))
        }
        async fn list_flights(
            &self,
            _: tonic::Request<arrow_flight::Criteria>,
        ) -> Answer<arrow_flight::FlightInfo> {
            Err(Status::unimplemented("list_flights"))
        }
        async fn get_flight_info(
            &self,
            _: tonic::Request<FlightDescriptor>,
        ) -> Result<tonic::Response<arrow_flight::FlightInfo>, Status> {
            Err(Status::unimplemented("get_flight_info"))
        }
        async fn poll_flight_info(
            &self,
            _: tonic::Request<FlightDescriptor>,
        ) -> Result<tonic::Response<arrow_flight::PollInfo>, Status> {
            Err(Status::unimplemented("poll_flight_info"))
        }
        async fn get_schema(
            &self,
            _: tonic::Request<FlightDescriptor>,
        ) -> Result<tonic::Response<arrow_flight::SchemaResult>, Status> {
            Err(Status::unimplemented("get_schema"))
        }
        async fn do_get(&self, request: tonic::Request<Ticket>) -> Answer<FlightData> {
            let ticket = request.into_inner().ticket;
            if ticket.as_ref() == b"refuse" {
                return Err(Status::permission_denied("refused"));
            }
            let batches = futures::stream::iter([Ok(batch(0)), Ok(batch(1000))]);
            let fails = ticket.as_ref() == b"fail";
            let end = futures::stream::iter(fails.then(|| {
                Err(arrow_flight::error::FlightError::Tonic(Box::new(
                    Status::data_loss("cut short"),
                )))
            }));
            let data = arrow_flight::encode::FlightDataEncoderBuilder::new()
                .build(batches.chain(end))
                .map_err(Status::from);
            let mut response = tonic::Response::new(data.boxed());
            response
                .metadata_mut()
                .insert("x-answer", "two batches".parse().unwrap());
            Ok(response)
        }
        async fn do_put(
            &self,
            _: tonic::Request<tonic::Streaming<FlightData>>,
        ) -> Answer<arrow_flight::PutResult> {
            Err(Status::unimplemented("do_put"))
        }
        async fn do_exchange(
            &self,
            _: tonic::Request<tonic::Streaming<FlightData>>,
        ) -> Answer<FlightData> {
            Err(Status::unimplemented("do_exchange"))
        }
        async fn do_action(
            &self,
            _: tonic::Request<arrow_flight::Action>,
        ) -> Answer<arrow_flight::Result> {
            Err(Status::unimplemented("do_action"))
        }
        async fn list_actions(
            &self,
            _: tonic::Request<arrow_flight::Empty>,
        ) -> Answer<arrow_flight::ActionType> {
            Err(Status::unimplemented("list_actions"))
        }
    }

    /// A server of `TwoBatches` behind `ZeroCopyDoGet`, and a channel to it.
    async fn served() -> tonic::transport::Channel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let flight = Arc::new(TwoBatches);
        let limits = MessageLimits {
            decoding: 1 << 20,
            encoding: 1 << 20,
        };
        let service = ZeroCopyDoGet::serving(flight, limits);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_do_get_answer_reads_as_the_batches_sent_with_its_metadata() {
        use crate::stream::ipc_header::MessageKind;
        use arrow_flight::flight_service_client::FlightServiceClient;
        let mut client = FlightServiceClient::new(served().await);
        let response = client.do_get(Ticket::new("ok")).await.unwrap();
        assert_eq!(response.metadata().get("x-answer").unwrap(), "two batches");
        let messages: Vec<FlightData> = response.into_inner().try_collect().await.unwrap();
        // Headers padded for alignment still read as what they announce.
        let kinds: Vec<_> = messages
            .iter()
            .map(|m| crate::stream::ipc_header::message_kind(m).unwrap())
            .collect();
        assert_eq!(
            kinds[1..],
            [
                MessageKind::RecordBatch {
                    rows: batch(0).num_rows() as u64
                },
                MessageKind::RecordBatch {
                    rows: batch(1000).num_rows() as u64
                }
            ]
        );
        let batches: Vec<_> = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
            futures::stream::iter(messages.into_iter().map(Ok)),
        )
        .try_collect()
        .await
        .unwrap();
        assert_eq!(batches, vec![batch(0), batch(1000)]);
    }

    #[tokio::test]
    async fn statuses_reach_the_client_and_other_methods_are_the_inner_service() {
        let mut client = arrow_flight::FlightClient::new(served().await);
        let refused = client.do_get(Ticket::new("refuse")).await.err().unwrap();
        assert!(refused.to_string().contains("refused"), "{refused}");

        let stream = client.do_get(Ticket::new("fail")).await.unwrap();
        let read: Vec<_> = stream.collect().await;
        assert_eq!(read.iter().filter(|b| b.is_ok()).count(), 2);
        let error = read.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(error.contains("cut short"), "{error}");

        let listed = client.list_actions().await.err().unwrap();
        assert!(listed.to_string().contains("list_actions"), "{listed}");
    }
}
