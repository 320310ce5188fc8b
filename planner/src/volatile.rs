//! The invariant every distributed pass keeps: a volatile expression
//! (`random()`, `uuid()`, anything DataFusion marks `Volatility::Volatile`)
//! is evaluated exactly as often as in DataFusion's own plan.
//!
//! Passes that share a subtree between two uses (one shuffle stage read for
//! two copies of a CTE), or compute one use twice (a build side that also
//! reduces the shuffles below its join), are right for deterministic
//! subtrees and wrong for volatile ones: two samples of `random() < 0.5`
//! joined as one, or one sample shared by two queries' uses that should
//! differ. Rather than each pass remembering that, the pipeline counts the
//! places each volatile expression is evaluated before and after every
//! pass and after the cut (`pipeline`), and keeps a plan only where the
//! counts agree.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use crate::job_graph::JobGraph;

/// How many times each volatile expression is evaluated over the rows it
/// sees, by operator and expression as displayed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolatileEvaluations(BTreeMap<String, usize>);

impl VolatileEvaluations {
    /// In a plan run in one process: once per place in the tree (a
    /// collected build side runs once for all partitions there).
    pub fn of_plan(plan: &Arc<dyn ExecutionPlan>) -> Result<Self> {
        let mut counts = Self::default();
        plan.apply(|node| {
            counts.add_node(node, 1)?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(counts)
    }

    /// In a job graph: each stage's task runs its own partition, so an
    /// operator below a drop in partitions (a build side of one partition
    /// under a join of several) runs whole in every task of its stage.
    pub fn of_graph(graph: &JobGraph) -> Result<Self> {
        let mut counts = Self::default();
        for stage in &graph.stages {
            counts.add_tree(stage.task_plan(), 1, stage.tasks.max(1))?;
        }
        Ok(counts)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn add_tree(&mut self, plan: &Arc<dyn ExecutionPlan>, runs: usize, tasks: usize) -> Result<()> {
        self.add_node(plan, runs)?;
        let partitions = plan.output_partitioning().partition_count();
        for child in plan.children() {
            let fewer = child.output_partitioning().partition_count() < partitions;
            let child_runs = if fewer { tasks } else { runs };
            self.add_tree(child, child_runs, tasks)?;
        }
        Ok(())
    }

    fn add_node(&mut self, node: &Arc<dyn ExecutionPlan>, runs: usize) -> Result<()> {
        node.apply_expressions(&mut |expr| {
            if is_volatile(expr) {
                *self
                    .0
                    .entry(format!("{}: {expr}", node.name()))
                    .or_default() += runs;
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(())
    }
}

/// No job graph evaluates the plan's volatile expressions as often as the
/// plan does: the plan is to run in one process (the coordinator's).
#[derive(Debug)]
pub struct VolatileRefusal {
    pub planned: String,
    pub distributed: String,
}

impl std::fmt::Display for VolatileRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no distributed plan evaluates its volatile expressions as often as the query \
             does ({} planned, {} distributed)",
            self.planned, self.distributed
        )
    }
}

impl std::error::Error for VolatileRefusal {}

impl From<VolatileRefusal> for DataFusionError {
    fn from(refusal: VolatileRefusal) -> Self {
        DataFusionError::External(Box::new(refusal))
    }
}

impl VolatileRefusal {
    /// Whether `error` is a refusal (the plan runs in one process).
    pub fn is(error: &DataFusionError) -> bool {
        matches!(error.find_root(), DataFusionError::External(e) if e.is::<VolatileRefusal>())
    }
}

impl std::fmt::Display for VolatileEvaluations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self
            .0
            .iter()
            .map(|(site, runs)| format!("{site} x{runs}"))
            .collect();
        f.write_str(&shown.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::build_job_graph;
    use crate::test_tables::{key_value_table, physical_plan, without_collected_joins};
    use squadron_exec::squadron_options::SquadronOptions;

    async fn context(collected_joins: bool) -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(2);
        if !collected_joins {
            without_collected_joins(&mut config);
        }
        let ctx = SessionContext::new_with_config(config);
        let rows: Vec<_> = (0..40).map(|i| (Some(i % 8), i)).collect();
        ctx.register_table("t", Arc::new(key_value_table(&rows, 2)))
            .unwrap();
        ctx
    }

    /// Two uses of the same volatile subtree stay two evaluations: the
    /// shuffle that would be shared is cut twice.
    #[tokio::test]
    async fn identical_volatile_subtrees_are_not_shared() {
        let ctx = context(false).await;
        let sql = "SELECT count(*) FROM (SELECT k, random() AS x FROM t) a \
                   JOIN (SELECT k, random() AS x FROM t) b ON a.k = b.k AND a.x = b.x";
        let plan = physical_plan(&ctx, sql).await;
        let before = VolatileEvaluations::of_plan(&plan).unwrap();
        assert_eq!(before.0.values().sum::<usize>(), 2, "{before}");
        let graph = build_job_graph(plan, &SquadronOptions::default()).unwrap();
        assert_eq!(VolatileEvaluations::of_graph(&graph).unwrap(), before);
        // The same subtree without random() is shared: one stage fewer.
        let deterministic = "SELECT count(*) FROM (SELECT k, v + 1 AS x FROM t) a \
                             JOIN (SELECT k, v + 1 AS x FROM t) b ON a.k = b.k AND a.x = b.x";
        let shared = build_job_graph(
            physical_plan(&ctx, deterministic).await,
            &Default::default(),
        )
        .unwrap();
        assert!(
            shared.stages.len() < graph.stages.len(),
            "{shared}\n{graph}"
        );
    }

    /// A selective build side with `random()` would also reduce the
    /// shuffle below its join, computed once more by the reducing stage:
    /// two samples. The pass is left out for that plan.
    #[tokio::test]
    async fn a_volatile_build_side_does_not_reduce_shuffles() {
        let ctx = context(true).await;
        let rows: Vec<_> = (0..20).map(|i| (Some(i), i)).collect();
        ctx.register_table("d", Arc::new(key_value_table(&rows, 1)))
            .unwrap();
        let sql = |filter: &str| {
            format!(
                "SELECT count(*) FROM (SELECT k, count(*) AS c FROM t GROUP BY k) g \
                 JOIN (SELECT k FROM d WHERE {filter}) s ON g.k = s.k"
            )
        };
        let reduced = |graph: &JobGraph| graph.to_string().matches("RightSemi").count();
        let deterministic = physical_plan(&ctx, &sql("v < 10")).await;
        let graph = build_job_graph(deterministic, &SquadronOptions::default()).unwrap();
        assert!(
            reduced(&graph) > 0,
            "the test needs a reducing plan: {graph}"
        );

        let plan = physical_plan(&ctx, &sql("random() < 0.5")).await;
        let before = VolatileEvaluations::of_plan(&plan).unwrap();
        let graph = build_job_graph(plan, &SquadronOptions::default()).unwrap();
        assert_eq!(reduced(&graph), 0, "{graph}");
        assert_eq!(VolatileEvaluations::of_graph(&graph).unwrap(), before);
    }

    /// A one-partition build side that calls `random()`, joined in a stage
    /// of two tasks, would run once in each: no cut keeps the invariant,
    /// and the plan is refused (the coordinator runs it itself).
    #[tokio::test]
    async fn a_volatile_subtree_every_task_would_run_is_refused() {
        let ctx = context(true).await;
        let rows: Vec<_> = (0..20).map(|i| (Some(i), i)).collect();
        ctx.register_table("d", Arc::new(key_value_table(&rows, 1)))
            .unwrap();
        let sql =
            "SELECT t.k, t.v FROM t JOIN (SELECT k FROM d WHERE random() < 0.5) s ON t.k = s.k";
        let plan = physical_plan(&ctx, sql).await;
        let shown = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        assert!(shown.contains("CollectLeft"), "{shown}");
        let refused = build_job_graph(plan, &SquadronOptions::default()).unwrap_err();
        assert!(VolatileRefusal::is(&refused), "{refused}");
        // Without random() the same shape is cut as usual.
        let sql = "SELECT t.k, t.v FROM t JOIN (SELECT k FROM d WHERE v < 10) s ON t.k = s.k";
        build_job_graph(physical_plan(&ctx, sql).await, &SquadronOptions::default()).unwrap();
    }
}
