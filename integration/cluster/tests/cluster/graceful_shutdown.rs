//! SIGTERM: both binaries stop accepting work, let what runs finish, and
//! exit 0. A worker told to stop mid-query still completes the query it is
//! part of, and receives no new tasks.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{client, coordinator_with, query, test_options, tpch_data, WorkerProcess};
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_worker_finishes_its_query_and_exits_cleanly() {
    let (_dir, tables) = tpch_data(0.01);
    let mut workers = [WorkerProcess::spawn(), WorkerProcess::spawn()];
    let mut options = test_options(workers.iter().map(|w| w.url.clone()).collect(), tables);
    options.health_interval = Duration::from_millis(100);
    let server = coordinator_with(options).await;
    let mut client = client(&server).await;

    let info = client
        .execute("SELECT * FROM lineitem, nation".to_string(), None)
        .await
        .unwrap();
    let mut stream = client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap();
    let mut rows = stream.next().await.unwrap().unwrap().num_rows();

    let stopping = tokio::task::spawn_blocking({
        let pid = workers[1].pid();
        move || {
            Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .unwrap()
        }
    });
    assert!(stopping.await.unwrap().success());
    while let Some(batch) = stream.next().await {
        rows += batch.expect("the running query completes").num_rows();
    }
    assert_eq!(rows, 25 * 60_175);

    let status = tokio::task::spawn_blocking(move || {
        let status = workers[1].terminate_wait();
        (workers, status)
    });
    let (mut workers, status) = tokio::time::timeout(Duration::from_secs(30), status)
        .await
        .expect("the worker exits once its work is done")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");

    // New queries go to the remaining worker.
    let batches = query(
        &mut client,
        "SELECT count(*) AS n FROM orders WHERE o_totalprice > 0",
    )
    .await
    .expect("served by the other worker");
    assert_eq!(batches[0].num_rows(), 1);
    let job = server.coordinator.recent_jobs().pop().unwrap();
    assert_eq!(job.workers_used(), vec![workers[0].url.clone()]);
    workers[0].kill();
    server.shutdown().await.unwrap();
}

#[test]
fn a_terminated_coordinator_exits_cleanly() {
    let exe = crate::support::worker_binary().with_file_name("squadron-server");
    assert!(
        exe.exists(),
        "build the binaries first (cargo build --bins)"
    );
    let mut child = Command::new(exe)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--local-workers",
            "1",
            "--insecure",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("listening on grpc://"), "{line}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}
