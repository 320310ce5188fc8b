//! The job graph: a physical plan cut into stages.

use std::fmt;
use std::sync::Arc;

use datafusion::common::{internal_err, Result};
use datafusion::physical_plan::{displayable, ExecutionPlan};
pub use squadron_exec::plan::StageOutput;
use squadron_exec::plan::StageWriteExec;
use squadron_exec::write::{SinkWriteExec, TableWriteExec};

/// One stage: a plan fragment run as one task per output partition.
#[derive(Debug, Clone)]
pub struct Stage {
    pub id: usize,
    /// The fragment: a `StageWriteExec` (where its rows go) over the
    /// plan its tasks run, in which upstream stages appear as
    /// `StageReadExec`.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Number of tasks (the output partitions of the plan, or of the input
    /// of its root RepartitionExec).
    pub tasks: usize,
    /// Stages this one reads from.
    pub inputs: Vec<usize>,
    /// The plan encoded for workers (`encode_stages`), once per stage.
    pub encoded: bytes::Bytes,
}

impl Stage {
    fn write(&self) -> &StageWriteExec {
        self.plan
            .downcast_ref::<StageWriteExec>()
            .expect("a stage's plan is rooted at its StageWriteExec")
    }

    /// Where the stage's rows go.
    pub fn output(&self) -> StageOutput {
        self.write().output()
    }

    /// The stage writing as `output` says instead.
    pub fn set_output(&mut self, output: StageOutput) -> Result<()> {
        let input = Arc::clone(self.write().input());
        self.plan = Arc::new(StageWriteExec::try_new(input, output)?);
        Ok(())
    }

    /// What each task executes (below the write, and below the
    /// `RepartitionExec` a repartitioning stage routes by).
    pub fn task_plan(&self) -> &Arc<dyn ExecutionPlan> {
        self.write().task_plan()
    }

    /// `plan` as the root of a stage writing as `output` says.
    pub fn rooted(
        plan: Arc<dyn ExecutionPlan>,
        output: StageOutput,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if plan.is::<StageWriteExec>() {
            return internal_err!("a stage's plan is already rooted");
        }
        Ok(Arc::new(StageWriteExec::try_new(plan, output)?))
    }
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

    /// Whether a task writes files (INSERT, CREATE TABLE AS, COPY): such a
    /// task's effects outlive it, so it is retried with its whole job, never
    /// on its own.
    pub fn writes_files(&self) -> bool {
        fn writes(plan: &Arc<dyn ExecutionPlan>) -> bool {
            plan.downcast_ref::<TableWriteExec>().is_some()
                || plan.downcast_ref::<SinkWriteExec>().is_some()
                || plan.children().into_iter().any(writes)
        }
        self.stages.iter().any(|stage| writes(&stage.plan))
    }

    /// The stages that read each stage.
    pub fn consumers(&self) -> Vec<Vec<usize>> {
        let mut consumers = vec![vec![]; self.stages.len()];
        for stage in &self.stages {
            for &input in &stage.inputs {
                consumers[input].push(stage.id);
            }
        }
        consumers
    }

    /// A compact, stable rendering: operators only, no file paths or
    /// statistics, so snapshot tests do not depend on the data location.
    pub fn display_compact(&self) -> String {
        let mut out = String::new();
        for stage in self.stages.iter().rev() {
            out.push_str(&stage_header(stage));
            out.push('\n');
            // The header says where the rows go; the operators start
            // below the write.
            write_operators(&mut out, stage.write().input().as_ref(), 1);
        }
        out
    }
}

pub fn stage_header(stage: &Stage) -> String {
    let inputs = if stage.inputs.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = stage.inputs.iter().map(|i| i.to_string()).collect();
        format!(" inputs=[{}]", ids.join(","))
    };
    let output = stage.output();
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
