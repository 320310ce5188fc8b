//! The job graph: a physical plan cut into stages.

use std::fmt;
use std::sync::Arc;

use datafusion::physical_plan::{displayable, ExecutionPlan};

/// How a stage's tasks split their output into channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageOutput {
    /// Read by the coordinator's job output: one channel per task.
    JobOutput,
    /// The stage root is the RepartitionExec cut at; rows go to `channels`
    /// channels by its partitioning (hash or round robin).
    Repartition { channels: usize },
    /// Every task's output goes whole to each of `channels` consumer tasks
    /// (one channel, `channels == 1`, when a single task consumes it).
    Broadcast { channels: usize },
}

/// One stage: a plan fragment run as one task per output partition.
#[derive(Debug, Clone)]
pub struct Stage {
    pub id: usize,
    /// The fragment; upstream stages appear in it as `StageReadExec`.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Number of tasks (the output partitions of the plan, or of the input
    /// of its root RepartitionExec).
    pub tasks: usize,
    /// Stages this one reads from.
    pub inputs: Vec<usize>,
    pub output: StageOutput,
    /// The plan encoded for workers (`encode_stages`), once per stage.
    pub encoded: bytes::Bytes,
}

/// A query cut into stages. Stages are in dependency order: every stage
/// comes after the stages it reads, and the last one feeds the job output.
#[derive(Debug, Clone)]
pub struct JobGraph {
    pub stages: Vec<Stage>,
}

impl JobGraph {
    pub fn final_stage(&self) -> &Stage {
        self.stages.last().expect("a job graph has a final stage")
    }

    pub fn task_count(&self) -> usize {
        self.stages.iter().map(|s| s.tasks).sum()
    }

    /// A compact, stable rendering: operators only, no file paths or
    /// statistics, so snapshot tests do not depend on the data location.
    pub fn display_compact(&self) -> String {
        let mut out = String::new();
        for stage in self.stages.iter().rev() {
            out.push_str(&stage_header(stage));
            out.push('\n');
            write_operators(&mut out, stage.plan.as_ref(), 1);
        }
        out
    }
}

fn stage_header(stage: &Stage) -> String {
    let inputs = if stage.inputs.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = stage.inputs.iter().map(|i| i.to_string()).collect();
        format!(" inputs=[{}]", ids.join(","))
    };
    let output = match stage.output {
        StageOutput::JobOutput => "job-output".to_string(),
        StageOutput::Repartition { channels } => format!("repartition({channels})"),
        StageOutput::Broadcast { channels: 1 } => "single".to_string(),
        StageOutput::Broadcast { channels } => format!("broadcast({channels})"),
    };
    format!(
        "Stage {} tasks={} output={output}{inputs}",
        stage.id, stage.tasks
    )
}

fn write_operators(out: &mut String, plan: &dyn ExecutionPlan, depth: usize) {
    let line = displayable(plan).one_line().to_string();
    // Keep the operator and the cheap part of its description; file lists
    // and byte ranges would make the rendering depend on the data files.
    let line = line.trim_end();
    let line = match plan.name() {
        "DataSourceExec" | "ParquetExec" | "CsvExec" => plan.name().to_string(),
        _ => line.to_string(),
    };
    out.push_str(&"  ".repeat(depth));
    out.push_str(&line);
    out.push('\n');
    for child in plan.children() {
        write_operators(out, child.as_ref(), depth + 1);
    }
}

/// The full rendering, with each stage's plan as DataFusion shows it.
impl fmt::Display for JobGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for stage in self.stages.iter().rev() {
            writeln!(f, "{}", stage_header(stage))?;
            for line in displayable(stage.plan.as_ref())
                .indent(false)
                .to_string()
                .lines()
            {
                writeln!(f, "  {line}")?;
            }
        }
        Ok(())
    }
}
