//! Cutting a DataFusion physical plan into stages.
//!
//! The rule:
//! - at every `RepartitionExec` (hash or round robin) the plan is shuffled:
//!   the repartition and its input become a producer stage whose tasks
//!   route rows to one channel per consumer partition, and the consumer reads
//!   it through a `StageReadExec` in shuffle mode (an order-preserving
//!   repartition becomes a plain one: the operators above are planned
//!   again without the order, and a sort goes only below one that
//!   requires it, see `cut_ordered_shuffle`);
//! - below every `CoalescePartitionsExec` / `SortPreservingMergeExec` the
//!   input becomes a producer stage and the merge stays in the consumer,
//!   reading each upstream task through a `StageReadExec` in merge mode;
//! - a merge-mode input goes whole to each consumer task that executes the
//!   merge, on a channel of its own (`readers`): one channel when a single
//!   task reads it, a broadcast when it is the build side of a collected
//!   join executed by several tasks.
//!
//! Joins that emit build-side rows once probing ends (left, semi, anti,
//! full with a collected build side) first see their whole probe side:
//! reduced to the matching rows, partitioned, or merged (see `build_side`).
//! A build side the reduction shares between two joins is cut once: its
//! stage then feeds two consumer stages, each on channels of its own. So is
//! a selective build side that first reduces the shuffles below its join
//! (`reduced_shuffles`, applied before cutting). A hash shuffle whose keys
//! a shuffle below holds is folded into it first (`subset_key_shuffles`).
//!
//! Only operators on the allow-list (`allow_list`) are split; any other
//! runs with its whole subtree in one task, or the query is refused.
//!
//! With these cuts no stage holds an operator that reads all partitions of
//! its input except above a merge-mode read, so running each output
//! partition as an independent task computes exactly the single-node answer.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::physical_expr::LexOrdering;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::partial_sort::PartialSortExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    displayable, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};
use squadron_exec::plan::stage_read::{
    equal_column_classes, hash_partition_columns, uniform_constant_columns,
};
use squadron_exec::plan::{encode_plan, StageReadExec};
use squadron_proto::v1::ReadMode;

use super::allow_list::{split_rule, Split};
use super::build_side::{gather_probe_side, ProbeSide};
use super::children::with_children_rewritten;
use super::job_graph::{JobGraph, Stage, StageOutput};
use super::readers::assign_readers;

/// `plan` without a top-level coalesce that has no limit: the job output
/// merges the final tasks' streams itself, so that coalesce would only add
/// a hop (so would a merge of one partition where it runs once:
/// `one_partition_merge_input`).
pub fn without_output_merge(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    Ok(match plan.downcast_ref::<CoalescePartitionsExec>() {
        Some(coalesce) if coalesce.fetch().is_none() => Arc::clone(coalesce.input()),
        _ => plan,
    })
}

/// Cuts `plan`, rewritten by the passes before it (`pipeline`), into a
/// job graph: producer stages at its shuffles and merges, each read by
/// its consumers through `StageReadExec`s, their channels assigned. With
/// `share_identical_shuffles` (`squadron.shared_shuffles`), a shuffle of a
/// subtree met twice is one stage read by both.
pub fn cut_into_stages(
    plan: Arc<dyn ExecutionPlan>,
    share_identical_shuffles: bool,
) -> Result<JobGraph> {
    let mut cutter = Cutter {
        runs_once: true,
        share_identical_shuffles,
        ..Cutter::default()
    };
    cutter.share_repeated_merges(&plan);
    let root = cutter.cut(plan)?;
    cutter.widen_shared_shuffles()?;
    let tasks = root.output_partitioning().partition_count();
    let final_id = cutter.stages.len();
    cutter.stages.push(Stage {
        id: final_id,
        inputs: read_stages(&root),
        plan: Stage::rooted(root, StageOutput::JobOutput)?,
        tasks,
        encoded: Default::default(),
    });
    let mut stages = cutter.stages;
    assign_readers(&mut stages)?;
    Ok(JobGraph { stages })
}

#[derive(Default)]
struct Cutter {
    stages: Vec<Stage>,
    /// Subtrees that appear under two joins (`build_side`), by address,
    /// with what cutting them gave once it did. The subtree itself is
    /// kept so that its address cannot be reused by another node.
    shared: HashMap<usize, SharedSubtree>,
    /// Whether the node being cut runs once, in one task: every operator
    /// above it, down from the result, has one partition and none is a
    /// shuffle.
    runs_once: bool,
    /// Whether `shuffles` is consulted (`cut_into_stages`).
    share_identical_shuffles: bool,
    /// Shuffles cut so far, by their subtree as displayed: the same
    /// subtree met again (a CTE or view the query uses twice) is read from
    /// the stage cut the first time, on a range of channels of its own.
    shuffles: HashMap<String, SharedShuffle>,
}

/// A shuffle stage and the reads of it handed out.
struct SharedShuffle {
    /// The subtree it was cut from, as planned.
    subtree: Arc<dyn ExecutionPlan>,
    /// The first read (channels `0..partitions`).
    read: StageReadExec,
    stage: usize,
    partitions: usize,
    /// Reads handed out: the stage writes `partitions * readers` channels.
    readers: usize,
}

/// A subtree two joins read, and what cutting it gave once it was cut.
struct SharedSubtree {
    _kept: Arc<dyn ExecutionPlan>,
    cut: Option<Arc<dyn ExecutionPlan>>,
}

/// The input of a merge without a limit that reads one partition: the
/// merge passes it through unchanged. Where it runs once (`runs_once`), the
/// one task above computes that input itself rather than reading it from a
/// one-task stage of its own, a round of tasks and a hop fewer (TPC-H q22's
/// anti join ran alone before the task that finishes the query). Under
/// several partitions the input could run once per task (a collected
/// join's build side), so that merge stays a stage read by all of them.
fn one_partition_merge_input(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let input = if let Some(merge) = plan.downcast_ref::<CoalescePartitionsExec>() {
        merge.fetch().is_none().then(|| merge.input())?
    } else {
        let merge = plan.downcast_ref::<SortPreservingMergeExec>()?;
        merge.fetch().is_none().then(|| merge.input())?
    };
    (input.output_partitioning().partition_count() == 1).then(|| Arc::clone(input))
}

/// `plan`, its children rewritten by cutting, with a sort below it where
/// an input no longer delivers the order `plan` requires of it: a
/// shuffle read promises none (`cut_ordered_shuffle`), nor does what the
/// operators above it become when rebuilt. A merge-mode read is left as
/// it is: each of its partitions is one producer task's stream, in the
/// producer's order, whose requirement was met before it was cut.
fn sorted_where_required(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(partial) = plan.downcast_ref::<PartialSortExec>() {
        return Ok(whole_sort_if_unsorted(partial)?.unwrap_or(plan));
    }
    let mut sorted = false;
    let mut children = Vec::with_capacity(plan.children().len());
    for (child, required) in plan
        .children()
        .into_iter()
        .zip(plan.required_input_ordering())
    {
        let merge_read = child
            .downcast_ref::<StageReadExec>()
            .is_some_and(|read| read.mode() == ReadMode::Merge);
        let unmet = match required {
            Some(required) if !merge_read => {
                let required = required.into_single();
                (!child
                    .equivalence_properties()
                    .ordering_satisfy_requirement(required.clone())?)
                .then(|| LexOrdering::from(required))
            }
            _ => None,
        };
        children.push(match unmet {
            Some(ordering) => {
                sorted = true;
                let sort = SortExec::new(ordering, Arc::clone(child))
                    .with_preserve_partitioning(child.output_partitioning().partition_count() > 1);
                Arc::new(sort) as Arc<dyn ExecutionPlan>
            }
            None => Arc::clone(child),
        });
    }
    if !sorted {
        return Ok(plan);
    }
    #[allow(deprecated)]
    plan.with_new_children(children)
}

/// A partial sort orders rows within runs of its input's order (a prefix
/// of its own) and declares no requirement for it: over an input that
/// lost that order it becomes a whole sort.
fn whole_sort_if_unsorted(partial: &PartialSortExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let input = partial.input();
    let prefix = partial.expr()[..partial.common_prefix_length()].to_vec();
    if input.equivalence_properties().ordering_satisfy(prefix)? {
        return Ok(None);
    }
    let sort = SortExec::new(partial.expr().clone(), Arc::clone(input))
        .with_preserve_partitioning(partial.preserve_partitioning())
        .with_fetch(partial.fetch());
    Ok(Some(Arc::new(sort)))
}

fn address(plan: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(plan) as *const () as usize
}

impl Cutter {
    /// Registers every merge the plan reaches more than once (a build side
    /// that `reduced_shuffles` also gave to the joins reducing shuffles):
    /// cut once, it is one stage that each of its readers reads.
    fn share_repeated_merges(&mut self, plan: &Arc<dyn ExecutionPlan>) {
        let mut seen = HashSet::new();
        let _ = plan.apply(|node| {
            if node.is::<CoalescePartitionsExec>() && !seen.insert(address(node)) {
                self.shared
                    .entry(address(node))
                    .or_insert_with(|| SharedSubtree {
                        _kept: Arc::clone(node),
                        cut: None,
                    });
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }

    /// Cuts `plan`, or gives what cutting it gave before when it is a
    /// shared subtree: one producer stage then feeds both consumers.
    fn cut(&mut self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let address = address(&plan);
        if let Some(done) = self.shared.get(&address).and_then(|s| s.cut.as_ref()) {
            return Ok(Arc::clone(done));
        }
        let shuffle = (self.share_identical_shuffles && plan.is::<RepartitionExec>())
            .then(|| displayable(plan.as_ref()).indent(true).to_string());
        if let Some(read) = shuffle
            .as_ref()
            .and_then(|k| self.shared_shuffle_read(k, &plan))
        {
            return Ok(read);
        }
        let subtree = Arc::clone(&plan);
        let done = self.cut_unshared(plan)?;
        if let Some(shared) = self.shared.get_mut(&address) {
            shared.cut = Some(Arc::clone(&done));
        }
        if let (Some(key), Some(read)) = (shuffle, done.downcast_ref::<StageReadExec>()) {
            if read.mode() == ReadMode::Shuffle && read.first_channel() == 0 {
                self.shuffles.entry(key).or_insert_with(|| SharedShuffle {
                    subtree,
                    read: read.with_readers(vec![], 0),
                    stage: read.stage_id() as usize,
                    partitions: read.partitions(),
                    readers: 1,
                });
            }
        }
        Ok(done)
    }

    /// Another read of the shuffle cut before from a subtree displayed as
    /// `key` that is `plan`, on the next range of its channels. Display
    /// leaves things out (the rows of an in-memory source), so the two
    /// must also encode alike, as a worker would receive them (a plan that
    /// does not encode is not shared). Reading one stage twice
    /// saves computing it twice (TPC-H q15 scanned `lineitem` once per use
    /// of its CTE); its producer never waits for a reader while another
    /// waits (`stream::channel`), so a consumer that reads its copy late
    /// (the probe side of a join whose build side reads the other) only
    /// makes that copy queue, or spill.
    fn shared_shuffle_read(
        &mut self,
        key: &str,
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let shared = self.shuffles.get_mut(key)?;
        let encoded = |plan: &Arc<dyn ExecutionPlan>| encode_plan(Arc::clone(plan)).ok();
        match (encoded(&shared.subtree), encoded(plan)) {
            (Some(first), Some(again)) if first == again => {}
            _ => return None,
        }
        let first_channel = (shared.partitions * shared.readers) as u32;
        shared.readers += 1;
        Some(Arc::new(shared.read.with_readers(vec![], first_channel)))
    }

    /// Gives each shuffle read more than once one range of channels per
    /// read.
    fn widen_shared_shuffles(&mut self) -> Result<()> {
        for shared in self.shuffles.values().filter(|s| s.readers > 1) {
            self.stages[shared.stage].set_output(StageOutput::Repartition {
                channels: shared.partitions * shared.readers,
            })?;
        }
        Ok(())
    }

    fn cut_unshared(&mut self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        if split_rule(&plan)? == Split::WholeInOneTask {
            return Ok(plan);
        }
        let ProbeSide { plan, shared_build } = gather_probe_side(plan)?;
        if let Some(build) = shared_build {
            self.shared
                .entry(address(&build))
                .or_insert_with(|| SharedSubtree {
                    _kept: Arc::clone(&build),
                    cut: None,
                });
        }
        let shared = self.shared.contains_key(&address(&plan));
        let runs_once = self.runs_once
            && plan.output_partitioning().partition_count() == 1
            && !plan.is::<RepartitionExec>();
        let above = std::mem::replace(&mut self.runs_once, runs_once);
        let plan = with_children_rewritten(plan, |child| self.cut(Arc::clone(child)));
        self.runs_once = above;
        let plan = sorted_where_required(plan?)?;

        if let Some(repartition) = plan.downcast_ref::<RepartitionExec>() {
            return self.cut_shuffle(&plan, repartition);
        }
        if plan.is::<CoalescePartitionsExec>() || plan.is::<SortPreservingMergeExec>() {
            if runs_once && !shared {
                if let Some(input) = one_partition_merge_input(&plan) {
                    return Ok(input);
                }
            }
            return self.cut_merge(plan);
        }
        Ok(plan)
    }

    /// The repartition and its input become a producer stage.
    fn cut_shuffle(
        &mut self,
        plan: &Arc<dyn ExecutionPlan>,
        repartition: &RepartitionExec,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // A repartition of one input partition keeps its input's order
        // without the preserve-order flag; the operators above were planned
        // on that order just the same.
        if repartition.preserve_order() || plan.output_ordering().is_some() {
            return self.cut_ordered_shuffle(repartition);
        }
        self.cut_plain_shuffle(plan, repartition)
    }

    /// The repartition and its input become a producer stage; the consumer
    /// reads its rows in whatever order they arrive.
    fn cut_plain_shuffle(
        &mut self,
        plan: &Arc<dyn ExecutionPlan>,
        repartition: &RepartitionExec,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let channels = match repartition.partitioning() {
            Partitioning::Hash(_, n) | Partitioning::RoundRobinBatch(n) => *n,
            other => {
                return Err(DataFusionError::NotImplemented(format!(
                    "distributing partitioning {other}"
                )))
            }
        };
        let tasks = repartition.input().output_partitioning().partition_count();
        let id = self.push_stage(
            Arc::clone(plan),
            tasks,
            StageOutput::Repartition { channels },
        )?;
        let read = StageReadExec::new(id as u32, ReadMode::Shuffle, channels, plan.schema());
        let hashed = hash_partition_columns(plan.output_partitioning(), channels);
        Ok(Arc::new(
            read.with_constants(&constants_of(plan))?
                .with_equal_columns(&equal_column_classes(plan.equivalence_properties()))?
                .hashed_on(&hashed)?,
        ))
    }

    /// An order-preserving repartition merges, per output partition, the
    /// sorted rows every input partition routes to it (or, with one input
    /// partition, keeps them in order). Across processes the rows of one
    /// channel arrive from many tasks in no fixed order, so the shuffle is
    /// a plain one and its read promises no order. DataFusion kept the
    /// order only because the scan below had it (files that record their
    /// sort order): the operators above are rebuilt over the read
    /// (`with_children_rewritten` recomputes them), so an aggregate that
    /// streamed sorted groups hashes them instead, and only an operator
    /// that requires the order gets a sort below it
    /// (`sorted_where_required`). Sorting every shuffled partition instead
    /// (as before) cost TPC-H q3 at SF10 a sort of 32 M `lineitem` rows
    /// to save a hash aggregate.
    fn cut_ordered_shuffle(
        &mut self,
        repartition: &RepartitionExec,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plain = Arc::new(RepartitionExec::try_new(
            Arc::clone(repartition.input()),
            repartition.partitioning().clone(),
        )?);
        self.cut_plain_shuffle(&(Arc::clone(&plain) as Arc<dyn ExecutionPlan>), &plain)
    }

    /// The merge's input becomes a producer stage; the merge stays here.
    fn cut_merge(&mut self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let input = Arc::clone(plan.children()[0]);
        let tasks = input.output_partitioning().partition_count();
        let schema = input.schema();
        // The channel count is set once the readers are known (`readers`).
        let constants = constants_of(&input);
        let equal = equal_column_classes(input.equivalence_properties());
        let hashed = hash_partition_columns(input.output_partitioning(), tasks);
        let id = self.push_stage(input, tasks, StageOutput::Broadcast { channels: 1 })?;
        let read = StageReadExec::new(id as u32, ReadMode::Merge, tasks, schema);
        let read = Arc::new(
            read.with_constants(&constants)?
                .with_equal_columns(&equal)?
                .hashed_on(&hashed)?,
        );
        #[allow(deprecated)]
        plan.with_new_children(vec![read])
    }

    fn push_stage(
        &mut self,
        plan: Arc<dyn ExecutionPlan>,
        tasks: usize,
        output: StageOutput,
    ) -> Result<usize> {
        let id = self.stages.len();
        self.stages.push(Stage {
            id,
            inputs: read_stages(&plan),
            plan: Stage::rooted(plan, output)?,
            tasks,
            encoded: Default::default(),
        });
        Ok(id)
    }
}

/// The stages a fragment reads from, in plan order.
fn read_stages(plan: &Arc<dyn ExecutionPlan>) -> Vec<usize> {
    let mut out = vec![];
    collect_reads(plan, &mut out);
    out
}

fn collect_reads(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<usize>) {
    if let Some(read) = plan.downcast_ref::<StageReadExec>() {
        out.push(read.stage_id() as usize);
    }
    for child in plan.children() {
        collect_reads(child, out);
    }
}

/// What the read replacing `plan` keeps of its properties: the columns
/// constant across the whole stream. The operators above were planned
/// knowing them (DataFusion drops a sort on a column a filter fixed), so a
/// read that forgot them would fail those operators' checks on the worker.
fn constants_of(plan: &Arc<dyn ExecutionPlan>) -> Vec<(usize, Option<ScalarValue>)> {
    uniform_constant_columns(plan.equivalence_properties())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::physical_plan::displayable;
    use datafusion::physical_plan::joins::HashJoinExec;
    use datafusion::prelude::{col, SessionConfig, SessionContext};

    use crate::build_job_graph;
    use crate::test_tables::{key_value_table, physical_plan};

    /// A collected join of `b` (one partition) with `p`, its build side
    /// behind a merge of that one partition.
    async fn join_over_merged_build_side(p_partitions: usize) -> Arc<dyn ExecutionPlan> {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let rows: Vec<_> = (0..20).map(|i| (Some(i % 6), i)).collect();
        ctx.register_table("b", Arc::new(key_value_table(&rows[..8], 1)))
            .unwrap();
        ctx.register_table("p", Arc::new(key_value_table(&rows, p_partitions)))
            .unwrap();
        let plan = physical_plan(&ctx, "SELECT * FROM b JOIN p ON b.k = p.k").await;
        plan.transform_down(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            let merged: Arc<dyn ExecutionPlan> =
                Arc::new(CoalescePartitionsExec::new(Arc::clone(join.left())));
            #[allow(deprecated)]
            let join =
                Arc::clone(&node).with_new_children(vec![merged, Arc::clone(join.right())])?;
            Ok(Transformed::new(join, true, TreeNodeRecursion::Stop))
        })
        .unwrap()
        .data
    }

    /// Table `s`: `(k, v)` rows in two partitions, each declared sorted
    /// on `(k, v)` (as files that record their order are); DataFusion
    /// keeps that order rather than sorting where `prefer_existing_sort`.
    async fn sorted_partitions(prefer_existing_sort: bool) -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(2);
        config.options_mut().optimizer.prefer_existing_sort = prefer_existing_sort;
        let ctx = SessionContext::new_with_config(config);
        let rows: Vec<_> = (0..40).map(|i| (Some(i / 4), i)).collect();
        let order = vec![vec![col("k").sort(true, false), col("v").sort(true, false)]];
        let table = key_value_table(&rows, 2).with_sort_order(order);
        ctx.register_table("s", Arc::new(table)).unwrap();
        ctx
    }

    /// The plan of `sql` over `sorted_partitions`, asserted to shuffle
    /// with an order-preserving repartition (the case under test), cut.
    async fn cut_ordered_shuffle_of(sql: &str, prefer_existing_sort: bool) -> String {
        let ctx = sorted_partitions(prefer_existing_sort).await;
        let plan = physical_plan(&ctx, sql).await;
        let single = displayable(plan.as_ref()).indent(true).to_string();
        assert!(single.contains("preserve_order=true"), "{single}");
        build_job_graph(plan, &Default::default())
            .unwrap()
            .display_compact()
    }

    #[tokio::test]
    async fn an_ordered_shuffle_read_is_not_sorted_when_nothing_above_requires_it() {
        let graph = cut_ordered_shuffle_of("SELECT k, sum(v) FROM s GROUP BY k", false).await;
        assert!(!graph.contains("SortExec"), "{graph}");
        // The producer streams its sorted groups; the consumer, reading
        // rows in no order, hashes them.
        assert_eq!(graph.matches("ordering_mode=Sorted").count(), 1, "{graph}");
        assert!(
            graph.contains("mode=Partial, gby=[k@0 as k], aggr=[sum(s.v)], ordering_mode=Sorted"),
            "{graph}"
        );
    }

    #[tokio::test]
    async fn an_operator_that_requires_the_order_gets_a_sort_over_the_read() {
        let graph = cut_ordered_shuffle_of(
            "SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v) AS n FROM s",
            true,
        )
        .await;
        let lines: Vec<&str> = graph.lines().map(str::trim).collect();
        let window = lines
            .iter()
            .position(|l| l.starts_with("BoundedWindowAggExec"))
            .unwrap_or_else(|| panic!("{graph}"));
        assert!(
            lines[window + 1]
                .starts_with("SortExec: expr=[k@0 ASC NULLS LAST, v@1 ASC NULLS LAST]"),
            "{graph}"
        );
        assert!(lines[window + 2].starts_with("StageReadExec"), "{graph}");
    }

    #[tokio::test]
    async fn a_merge_of_one_partition_under_a_one_task_result_is_no_stage() {
        let plan = join_over_merged_build_side(1).await;
        assert_eq!(plan.output_partitioning().partition_count(), 1);
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        assert_eq!(graph.stages.len(), 1, "{}", graph.display_compact());
    }

    #[tokio::test]
    async fn a_build_side_read_by_several_tasks_stays_a_stage() {
        // Each of the join's two tasks would compute it again.
        let plan = join_over_merged_build_side(2).await;
        assert_eq!(plan.output_partitioning().partition_count(), 2);
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        assert_eq!(graph.stages.len(), 2, "{}", graph.display_compact());
    }

    #[tokio::test]
    async fn a_subtree_planned_twice_is_one_shuffle_stage_read_twice() {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let rows: Vec<_> = (0..40).map(|i| (Some(i % 6), i)).collect();
        ctx.register_table("p", Arc::new(key_value_table(&rows, 2)))
            .unwrap();
        let sql = "WITH t AS (SELECT k, sum(v) AS s FROM p GROUP BY k) \
                   SELECT t.k FROM t JOIN (SELECT max(s) AS m FROM t) b ON t.s = b.m";
        let plan = physical_plan(&ctx, sql).await;
        let single = displayable(plan.as_ref()).indent(true).to_string();
        assert_eq!(single.matches("RepartitionExec").count(), 2, "{single}");
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let shown = graph.display_compact();
        let shuffles: Vec<&Stage> = graph
            .stages
            .iter()
            .filter(|s| matches!(s.output(), StageOutput::Repartition { .. }))
            .collect();
        assert_eq!(shuffles.len(), 1, "{shown}");
        assert_eq!(
            shuffles[0].output(),
            StageOutput::Repartition { channels: 4 },
            "{shown}"
        );
        let id = shuffles[0].id;
        let reads = |first_channel: &str| {
            shown
                .matches(&format!(
                    "StageReadExec: stage={id}, mode=shuffle, partitions=2{first_channel}\n"
                ))
                .count()
        };
        assert_eq!((reads(""), reads(", first_channel=2")), (1, 1), "{shown}");
    }

    #[tokio::test]
    async fn subtrees_that_display_alike_but_read_other_rows_are_not_shared() {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
        let rows: Vec<_> = (0..40).map(|i| (Some(i % 6), i)).collect();
        let other: Vec<_> = (0..40).map(|i| (Some(i % 5), i * 3)).collect();
        ctx.register_table("a", Arc::new(key_value_table(&rows, 2)))
            .unwrap();
        ctx.register_table("b", Arc::new(key_value_table(&other, 2)))
            .unwrap();
        let sql = "SELECT x.k FROM (SELECT k, sum(v) AS s FROM a AS t GROUP BY k) x \
                   JOIN (SELECT k, sum(v) AS s FROM b AS t GROUP BY k) y ON x.s = y.s";
        let plan = physical_plan(&ctx, sql).await;
        let mut shuffles = vec![];
        plan.apply(|node| {
            if node.is::<RepartitionExec>() {
                shuffles.push(displayable(node.as_ref()).indent(true).to_string());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .unwrap();
        assert_eq!(shuffles.len(), 2, "{shuffles:?}");
        assert_eq!(
            shuffles[0], shuffles[1],
            "the case under test: alike as displayed"
        );
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let repartitions = graph
            .stages
            .iter()
            .filter(|s| s.output() == StageOutput::Repartition { channels: 2 })
            .count();
        assert_eq!(repartitions, 2, "{}", graph.display_compact());
    }

    /// Tables `p` and `q` (keys 0..6 over 40 rows, 2 partitions each),
    /// every join partitioned.
    fn two_tables_joined_partitioned() -> SessionContext {
        let mut config = SessionConfig::new().with_target_partitions(2);
        crate::test_tables::without_collected_joins(&mut config);
        let ctx = SessionContext::new_with_config(config);
        let rows: Vec<_> = (0..40).map(|i| (Some(i % 6), i)).collect();
        for name in ["p", "q"] {
            ctx.register_table(name, Arc::new(key_value_table(&rows, 2)))
                .unwrap();
        }
        ctx
    }

    #[tokio::test]
    async fn a_read_keeps_the_equal_columns_of_a_join_below_the_cut() {
        let ctx = two_tables_joined_partitioned();
        // The aggregate's shuffle on (a, b) is cut above the join that
        // makes them equal.
        let sql = "SELECT a, b, count(*) FROM \
                   (SELECT p.k AS a, q.k AS b FROM p JOIN q ON p.k = q.k) GROUP BY a, b";
        let graph = build_job_graph(physical_plan(&ctx, sql).await, &Default::default()).unwrap();
        let equal_at_reads = |plan: &Arc<dyn ExecutionPlan>| {
            let mut equal = vec![];
            plan.apply(|node| {
                if let Some(read) = node.downcast_ref::<StageReadExec>() {
                    equal.extend(read.equal_columns());
                }
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            equal
        };
        let task_ctx = ctx.task_ctx();
        let (mut planned, mut decoded) = (vec![], vec![]);
        for stage in &graph.stages {
            planned.extend(equal_at_reads(&stage.plan));
            let bytes = encode_plan(Arc::clone(&stage.plan)).unwrap();
            let copy = squadron_exec::plan::decode_plan(&bytes, &task_ctx).unwrap();
            decoded.extend(equal_at_reads(&copy));
        }
        assert_eq!(planned, vec![vec![0, 1]], "{}", graph.display_compact());
        assert_eq!(
            decoded, planned,
            "the worker's copy of the read says so too"
        );
    }

    #[tokio::test]
    async fn a_read_keeps_a_known_constant_that_joins_two_sides_classes() {
        let ctx = two_tables_joined_partitioned();
        // Fuzzer finding 13 (a TLP union). Both sides' keys are 1, so
        // DataFusion puts them in one class (through the literal) and
        // passes the left side's partitioning on through `q.k`: the
        // branches of the union agree, and it is an interleave. The reads
        // below each join must say `k = 1` the same way, or the interleave
        // cannot be rebuilt over them.
        let branch = |condition: &str| {
            format!(
                "SELECT q.k FROM p a0 JOIN p a1 ON true LEFT JOIN q ON q.k = a0.k \
                 WHERE a0.k IN (1) AND {condition}"
            )
        };
        let sql = ["a1.v < q.v", "NOT (a1.v < q.v)", "(a1.v < q.v) IS NULL"]
            .map(branch)
            .join(" UNION ALL ");
        let plan = physical_plan(&ctx, &sql).await;
        let interleaves = |plan: &Arc<dyn ExecutionPlan>| {
            let mut found = 0;
            plan.apply(|node| {
                found += usize::from(node.name() == "InterleaveExec");
                Ok(TreeNodeRecursion::Continue)
            })
            .unwrap();
            found
        };
        assert_eq!(
            interleaves(&plan),
            1,
            "{}",
            displayable(plan.as_ref()).indent(true)
        );
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        let task_ctx = ctx.task_ctx();
        let mut decoded_interleaves = 0;
        for stage in &graph.stages {
            let bytes = encode_plan(Arc::clone(&stage.plan)).unwrap();
            let copy = squadron_exec::plan::decode_plan(&bytes, &task_ctx).unwrap();
            decoded_interleaves += interleaves(&copy);
        }
        assert_eq!(decoded_interleaves, 1, "{}", graph.display_compact());
    }
}
