//! Rows a selective collected join will drop are dropped before a shuffle.
//!
//! A collected (CollectLeft) inner or right-semi hash join keeps only the
//! probe rows whose keys its build side holds; a left semi, anti or mark
//! join answers with build rows, which probe rows that match none do not
//! change. In one process dropping those rows is cheap wherever it
//! happens. Split into stages, every probe row that reaches such a join
//! through a shuffle was first encoded, sent and decoded, and often joined
//! or aggregated on the way, only to be dropped. TPC-H q18 shuffles all of
//! `lineitem` (6 M rows) and `orders` into a partitioned join, whose output
//! a right-semi join then cuts to the 57 orders of its build side.
//!
//! A partitioned inner or semi join drops each input's rows whose key the
//! other input lacks; when one input's keys all come from such a build side
//! (through the operators that keep them), that build side reduces the
//! other input. TPC-H q17 aggregates all of `lineitem` by part to compare
//! with the lines of the few parts of one brand and container.
//!
//! So when the build side is selective (it filters), every shuffle on the
//! probe side that carries the join key first keeps only the rows whose key
//! the build side holds: a right-semi join on the same build side, inserted
//! below the shuffle and as deep as the key columns reach in that stage
//! (through projections, aggregations grouping by them, the probe side of
//! a collected inner join; above filters, which cost less than a probe; on
//! the keys that reach when some do not).
//! Through a partitioned inner join the key reaches both inputs, by the
//! join's own key equality. A build side that is a merge is cut once into
//! a stage whose rows every reducing join reads too (`cut`), so it is
//! computed once; one of a single partition over small tables (`nation`
//! filtered to two countries in TPC-H q7) is computed again by each.
//!
//! The same answer: a row the reducing join drops has a key the build side
//! lacks (or a NULL, which matches nothing, with the join's own null
//! handling), and every operator it passes on its way up keeps that key,
//! so every row made from it would match nothing in the join above. The
//! join filter, if any, is left to the join above; the reduction keeps a
//! superset of the rows it matches.
//!
//! The price: a reducing stage waits for the build side before it reads
//! its probe rows, and each of its tasks builds its own copy of it. The
//! build side is small by DataFusion's own choice of a collected join
//! (under `BROADCAST_BUILD_MAX_*`), and the rule only applies where a
//! shuffle is saved and the build side filters. "Filters" is a guess at
//! selectivity: a filter that keeps nearly every row makes the reduction
//! pure cost (a hash probe per shuffled row and a wait), not a wrong
//! answer.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::PhysicalExprRef;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, StatisticsArgs, StatisticsContext,
};

use super::children::with_children_rewritten;
use super::passed_columns::source_column;
use super::rows_read::rows_read;

/// `plan` with the shuffles below each selective collected join reduced,
/// deepest joins first. Applied as a plan is cut into stages, never to a
/// plan run in one process: the build side it shares would run twice
/// there, and a repartition in it cannot.
pub fn reduce_shuffles(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let plan = with_children_rewritten(plan, |child| reduce_shuffles(Arc::clone(child)))?;
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(plan);
    };
    if *join.partition_mode() == PartitionMode::Partitioned {
        return reduce_partitioned(&plan, join);
    }
    let Some(keys) = reducing_keys(join) else {
        return Ok(plan);
    };
    let reducer = Reducer { join };
    match reducer.below(join.right(), keys, false)? {
        Some(probe) => join
            .builder()
            .with_new_children(vec![Arc::clone(join.left()), probe])?
            .build_exec(),
        None => Ok(plan),
    }
}

/// A partitioned join that drops the rows of each input whose key the other
/// input lacks: when one input's keys all come from a selective collected
/// join's build side, that build side reduces the other input's shuffle.
/// (TPC-H q17: the parts of one brand and container, joined to `lineitem`,
/// meet an aggregation of all of `lineitem` by part.)
fn reduce_partitioned(
    plan: &Arc<dyn ExecutionPlan>,
    join: &HashJoinExec,
) -> Result<Arc<dyn ExecutionPlan>> {
    let each_side_drops_unmatched = matches!(
        join.join_type(),
        JoinType::Inner | JoinType::LeftSemi | JoinType::RightSemi
    );
    if !each_side_drops_unmatched || join.null_aware {
        return Ok(Arc::clone(plan));
    }
    let mut left = Arc::clone(join.left());
    let mut right = Arc::clone(join.right());
    for (l, r) in join.on() {
        let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            continue;
        };
        if let Some(reduced) = reduced_by_source(join.left(), l, &right, r)? {
            right = reduced;
        }
        if let Some(reduced) = reduced_by_source(join.right(), r, &left, l)? {
            left = reduced;
        }
    }
    if Arc::ptr_eq(&left, join.left()) && Arc::ptr_eq(&right, join.right()) {
        return Ok(Arc::clone(plan));
    }
    join.builder()
        .with_new_children(vec![left, right])?
        .build_exec()
}

/// `other` reduced to the keys in column `other_key` that `side`'s column
/// `side_key` can hold, when a selective build side holds all of those.
fn reduced_by_source(
    side: &Arc<dyn ExecutionPlan>,
    side_key: &Column,
    other: &Arc<dyn ExecutionPlan>,
    other_key: &Column,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some((source, build_key)) = key_source(side, side_key.index()) else {
        return Ok(None);
    };
    let Some(source) = source.downcast_ref::<HashJoinExec>() else {
        return Ok(None);
    };
    let reducer = Reducer { join: source };
    reducer.below(other, vec![(build_key, other_key.index())], false)
}

/// The selective collected join whose build side holds every value of
/// column `index` of `node`, and that build side's key expression: found
/// through the operators that keep the column's values.
fn key_source(
    node: &Arc<dyn ExecutionPlan>,
    index: usize,
) -> Option<(Arc<dyn ExecutionPlan>, PhysicalExprRef)> {
    let Some(join) = node.downcast_ref::<HashJoinExec>() else {
        let source = source_column(node.as_ref(), index)?;
        return key_source(node.children().first()?, source);
    };
    if !matches!(join.join_type(), JoinType::Inner | JoinType::RightSemi) {
        return None;
    }
    let joined = match &join.projection {
        Some(projection) => *projection.get(index)?,
        None => index,
    };
    // Right-semi output is the probe input; inner output both inputs.
    let left_width = match join.join_type() {
        JoinType::Inner => join.left().schema().fields().len(),
        _ => 0,
    };
    let is_column = |expr: &PhysicalExprRef, at: usize| {
        expr.downcast_ref::<Column>()
            .is_some_and(|column| column.index() == at)
    };
    let matched = join
        .on()
        .iter()
        .find(|(build, probe)| match joined.checked_sub(left_width) {
            None => is_column(build, joined),
            Some(at) => is_column(probe, at),
        });
    if let Some((build, _)) = matched {
        if reducing_keys(join).is_some() {
            return Some((Arc::clone(node), Arc::clone(build)));
        }
    }
    // Not a key of this join: its probe input may still hold the source.
    let at = joined.checked_sub(left_width)?;
    key_source(join.right(), at)
}

/// A probe-side key: the build side's expression, and the probe column it
/// must equal (an index into the schema of the node being visited).
type Key = (PhysicalExprRef, usize);

/// The keys of `join` when it drops the probe rows its build side lacks and
/// that build side is selective and cheap to share; `None` otherwise.
fn reducing_keys(join: &HashJoinExec) -> Option<Vec<Key>> {
    // Inner and right-semi joins drop them; the others here answer with
    // build rows only, whatever the probe rows that match none.
    let drops_unmatched_probe_rows = matches!(
        join.join_type(),
        JoinType::Inner
            | JoinType::RightSemi
            | JoinType::LeftSemi
            | JoinType::LeftAnti
            | JoinType::LeftMark
    );
    if *join.partition_mode() != PartitionMode::CollectLeft
        || !drops_unmatched_probe_rows
        || join.null_aware
        || !is_selective_build_side(join.left())
    {
        return None;
    }
    let keys: Vec<Key> = join
        .on()
        .iter()
        .map(|(build, probe)| {
            let column = probe.downcast_ref::<Column>()?;
            Some((Arc::clone(build), column.index()))
        })
        .collect::<Option<_>>()?;
    (!keys.is_empty()).then_some(keys)
}

/// Most rows the tables of a one-partition build side may hold for that
/// build side to be read again by every reducing task (TPC-H's `nation`
/// and `region` hold 25 and 5).
const RECOMPUTED_BUILD_MAX_ROWS: usize = 100_000;

/// A build side that filters (so likely to hold few of the probe side's
/// keys, unless estimated otherwise: `keeps_most_rows`) and that reducing
/// joins elsewhere can read cheaply: a merge, cut into one stage that each
/// of them reads, or one partition over small tables, which each of them
/// computes again.
fn is_selective_build_side(build: &Arc<dyn ExecutionPlan>) -> bool {
    let shared = match build.downcast_ref::<CoalescePartitionsExec>() {
        Some(merge) => merge.fetch().is_none(),
        None => build.output_partitioning().partition_count() == 1 && reads_small_tables(build),
    };
    shared
        && any_node(build, |node| {
            node.downcast_ref::<FilterExec>()
                .is_some_and(|filter| !keeps_most_rows(filter))
        })
}

/// Whether DataFusion estimates that `filter` keeps more than half of its
/// input's rows from the bounds of every column it compares (file footers'
/// min and max): a filter those bounds say every row passes. Without
/// bounds (an aggregate's result, an in-memory table) DataFusion's estimate
/// is no information, and the filter is taken as selective. A reduction by
/// a build side that keeps nearly every key probes every shuffled row for
/// nothing: a sum of `lineitem` by supplier joined to the suppliers with
/// `s_acctbal > -2000` (all of them) took 102 ms reduced, 83 ms not.
/// DataFusion estimates from integer and date bounds (`s_nationkey >= 0`
/// is caught); on that decimal comparison it falls back to its default
/// guess of a fifth, so that case is still reduced.
fn keeps_most_rows(filter: &FilterExec) -> bool {
    let statistics = StatisticsContext::new();
    let args = StatisticsArgs::new();
    let (Ok(kept), Ok(read)) = (
        statistics.compute(filter, &args),
        statistics.compute(filter.input().as_ref(), &args),
    ) else {
        return false;
    };
    let bounded = collect_columns(filter.predicate()).iter().all(|column| {
        read.column_statistics
            .get(column.index())
            .is_some_and(|column| {
                column.min_value.get_value().is_some() && column.max_value.get_value().is_some()
            })
    });
    match (kept.num_rows.get_value(), read.num_rows.get_value()) {
        (Some(kept), Some(read)) if bounded => kept.saturating_mul(2) > *read,
        _ => false,
    }
}

/// Whether `plan` runs in one stage over tables of at most
/// `RECOMPUTED_BUILD_MAX_ROWS` rows by their statistics.
fn reads_small_tables(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let crosses_stages = any_node(plan, |node| {
        node.is::<RepartitionExec>()
            || node.is::<CoalescePartitionsExec>()
            || node.is::<SortPreservingMergeExec>()
    });
    if crosses_stages {
        return false;
    }
    rows_read(plan).is_some_and(|rows| rows <= RECOMPUTED_BUILD_MAX_ROWS)
}

fn any_node(plan: &Arc<dyn ExecutionPlan>, test: impl Fn(&Arc<dyn ExecutionPlan>) -> bool) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        found = test(node);
        Ok(match found {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

struct Reducer<'a> {
    /// The join whose build side reduces.
    join: &'a HashJoinExec,
}

impl Reducer<'_> {
    /// `node` with its rows reduced by the build side where `keys` reach
    /// below a shuffle; `None` when nothing changed. `crossed` says whether
    /// `node` is already below a shuffle of the probe side.
    fn below(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        keys: Vec<Key>,
        crossed: bool,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let here = |reducer: &Self| match crossed {
            true => reducer.reduced(node, &keys).map(Some),
            false => Ok(None),
        };
        let limited = node.fetch().is_some()
            || node
                .downcast_ref::<AggregateExec>()
                .is_some_and(|aggregate| aggregate.limit_options().is_some());
        if limited {
            // Which rows a limit keeps depends on the rows it sees: the
            // top groups of a limited aggregation are not the top matching
            // ones. Reduced above it, the rows it keeps stay the same.
            return here(self);
        }
        if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
            if crossed {
                // One reduction per stage: the stage below this shuffle is
                // another one.
                return here(self);
            }
            return self.rebuilt(node, repartition.input(), keys, true);
        }
        if node.is::<FilterExec>() && crossed {
            // Comparing values costs less than probing a hash table: the
            // filter goes first.
            return here(self);
        }
        // A group of an aggregation is made of rows with its key: dropping
        // the rows of a key drops the group.
        if node.is::<FilterExec>() || node.is::<ProjectionExec>() || node.is::<AggregateExec>() {
            let mapped = keys_through(&keys, |i| source_column(node.as_ref(), i));
            return match mapped {
                Some(mapped) => self.rebuilt(node, node.children()[0], mapped, crossed),
                None => here(self),
            };
        }
        if let Some(inner) = node.downcast_ref::<HashJoinExec>() {
            if Arc::ptr_eq(inner.left(), self.join.left()) {
                // Reduced by this build side already.
                return Ok(None);
            }
            if let Some(reduced) = self.through_join(node, inner, &keys, crossed)? {
                return Ok(Some(reduced));
            }
        }
        here(self)
    }

    /// Through an inner join: into the input that holds the keys, or both
    /// inputs of a partitioned join when they are its join keys. Only one
    /// input once below a shuffle, so that each stage reduces once.
    fn through_join(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        inner: &HashJoinExec,
        keys: &[Key],
        crossed: bool,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if *inner.join_type() != JoinType::Inner {
            return Ok(None);
        }
        let left_width = inner.left().schema().fields().len();
        let joined = |i: usize| match &inner.projection {
            Some(projection) => projection.get(i).copied(),
            None => Some(i),
        };
        let on_left = keys_through(keys, |i| joined(i).filter(|&j| j < left_width));
        let on_right = keys_through(keys, |i| joined(i).and_then(|j| j.checked_sub(left_width)));
        // By the join's key equality, a key of one input is the other's.
        let across = |keys: &Option<Vec<Key>>, to_left: bool| {
            keys.as_ref().and_then(|keys| {
                keys_through(keys, |i| {
                    inner.on().iter().find_map(|(l, r)| {
                        let (from, to) = if to_left { (r, l) } else { (l, r) };
                        let from = from.downcast_ref::<Column>()?;
                        let to = to.downcast_ref::<Column>()?;
                        (from.index() == i).then(|| to.index())
                    })
                })
            })
        };
        let (left_keys, right_keys) = match inner.partition_mode() {
            PartitionMode::Partitioned if !crossed => {
                let left = on_left.clone().or_else(|| across(&on_right, true));
                let right = on_right.clone().or_else(|| across(&on_left, false));
                (left, right)
            }
            // A collected build side is another stage, read whole.
            PartitionMode::CollectLeft => (None, on_right),
            _ if crossed => return Ok(None),
            _ => (on_left, on_right),
        };
        let left = match left_keys {
            Some(keys) => self.below(inner.left(), keys, crossed)?,
            None => None,
        };
        let right = match right_keys {
            Some(keys) => self.below(inner.right(), keys, crossed)?,
            None => None,
        };
        if left.is_none() && right.is_none() {
            return Ok(None);
        }
        let children = vec![
            left.unwrap_or_else(|| Arc::clone(inner.left())),
            right.unwrap_or_else(|| Arc::clone(inner.right())),
        ];
        #[allow(deprecated)] // replace_children needs options we have no use for
        Arc::clone(node).with_new_children(children).map(Some)
    }

    /// `node` over its `input` reduced, if that changed anything.
    fn rebuilt(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        input: &Arc<dyn ExecutionPlan>,
        keys: Vec<Key>,
        crossed: bool,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(input) = self.below(input, keys, crossed)? else {
            return Ok(None);
        };
        #[allow(deprecated)] // replace_children needs options we have no use for
        Arc::clone(node).with_new_children(vec![input]).map(Some)
    }

    /// `node`'s rows whose `keys` the build side holds: a right-semi join
    /// with the build side and null handling of the join that reduces.
    fn reduced(
        &self,
        node: &Arc<dyn ExecutionPlan>,
        keys: &[Key],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = node.schema();
        let on = keys
            .iter()
            .map(|(build, index)| {
                let probe: PhysicalExprRef =
                    Arc::new(Column::new(schema.field(*index).name(), *index));
                (Arc::clone(build), probe)
            })
            .collect();
        self.join
            .builder()
            .with_type(JoinType::RightSemi)
            .with_on(on)
            .with_filter(None)
            .with_projection(None)
            .with_fetch(None)
            .with_new_children(vec![Arc::clone(self.join.left()), Arc::clone(node)])?
            .reset_state()
            .recompute_properties()
            .build_exec()
    }
}

/// The `keys` whose probe columns `to_input` maps, mapped; `None` when none
/// does. A row must match the build side on all keys to be kept above, so
/// on some of them too: reducing on fewer keys keeps a superset. (TPC-H q2
/// matches parts and their lowest cost: the cost, an aggregate, does not
/// reach below the aggregation; the part does.)
fn keys_through(keys: &[Key], to_input: impl Fn(usize) -> Option<usize>) -> Option<Vec<Key>> {
    let mapped: Vec<Key> = keys
        .iter()
        .filter_map(|(build, index)| Some((Arc::clone(build), to_input(*index)?)))
        .collect();
    (!mapped.is_empty()).then_some(mapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::execution_plan::reset_plan_states;
    use datafusion::physical_plan::{collect, displayable, Partitioning};
    use datafusion::prelude::{SessionConfig, SessionContext};

    use crate::build_job_graph;
    use crate::test_tables::{key_value_table, physical_plan, sorted_lines};

    /// A small table `b` and a larger `p`, planned in two partitions, joins
    /// collected up to `collected_rows` estimated build rows.
    fn context(collected_rows: usize) -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(2);
        let optimizer = &mut config.options_mut().optimizer;
        optimizer.hash_join_single_partition_threshold_rows = collected_rows;
        optimizer.enable_dynamic_filter_pushdown = false;
        let ctx = SessionContext::new_with_config(config);
        let small: Vec<_> = (0..8)
            .map(|i| (Some(i % 5), i))
            .chain([(None, 9)])
            .collect();
        let big: Vec<_> = (0..60)
            .map(|i| (Some(i % 11), i % 7))
            .chain([(None, 1), (None, 5)])
            .collect();
        ctx.register_table("b", Arc::new(key_value_table(&small, 2)))
            .unwrap();
        ctx.register_table("b1", Arc::new(key_value_table(&small, 1)))
            .unwrap();
        ctx.register_table("p", Arc::new(key_value_table(&big, 2)))
            .unwrap();
        ctx
    }

    /// The plan of `sql` and the same reduced, with their answers, which
    /// must agree.
    async fn reduced(ctx: &SessionContext, sql: &str) -> (String, Arc<dyn ExecutionPlan>) {
        reduced_plan(ctx, sql, physical_plan(ctx, sql).await).await
    }

    async fn reduced_plan(
        ctx: &SessionContext,
        sql: &str,
        plan: Arc<dyn ExecutionPlan>,
    ) -> (String, Arc<dyn ExecutionPlan>) {
        let expected = collect(
            reset_plan_states(Arc::clone(&plan)).unwrap(),
            ctx.task_ctx(),
        )
        .await
        .unwrap();
        let rewritten = reduce_shuffles(plan).unwrap();
        let shown = displayable(rewritten.as_ref()).indent(true).to_string();
        // Each reader of the shared build side gets a copy of its own: in
        // one process a repartition runs once.
        let unshared = reset_plan_states(Arc::clone(&rewritten)).unwrap();
        let actual = collect(unshared, ctx.task_ctx()).await.unwrap();
        assert_eq!(
            sorted_lines(&actual),
            sorted_lines(&expected),
            "{sql}:\n{shown}"
        );
        (shown, rewritten)
    }

    /// Stages whose plan scans `b` with a filter: the build side.
    fn build_stages(plan: Arc<dyn ExecutionPlan>) -> usize {
        let graph = build_job_graph(plan, &Default::default())
            .map_err(|e| e.to_string())
            .unwrap();
        graph
            .stages
            .iter()
            .filter(|stage| {
                let shown = displayable(stage.plan.as_ref()).indent(true).to_string();
                shown.contains("FilterExec")
            })
            .count()
    }

    #[tokio::test]
    async fn a_selective_collected_join_reduces_the_shuffles_below_it() {
        let ctx = context(1024);
        let queries = [
            // Inner: an aggregation by the key, shuffled between its steps.
            "SELECT a.k, a.s, b.v FROM (SELECT k, sum(v) AS s FROM p GROUP BY k) a \
             JOIN b ON a.k = b.k WHERE b.v > 4",
            // Semi: only the build side's keys matter.
            "SELECT * FROM (SELECT k, sum(v) AS s FROM p GROUP BY k) a \
             WHERE a.k IN (SELECT k FROM b WHERE v > 4)",
            // Two keys, one an aggregate: the group key alone reaches below
            // the aggregation.
            "SELECT * FROM b WHERE b.v > 4 AND EXISTS (SELECT 1 FROM \
             (SELECT k, min(v) AS m FROM p GROUP BY k) a WHERE a.k = b.k AND a.m < b.v)",
        ];
        for sql in queries {
            let (shown, rewritten) = reduced(&ctx, sql).await;
            let semis = shown.matches("join_type=RightSemi").count();
            assert!(semis >= 1, "{sql}:\n{shown}");
            // The reducing join sits below the shuffle, the build side is
            // computed by one stage.
            let below = shown.find("RepartitionExec: partitioning=Hash").unwrap();
            assert!(
                shown[below..].contains("join_type=RightSemi"),
                "{sql}:\n{shown}"
            );
            assert_eq!(build_stages(rewritten), 1, "{sql}:\n{shown}");
        }
    }

    #[tokio::test]
    async fn a_one_partition_build_side_over_a_small_table_is_computed_by_each_reducer() {
        let ctx = context(1024);
        let sql = "SELECT a.k, a.s, b1.v FROM (SELECT k, sum(v) AS s FROM p GROUP BY k) a \
                   JOIN b1 ON a.k = b1.k WHERE b1.v > 4";
        let (shown, rewritten) = reduced(&ctx, sql).await;
        let below = shown.find("RepartitionExec: partitioning=Hash").unwrap();
        assert!(shown[below..].contains("join_type=RightSemi"), "{shown}");
        // No stage of its own: the join's stage and the reducing one each
        // filter `b1`.
        assert_eq!(build_stages(rewritten), 2, "{shown}");
    }

    #[tokio::test]
    async fn a_limited_aggregation_keeps_the_rows_it_sees() {
        let ctx = context(1024);
        // The keys with the three highest maxima: reduced before the
        // aggregation, other keys would make the top three.
        let sql = "SELECT a.k, a.s FROM (SELECT k, max(v) AS s FROM p GROUP BY k \
                   ORDER BY max(v) DESC LIMIT 3) a JOIN b ON a.k = b.k WHERE b.v > 4";
        let plan = physical_plan(&ctx, sql).await;
        let join = plan.downcast_ref::<HashJoinExec>().unwrap();
        let mut limited = None;
        plan.apply(|node| {
            let aggregate = node.downcast_ref::<AggregateExec>();
            if aggregate.is_some_and(|a| a.limit_options().is_some()) && limited.is_none() {
                limited = Some(Arc::clone(node));
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        let limited = limited.expect("a limited aggregation");
        let key: Key = (Arc::new(Column::new("k", 0)), 0);
        let reducer = Reducer { join };
        let below = |node: &Arc<dyn ExecutionPlan>| reducer.below(node, vec![key.clone()], false);
        assert!(below(&limited).unwrap().is_none());
        // The same aggregation without its limit is reduced below its
        // shuffle.
        let unlimited: Arc<dyn ExecutionPlan> = Arc::new(
            limited
                .downcast_ref::<AggregateExec>()
                .unwrap()
                .with_new_limit_options(None),
        );
        let reduced = below(&unlimited).unwrap().expect("reduced");
        let shown = displayable(reduced.as_ref()).indent(true).to_string();
        assert!(shown.contains("join_type=RightSemi"), "{shown}");
    }

    #[tokio::test]
    async fn a_build_side_without_a_filter_reduces_nothing() {
        let ctx = context(1024);
        let sql = "SELECT a.k, a.s, b.v FROM (SELECT k, sum(v) AS s FROM p GROUP BY k) a \
                   JOIN b ON a.k = b.k";
        let (shown, _) = reduced(&ctx, sql).await;
        assert!(!shown.contains("join_type=RightSemi"), "{shown}");
    }

    /// `b` and `p` of `context` as Parquet files, whose footers give the
    /// column bounds DataFusion estimates a filter's rows from.
    async fn parquet_context(dir: &std::path::Path) -> SessionContext {
        use datafusion::parquet::arrow::ArrowWriter;
        let memory = context(1024);
        let ctx = SessionContext::new_with_config(memory.copied_config());
        for table in ["b", "p"] {
            let batches = memory.table(table).await.unwrap().collect().await.unwrap();
            let path = dir.join(format!("{table}.parquet"));
            let file = std::fs::File::create(&path).unwrap();
            let mut writer = ArrowWriter::try_new(file, batches[0].schema(), None).unwrap();
            for batch in &batches {
                writer.write(batch).unwrap();
            }
            writer.close().unwrap();
            ctx.register_parquet(table, path.to_str().unwrap(), Default::default())
                .await
                .unwrap();
        }
        ctx
    }

    #[tokio::test]
    async fn a_filter_estimated_to_keep_most_rows_reduces_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = parquet_context(dir.path()).await;
        let sql = |filter: &str| {
            format!(
                "SELECT a.k, a.s, b.v FROM (SELECT k, sum(v) AS s FROM p GROUP BY k) a \
                 JOIN b ON a.k = b.k WHERE {filter}"
            )
        };
        // `v` runs from 0 to 9: by its bounds every row passes the first.
        let (shown, _) = reduced(&ctx, &sql("b.v > -1")).await;
        assert!(!shown.contains("join_type=RightSemi"), "{shown}");
        let (shown, _) = reduced(&ctx, &sql("b.v > 7")).await;
        assert!(shown.contains("join_type=RightSemi"), "{shown}");
    }

    /// `plan`, a collected join whose probe side is hashed on its keys, as
    /// a partitioned one: the build side hash-shuffled on its keys.
    fn partitioned(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        let join = plan.downcast_ref::<HashJoinExec>().unwrap();
        let left_keys = join.on().iter().map(|(l, _)| Arc::clone(l)).collect();
        let merged = join
            .left()
            .downcast_ref::<CoalescePartitionsExec>()
            .unwrap();
        let left =
            RepartitionExec::try_new(Arc::clone(merged.input()), Partitioning::Hash(left_keys, 2))
                .unwrap();
        join.builder()
            .with_partition_mode(PartitionMode::Partitioned)
            .with_new_children(vec![Arc::new(left), Arc::clone(join.right())])
            .unwrap()
            .build_exec()
            .unwrap()
    }

    #[tokio::test]
    async fn keys_from_a_selective_build_side_reduce_the_other_input_of_a_partitioned_join() {
        let ctx = context(1024);
        // `l`'s keys all come from the filtered `b`.
        let sql = "SELECT l.k, l.v, a.s FROM \
                   (SELECT p.k, p.v FROM p JOIN b ON p.k = b.k WHERE b.v > 5) l \
                   JOIN (SELECT k, sum(v) AS s FROM p GROUP BY k) a ON l.k = a.k";
        let plan = partitioned(physical_plan(&ctx, sql).await);
        let (shown, rewritten) = reduced_plan(&ctx, sql, plan).await;
        assert!(shown.contains("mode=Partitioned"), "{shown}");
        // The aggregation is reduced before its shuffle, by `b`'s keys.
        let aggregation = shown.find("AggregateExec: mode=FinalPartitioned").unwrap();
        let below = &shown[aggregation..];
        let shuffle = below.find("RepartitionExec").unwrap();
        assert!(below[shuffle..].contains("join_type=RightSemi"), "{shown}");
        assert_eq!(build_stages(rewritten), 1, "{shown}");
    }
}
