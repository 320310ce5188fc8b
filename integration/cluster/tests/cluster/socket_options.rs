//! Every connection the coordinator and its workers accept, and every one
//! they open, has Nagle's algorithm off. With it on, each small message (a
//! GetFlightInfo answer, a task status, a short stream) waits for the
//! peer's delayed ACK, about 40 ms: tonic's `Server::tcp_nodelay` applies
//! only to listeners tonic binds itself, not to the ones Squadron passes in.

use std::mem::ManuallyDrop;
use std::net::TcpStream;
use std::os::fd::FromRawFd;

use crate::support::{client, coordinator, query, tpch_data};

/// The TCP sockets of this process: (local port, peer port, nodelay).
fn tcp_sockets() -> Vec<(u16, u16, bool)> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd") {
        let Ok(entry) = entry else { continue };
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: the descriptor is borrowed only to read socket options
        // and is never closed (ManuallyDrop); a non-TCP socket just makes
        // the address calls fail.
        let socket = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        if let (Ok(local), Ok(peer), Ok(nodelay)) =
            (socket.local_addr(), socket.peer_addr(), socket.nodelay())
        {
            found.push((local.port(), peer.port(), nodelay));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connection_of_the_cluster_waits_for_delayed_acks() {
    let (_dir, tables) = tpch_data(0.01);
    // Embedded workers: their sockets are in this process too.
    let server = coordinator(vec![], tables).await;
    let mut client = client(&server).await;
    query(
        &mut client,
        "SELECT count(*) FROM orders WHERE o_totalprice > 0",
    )
    .await
    .expect("a distributed query");

    let mut ports = vec![server.addr.port()];
    for url in &server.workers {
        let port = url.rsplit(':').next().and_then(|p| p.parse().ok());
        ports.push(port.expect("a worker URL with a port"));
    }
    let sockets = tcp_sockets();
    let accepted: Vec<_> = sockets
        .iter()
        .filter(|(local, _, _)| ports.contains(local))
        .collect();
    let opened: Vec<_> = sockets
        .iter()
        .filter(|(_, peer, _)| ports.contains(peer))
        .collect();
    // The client's connection to the coordinator, and the coordinator's
    // and workers' connections to the workers.
    assert!(accepted.len() >= 2, "accepted connections: {sockets:?}");
    for (local, peer, nodelay) in accepted {
        assert!(nodelay, "accepted on port {local} from {peer}: Nagle is on");
    }
    for (local, peer, nodelay) in opened.iter().filter(|(l, _, _)| !ports.contains(l)) {
        // The test's own client sets nodelay like any good client; the
        // cluster's own connections must.
        assert!(nodelay, "opened from {local} to {peer}: Nagle is on");
    }
    server.shutdown().await.unwrap();
}
