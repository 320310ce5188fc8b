//! A planned statement and what it runs as: on the workers, here, at once
//! (EXPLAIN), or as an update.

use squadron_planner::column_origins::ColumnOrigin;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use squadron_common::error::Error;

use crate::session::Session;
use squadron_planner::JobGraph;

/// The placeholders of a statement (`$1`, `$2`, … or `$name`), in order.
pub fn parameter_names(plan: &LogicalPlan) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = plan
        .get_parameter_types()
        .map_err(Error::from)?
        .into_keys()
        .collect();
    // `$10` after `$9`: by number where there is one.
    names.sort_by_key(|n| (n[1..].parse::<u64>().unwrap_or(u64::MAX), n.clone()));
    Ok(names)
}

/// A planned statement, ready to run.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    pub schema: SchemaRef,
    pub work: Work,
    /// The settings the planning session changed; its tasks carry them.
    pub settings: Vec<(String, String)>,
    /// The SQL it was planned from, when known (`system.queries`).
    pub statement: Option<Arc<str>>,
    /// The table each result column is read from, where known (empty for
    /// statements that are not queries); clients see it as Flight SQL
    /// column metadata.
    pub origins: Vec<Option<ColumnOrigin>>,
}

impl PlannedQuery {
    /// Stages the query runs as on the workers (0 when it runs here).
    pub fn stage_count(&self) -> usize {
        match &self.work {
            Work::Distributed(graph) | Work::Analyze { graph, .. } => graph.stages.len(),
            _ => 0,
        }
    }

    /// Whether starting it before its client's DoGet saves time: it reads
    /// tables (on the workers, or a few row groups here).
    pub fn worth_starting_early(&self) -> bool {
        matches!(
            self.work,
            Work::Distributed(_)
                | Work::Local {
                    run: LocalRun::AtOnce,
                    ..
                }
        )
    }
}

/// What a session's templates did for a statement (`plan_from_template`).
pub enum Reuse {
    /// Planned from a template.
    Planned(Box<PlannedQuery>),
    /// No template of its shape yet: plan it and keep one.
    Unknown,
    /// Its shape was checked and does not qualify.
    DoesNotQualify,
    /// The template was made from a table or files since changed: plan
    /// it and keep a new one.
    Stale,
    /// A constant does not convert exactly to the type the template has
    /// for it: plan it, and keep the template for the next one.
    Inexact,
}

/// How the coordinator runs a plan it answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalRun {
    /// Bounded, over constants only (`SELECT 1`): computed in the request
    /// as the client reads it.
    AsRead,
    /// Bounded, reading a few row groups (a lookup): started at once on
    /// the serving threads, so that when it is started early (see
    /// `worth_starting_early`) the read overlaps the client's round trip
    /// from the FlightInfo to its DoGet.
    AtOnce,
    /// Not bounded by its inputs (a join, a recursive query over
    /// constants): on the execution threads, supervised (timeout, cancel).
    /// The hop there and back costs more than a bounded plan does.
    Supervised,
}

#[derive(Debug, Clone)]
pub enum Work {
    /// A query to run on the workers, its stage plans encoded.
    Distributed(Arc<JobGraph>),
    /// A query that reads no table (`SELECT 1`, `information_schema`) or
    /// little (see `planner::local`), run on the coordinator in its session.
    Local {
        plan: Arc<dyn ExecutionPlan>,
        task_ctx: Arc<TaskContext>,
        run: LocalRun,
    },
    /// An answer the coordinator computed itself (EXPLAIN).
    Immediate(Vec<RecordBatch>),
    /// EXPLAIN ANALYZE of a query run on the workers: it runs, and the
    /// answer is what its stages and tasks did.
    Analyze { graph: Arc<JobGraph>, verbose: bool },
    /// A DDL or DML statement, run when fetched; its answer is one row
    /// with the rows it wrote (`count`).
    Update(LogicalPlan, Arc<Session>),
}

/// Whether `plan` is a DDL or DML statement (the server's `updates` run
/// them).
pub fn is_update(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_)
    )
}

/// The result of a DDL or DML statement read as a query, as single-node
/// DataFusion answers it: DML gives one row with the rows it wrote
/// (`count`), DDL gives nothing (no columns, no rows).
pub fn update_schema(plan: &LogicalPlan) -> SchemaRef {
    if matches!(plan, LogicalPlan::Ddl(_)) {
        return Arc::new(Schema::empty());
    }
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::Int64,
        false,
    )]))
}
