//! Inputs paired by partition must be partitioned by the same function.
//!
//! With `datafusion.optimizer.preserve_file_partitions`, a scan of a
//! Hive-style table (`…/key=A/…`, `…/key=B/…`) declares hash partitioning on
//! the key: each file group holds its own key values. That is true, but not
//! by the hash function a `RepartitionExec` routes rows with. DataFusion
//! 55 still pairs such a scan with a hash-repartitioned input, partition by
//! partition, in a partitioned join, and the join then misses every match
//! whose key landed in a partition of another number (single-node DataFusion
//! answers such a join wrongly too, once the join is large enough to be
//! partitioned). This rule, which runs after DataFusion's distribution rules,
//! routes the file-grouped input through the same hash repartition whenever
//! an operator pairs it with a routed one.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning, PhysicalExpr,
};

#[derive(Debug, Default)]
pub struct PairedInputsHashRouted;

impl PhysicalOptimizerRule for PairedInputsHashRouted {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let keys = key_requirements(&node);
            let children = node.children();
            let by_groups: Vec<bool> = children
                .iter()
                .zip(&keys)
                .map(|(child, keys)| keys.is_some() && hashed_by_file_groups(child))
                .collect();
            let paired = keys.iter().flatten().count();
            let grouped = by_groups.iter().filter(|g| **g).count();
            // Only a mix is wrong: file groups against file groups line up
            // as DataFusion intends (both sides listed in key order).
            if paired < 2 || grouped == 0 || grouped == paired {
                return Ok(Transformed::no(node));
            }
            let mut new_children = Vec::with_capacity(children.len());
            for ((child, keys), by_groups) in children.into_iter().zip(keys).zip(by_groups) {
                let child = Arc::clone(child);
                new_children.push(match keys {
                    Some(keys) if by_groups => {
                        let n = child.output_partitioning().partition_count();
                        // Operators above may rely on the scan's order.
                        let hashed = RepartitionExec::try_new(child, Partitioning::Hash(keys, n))?;
                        Arc::new(hashed.with_preserve_order()) as Arc<dyn ExecutionPlan>
                    }
                    _ => child,
                });
            }
            #[allow(deprecated)] // replace_children needs options we have no use for
            let node = node.with_new_children(new_children)?;
            Ok(Transformed::yes(node))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "paired_inputs_hash_routed"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Per child, the keys it must be partitioned on, if any.
fn key_requirements(plan: &Arc<dyn ExecutionPlan>) -> Vec<Option<Vec<Arc<dyn PhysicalExpr>>>> {
    plan.input_distribution_requirements()
        .per_child_distributions()
        .map(|distribution| match distribution {
            Distribution::KeyPartitioned(keys) => Some(keys.clone()),
            #[allow(deprecated)] // still what some operators return in 55
            Distribution::HashPartitioned(keys) => Some(keys.clone()),
            _ => None,
        })
        .collect()
}

/// Whether `plan`'s hash partitioning is a scan's file groups, passed up
/// unchanged (by filters, projections, …) rather than rows routed by hash.
fn hashed_by_file_groups(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let Partitioning::Hash(_, n) = plan.output_partitioning() else {
        return false;
    };
    if plan.is::<RepartitionExec>() {
        return false;
    }
    if plan.is::<DataSourceExec>() {
        return true;
    }
    match plan.children().as_slice() {
        [child] => {
            matches!(child.output_partitioning(), Partitioning::Hash(_, m) if m == n)
                && hashed_by_file_groups(child)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::execution::runtime_env::RuntimeEnv;
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::context::planning_context;

    /// A Hive-style fact table (one directory per key) and a dimension
    /// table, joined after the DataFusion 55 plan pairs them partition by
    /// partition.
    async fn join_answer(ctx: &SessionContext, dir: &std::path::Path) -> String {
        let dir = dir.display();
        for (key, value) in [("A", 1.5), ("B", 2.5), ("C", 4.0)] {
            ctx.sql(&format!(
                "COPY (SELECT {value} AS value) TO '{dir}/fact/f_dkey={key}/data.parquet' \
                 STORED AS PARQUET"
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        }
        let statements = [
            format!(
                "COPY (SELECT * FROM (VALUES ('A', 'dev'), ('B', 'prod'), ('C', 'prod'))
                 AS t(d_dkey, env)) TO '{dir}/dim/data.parquet' STORED AS PARQUET"
            ),
            format!(
                "CREATE EXTERNAL TABLE fact (value DOUBLE) STORED AS PARQUET \
                 PARTITIONED BY (f_dkey STRING) LOCATION '{dir}/fact/'"
            ),
            format!(
                "CREATE EXTERNAL TABLE dim (d_dkey STRING, env STRING) STORED AS PARQUET \
                 LOCATION '{dir}/dim/'"
            ),
        ];
        for sql in statements {
            ctx.sql(&sql).await.unwrap().collect().await.unwrap();
        }
        let batches = ctx
            .sql(
                "SELECT f.f_dkey, max(d.env), sum(f.value) FROM fact f \
                 JOIN dim d ON f.f_dkey = d.d_dkey GROUP BY f.f_dkey ORDER BY f.f_dkey",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        pretty_format_batches(&batches).unwrap().to_string()
    }

    fn config(preserve_file_partitions: usize) -> SessionConfig {
        let mut config = SessionConfig::new().with_target_partitions(3);
        let options = config.options_mut();
        options.optimizer.preserve_file_partitions = preserve_file_partitions;
        // A partitioned join, as DataFusion picks for large inputs.
        options.optimizer.hash_join_single_partition_threshold = 0;
        options.optimizer.hash_join_single_partition_threshold_rows = 0;
        config
    }

    #[tokio::test]
    async fn a_file_grouped_input_is_hashed_like_the_input_it_is_joined_with() {
        let oracle_dir = tempfile::tempdir().unwrap();
        let expected = join_answer(
            &SessionContext::new_with_config(config(0)),
            oracle_dir.path(),
        )
        .await;
        assert!(
            expected.contains("| C      | prod       | 4.0 "),
            "{expected}"
        );

        let dir = tempfile::tempdir().unwrap();
        let ctx = planning_context(config(1), Arc::new(RuntimeEnv::default()));
        assert_eq!(join_answer(&ctx, dir.path()).await, expected);
    }
}
