//! One shuffle where two would hash on nested keys.
//!
//! DataFusion plans `count(DISTINCT x) ... GROUP BY g` as an aggregation by
//! `(g, x)` and then one by `g`, each behind a hash shuffle: on `(g, x)`,
//! then on `g`. Rows with equal `(g, x)` have equal `g`, so a first shuffle
//! hashed on `g` alone also brings each `(g, x)` group into one partition;
//! the second would then hash every row to the partition it is already in.
//! So the lower shuffle hashes on the upper one's keys and the upper one
//! goes: one stage less (TPC-H q16 runs four stages instead of five, and
//! each stage boundary costs a round of tasks, encoding and waiting).
//!
//! The same answer: between the two shuffles only operators that keep rows
//! in their partition and pass the upper keys' columns up unchanged
//! (filters, projections, aggregations grouping by them, no limit), and
//! every operator there that needs rows with equal lower keys together
//! still has them together.
//!
//! The price: the work between the shuffles spreads over the distinct
//! values of the upper keys rather than of the lower ones; a handful of
//! groups would leave most tasks idle. DataFusion makes the same trade
//! when data is already hashed on a subset (`subset_repartition_threshold`).
//! Here it is bounded: the rule applies only where the plan below reads at
//! most `squadron.subset_key_max_rows` rows by its tables' statistics, a fraction of a
//! second for one task even when all of it lands in one partition; above
//! that one more stage costs little next to the query.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

use super::passed_columns::source_column;
use super::rows_read::rows_read;

/// `plan` with every hash shuffle whose keys a hash shuffle below it holds
/// folded into that lower shuffle, hashed on the upper keys. Applied as a
/// plan is cut into stages: in one process both are cheap repartitions.
/// Only where the plan below reads at most `max_rows_read` rows.
pub fn merge_subset_key_shuffles(
    plan: Arc<dyn ExecutionPlan>,
    max_rows_read: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(upper) = node.downcast_ref::<RepartitionExec>() else {
            return Ok(Transformed::no(node));
        };
        let Partitioning::Hash(keys, count) = upper.partitioning() else {
            return Ok(Transformed::no(node));
        };
        let columns: Option<Vec<usize>> = keys
            .iter()
            .map(|key| key.downcast_ref::<Column>().map(Column::index))
            .collect();
        let rehashed = match columns {
            Some(columns) if !columns.is_empty() && !upper.preserve_order() => {
                rehashed_below(upper.input(), &columns, *count, max_rows_read)?
            }
            _ => None,
        };
        Ok(match rehashed {
            Some(input) => Transformed::yes(input),
            None => Transformed::no(node),
        })
    })
    .map(|transformed| transformed.data)
}

/// `node` with the hash shuffle below it, reached through operators that
/// pass `columns` up unchanged, hashed on `columns` instead of its keys;
/// `None` when there is no such shuffle or its keys do not hold them all.
fn rehashed_below(
    node: &Arc<dyn ExecutionPlan>,
    columns: &[usize],
    count: usize,
    max_rows_read: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(lower) = node.downcast_ref::<RepartitionExec>() {
        return rehashed(lower, columns, count, max_rows_read);
    }
    if !keeps_rows_in_partition(node) {
        return Ok(None);
    }
    let Some(mapped) = columns
        .iter()
        .map(|&column| source_column(node.as_ref(), column))
        .collect::<Option<Vec<usize>>>()
    else {
        return Ok(None);
    };
    let Some(input) = rehashed_below(node.children()[0], &mapped, count, max_rows_read)? else {
        return Ok(None);
    };
    #[allow(deprecated)] // replace_children needs options we have no use for
    Arc::clone(node).with_new_children(vec![input]).map(Some)
}

/// Whether `node` is a single-input operator whose rows (and those of its
/// groups) depend only on the rows of the same partition, whichever of
/// them share it: no limit, no aggregation that needs a single partition.
fn keeps_rows_in_partition(node: &Arc<dyn ExecutionPlan>) -> bool {
    if node.fetch().is_some() {
        return false;
    }
    if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
        let per_partition = matches!(
            aggregate.mode(),
            AggregateMode::Partial
                | AggregateMode::FinalPartitioned
                | AggregateMode::SinglePartitioned
        );
        return per_partition && aggregate.limit_options().is_none();
    }
    node.is::<FilterExec>() || node.is::<ProjectionExec>()
}

/// The hash shuffle `lower` hashed on `columns` of its input, when its
/// keys hold them all, it has `count` partitions and the rows below are
/// few enough (at most `max_rows_read`).
fn rehashed(
    lower: &RepartitionExec,
    columns: &[usize],
    count: usize,
    max_rows_read: usize,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Partitioning::Hash(lower_keys, lower_count) = lower.partitioning() else {
        return Ok(None);
    };
    let is_lower_key = |column: &usize| {
        lower_keys.iter().any(|key| {
            key.downcast_ref::<Column>()
                .is_some_and(|key| key.index() == *column)
        })
    };
    let applies = *lower_count == count
        && !lower.preserve_order()
        && columns.iter().all(is_lower_key)
        && rows_read(lower.input()).is_some_and(|rows| rows <= max_rows_read);
    if !applies {
        return Ok(None);
    }
    let schema = lower.input().schema();
    let keys: Vec<PhysicalExprRef> = columns
        .iter()
        .map(|&column| {
            Arc::new(Column::new(schema.field(column).name(), column)) as PhysicalExprRef
        })
        .collect();
    let repartition =
        RepartitionExec::try_new(Arc::clone(lower.input()), Partitioning::Hash(keys, count))?;
    Ok(Some(Arc::new(repartition)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::physical_plan::execution_plan::reset_plan_states;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::test_tables::{
        key_value_table, physical_plan, sorted_lines, without_collected_joins,
    };

    /// `t` and `u`: `(k, v)` rows with repeated pairs and a NULL key,
    /// planned in three partitions, joins partitioned.
    fn context() -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(3);
        without_collected_joins(&mut config);
        let ctx = SessionContext::new_with_config(config);
        let rows: Vec<_> = (0..90)
            .map(|i| (Some(i % 7), i % 5))
            .chain([(None, 1), (None, 2), (None, 1)])
            .collect();
        ctx.register_table("t", Arc::new(key_value_table(&rows, 3)))
            .unwrap();
        ctx.register_table("u", Arc::new(key_value_table(&rows[..40], 2)))
            .unwrap();
        ctx
    }

    fn hash_shuffles(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let mut count = 0;
        let _ = plan.apply(|node| {
            if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
                count += matches!(repartition.partitioning(), Partitioning::Hash(..)) as usize;
            }
            Ok(TreeNodeRecursion::Continue)
        });
        count
    }

    /// DataFusion's plan of `sql` and the same with the rule applied, whose
    /// answers must agree; the hash shuffles of both.
    async fn shuffles_before_and_after(sql: &str) -> (usize, usize) {
        shuffles_before_and_after_reading_at_most(sql, usize::MAX).await
    }

    async fn shuffles_before_and_after_reading_at_most(
        sql: &str,
        max_rows_read: usize,
    ) -> (usize, usize) {
        let ctx = context();
        let plan = physical_plan(&ctx, sql).await;
        let expected = collect(
            reset_plan_states(Arc::clone(&plan)).unwrap(),
            ctx.task_ctx(),
        )
        .await
        .unwrap();
        let merged = merge_subset_key_shuffles(Arc::clone(&plan), max_rows_read).unwrap();
        let actual = collect(
            reset_plan_states(Arc::clone(&merged)).unwrap(),
            ctx.task_ctx(),
        )
        .await
        .unwrap();
        assert_eq!(
            sorted_lines(&actual),
            sorted_lines(&expected),
            "{sql}\n{}",
            displayable(merged.as_ref()).indent(true)
        );
        (hash_shuffles(&plan), hash_shuffles(&merged))
    }

    #[tokio::test]
    async fn a_count_distinct_by_group_shuffles_once() {
        let sql = "SELECT k % 3 AS g, count(DISTINCT v), sum(DISTINCT v) FROM t GROUP BY k % 3";
        assert_eq!(shuffles_before_and_after(sql).await, (2, 1));
    }

    #[tokio::test]
    async fn a_plan_reading_more_than_the_limit_keeps_both_shuffles() {
        let sql = "SELECT k % 3 AS g, count(DISTINCT v) FROM t GROUP BY k % 3";
        let rows = context()
            .sql("SELECT count(*) FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let rows = rows[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .unwrap()
            .value(0) as usize;
        assert_eq!(
            shuffles_before_and_after_reading_at_most(sql, rows).await,
            (2, 1)
        );
        assert_eq!(
            shuffles_before_and_after_reading_at_most(sql, rows - 1).await,
            (2, 2)
        );
    }

    #[tokio::test]
    async fn nested_groupings_shuffle_once() {
        let sql = "SELECT k, count(*), sum(n) FROM \
                   (SELECT k, v, count(*) AS n FROM t WHERE v < 4 GROUP BY k, v) \
                   WHERE n > 1 GROUP BY k";
        assert_eq!(shuffles_before_and_after(sql).await, (2, 1));
    }

    #[tokio::test]
    async fn an_aggregated_value_is_no_lower_key() {
        // `m` is computed from many rows of each group below, so rows with
        // equal `m` are spread over the lower shuffle's partitions.
        let sql = "SELECT m, count(*) FROM (SELECT k, max(v) AS m FROM t GROUP BY k) GROUP BY m";
        assert_eq!(shuffles_before_and_after(sql).await, (2, 2));
    }

    #[tokio::test]
    async fn a_partitioned_join_keeps_its_inputs_hashed_alike() {
        // Each input of the join is hashed on (k, v); rehashing one of them
        // on k alone would part rows that must meet.
        let sql = "SELECT t.k, count(*) FROM t JOIN u ON t.k = u.k AND t.v = u.v GROUP BY t.k";
        let (before, after) = shuffles_before_and_after(sql).await;
        assert_eq!(before, 3);
        assert_eq!(after, before);
    }
}
