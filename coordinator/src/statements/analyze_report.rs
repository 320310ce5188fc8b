//! The text EXPLAIN ANALYZE answers for a distributed query: per stage its
//! plan, what its tasks wrote and read (per upstream stage), their CPU
//! time, spill and peak memory, and each task attempt with its worker and
//! times; VERBOSE adds every task's operators with their metrics.

use std::fmt::Write;
use std::time::Duration;

use datafusion::physical_plan::displayable;
use squadron_planner::job_graph::stage_header;
use squadron_planner::JobGraph;
use squadron_proto::v1::TaskMetrics;

use crate::scheduler::TaskRun;

/// What the job did as a whole.
pub struct QuerySummary {
    pub rows: u64,
    pub elapsed: Duration,
    pub attempts: u32,
    pub tasks_rerun: u32,
}

/// One row per stage, the final stage first (as EXPLAIN lists them),
/// after a first row about the whole query: (plan_type, plan).
pub fn report(
    graph: &JobGraph,
    runs: &[TaskRun],
    summary: &QuerySummary,
    verbose: bool,
) -> Vec<(String, String)> {
    let mut rows = vec![(
        "Query".to_string(),
        format!(
            "{} rows in {:.1} ms; {} stages, {} tasks, {} job attempt(s), {} task(s) re-run",
            summary.rows,
            summary.elapsed.as_secs_f64() * 1000.0,
            graph.stages.len(),
            graph.task_count(),
            summary.attempts,
            summary.tasks_rerun,
        ),
    )];
    let started = runs.iter().filter_map(micros_started).min().unwrap_or(0);
    for stage in graph.stages.iter().rev() {
        let own: Vec<&TaskRun> = runs
            .iter()
            .filter(|r| r.stage as usize == stage.id)
            .collect();
        let mut text = String::new();
        let _ = writeln!(text, "{}", stage_header(stage));
        stage_totals(&mut text, &counted(&own));
        let _ = writeln!(text, "  tasks:");
        for run in &own {
            task_line(&mut text, run, started);
        }
        let _ = writeln!(text, "  plan:");
        for line in displayable(stage.plan.as_ref())
            .indent(false)
            .to_string()
            .lines()
        {
            let _ = writeln!(text, "    {line}");
        }
        if verbose {
            for run in &own {
                operators(&mut text, run);
            }
        }
        rows.push((format!("Stage {}", stage.id), text));
    }
    rows
}

/// The attempts whose output the job used: of each task, its last
/// succeeded attempt.
fn counted<'a>(runs: &[&'a TaskRun]) -> Vec<&'a TaskMetrics> {
    let mut best: Vec<&TaskRun> = vec![];
    for run in runs.iter().filter(|r| r.state == "succeeded") {
        match best.iter_mut().find(|b| b.partition == run.partition) {
            Some(b) if b.attempt < run.attempt => *b = run,
            Some(_) => {}
            None => best.push(run),
        }
    }
    best.iter().filter_map(|r| r.metrics.as_ref()).collect()
}

/// Rows each upstream stage sent to these tasks, by stage id.
pub fn rows_read_by_stage(metrics: &[&TaskMetrics]) -> Vec<(u32, u64)> {
    let mut by_stage: Vec<(u32, u64)> = vec![];
    for m in metrics {
        for op in &m.operators {
            let Some(stage) = read_stage(&op.name) else {
                continue;
            };
            let rows = op
                .metrics
                .iter()
                .find(|x| x.name == "output_rows")
                .map_or(0, |x| x.value);
            match by_stage.iter_mut().find(|(s, _)| *s == stage) {
                Some((_, total)) => *total += rows,
                None => by_stage.push((stage, rows)),
            }
        }
    }
    by_stage.sort();
    by_stage
}

/// The upstream stage a `StageReadExec` description reads.
fn read_stage(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("StageReadExec: stage=")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn stage_totals(text: &mut String, metrics: &[&TaskMetrics]) {
    let sum = |f: fn(&TaskMetrics) -> u64| metrics.iter().map(|m| f(m)).sum::<u64>();
    let reads: Vec<String> = rows_read_by_stage(metrics)
        .iter()
        .map(|(stage, rows)| format!("stage {stage}: {rows}"))
        .collect();
    let first = metrics
        .iter()
        .map(|m| m.started_unix_micros)
        .min()
        .unwrap_or(0);
    let last = metrics
        .iter()
        .map(|m| m.ended_unix_micros)
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        text,
        "  output_rows={}{}, output_batches={}, output_bytes={}, input_rows={}{}, \
         input_bytes={}, compute={}, spilled_bytes={}, peak_memory_bytes={} (largest task), \
         elapsed={}",
        sum(|m| m.output_rows),
        filtered(sum(|m| m.output_rows_filtered)),
        sum(|m| m.output_batches),
        sum(|m| m.output_bytes),
        sum(|m| m.input_rows),
        if reads.is_empty() {
            String::new()
        } else {
            format!(" ({})", reads.join(", "))
        },
        sum(|m| m.input_bytes),
        millis(sum(|m| m.elapsed_compute_nanos) / 1000),
        sum(|m| m.spilled_bytes),
        metrics
            .iter()
            .map(|m| m.peak_memory_bytes)
            .max()
            .unwrap_or(0),
        millis(last.saturating_sub(first)),
    );
}

/// The rows consumers' filters kept from being sent, when any.
fn filtered(rows: u64) -> String {
    match rows {
        0 => String::new(),
        rows => format!(" ({rows} dropped by consumers' filters)"),
    }
}

fn task_line(text: &mut String, run: &TaskRun, started: u64) {
    let _ = write!(
        text,
        "    task {} attempt {} on {}: {}",
        run.partition, run.attempt, run.worker, run.state
    );
    if let Some(m) = &run.metrics {
        let _ = write!(
            text,
            ", output_rows={}{}, output_bytes={}, input_rows={}, input_bytes={}, compute={}, \
             spilled_bytes={}, peak_memory_bytes={}, start=+{}, end=+{}",
            m.output_rows,
            filtered(m.output_rows_filtered),
            m.output_bytes,
            m.input_rows,
            m.input_bytes,
            millis(m.elapsed_compute_nanos / 1000),
            m.spilled_bytes,
            m.peak_memory_bytes,
            millis(m.started_unix_micros.saturating_sub(started)),
            millis(m.ended_unix_micros.saturating_sub(started)),
        );
    }
    if let Some(error) = &run.error {
        let _ = write!(text, ", error: {error}");
    }
    text.push('\n');
}

fn operators(text: &mut String, run: &TaskRun) {
    let Some(m) = &run.metrics else { return };
    let _ = writeln!(
        text,
        "  task {} attempt {} operators:",
        run.partition, run.attempt
    );
    for op in &m.operators {
        let values: Vec<String> = op
            .metrics
            .iter()
            .map(|x| format!("{}={}", x.name, x.value))
            .collect();
        let _ = writeln!(
            text,
            "    {}{}, metrics=[{}]",
            "  ".repeat(op.depth as usize),
            op.name,
            values.join(", ")
        );
    }
}

fn micros_started(run: &TaskRun) -> Option<u64> {
    run.metrics.as_ref().map(|m| m.started_unix_micros)
}

fn millis(micros: u64) -> String {
    format!("{:.3} ms", micros as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use squadron_proto::v1::{Metric, OperatorMetrics};
    use std::time::SystemTime;

    fn run(partition: u32, attempt: u32, state: &'static str, rows: u64) -> TaskRun {
        TaskRun {
            stage: 1,
            partition,
            attempt,
            worker: "w".into(),
            state,
            started: SystemTime::now(),
            ended: None,
            error: None,
            reported: true,
            metrics: Some(TaskMetrics {
                output_rows: rows,
                operators: vec![OperatorMetrics {
                    depth: 1,
                    name: "StageReadExec: stage=0, mode=shuffle, partitions=2".into(),
                    metrics: vec![Metric {
                        name: "output_rows".into(),
                        value: rows * 2,
                    }],
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_the_last_succeeded_attempt_of_each_task_counts() {
        let runs = [
            run(0, 0, "succeeded", 5),
            run(0, 1, "succeeded", 6),
            run(1, 0, "lost", 100),
            run(1, 1, "succeeded", 7),
        ];
        let refs: Vec<&TaskRun> = runs.iter().collect();
        let rows: Vec<u64> = counted(&refs).iter().map(|m| m.output_rows).collect();
        assert_eq!(rows, [6, 7]);
        assert_eq!(rows_read_by_stage(&counted(&refs)), [(0, 26)]);
    }

    #[test]
    fn a_stage_read_names_its_upstream_stage() {
        assert_eq!(read_stage("StageReadExec: stage=12, mode=merge"), Some(12));
        assert_eq!(read_stage("ProjectionExec: expr=[a]"), None);
    }
}
