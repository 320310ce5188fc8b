//! A statement's query starts at GetFlightInfo when the cluster has room,
//! before its client's DoGet; otherwise it waits for the DoGet. Either way
//! it runs once, and a started statement nobody fetches stops.

use std::time::{Duration, Instant};

use crate::support::{
    assert_no_running_jobs, assert_workers_idle, cancel_flight_info, coordinator, coordinator_with,
    oracle, oracle_context, test_options, tpch_data,
};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
use arrow_flight::{CancelStatus, FlightDescriptor, FlightInfo, Ticket};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::TryStreamExt;
use prost::Message;
use squadron_server::RunningServer;
use tonic::transport::Channel;
use tonic::Code;

const GROUPED: &str = "SELECT n_name, count(*) AS n FROM lineitem, nation \
                       WHERE l_suppkey % 25 = n_nationkey GROUP BY n_name ORDER BY n_name";

async fn flight_client(server: &RunningServer) -> FlightServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightServiceClient::new(channel)
}

async fn describe(client: &mut FlightServiceClient<Channel>, sql: &str) -> FlightInfo {
    let command = CommandStatementQuery {
        query: sql.into(),
        transaction_id: None,
    };
    let descriptor = FlightDescriptor::new_cmd(command.as_any().encode_to_vec());
    client
        .get_flight_info(descriptor)
        .await
        .expect("GetFlightInfo")
        .into_inner()
}

fn ticket(info: &FlightInfo) -> Ticket {
    info.endpoint[0].ticket.clone().expect("a ticket")
}

async fn read(
    client: &mut FlightServiceClient<Channel>,
    ticket: Ticket,
) -> Result<Vec<RecordBatch>, tonic::Status> {
    let stream = client.do_get(ticket).await?.into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(Into::into))
        .try_collect()
        .await
        .map_err(|e| tonic::Status::internal(e.to_string()))
}

/// Describes a query of 1.5 M rows, far more than the output buffer
/// holds, so its tasks wait for a reader; returns once it runs.
async fn start_unread_query(
    client: &mut FlightServiceClient<Channel>,
    server: &RunningServer,
) -> FlightInfo {
    let info = describe(client, "SELECT * FROM lineitem, nation").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.coordinator.running_jobs() == 0 {
        assert!(Instant::now() < deadline, "the query never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    info
}

fn assert_same(got: &[RecordBatch], want: &[RecordBatch]) {
    assert_eq!(
        pretty_format_batches(got).unwrap().to_string(),
        pretty_format_batches(want).unwrap().to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_runs_before_its_doget_and_only_once() {
    let (_dir, tables) = tpch_data(0.01);
    let oracle_ctx = oracle_context(&tables).await;
    let server = coordinator(vec![], tables).await;
    let mut client = flight_client(&server).await;

    let info = describe(&mut client, GROUPED).await;
    // The job finishes (its 25 rows fit the output buffer) with no DoGet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.coordinator.recent_jobs().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the query never ran before DoGet"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = read(&mut client, ticket(&info)).await.expect("DoGet");
    assert_same(&got, &oracle(&oracle_ctx, GROUPED).await);
    let again = read(&mut client, ticket(&info)).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{again}");
    assert_eq!(server.coordinator.recent_jobs().len(), 1, "it ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_statement_nobody_fetches_stops_when_cancelled() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables).await;
    let mut client = flight_client(&server).await;

    let info = start_unread_query(&mut client, &server).await;
    assert_eq!(
        cancel_flight_info(&mut client, info).await,
        CancelStatus::Cancelled
    );
    assert_workers_idle(&server, Duration::from_secs(10), "cancelling before DoGet").await;
    assert_no_running_jobs(&server, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_room_a_statement_waits_for_its_doget() {
    let (_dir, tables) = tpch_data(0.01);
    let oracle_ctx = oracle_context(&tables).await;
    let mut options = test_options(vec![], tables);
    options.limits.max_concurrent_queries = 2;
    let server = coordinator_with(options).await;
    let mut client = flight_client(&server).await;

    // A query that holds one of the two slots until it is read: half the
    // slots are taken, so the next statement is not started early.
    let busy = start_unread_query(&mut client, &server).await;
    let info = describe(&mut client, GROUPED).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.coordinator.running_jobs(), 1, "started without room");
    assert!(server.coordinator.recent_jobs().is_empty());

    let got = read(&mut client, ticket(&info)).await.expect("DoGet");
    assert_same(&got, &oracle(&oracle_ctx, GROUPED).await);
    assert_eq!(server.coordinator.recent_jobs().len(), 1);
    drop(busy);
}
