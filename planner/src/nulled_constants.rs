//! Nothing planned above an operator that makes a constant column NULL
//! takes that column for a constant.
//!
//! DataFusion 55 carries a filter's `k = 2` through an aggregate over
//! `GROUPING SETS ((s, k), (s))` though the second set outputs `k` NULL
//! (finding 15), and through an outer join whose NULL-filled side it
//! filtered (finding 17). Its sort rules then drop `k` from an `ORDER BY
//! k, s` (a constant sorts nothing), and the rows of `k = 2` and of `k`
//! NULL come out mixed: single-node DataFusion answers so too, so the
//! fuzzer's comparison with it could not see it. This rule reads each such
//! output through an `OrderUnknownExec` before DataFusion's distribution
//! and sort rules run (`squadron_exec::plan::nulled_constants_unordered`).
//! An outer join keeps what is known of its order where its NULL-filled
//! side has no constant, which is where such joins come from in practice
//! (none of TPC-H's).

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use squadron_exec::plan::nulled_constants_unordered;

#[derive(Debug, Default)]
pub struct NulledConstantsUnordered;

impl PhysicalOptimizerRule for NulledConstantsUnordered {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        nulled_constants_unordered(plan)
    }

    fn name(&self) -> &str {
        "NulledConstantsUnordered"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::Int64Array;
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::context::planning_context;
    use crate::test_tables::physical_plan;

    /// `k` is 2 where the filter keeps it and NULL in the sets without it:
    /// `ORDER BY k, s` puts every `k = 2` row before every NULL one.
    const SQL: &str = "SELECT k, s, count(*) AS n FROM \
        (SELECT CAST(value % 3 AS BIGINT) AS k, CAST(value % 5 AS VARCHAR) AS s \
         FROM generate_series(1, 300)) t \
        WHERE k IN (2) GROUP BY GROUPING SETS ((s, k), (k), (s), ()) ORDER BY k, s";

    /// The first column of `sql`'s answer, in order.
    async fn column_in_order(ctx: &SessionContext, sql: &str) -> Vec<Option<i64>> {
        let plan = physical_plan(ctx, sql).await;
        let batches = collect(plan, ctx.task_ctx()).await.unwrap();
        let mut ks = vec![];
        for batch in &batches {
            let k = batch
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            ks.extend(k.iter());
        }
        ks
    }

    fn config() -> SessionConfig {
        SessionConfig::new().with_target_partitions(4)
    }

    #[tokio::test]
    async fn an_order_by_a_column_grouping_sets_make_null_keeps_it() {
        let ctx = planning_context(config(), Arc::new(RuntimeEnv::default()));
        let planned = column_in_order(&ctx, SQL).await;
        // 5 groups (s, k), 1 (k), 5 (s), 1 (): 6 rows with k = 2 first.
        assert_eq!(planned.len(), 12);
        let first_null = planned.iter().position(Option::is_none).unwrap();
        assert_eq!(first_null, 6, "{planned:?}");
        assert!(
            planned[first_null..].iter().all(Option::is_none),
            "{planned:?}"
        );

        // Single-node DataFusion sorts by `s` alone and mixes them.
        let oracle = column_in_order(&SessionContext::new_with_config(config()), SQL).await;
        assert!(oracle[6..].iter().any(Option::is_some), "{oracle:?}");
    }

    /// `k` is 1 in the one row of `a1` (the filter makes it a constant),
    /// which matches the 25th of 50 rows of `a2`; the RIGHT JOIN fills the
    /// other 49 with NULL.
    const OUTER_JOIN_SQL: &str = "SELECT a1.k FROM \
        (SELECT CAST(value AS BIGINT) AS k FROM generate_series(1, 20) WHERE value = 1) a1 \
        RIGHT JOIN (SELECT CAST(value AS BIGINT) AS v FROM generate_series(1, 50)) a2 \
        ON a2.v = a1.k + 24 ORDER BY 1";

    #[tokio::test]
    async fn an_order_by_a_column_an_outer_join_makes_null_keeps_it() {
        let ctx = planning_context(config(), Arc::new(RuntimeEnv::default()));
        let planned = column_in_order(&ctx, OUTER_JOIN_SQL).await;
        assert_eq!(planned.len(), 50);
        assert_eq!(planned[0], Some(1), "{planned:?}");
        assert!(planned[1..].iter().all(Option::is_none), "{planned:?}");

        let oracle =
            column_in_order(&SessionContext::new_with_config(config()), OUTER_JOIN_SQL).await;
        assert_ne!(oracle[0], Some(1), "{oracle:?}");
    }
}
