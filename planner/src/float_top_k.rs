//! Aggregates over floats keep every group where an ORDER BY … LIMIT
//! reads them, instead of DataFusion 55's top-k of groups, which panics on
//! NaN.
//!
//! DataFusion's `LimitAggregation` rule gives an aggregate read by a sort
//! with a limit (`SELECT DISTINCT f … ORDER BY f LIMIT 8`, or a GROUP BY
//! ordered by its key or by its one MIN/MAX) a bounded table of the best
//! groups. Evicting a group finds it again by equality, and NaN equals
//! nothing: the eviction of a NaN group hits `unreachable!()` (the
//! fuzzer's seed 1, query 27, in single-node DataFusion; a task panic, so
//! an INTERNAL error, in Squadron). Where the group key or the ordered
//! value is a float, the aggregate here keeps all its groups; the sort
//! above still takes the limit.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::ExecutionPlan;

#[derive(Debug, Default)]
pub struct NoTopKAggregationOverFloats;

impl PhysicalOptimizerRule for NoTopKAggregationOverFloats {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            let top_k = aggregate
                .limit_options()
                .is_some_and(|limit| limit.descending.is_some());
            if !top_k || !over_floats(aggregate)? {
                return Ok(Transformed::no(node));
            }
            let unbounded = aggregate.with_new_limit_options(None);
            Ok(Transformed::yes(
                Arc::new(unbounded) as Arc<dyn ExecutionPlan>
            ))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "NoTopKAggregationOverFloats"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether a group key of `aggregate`, or the value its MIN/MAX orders
/// by, is a float.
fn over_floats(aggregate: &AggregateExec) -> Result<bool> {
    let input = aggregate.input().schema();
    for (key, _) in aggregate.group_expr().expr() {
        if key.data_type(&input)?.is_floating() {
            return Ok(true);
        }
    }
    Ok(aggregate
        .get_minmax_desc()
        .is_some_and(|(field, _)| field.data_type().is_floating()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::RecordBatch;
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::context::planning_context;
    use crate::test_tables::{physical_plan, sorted_lines};

    /// 50 distinct values, NaN and NULL among them.
    const TABLE: &str = "CREATE TABLE t AS SELECT CASE \
        WHEN value % 7 = 0 THEN CAST('NaN' AS DOUBLE) \
        WHEN value % 11 = 0 THEN NULL ELSE CAST(value % 50 AS DOUBLE) END AS f \
        FROM generate_series(1, 5000)";

    const SQLS: [&str; 2] = [
        "SELECT DISTINCT f FROM t ORDER BY 1 LIMIT 8",
        "SELECT f, count(*) AS n FROM t GROUP BY f ORDER BY f DESC LIMIT 3",
    ];

    async fn answer(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let plan = physical_plan(ctx, sql).await;
        let batches: Vec<RecordBatch> = collect(plan, ctx.task_ctx()).await.unwrap();
        sorted_lines(&batches)
    }

    #[tokio::test]
    async fn a_top_k_of_float_groups_holding_nan_answers() {
        let config = || SessionConfig::new().with_target_partitions(1);
        let planned = planning_context(config(), Arc::new(RuntimeEnv::default()));
        let mut without_top_k = config();
        without_top_k
            .options_mut()
            .optimizer
            .enable_topk_aggregation = false;
        let oracle = SessionContext::new_with_config(without_top_k);
        for ctx in [&planned, &oracle] {
            ctx.sql(TABLE).await.unwrap().collect().await.unwrap();
        }
        for sql in SQLS {
            assert_eq!(
                answer(&planned, sql).await,
                answer(&oracle, sql).await,
                "{sql}"
            );
        }

        // DataFusion's own plan panics.
        let datafusion = SessionContext::new_with_config(config());
        datafusion
            .sql(TABLE)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let plan = physical_plan(&datafusion, SQLS[0]).await;
        let run = tokio::spawn(async move {
            let ctx = Arc::new(datafusion::execution::TaskContext::default());
            collect(plan, ctx).await
        });
        assert!(run.await.unwrap_err().is_panic());
    }
}
