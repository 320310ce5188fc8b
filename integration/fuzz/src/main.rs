//! `squadron-fuzz`: generated schemas, data and queries, answered by
//! single-node DataFusion and by Squadron (a coordinator and two worker
//! processes) in every mode; differences reduced and kept as cases.
//!
//! ```text
//! squadron-fuzz [--seed S] [--queries N] [--modes default,workers,…]
//!               [--replay integration/fuzz/cases] [--save-cases DIR] [--check]
//!               [--progress-every N] [--from-query N]
//! ```
//!
//! A seed names the datasets and queries on every machine: `--seed 7
//! --queries 50` runs the same 50 queries wherever it runs.

mod cases;
mod compare;
mod data;
mod engines;
mod fuzzer;
mod generate;
mod modes;
mod oracles;
mod query;
mod reduce;
mod rng;
mod templates;
mod volatile;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use squadron_server::{start, ServerOptions};
use squadron_sqllogictest::cluster::{worker_binary, Worker};

use compare::{compare, Verdict};
use engines::Engines;
use fuzzer::Fuzzer;
use modes::Mode;
use oracles::{unless_datafusion_fails_too, unless_datafusion_misorders_a_limit};
use rng::Rng;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Generated queries on single-node DataFusion and through Squadron, compared")]
struct Args {
    /// Names the datasets and queries.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Generated queries to run (each in every mode); 0 runs only the
    /// replayed cases.
    #[arg(long, default_value_t = 100)]
    queries: usize,
    /// Resume a run at this generated query: the datasets and queries
    /// before it are generated as before (a seed names the same ones) but
    /// not run, so a long run stopped at a progress line goes on from it.
    #[arg(long, default_value_t = 0)]
    from_query: usize,
    /// Queries per generated dataset, before new tables are generated.
    #[arg(long, default_value_t = 40)]
    queries_per_dataset: usize,
    /// One query in this many is a volatile one, checked by invariants.
    #[arg(long, default_value_t = 6)]
    volatile_every: usize,
    /// After one query in this many, a template check: statements of one
    /// plan template's shape with other constants (0: none).
    #[arg(long, default_value_t = 10)]
    template_every: usize,
    /// Modes each query runs in (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["default", "workers", "partitioned", "bloom", "task-retry", "rewrites-off"])]
    modes: Vec<Mode>,
    /// Replay the kept cases under this directory first.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Keep each reduced difference as a case under this directory.
    #[arg(long)]
    save_cases: Option<PathBuf>,
    /// Report differences as found, without reducing them.
    #[arg(long)]
    no_reduce: bool,
    /// Exit non-zero on any difference.
    #[arg(long)]
    check: bool,
    /// Print every statement as it is checked.
    #[arg(long)]
    verbose: bool,
    /// Print a progress line (queries, statements, differences, rate)
    /// every this many generated queries; 0 prints none. A long run that
    /// is stopped early still says how far it got.
    #[arg(long, default_value_t = 0)]
    progress_every: usize,
    /// More settings for every mode's session (`key=value`, repeatable):
    /// a difference that goes away with one names the rewrite at fault.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let binary = worker_binary()?;
    let home = tempfile::tempdir()?;
    let workers = [
        Worker::spawn(&binary, home.path())?,
        Worker::spawn(&binary, home.path())?,
    ];
    let options = ServerOptions {
        listen: "127.0.0.1:0".parse()?,
        workers: workers.iter().map(|w| w.url.clone()).collect(),
        data_dir: Some(home.path().join("warehouse")),
        ..ServerOptions::default()
    };
    let server = start(options).await?;
    let extra: Vec<String> = args
        .settings
        .iter()
        .map(|setting| match setting.split_once('=') {
            Some((key, value)) => Ok(format!("SET {key} = {value}")),
            None => Err(anyhow::anyhow!("--set {setting}: expected KEY=VALUE")),
        })
        .collect::<anyhow::Result<_>>()?;
    let engines = Engines::connect(&server.addr.to_string(), &args.modes, &extra).await?;
    let mut fuzzer = Fuzzer::new(engines, args.modes.clone(), !args.no_reduce)?;
    fuzzer.verbose = args.verbose;

    let started = Instant::now();
    let (mut replayed, mut replay_failures) = (0, vec![]);
    if let Some(root) = &args.replay {
        (replayed, replay_failures) = replay(&mut fuzzer, root).await?;
    }
    let replayed_in = started.elapsed();

    let started = Instant::now();
    let mut rng = Rng::new(args.seed);
    let mut saved = 0;
    let mut dataset = None;
    for i in 0..args.queries {
        if i % args.queries_per_dataset.max(1) == 0 {
            dataset = Some(data::generate(&mut rng.fork()));
        }
        let mut query_rng = rng.fork();
        if i < args.from_query {
            continue;
        }
        if let Some(tables) = dataset.take() {
            if fuzzer.verbose {
                let sizes: Vec<String> = tables
                    .iter()
                    .map(|t| format!("{} {} rows", t.name, t.rows()))
                    .collect();
                eprintln!(
                    "--seed {} query {i}: tables {}",
                    args.seed,
                    sizes.join(", ")
                );
            }
            fuzzer.install(tables).await?;
        }
        let origin = format!("--seed {} query {i}", args.seed);
        if args.volatile_every > 0 && i % args.volatile_every == args.volatile_every - 1 {
            fuzzer.volatile(&mut query_rng, &origin).await?;
        } else {
            fuzzer.query(&mut query_rng, &origin).await?;
        }
        // From the query's own generator: the seed's datasets and queries
        // stay what they were without template checks.
        if args.template_every > 0 && i % args.template_every == args.template_every - 1 {
            fuzzer.templates(&mut query_rng.fork(), &origin).await?;
        }
        // Kept as found, so a run stopped early loses no case.
        if let Some(root) = &args.save_cases {
            while saved < fuzzer.findings.len() {
                let name = format!("seed{}-{}", args.seed, saved + 1);
                let dir = cases::save(root, &name, &fuzzer.findings[saved])?;
                eprintln!("kept as {}", dir.display());
                saved += 1;
            }
        }
        if args.progress_every > 0 && (i + 1) % args.progress_every == 0 {
            let elapsed = started.elapsed().as_secs_f64();
            println!(
                "fuzz progress: seed {} {} queries, {} statements, {} differences, {:.0} s \
                 ({:.1} queries/s)",
                args.seed,
                i + 1,
                fuzzer.stats.statements,
                fuzzer.findings.len(),
                elapsed,
                (i + 1 - args.from_query) as f64 / elapsed.max(1e-9)
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    server.shutdown().await?;
    drop(workers);

    for (i, finding) in fuzzer.findings.iter().enumerate() {
        eprintln!(
            "\nDIFFERENCE {} ({}, mode {}) at {}: {}\n{}",
            i + 1,
            finding.check,
            finding.mode.name(),
            finding.origin,
            finding.why,
            finding.sql
        );
    }
    let stats = &fuzzer.stats;
    for tolerated in stats.tolerated.iter().take(5) {
        eprintln!("tolerated: {tolerated}");
    }
    println!(
        "fuzz: {} queries ({} volatile) in {} modes ({}), {} statements in {:.1} s ({:.1} queries/s, \
         {:.1} statements/s); {} invalid (DataFusion refused), {} too large to compare, {} answered \
         no row, {} metamorphic checks, {} template statements, {} tolerated errors; {} cases \
         replayed in {:.1} s",
        stats.queries + stats.volatile,
        stats.volatile,
        args.modes.len(),
        args.modes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", "),
        stats.statements,
        elapsed,
        (stats.queries + stats.volatile) as f64 / elapsed.max(1e-9),
        stats.statements as f64 / elapsed.max(1e-9),
        stats.invalid,
        stats.too_large,
        stats.empty,
        stats.metamorphic,
        stats.templated,
        stats.tolerated.len(),
        replayed,
        replayed_in.as_secs_f64(),
    );
    let differences = fuzzer.findings.len() + replay_failures.len();
    let checked = args.modes.len() * (stats.queries + stats.volatile + replayed);
    println!(
        "fuzz: {} passed, {differences} failed",
        checked.saturating_sub(differences)
    );
    if args.check {
        anyhow::ensure!(
            differences == 0,
            "{differences} differences (replayed cases failing: {replay_failures:?})"
        );
    }
    Ok(())
}

/// Every kept case in every mode against the oracle: how many cases, and
/// the names of those that differ.
async fn replay(
    fuzzer: &mut Fuzzer,
    root: &std::path::Path,
) -> anyhow::Result<(usize, Vec<String>)> {
    let cases = cases::load(root).with_context(|| format!("reading {}", root.display()))?;
    let mut failures = vec![];
    for case in &cases {
        let tables: Vec<data::Table> = case
            .tables
            .iter()
            .map(|(name, _, sorted)| cases::table_entry(name, *sorted))
            .collect();
        let locations: Vec<PathBuf> = case.tables.iter().map(|(_, l, _)| l.clone()).collect();
        fuzzer.install_at(&tables, &locations).await?;
        let expected = fuzzer.engines.oracle(&case.sql).await;
        let ordered = case.sql.contains(" ORDER BY ");
        for (index, mode) in fuzzer.modes.clone().into_iter().enumerate() {
            let got = fuzzer.engines.squadron(index, &case.sql).await;
            let verdict = compare(&expected, &got, ordered);
            let verdict = unless_datafusion_misorders_a_limit(
                &mut fuzzer.engines,
                &case.sql,
                &expected,
                &got,
                verdict,
            )
            .await;
            let mut verdict =
                unless_datafusion_fails_too(&mut fuzzer.engines, index, &case.sql, verdict, &got)
                    .await;
            // A metamorphic case: its second statement answers the first's
            // rows, on Squadron (DataFusion may share the bug it found).
            if let (Verdict::Same, Some(equivalent)) = (&verdict, &case.equivalent) {
                let again = fuzzer.engines.squadron(index, equivalent).await;
                let repeated = compare(&got, &again, false);
                verdict = unless_datafusion_fails_too(
                    &mut fuzzer.engines,
                    index,
                    equivalent,
                    repeated,
                    &again,
                )
                .await;
            }
            if let Verdict::Differs(why) = verdict {
                eprintln!("case {} differs in mode {}: {why}", case.name, mode.name());
                if fuzzer.verbose {
                    let plan = fuzzer
                        .engines
                        .squadron(index, &format!("EXPLAIN {}", case.sql))
                        .await;
                    eprintln!("{}", engines::rendered(&plan));
                }
                failures.push(format!("{} ({})", case.name, mode.name()));
            }
        }
    }
    Ok((cases.len(), failures))
}
