//! Security end to end with generated certificates: clients over TLS, the
//! coordinator and two worker processes over mutual TLS running TPC-H
//! queries, the connections that must be refused, and what a worker's
//! plans may read.

use std::path::Path;
use std::time::Duration;

use crate::support::{
    coordinator_with, oracle, oracle_context, query, test_options, tpch_data, tpch_query,
    WorkerProcess,
};
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::Ticket;
use datafusion::arrow::util::pretty::pretty_format_batches;
use squadron_exec::plan::guard::DataRoots;
use squadron_net::tls::generate::{generate, DevCerts};
use squadron_net::tls::{ClusterTlsFiles, CLUSTER_DOMAIN};
use squadron_proto::v1::worker_service_client::WorkerServiceClient;
use squadron_proto::v1::CleanUpJobRequest;
use squadron_server::security::ClientTlsFiles;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

fn cluster_files(
    certs: &DevCerts,
    (cert, key): (std::path::PathBuf, std::path::PathBuf),
) -> ClusterTlsFiles {
    ClusterTlsFiles {
        ca: certs.ca(),
        cert,
        key,
    }
}

fn spawn_tls_worker(certs: &DevCerts) -> WorkerProcess {
    let (cert, key) = certs.worker();
    let ca = certs.ca();
    WorkerProcess::spawn_args(
        "127.0.0.1:0",
        &[],
        &[
            "--cluster-ca",
            ca.to_str().unwrap(),
            "--cluster-cert",
            cert.to_str().unwrap(),
            "--cluster-key",
            key.to_str().unwrap(),
        ],
    )
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

async fn tls_channel(
    url: String,
    ca: &Path,
    domain: &str,
    identity: Option<Identity>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(ca)))
        .domain_name(domain);
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Endpoint::from_shared(url)?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// Whether a worker refuses a control call on `channel` (at the TLS
/// handshake, or after it).
async fn worker_refuses(channel: Result<Channel, tonic::transport::Error>) -> bool {
    match channel {
        Err(_) => true,
        Ok(channel) => WorkerServiceClient::new(channel)
            .clean_up_job(CleanUpJobRequest::default())
            .await
            .is_err(),
    }
}

fn identity(pair: (std::path::PathBuf, std::path::PathBuf)) -> Identity {
    Identity::from_pem(read(&pair.0), read(&pair.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_over_tls_and_cluster_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate(dir.path(), &["localhost".into(), "127.0.0.1".into()]).unwrap();
    let workers = [spawn_tls_worker(&certs), spawn_tls_worker(&certs)];
    assert!(workers.iter().all(|w| w.url.starts_with("https://")));

    let (_data, tables) = tpch_data(0.01);
    let oracle_ctx = oracle_context(&tables).await;
    let (cert, key) = certs.server();
    let mut options = test_options(workers.iter().map(|w| w.url.clone()).collect(), tables);
    options.tls = Some(ClientTlsFiles {
        cert,
        key,
        client_ca: None,
    });
    options.cluster_tls = Some(cluster_files(&certs, certs.coordinator()));
    let server = coordinator_with(options).await;
    assert!(server.uri().starts_with("grpc+tls://"));

    let url = format!("https://localhost:{}", server.addr.port());
    let channel = tls_channel(url.clone(), &certs.ca(), "localhost", None)
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    for n in [1, 3, 5, 10] {
        let sql = tpch_query(n);
        let got = query(&mut client, &sql)
            .await
            .unwrap_or_else(|e| panic!("q{n}: {e}"));
        let want = oracle(&oracle_ctx, &sql).await;
        assert_eq!(
            pretty_format_batches(&got).unwrap().to_string(),
            pretty_format_batches(&want).unwrap().to_string(),
            "q{n}"
        );
    }
    let placed = server
        .coordinator
        .recent_jobs()
        .last()
        .unwrap()
        .workers_used();
    assert_eq!(placed.len(), 2, "both TLS workers ran tasks: {placed:?}");

    // A plaintext client against the TLS port gets nowhere.
    let plain = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(plain) = plain {
        let mut plain = FlightSqlServiceClient::new(plain);
        assert!(query(&mut plain, "SELECT 1").await.is_err());
    }
    // A client that does not trust the server's CA neither.
    let other = tempfile::tempdir().unwrap();
    let other_certs = generate(other.path(), &["localhost".into()]).unwrap();
    let mistrusting = tls_channel(url.clone(), &other_certs.ca(), "localhost", None).await;
    assert!(
        mistrusting.is_err(),
        "a certificate from another CA was accepted"
    );

    // Workers: no client certificate, the wrong CA's, or a certificate
    // without the coordinator's role.
    let worker_url = workers[0].url.clone();
    let no_cert = tls_channel(worker_url.clone(), &certs.ca(), CLUSTER_DOMAIN, None).await;
    assert!(
        worker_refuses(no_cert).await,
        "a worker answered a client without a certificate"
    );
    let foreign = tls_channel(
        worker_url.clone(),
        &certs.ca(),
        CLUSTER_DOMAIN,
        Some(identity(other_certs.coordinator())),
    )
    .await;
    assert!(
        worker_refuses(foreign).await,
        "a worker accepted another CA's certificate"
    );
    for (pair, want_control, want_stream) in [
        (certs.client(), false, Code::PermissionDenied),
        (certs.worker(), false, Code::NotFound),
        (certs.coordinator(), true, Code::NotFound),
    ] {
        let channel = tls_channel(
            worker_url.clone(),
            &certs.ca(),
            CLUSTER_DOMAIN,
            Some(identity(pair)),
        )
        .await
        .unwrap();
        let cleanup = WorkerServiceClient::new(channel.clone())
            .clean_up_job(CleanUpJobRequest::default())
            .await;
        // A permitted caller's empty request is refused for what it is.
        let code = cleanup.err().map_or(Code::Ok, |e| e.code());
        assert_eq!(code != Code::PermissionDenied, want_control, "{code:?}");
        let stream = FlightServiceClient::new(channel)
            .do_get(Ticket::new(b"no such stream".to_vec()))
            .await;
        let code = match stream {
            Err(e) => e.code(),
            Ok(response) => {
                let mut s = response.into_inner();
                match s.message().await {
                    Err(e) => e.code(),
                    Ok(_) => Code::Ok,
                }
            }
        };
        // The ticket is garbage: a permitted caller learns only that.
        assert!(
            code == want_stream || (want_stream == Code::NotFound && code == Code::InvalidArgument),
            "DoGet answered {code:?}"
        );
    }

    // After every rejection the cluster still answers.
    let got = query(&mut client, "SELECT count(*) FROM nation")
        .await
        .unwrap();
    assert_eq!(got[0].num_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_reload_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate(dir.path(), &["localhost".into()]).unwrap();
    let served = tempfile::tempdir().unwrap();
    let (cert, key) = (
        served.path().join("tls.pem"),
        served.path().join("tls-key.pem"),
    );
    std::fs::copy(certs.server().0, &cert).unwrap();
    std::fs::copy(certs.server().1, &key).unwrap();
    let mut options = test_options(vec![], vec![]);
    options.tls = Some(ClientTlsFiles {
        cert: cert.clone(),
        key: key.clone(),
        client_ca: None,
    });
    let server = coordinator_with(options).await;
    let url = format!("https://localhost:{}", server.addr.port());
    let mut before = FlightSqlServiceClient::new(
        tls_channel(url.clone(), &certs.ca(), "localhost", None)
            .await
            .unwrap(),
    );
    query(&mut before, "SELECT 1").await.unwrap();

    // A certificate from a new CA replaces the files.
    let rotated = tempfile::tempdir().unwrap();
    let new_certs = generate(rotated.path(), &["localhost".into()]).unwrap();
    std::fs::copy(new_certs.server().1, &key).unwrap();
    std::fs::copy(new_certs.server().0, &cert).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(channel) = tls_channel(url.clone(), &new_certs.ca(), "localhost", None).await {
            let mut after = FlightSqlServiceClient::new(channel);
            if query(&mut after, "SELECT 1").await.is_ok() {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The connection made before the rotation still works.
    query(&mut before, "SELECT 2").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let certs = generate(dir.path(), &["localhost".into()]).unwrap();
    let (cert, key) = certs.server();
    let mut options = test_options(vec![], vec![]);
    options.tls = Some(ClientTlsFiles {
        cert,
        key,
        client_ca: Some(certs.ca()),
    });
    let server = coordinator_with(options).await;
    let url = format!("https://localhost:{}", server.addr.port());
    let without = tls_channel(url.clone(), &certs.ca(), "localhost", None).await;
    let refused = match without {
        Err(_) => true,
        Ok(channel) => query(&mut FlightSqlServiceClient::new(channel), "SELECT 1")
            .await
            .is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    let channel = tls_channel(
        url,
        &certs.ca(),
        "localhost",
        Some(identity(certs.client())),
    )
    .await
    .unwrap();
    let got = query(&mut FlightSqlServiceClient::new(channel), "SELECT 1").await;
    assert!(got.is_ok(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_read_only_under_their_data_roots() {
    let (data, tables) = tpch_data(0.01);
    let elsewhere = tempfile::tempdir().unwrap();
    let root = |dir: &Path| dir.to_str().unwrap().to_string();
    let confined = WorkerProcess::spawn_args(
        "127.0.0.1:0",
        &[],
        &["--insecure", "--data-root", &root(elsewhere.path())],
    );
    let allowed = WorkerProcess::spawn_args(
        "127.0.0.1:0",
        &[],
        &["--insecure", "--data-root", &root(data.path())],
    );
    let mut options = test_options(vec![confined.url.clone()], tables.clone());
    options.limits.max_attempts = 1;
    let server = coordinator_with(options).await;
    let mut client = crate::support::client(&server).await;
    // (Not count(*): Parquet statistics answer that without a scan.)
    let sql = "SELECT n_name FROM nation WHERE n_nationkey = 3";
    let err = query(&mut client, sql).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert!(err.message().contains("--data-root"), "{err}");

    let server = coordinator_with(test_options(vec![allowed.url.clone()], tables)).await;
    let mut client = crate::support::client(&server).await;
    let got = query(&mut client, "SELECT count(*) FROM nation")
        .await
        .unwrap();
    assert_eq!(got[0].num_rows(), 1);
}

#[test]
fn without_tls_or_insecure_the_binaries_refuse_to_start() {
    let worker = crate::support::worker_binary();
    for exe in [worker.clone(), worker.with_file_name("squadron-server")] {
        let output = std::process::Command::new(&exe)
            .args(["--listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert!(
            !output.status.success(),
            "{} started insecure",
            exe.display()
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--insecure"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_create_external_tables_only_under_the_data_roots() {
    let (data, tables) = tpch_data(0.01);
    let catalog = tempfile::tempdir().unwrap();
    let nation = data.path().join("nation.parquet");
    let mut options = test_options(vec![], tables.clone());
    options.data_dir = Some(catalog.path().to_path_buf());
    options.table_roots = Some(DataRoots::new(&[data.path().to_path_buf()]).unwrap());
    let server = coordinator_with(options).await;
    let mut client = crate::support::client(&server).await;
    let create = |name: &str, location: &str| {
        format!("CREATE EXTERNAL TABLE {name} STORED AS PARQUET LOCATION '{location}'")
    };

    let sql = create("inside", nation.to_str().unwrap());
    client.execute_update(sql, None).await.unwrap();
    let got = query(&mut client, "SELECT count(*) AS n FROM inside")
        .await
        .unwrap();
    let expected = oracle(
        &oracle_context(&tables).await,
        "SELECT count(*) AS n FROM nation",
    )
    .await;
    assert_eq!(
        pretty_format_batches(&got).unwrap().to_string(),
        pretty_format_batches(&expected).unwrap().to_string()
    );

    let escape = format!("{}/../../etc/passwd", data.path().display());
    for location in ["/etc/passwd", "/etc", escape.as_str()] {
        let sql = create("outside", location);
        let err = crate::support::to_status(client.execute_update(sql, None).await.unwrap_err());
        assert_eq!(err.code(), Code::PermissionDenied, "{location}: {err}");
        assert!(err.message().contains("--data-root"), "{err}");
    }
    assert!(query(&mut client, "SELECT 1 FROM outside").await.is_err());

    // Without roots (a secure server without --data-root): nowhere.
    let mut options = test_options(vec![], tables);
    options.data_dir = Some(catalog.path().to_path_buf());
    options.table_roots = None;
    let server = coordinator_with(options).await;
    let mut client = crate::support::client(&server).await;
    let sql = create("anywhere", nation.to_str().unwrap());
    let err = crate::support::to_status(client.execute_update(sql, None).await.unwrap_err());
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    assert!(err.message().contains("--data-root"), "{err}");
}
