//! DataFusion's physical filter pushdown, kept from remapping a filter
//! through a node whose output repeats a column name.
//!
//! DataFusion 55 moves a filter through a projection by the projection's
//! reverse alias map, keyed by column name, and into a child by
//! `index_of(name)`: where two output columns share a name (`a0.s` and
//! `a1.s` of a self join), a filter on one lands on the other. Below a
//! right join, `WHERE a0.s IS NULL` became a filter on `a1.s` and removed
//! the unmatched rows it should have kept; single-node DataFusion answers
//! the same query wrong (the fuzzer's TLP check found it; upstream fixed
//! the same family of bugs after 55, apache/datafusion#25244).
//!
//! This rule runs DataFusion's pre-phase pushdown with a fence above every
//! node whose output repeats a name, then takes the fences out. A fence
//! accepts no filter from above (DataFusion's default for an operator), so
//! no filter is remapped through such a node, while filters below it are
//! still pushed as DataFusion would. The logical optimizer has already
//! placed every filter as low as the query allows by qualified column;
//! what this stops is only the physical re-placement across such nodes.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::Result;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

use crate::fence::fenced;

/// `rules` (a physical optimizer's) with DataFusion's pre-phase
/// `FilterPushdown` replaced by the fenced one: the coordinator's planning
/// uses it, and so does the fuzzer's single-node oracle, which would
/// otherwise answer wrong where Squadron does not.
pub fn with_fenced_filter_pushdown(
    mut rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    if let Some(pushdown) = rules
        .iter()
        .position(|rule| rule.name() == "FilterPushdown")
    {
        rules[pushdown] = Arc::new(FencedFilterPushdown::default());
    }
    rules
}

/// DataFusion's `FilterPushdown` (pre-optimization phase), fenced off
/// nodes whose output repeats a column name.
#[derive(Debug, Default)]
pub struct FencedFilterPushdown {
    inner: FilterPushdown,
}

impl PhysicalOptimizerRule for FencedFilterPushdown {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        fenced(plan, repeats_a_name, |plan| {
            self.inner.optimize(plan, config)
        })
    }

    /// DataFusion's name, so `EXPLAIN VERBOSE` reads as it does there.
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether two of `node`'s output columns share a name.
fn repeats_a_name(node: &Arc<dyn ExecutionPlan>) -> bool {
    let schema = node.schema();
    let mut seen = HashSet::new();
    !schema.fields().iter().all(|f| seen.insert(f.name()))
}

#[cfg(test)]
mod tests {
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::test_tables::sorted_lines;

    /// `t`: one row whose key is NULL, so the right join below keeps it
    /// unmatched, `a0.s` NULL.
    async fn with_table(ctx: &SessionContext, dir: &std::path::Path) {
        let file = dir.join("t.parquet");
        for sql in [
            format!(
                "COPY (SELECT CAST(NULL AS BIGINT) AS k, 'x' AS s, 884.5 AS f) TO '{}' \
                 STORED AS PARQUET",
                file.display()
            ),
            format!(
                "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'",
                file.display()
            ),
        ] {
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
    }

    const QUERY: &str = "SELECT a0.s AS s0, a1.s FROM t a0 RIGHT JOIN t a1 ON a1.k = a0.k \
                         WHERE a1.f >= 100.0 AND a0.s IS NULL";

    #[tokio::test]
    async fn a_filter_on_one_of_two_columns_of_one_name_stays_on_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::context::coordinator_session_config(2);
        let ctx =
            crate::context::planning_context(config, std::sync::Arc::new(RuntimeEnv::default()));
        with_table(&ctx, dir.path()).await;
        let rows = ctx.sql(QUERY).await.unwrap().collect().await.unwrap();
        assert_eq!(sorted_lines(&rows).len(), 5, "{:?}", sorted_lines(&rows));
        assert!(
            sorted_lines(&rows).iter().any(|l| l.contains("| x")),
            "{:?}",
            sorted_lines(&rows)
        );

        // DataFusion 55 alone moves the filter onto `a1.s` and loses the
        // row: the case this rule exists for (remove it when it answers).
        let plain = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let dir = tempfile::tempdir().unwrap();
        with_table(&plain, dir.path()).await;
        let rows = plain.sql(QUERY).await.unwrap().collect().await.unwrap();
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
    }
}
