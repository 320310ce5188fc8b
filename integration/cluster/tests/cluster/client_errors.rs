//! Bad input and clients that go away: clear statuses, and the server keeps
//! answering. Runs on the coordinator's embedded workers.

use std::time::Duration;

use crate::support::{
    assert_workers_idle, client, coordinator, query, start_large_query, tpch_data,
};
use arrow_flight::sql::{ProstMessageExt, TicketStatementQuery};
use arrow_flight::Ticket;
use prost::Message;
use tonic::Code;

async fn count(
    client: &mut arrow_flight::sql::client::FlightSqlServiceClient<tonic::transport::Channel>,
    table: &str,
) -> i64 {
    let batches = query(client, &format!("SELECT count(*) AS n FROM {table}"))
        .await
        .expect("count query");
    let col = batches[0].column(0);
    col.as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .expect("int64 count")
        .value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_statuses_and_the_server_stays_healthy() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables).await;
    let mut client = client(&server).await;

    let err = query(&mut client, "SELEC 1").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert_eq!(count(&mut client, "nation").await, 25);

    let err = query(&mut client, "SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err}");
    assert!(err.message().contains("no_such_table"), "{err}");

    let err = query(&mut client, "SELECT no_such_column FROM nation")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");

    // An error in the data, raised inside a task on a worker.
    let err = query(
        &mut client,
        "SELECT CAST(l_orderkey AS INT) / CAST(l_linenumber - l_linenumber AS INT) FROM lineitem",
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("Divide by zero"), "{err}");

    // A ticket for a statement that was never issued.
    let forged = TicketStatementQuery {
        statement_handle: "not-a-statement".as_bytes().to_vec().into(),
    };
    let err = client
        .do_get(Ticket::new(forged.as_any().encode_to_vec()))
        .await
        .map(|_| ())
        .expect_err("a forged ticket is refused");
    assert!(
        err.to_string().contains("unknown statement handle"),
        "{err}"
    );

    // A ticket of a known type whose body's framing is broken.
    let mut broken = forged.as_any();
    broken.value = vec![0x0a, 0x7f, b'x'].into();
    let err = client
        .do_get(Ticket::new(broken.encode_to_vec()))
        .await
        .map(|_| ())
        .map_err(crate::support::to_status)
        .expect_err("a broken ticket is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");

    assert_eq!(count(&mut client, "region").await, 5);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_mid_stream_stops_the_job_on_every_worker() {
    let (_dir, tables) = tpch_data(0.01);
    let server = coordinator(vec![], tables).await;
    let mut client = client(&server).await;

    let stream = start_large_query(&mut client).await;
    let busy: usize = squadron_cluster_tests::workers(&server)
        .iter()
        .map(|w| w.tasks.len())
        .sum();
    assert!(busy > 0, "the job should still be running");
    drop(stream);

    assert_workers_idle(&server, Duration::from_secs(30), "the client hung up").await;
    let mut client = crate::support::client(&server).await;
    assert_eq!(count(&mut client, "nation").await, 25);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_and_the_server_stays_healthy() {
    use arrow_flight::flight_service_client::FlightServiceClient;
    use arrow_flight::{FlightData, FlightDescriptor};

    let server = coordinator(vec![], vec![]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut flight = FlightServiceClient::new(channel).max_encoding_message_size(usize::MAX);
    let limit = squadron_server::CLIENT_MESSAGE_BYTES;
    let huge = FlightData {
        flight_descriptor: Some(FlightDescriptor::new_cmd(b"x".to_vec())),
        data_body: vec![0u8; limit + 1].into(),
        ..Default::default()
    };
    let err = match flight.do_put(futures::stream::iter(vec![huge])).await {
        Err(e) => e,
        Ok(response) => {
            let mut results = response.into_inner();
            results.message().await.unwrap_err()
        }
    };
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("too large"), "{err}");
    // A unary call: refused before any handler runs.
    let descriptor = FlightDescriptor::new_cmd(vec![b'x'; limit + 1]);
    let err = flight.get_flight_info(descriptor).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("16 MiB"), "{err}");
    let mut client = client(&server).await;
    assert_eq!(query(&mut client, "SELECT 1").await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_query_quota_is_refused_until_one_ends() {
    let (_dir, tables) = tpch_data(0.01);
    let mut options = crate::support::test_options(vec![], tables);
    options.max_queries_per_user = 1;
    let server = crate::support::coordinator_with(options).await;
    let mut client = client(&server).await;
    let running = start_large_query(&mut client).await;
    // Planning is not counted: the ticket is refused at DoGet, and kept.
    let info = client.execute("SELECT 1".to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let err = client.do_get(ticket.clone()).await.unwrap_err();
    let err = crate::support::to_status(err);
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("--max-queries-per-user"), "{err}");
    let err = client
        .execute_update("CREATE TABLE t AS SELECT 1".to_string(), None)
        .await
        .unwrap_err();
    assert_eq!(
        crate::support::to_status(err).code(),
        Code::ResourceExhausted
    );
    drop(running);
    // The slot is the stream's: free once the client lets go of it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let stream = loop {
        match client.do_get(ticket.clone()).await {
            Ok(stream) => break stream,
            Err(e) if std::time::Instant::now() < deadline => {
                assert_eq!(crate::support::to_status(e).code(), Code::ResourceExhausted);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the quota was not given back: {e}"),
        }
    };
    use futures::TryStreamExt;
    let batches: Vec<_> = stream.try_collect().await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}
