//! The worker's RunTask contract, spoken to directly: a mismatched engine or
//! protocol is refused with FAILED_PRECONDITION naming both sides, a second
//! task with a live key is refused with ALREADY_EXISTS (never overwritten),
//! dropping the RunTask stream frees the task's unread output streams, and
//! a stream is handed out (or given a consumer's filter) only for a ticket
//! signed by its job's secret.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{Action, Ticket};
use futures::TryStreamExt;

use datafusion::arrow::datatypes::Schema;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use squadron_common::version::engine_build;
use squadron_exec::plan::{encode_plan, StageOutput, StageWriteExec};
use squadron_net::stream::StreamSecret;
use squadron_proto::v1::worker_service_client::WorkerServiceClient;
use squadron_proto::v1::{RunTaskRequest, TaskDefinition, TaskKey, TaskState, TaskStatus};
use squadron_proto::{StreamKey, PROTOCOL_VERSION};
use squadron_worker::{spawn_worker, Worker, WorkerOptions};
use tonic::Code;

fn request(job: &str) -> RunTaskRequest {
    request_signed_by(job, StreamSecret::generate().bytes())
}

fn request_signed_by(job: &str, secret: &[u8]) -> RunTaskRequest {
    let row = Arc::new(PlaceholderRowExec::new(Arc::new(Schema::empty())));
    let plan = StageWriteExec::try_new(row, StageOutput::JobOutput).unwrap();
    request_of(job, secret, encode_plan(Arc::new(plan)).unwrap())
}

fn request_of(job: &str, secret: &[u8], plan: Vec<u8>) -> RunTaskRequest {
    RunTaskRequest {
        key: Some(TaskKey {
            job_id: job.into(),
            stage_id: 0,
            partition: 0,
        }),
        attempt: 0,
        definition: Some(TaskDefinition {
            plan,
            inputs: vec![],
            settings: Default::default(),
        }),
        peers: vec![],
        protocol_version: PROTOCOL_VERSION,
        engine_build: engine_build(),
        own_url: String::new(),
        stream_secret: secret.to_vec(),
        query_id: "q1".into(),
        trace_context: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_task_refuses_mismatches_and_duplicates_and_frees_on_drop() {
    let (url, worker) = spawn_worker("127.0.0.1:0".parse().unwrap(), WorkerOptions::default())
        .await
        .unwrap();
    let mut client = WorkerServiceClient::connect(url).await.unwrap();

    let mut old_engine = request("j1");
    old_engine.engine_build = "squadron 0.0.1 / datafusion 1.0.0".into();
    let err = client.run_task(old_engine).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("datafusion 1.0.0"), "{err}");
    assert!(err.message().contains(&engine_build()), "{err}");

    let mut old_protocol = request("j1");
    old_protocol.protocol_version = PROTOCOL_VERSION + 1;
    let err = client.run_task(old_protocol).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");

    // A plan that does not say where its rows go.
    let row = Arc::new(PlaceholderRowExec::new(Arc::new(Schema::empty())));
    let unrooted = request_of(
        "j0",
        StreamSecret::generate().bytes(),
        encode_plan(row).unwrap(),
    );
    let err = client.run_task(unrooted).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("StageWriteExec"), "{err}");

    let mut first = client.run_task(request("j1")).await.unwrap().into_inner();
    let accepted = first.message().await.unwrap().unwrap();
    assert_eq!(accepted.state(), TaskState::Accepted);
    let done = first.message().await.unwrap().unwrap();
    assert_eq!(done.state(), TaskState::Succeeded, "{done:?}");
    assert_eq!(worker.streams.len(), 1, "its output waits for a reader");

    let err = client.run_task(request("j1")).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    assert_eq!(worker.streams.len(), 1, "the live stream was not replaced");

    // The RunTask stream owns the task's output: hanging up frees it.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while worker.streams.len() + worker.tasks.len() > 0 {
        assert!(Instant::now() < deadline, "the unread stream was not freed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The key is free again once its owner is gone.
    let mut again = client.run_task(request("j1")).await.unwrap().into_inner();
    assert_eq!(
        again.message().await.unwrap().unwrap().state(),
        TaskState::Accepted
    );
}

/// A worker running one task of job `j1`, accepted; the secret its
/// streams are signed with; the key of its one output stream; a Flight
/// client of the worker. The task lives as long as its status stream.
async fn one_task() -> (
    Worker,
    StreamSecret,
    tonic::Streaming<TaskStatus>,
    StreamKey,
    FlightServiceClient<tonic::transport::Channel>,
) {
    let (url, worker) = spawn_worker("127.0.0.1:0".parse().unwrap(), WorkerOptions::default())
        .await
        .unwrap();
    let mut control = WorkerServiceClient::connect(url.clone()).await.unwrap();
    let secret = StreamSecret::generate();
    let mut task = control
        .run_task(request_signed_by("j1", secret.bytes()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        task.message().await.unwrap().unwrap().state(),
        TaskState::Accepted
    );
    let key = StreamKey {
        job_id: "j1".into(),
        stage_id: 0,
        partition: 0,
        attempt: 0,
        channel: 0,
    };
    let channel = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    (worker, secret, task, key, FlightServiceClient::new(channel))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_served_only_for_a_ticket_signed_by_its_job() {
    let (worker, secret, _task, key, mut flight) = one_task().await;
    let unsigned = key.to_ticket(vec![]);
    let mut altered = secret.ticket(&key);
    *altered.last_mut().unwrap() ^= 1;
    let other = StreamSecret::generate();
    for forged in [unsigned, altered, other.ticket(&key)] {
        let err = flight.do_get(Ticket::new(forged)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    }
    assert_eq!(worker.streams.len(), 1, "forged tickets take nothing");
    let stream = flight
        .do_get(Ticket::new(secret.ticket(&key)))
        .await
        .unwrap()
        .into_inner();
    let messages: Vec<_> = stream.try_collect().await.unwrap();
    assert!(!messages.is_empty());
    assert_eq!(worker.streams.len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_filter_is_taken_only_when_signed_and_well_formed() {
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::expressions::lit;
    use prost::Message;
    use squadron_exec::stream::filter::encode_filter;
    use squadron_proto::v1::StreamFilter;
    use squadron_proto::FILTER_STREAM_ACTION;

    let (_worker, secret, _task, key, mut flight) = one_task().await;
    let filter = |ticket: Vec<u8>, value: ScalarValue| {
        let filter = encode_filter(&lit(value)).unwrap();
        Action::new(
            FILTER_STREAM_ACTION,
            StreamFilter { ticket, filter }.encode_to_vec(),
        )
    };
    let refused = |action: Action| {
        let mut flight = flight.clone();
        async move { flight.do_action(action).await.unwrap_err().code() }
    };

    let other_action = Action::new("squadron.something_else", vec![]);
    assert_eq!(refused(other_action).await, Code::Unimplemented);
    let malformed = Action::new(FILTER_STREAM_ACTION, b"\xff\xff\xff".to_vec());
    assert_eq!(refused(malformed).await, Code::InvalidArgument);
    let not_a_ticket = filter(b"not a ticket".to_vec(), ScalarValue::Boolean(Some(false)));
    assert_eq!(refused(not_a_ticket).await, Code::InvalidArgument);
    let forged = StreamSecret::generate().ticket(&key);
    let forged = filter(forged, ScalarValue::Boolean(Some(false)));
    assert_eq!(refused(forged).await, Code::PermissionDenied);
    let not_boolean = filter(secret.ticket(&key), ScalarValue::Int64(Some(1)));
    assert_eq!(refused(not_boolean).await, Code::InvalidArgument);

    let good = filter(secret.ticket(&key), ScalarValue::Boolean(Some(false)));
    let answers: Vec<_> = flight
        .do_action(good)
        .await
        .unwrap()
        .into_inner()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(answers.len(), 1);
    assert_eq!(&answers[0].body[..], b"applied");
}
