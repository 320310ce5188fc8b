//! `PollFlightInfo` and `GetSchema` through the Flight service, as a raw
//! client sends them.

use std::time::Duration;

use crate::support::{
    assert_workers_idle, cancel_flight_info, coordinator, oracle, oracle_context, tpch_data,
};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetTables, CommandPreparedStatementQuery, CommandStatementQuery, ProstMessageExt,
};
use arrow_flight::{Action, FlightDescriptor, PollInfo};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::util::pretty::pretty_format_batches;
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::Channel;
use tonic::Code;

async fn flight_client(addr: &std::net::SocketAddr) -> FlightServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightServiceClient::new(channel)
}

fn statement(sql: &str) -> FlightDescriptor {
    let command = CommandStatementQuery {
        query: sql.into(),
        transaction_id: None,
    };
    FlightDescriptor::new_cmd(command.as_any().encode_to_vec())
}

fn schema_of(bytes: &[u8]) -> Schema {
    let message = arrow_flight::IpcMessage(bytes.to_vec().into());
    Schema::try_from(message).expect("an IPC schema")
}

async fn read_all(
    client: &mut FlightServiceClient<Channel>,
    poll: &PollInfo,
) -> Vec<datafusion::arrow::array::RecordBatch> {
    let info = poll.info.as_ref().expect("a FlightInfo");
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let stream = client.do_get(ticket).await.expect("DoGet").into_inner();
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(Into::into))
        .try_collect()
        .await
        .expect("the rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_reports_progress_until_the_query_completes() {
    let (_dir, tables) = tpch_data(0.01);
    let oracle_ctx = oracle_context(&tables).await;
    let server = coordinator(vec![], tables).await;
    let mut client = flight_client(&server.addr).await;

    let sql = "SELECT n_name, count(*) AS n FROM lineitem, nation \
               WHERE l_suppkey % 25 = n_nationkey GROUP BY n_name ORDER BY n_name";
    let first = client
        .poll_flight_info(statement(sql))
        .await
        .expect("the first poll")
        .into_inner();
    // The query has only just been started: more to come.
    let mut again = first
        .flight_descriptor
        .clone()
        .expect("a descriptor to poll again");
    let mut progress = vec![first.progress.expect("a progress figure")];
    assert!(progress[0] < 1.0, "{progress:?}");
    let last = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let poll = client
            .poll_flight_info(again.clone())
            .await
            .expect("polling again")
            .into_inner();
        progress.push(poll.progress.expect("a progress figure"));
        match poll.flight_descriptor.clone() {
            Some(descriptor) => again = descriptor,
            None => break poll,
        }
    };
    assert!(
        progress.windows(2).all(|w| w[0] <= w[1]),
        "progress never goes back: {progress:?}"
    );
    assert_eq!(*progress.last().unwrap(), 1.0, "{progress:?}");
    let got = read_all(&mut client, &last).await;
    let want = oracle(&oracle_ctx, sql).await;
    assert_eq!(
        pretty_format_batches(&got).unwrap().to_string(),
        pretty_format_batches(&want).unwrap().to_string()
    );

    // A poll descriptor that was never issued, and garbage.
    let forged = Any {
        type_url: "type.googleapis.com/squadron.PolledQuery".into(),
        value: b"forged".to_vec().into(),
    };
    let err = client
        .poll_flight_info(FlightDescriptor::new_cmd(forged.encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    let err = client
        .poll_flight_info(FlightDescriptor::new_cmd(vec![0xff, 0x01]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polled_query_that_waits_for_its_reader_is_complete_and_cancellable() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables).await;
    let mut client = flight_client(&server.addr).await;

    // 1.5 M rows: far more than the output buffer holds.
    let mut poll = client
        .poll_flight_info(statement("SELECT * FROM lineitem, nation"))
        .await
        .unwrap()
        .into_inner();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Some(again) = poll.flight_descriptor.clone() {
        assert!(std::time::Instant::now() < deadline, "never ready to read");
        tokio::time::sleep(Duration::from_millis(20)).await;
        poll = client.poll_flight_info(again).await.unwrap().into_inner();
    }
    assert!(poll.progress.unwrap() < 1.0, "tasks still run: {poll:?}");

    // Never read: cancelling it stops every task.
    let info = poll.info.clone().expect("a FlightInfo");
    assert_eq!(
        cancel_flight_info(&mut client, info).await,
        arrow_flight::CancelStatus::Cancelled
    );
    assert_workers_idle(
        &server,
        Duration::from_secs(10),
        "cancelling a polled query",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_schema_describes_without_running() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables).await;
    let mut client = flight_client(&server.addr).await;

    let schema = client
        .get_schema(statement("SELECT n_name, n_nationkey + 1 AS k FROM nation"))
        .await
        .expect("GetSchema of a statement")
        .into_inner();
    let schema = schema_of(&schema.schema);
    let fields: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert_eq!(fields, ["n_name:Utf8", "k:Int64"]);

    // A prepared statement's dataset schema.
    let create = ActionCreatePreparedStatementRequest {
        query: "SELECT r_name FROM region WHERE r_regionkey = $1".into(),
        transaction_id: None,
    };
    let results: Vec<_> = client
        .do_action(Action::new(
            "CreatePreparedStatement",
            create.as_any().encode_to_vec(),
        ))
        .await
        .unwrap()
        .into_inner()
        .try_collect()
        .await
        .unwrap();
    let prepared: ActionCreatePreparedStatementResult = Any::decode(results[0].body.clone())
        .unwrap()
        .unpack()
        .unwrap()
        .unwrap();
    let command = CommandPreparedStatementQuery {
        prepared_statement_handle: prepared.prepared_statement_handle,
    };
    let schema = client
        .get_schema(FlightDescriptor::new_cmd(command.as_any().encode_to_vec()))
        .await
        .expect("GetSchema of a prepared statement")
        .into_inner();
    assert_eq!(schema_of(&schema.schema).field(0).name(), "r_name");

    // A metadata command: the spec's GetTables schema.
    let tables = CommandGetTables {
        include_schema: false,
        ..Default::default()
    };
    let schema = client
        .get_schema(FlightDescriptor::new_cmd(tables.as_any().encode_to_vec()))
        .await
        .expect("GetSchema of GetTables")
        .into_inner();
    assert_eq!(schema_of(&schema.schema).field(2).name(), "table_name");

    // Nothing ran: no job was recorded.
    assert!(server.coordinator.recent_jobs().is_empty());

    for (descriptor, code) in [
        (
            FlightDescriptor::new_path(vec!["t".into()]),
            Code::InvalidArgument,
        ),
        (FlightDescriptor::new_cmd(vec![0xff]), Code::InvalidArgument),
        (statement("SELEC 1"), Code::InvalidArgument),
        (statement("SELECT * FROM missing"), Code::NotFound),
    ] {
        let err = client.get_schema(descriptor).await.unwrap_err();
        assert_eq!(err.code(), code, "{err}");
    }
}
