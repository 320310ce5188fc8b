//! `squadron-slt`: DataFusion's sqllogictest corpus on single-node
//! DataFusion (the baseline) and through Squadron's Flight SQL on two
//! worker processes, compared statement by statement.
//!
//! ```text
//! squadron-slt [--subset ci] [--check] [--report docs/sqllogictest.md] [FILTER…]
//! ```

mod by_design;
mod corpus;
mod gaps;
mod report;
mod run;
mod skips;
mod subset;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;

use squadron_sqllogictest::{cluster, engines};
// The shared modules, under the paths the runner's modules use.
pub(crate) use squadron_sqllogictest::format;

use cluster::{Mode, Worker};
use engines::{Baseline, EngineError, Squadron};
use report::FileResult;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "DataFusion's sqllogictest corpus, single-node and through Squadron")]
struct Args {
    /// The package root holding test_files/ (default: the
    /// datafusion-sqllogictest package Cargo downloaded).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Which files: all of them, or the subset CI runs.
    #[arg(long, value_enum, default_value = "all")]
    subset: subset::Subset,
    /// Only files whose path contains one of these.
    filters: Vec<String>,
    /// Cluster modes to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["default", "partitioned"])]
    modes: Vec<Mode>,
    /// Write the per-file table here (Markdown).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Seconds one statement may take before it counts as hung.
    #[arg(long, default_value_t = 60)]
    deadline: u64,
    /// Exit non-zero if a statement passing single-node fails through
    /// Squadron, or a task is left running.
    #[arg(long)]
    check: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let root = corpus::locate(args.corpus.as_deref())?;
    let files: Vec<PathBuf> = corpus::files(&root)?
        .into_iter()
        .filter(|file| args.subset.includes(file))
        .filter(|file| {
            let name = file.to_string_lossy();
            args.filters.is_empty() || args.filters.iter().any(|f| name.contains(f.as_str()))
        })
        .collect();
    anyhow::ensure!(!files.is_empty(), "no .slt file matches");
    // Resolved before the working directory changes.
    let report_path = match &args.report {
        Some(path) => Some(std::env::current_dir()?.join(path)),
        None => None,
    };
    let work = corpus::WorkDir::new(&root)?;
    // The files name paths relative to the package root; the coordinator
    // (in this process) and the workers resolve them here.
    std::env::set_current_dir(work.path())?;
    let binary = cluster::worker_binary()?;
    let workers = [
        Worker::spawn(&binary, work.path())?,
        Worker::spawn(&binary, work.path())?,
    ];
    let deadline = Duration::from_secs(args.deadline);
    let started = Instant::now();
    let mut results = vec![];
    for file in &files {
        let result = compare(&work, file, &workers, &args.modes, deadline).await?;
        let regressions = result.regressions();
        let gaps = regressions.iter().filter(|g| g.gap.is_some()).count();
        let differences = regressions.len() - gaps;
        eprintln!(
            "{:<48} {:>5} statements, {:>5} pass single-node; through Squadron {differences} differ, {gaps} known gaps",
            result.file,
            result.statements(),
            result.baseline_passed(),
        );
        results.push(result);
    }
    let left_running = running_tasks(&workers).await?;
    let modes: Vec<&'static str> = args.modes.iter().map(|m| m.name()).collect();
    let summary = report::summary(&results, &modes);
    println!(
        "{summary}; {left_running} tasks left running; {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &report_path {
        let shown = args.report.as_deref().unwrap_or(path);
        write_report(path, shown, &root, &results, &modes, &summary)?;
    }
    if args.check {
        let differences: Vec<_> = results
            .iter()
            .flat_map(|r| r.regressions())
            .filter(|g| g.gap.is_none())
            .collect();
        for g in &differences {
            eprintln!("DIFFERENCE ({}) {}: {}", g.mode, g.location, g.difference);
        }
        anyhow::ensure!(
            differences.is_empty() && left_running == 0,
            "{} statements pass single-node but not through Squadron (not known gaps); \
             {left_running} tasks left running",
            differences.len()
        );
    }
    Ok(())
}

/// One file on the baseline, then on a fresh coordinator per mode.
async fn compare(
    work: &corpus::WorkDir,
    file: &Path,
    workers: &[Worker],
    modes: &[Mode],
    deadline: Duration,
) -> anyhow::Result<FileResult> {
    let name = file.to_string_lossy().into_owned();
    if let Some(reason) = skips::skipped_file(file) {
        return Ok(FileResult {
            file: name,
            skipped: Some(reason),
            baseline: Default::default(),
            squadron: vec![],
        });
    }
    let path = work.file(file);
    work.fresh_scratch(file)?;
    let baseline = run::run_file(
        &path,
        || async { Ok::<_, EngineError>(Baseline::new(deadline)) },
        skips::skipped_record,
    )
    .await
    .with_context(|| format!("{name} on DataFusion"))?;
    let mut squadron = vec![];
    for mode in modes {
        work.fresh_scratch(file)?;
        let data = tempfile::tempdir()?;
        let server = cluster::coordinator(workers, *mode, data.path()).await?;
        let addr = server.addr.to_string();
        let outcomes = run::run_file(
            &path,
            || {
                let addr = addr.clone();
                async move {
                    Squadron::connect(&addr, deadline)
                        .await
                        .map_err(|e| EngineError(format!("connecting: {e}")))
                }
            },
            skips::skipped_record,
        )
        .await
        .with_context(|| format!("{name} on Squadron ({})", mode.name()))?;
        server.shutdown().await?;
        squadron.push((mode.name(), outcomes));
    }
    Ok(FileResult {
        file: name,
        skipped: None,
        baseline,
        squadron,
    })
}

/// Tasks the workers still run after every file finished (each statement
/// was read to its end or failed, so this must be zero).
async fn running_tasks(workers: &[Worker]) -> anyhow::Result<u64> {
    let data = tempfile::tempdir()?;
    let server = cluster::coordinator(workers, Mode::Default, data.path()).await?;
    let mut client = Squadron::connect(&server.addr.to_string(), Duration::from_secs(30)).await?;
    let running = client
        .count("SELECT CAST(sum(running_tasks) AS BIGINT) FROM system.workers")
        .await?;
    server.shutdown().await?;
    Ok(running)
}

fn write_report(
    path: &Path,
    shown: &Path,
    root: &Path,
    results: &[FileResult],
    modes: &[&'static str],
    summary: &str,
) -> anyhow::Result<()> {
    let text = format!(
        "# DataFusion's sqllogictest corpus on Squadron\n\n\
         Generated by `cargo run --bin squadron-slt -- --report {}` \
         from the `.slt` files of datafusion-sqllogictest {} (not copied into this \
         repository). Each file runs on single-node DataFusion (target partitions {}, \
         as DataFusion's runner sets it up) and, statement by statement, through \
         Squadron's Flight SQL on a coordinator with two worker processes, once per \
         mode: *default* (small join inputs broadcast) and *partitioned joins* (no \
         broadcast: both join inputs hash-partitioned over the exchange). A column \
         counts the statements that give the file's expected answer; *first difference* \
         is the first statement passing single-node but not through Squadron (a *known \
         gap* when Squadron refuses it on purpose or for a reason listed in \
         `integration/sqllogictest/src/gaps.rs`). Skipped files and the records left \
         out (EXPLAIN) are listed in `integration/sqllogictest/src/skips.rs`; files that \
         read data the package does not ship run anyway, those statements failing on \
         both sides.\n\n\
         **{summary}.**\n\n{}",
        shown.display(),
        corpus::version(root),
        engines::PARTITIONS,
        report::table(results, modes),
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
