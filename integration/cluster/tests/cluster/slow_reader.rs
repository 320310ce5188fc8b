//! A slow reader of a multi-million-row result keeps memory flat on the
//! coordinator and the workers: backpressure reaches every task instead of
//! results piling up in buffers. Its own test binary, so nothing else runs
//! in the process whose memory it measures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{client, coordinator_with, query, test_options, tpch_data, WorkerProcess};
use futures::StreamExt;
use squadron_cluster_tests::process_stats::rss_bytes;

const MIB: u64 = 1 << 20;

/// Highest resident memory seen for each pid while `sampling` is set.
fn sample_peaks(pids: Vec<u32>, sampling: Arc<AtomicBool>) -> Vec<Arc<AtomicU64>> {
    let peaks: Vec<Arc<AtomicU64>> = pids.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let watched = peaks.clone();
    std::thread::spawn(move || {
        while sampling.load(Ordering::Relaxed) {
            for (pid, peak) in pids.iter().zip(&watched) {
                peak.fetch_max(rss_bytes(*pid), Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    peaks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_keeps_memory_flat() {
    let (_dir, tables) = tpch_data(0.01);
    let workers = [WorkerProcess::spawn(), WorkerProcess::spawn()];
    let server = coordinator_with(test_options(
        workers.iter().map(|w| w.url.clone()).collect(),
        tables,
    ))
    .await;
    let mut client = client(&server).await;
    // Warm up (allocator arenas, the session) before the baseline.
    query(
        &mut client,
        "SELECT count(*) FROM lineitem WHERE l_quantity > 0",
    )
    .await
    .unwrap();
    let pids = vec![std::process::id(), workers[0].pid(), workers[1].pid()];
    let baseline: Vec<u64> = pids.iter().map(|p| rss_bytes(*p)).collect();
    let sampling = Arc::new(AtomicBool::new(true));
    let peaks = sample_peaks(pids, Arc::clone(&sampling));

    // 3 million rows of about 200 bytes: ~600 MB if anything buffered them.
    let sql = "SELECT * FROM lineitem, nation, (VALUES (1), (2)) AS t(k)";
    let info = client.execute(sql.to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut stream = client.do_get(ticket).await.unwrap();
    let (mut rows, started) = (0usize, Instant::now());
    while let Some(batch) = stream.next().await {
        rows += batch.expect("a batch").num_rows();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    sampling.store(false, Ordering::Relaxed);
    assert_eq!(rows, 2 * 25 * 60_175);

    let growth: Vec<u64> = peaks
        .iter()
        .zip(&baseline)
        .map(|(peak, base)| peak.load(Ordering::Relaxed).saturating_sub(*base) / MIB)
        .collect();
    eprintln!(
        "slow reader: {rows} rows in {:.1}s; peak RSS growth MiB (coordinator+test, worker, worker): {growth:?}",
        started.elapsed().as_secs_f64()
    );
    for (who, grew) in ["coordinator", "worker 1", "worker 2"].iter().zip(&growth) {
        assert!(
            *grew < 200,
            "{who} grew {grew} MiB while streaming to a slow reader"
        );
    }
    server.shutdown().await.unwrap();
}
