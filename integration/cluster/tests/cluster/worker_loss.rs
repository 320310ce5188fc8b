//! A worker process killed mid-query fails the query with an error naming
//! that worker, instead of hanging.

use std::time::Duration;

use crate::support::{client, coordinator, start_large_query, tpch_data, WorkerProcess};
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_worker_mid_query_fails_the_query_naming_it() {
    let (_dir, tables) = tpch_data(0.01);
    let mut workers = [WorkerProcess::spawn(), WorkerProcess::spawn()];
    let server = coordinator(workers.iter().map(|w| w.url.clone()).collect(), tables).await;
    let mut client = client(&server).await;

    let mut stream = start_large_query(&mut client).await;

    let lost = workers[1].url.clone();
    workers[1].kill();

    let outcome = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                return Some(e.to_string());
            }
        }
        None
    })
    .await
    .expect("the query must end, not hang, when a worker dies");
    let error = outcome.expect("the query must fail: part of its data is gone");
    assert!(error.contains(&lost), "error should name {lost}: {error}");
    server.shutdown().await.unwrap();
}
