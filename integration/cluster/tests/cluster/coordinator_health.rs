//! The coordinator's gRPC health, as a load balancer sees it: SERVING while
//! at least one worker can take tasks, NOT_SERVING once none can, SERVING
//! again when one returns.

use std::time::{Duration, Instant};

use crate::support::{coordinator_with, test_options, WorkerProcess};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn status(addr: std::net::SocketAddr) -> ServingStatus {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connecting to the coordinator");
    let mut client = HealthClient::new(channel);
    let response = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("the health service answers");
    response.get_ref().status()
}

async fn wait_for(addr: std::net::SocketAddr, wanted: ServingStatus, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = status(addr).await;
        if now == wanted {
            return;
        }
        assert!(Instant::now() < deadline, "still {now:?}: {why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_workers() {
    let mut first = WorkerProcess::spawn();
    let mut second = WorkerProcess::spawn();
    let mut options = test_options(vec![first.url.clone(), second.url.clone()], vec![]);
    options.health_interval = Duration::from_millis(200);
    let server = coordinator_with(options).await;
    let addr = server.addr;
    assert_eq!(status(addr).await, ServingStatus::Serving);

    first.kill();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        status(addr).await,
        ServingStatus::Serving,
        "one worker left is enough"
    );
    let second_addr = second.addr().to_string();
    second.kill();
    wait_for(addr, ServingStatus::NotServing, "no worker is left").await;

    let _back = WorkerProcess::spawn_with(&second_addr, &[]);
    wait_for(addr, ServingStatus::Serving, "a worker came back").await;
    server.shutdown().await.unwrap();
}
