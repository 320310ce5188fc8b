//! Dynamic filters in a task: a hash join's build side, once complete,
//! prunes the scans of its probe side; a TopK's threshold prunes the scan
//! below it.
//!
//! DataFusion wires these itself when a whole plan runs in one process,
//! but a task runs one partition of its stage's plan, and a hash join
//! publishes its filter only when every partition of its plan instance
//! has built: in a task it would wait forever. So the coordinator plans
//! without them (`planner::context`) and each task, on the worker, gets
//! its own: DataFusion's filter pushdown places a fresh filter in the
//! probe side's scans (`FilterPushdown`, post-optimization phase), then
//! each join's filter is published by a `BuildSideFilterExec` over its
//! build side instead of by the join.
//!
//! Sound because of what one task executes. A join collecting its build
//! side (CollectLeft: a broadcast, a small table) has all of it in every
//! task. A partitioned join in a task that executes one of its partitions
//! sees that partition's build rows, and every probe row computed in the
//! task flows to that partition or nowhere, so keys absent from it match
//! nothing the task produces; a partitioned join whose partitions are
//! merged in the task (below a coalesce or a merge) gets no filter. As in
//! DataFusion, only joins whose unmatched probe rows are not part of the
//! answer carry one.
//!
//! Where the probe key comes from another stage (a shuffle read, or the
//! build side of an inner join below whose inputs are shuffle reads), the
//! filter follows it there and a `FilterExec` over each stage read drops
//! the rows it rules out (`stage_reads`): for that the filter also lists
//! the build keys when there are at most 4,096 (`key IN (…)`), and, with
//! `squadron.bloom_filters`, holds a Bloom filter of them when there are
//! more (`bloom`).
//!
//! The filter arrives before the probe side is read: a hash join reads
//! its probe side only once its build side is collected, and its probe
//! side is executed (its scans opened) only then (`DeferredExec`). A scan
//! uses it to skip row groups; where another join lies between the scan
//! and the join, a `FilterExec` over the scan also drops its rows
//! (`scans_below_joins`). Where the probe side repeats a column name, a
//! filter is kept only where it landed on its key's own column (`origins`:
//! DataFusion 55 maps pushed filters by name). Such a filter stays in its
//! task, so it lists up
//! to 65,536 integer keys when they span less than a bitmap holds and are
//! sparse in it (`Membership::IN_TASK`).

mod build_side;
mod deferred;
mod origins;
mod row_form;
mod scans_below_joins;
mod stage_reads;
mod trial;

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{NullEquality, Result};
use datafusion::datasource::memory::DataSourceExec;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::physical_expr::expressions::{lit, Column, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

pub use build_side::{BuildSideFilterExec, FILTERS_PUBLISHED};
pub use deferred::DeferredExec;
use origins::{has_repeated_column_names, lands_on_its_keys};
use scans_below_joins::filter_scans_below_joins;
use stage_reads::filter_stage_reads;

use squadron_exec::key_filters::Membership;
use squadron_exec::squadron_options::SquadronOptions;

/// Whether a TopK (a sort with a limit) reads an input where an operator
/// outputs two columns of one name.
fn top_k_over_repeated_names(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut found = false;
    plan.apply(|node| {
        let top_k = node
            .downcast_ref::<datafusion::physical_plan::sorts::sort::SortExec>()
            .is_some_and(|sort| sort.fetch().is_some());
        if top_k && has_repeated_column_names(node)? {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// `task_plan` (executed for one partition) with dynamic filters wired,
/// when the session's `squadron.dynamic_filters` is on.
pub fn with_dynamic_filters(
    task_plan: Arc<dyn ExecutionPlan>,
    options: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    let squadron = SquadronOptions::of(options);
    if !squadron.dynamic_filters {
        return Ok(task_plan);
    }
    let bloom_filters = squadron.bloom_filters;
    let mut config = options.clone();
    let optimizer = &mut config.optimizer;
    optimizer.enable_join_dynamic_filter_pushdown = true;
    // A TopK's filter cannot be checked for where it lands (`origins`):
    // none over columns of repeated names.
    optimizer.enable_topk_dynamic_filter_pushdown = !top_k_over_repeated_names(&task_plan)?;
    // An aggregate's filter (min/max without grouping) is shared by its
    // partitions in one process; not wired here.
    optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    let plan = FilterPushdown::new_post_optimization().optimize(task_plan, &config)?;
    let single = joins_run_for_one_partition(&plan);
    // The filters published by a `BuildSideFilterExec`: a join is visited
    // before the scans below it.
    let mut published = HashSet::new();
    plan.transform_down(|node| {
        if let Some(scan) = without_bloom_filters(&node, &published)? {
            return Ok(Transformed::yes(scan));
        }
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        #[allow(deprecated)] // its replacement returns the filter type-erased
        let placed = join.dynamic_filter_expr().cloned();
        let probe_keys: Vec<_> = join
            .on()
            .iter()
            .map(|(_, probe)| Arc::clone(probe))
            .collect();
        let landed = match placed.as_ref().and_then(|f| f.expression_id()) {
            Some(id) if has_repeated_column_names(join.right())? => {
                lands_on_its_keys(join.right(), &probe_keys, id)?
            }
            _ => true,
        };
        let sound = filters_soundly(join)
            && landed
            && (*join.partition_mode() == PartitionMode::CollectLeft
                || single.contains(&identity(&node)));
        if !sound {
            // Without the join's own wait for partitions that never run.
            return match placed {
                Some(_) => Ok(Transformed::yes(join.builder().reset_state().build_exec()?)),
                None => Ok(Transformed::no(node)),
            };
        }
        // DataFusion places none where the probe key comes from a stage
        // read (it wants hash-partitioned inputs it can see).
        let filter = placed
            .clone()
            .unwrap_or_else(|| Arc::new(DynamicFilterPhysicalExpr::new(probe_keys, lit(true))));
        let id = filter.expression_id();
        let scanned = placed.is_some() && id.is_some_and(|id| holds(join.right(), id));
        let read = match join.on() {
            [(_, probe_key)] => match probe_key.downcast_ref::<Column>() {
                Some(key) => filter_stage_reads(join.right(), key.index(), &filter)?,
                None => None,
            },
            _ => None,
        };
        if !scanned && read.is_none() {
            return match placed {
                Some(_) => Ok(Transformed::yes(join.builder().reset_state().build_exec()?)),
                None => Ok(Transformed::no(node)),
            };
        }
        published.extend(id);
        let drops_rows_in_stage_reads = read.is_some();
        let mut probe = read.unwrap_or_else(|| Arc::clone(join.right()));
        let mut drops_rows_below_joins = false;
        if let (true, Some(id)) = (scanned, id) {
            let filtered = filter_scans_below_joins(&probe, id)?;
            drops_rows_below_joins = !Arc::ptr_eq(&filtered, &probe);
            probe = Arc::new(DeferredExec::new(filtered));
        }
        // A filter that drops rows (not only prunes row groups) drops them
        // by membership. Over a scan below another join, in this task, it
        // lists every tracked key: TPC-H q8 at SF10 joins 13,452 part keys
        // above the orders join, and ranges alone kept all of a task's 30 M
        // line items for the orders join to probe.
        let membership = if drops_rows_in_stage_reads {
            Membership::over_stage_reads(bloom_filters)
        } else if drops_rows_below_joins {
            Membership::IN_TASK
        } else {
            Membership::PRUNING
        };
        let (build_keys, probe_keys) = join.on().iter().cloned().unzip();
        let observed: Arc<dyn ExecutionPlan> = Arc::new(BuildSideFilterExec::new(
            Arc::clone(join.left()),
            build_keys,
            probe_keys,
            join.right().schema(),
            filter,
            membership,
        ));
        let rebuilt = join
            .builder()
            .reset_state()
            .with_new_children(vec![observed, probe])?
            .build_exec()?;
        Ok(Transformed::yes(rebuilt))
    })
    .map(|t| t.data)
}

/// `node`, when it is a Parquet scan holding one of the `published`
/// filters, reading no bloom filters: the reader checks them by evaluating
/// the whole predicate once per row group, and a filter of many ranges
/// made that cost more than the scan (TPC-H q20 at SF1: 175 ms of 230),
/// while ranges are what statistics prune, not bloom filters.
fn without_bloom_filters(
    node: &Arc<dyn ExecutionPlan>,
    published: &HashSet<u64>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(scan) = node.downcast_ref::<DataSourceExec>() else {
        return Ok(None);
    };
    let Some((config, parquet)) = scan.downcast_to_file_source::<ParquetSource>() else {
        return Ok(None);
    };
    let mut holds_published = false;
    node.apply_expressions(&mut |root| {
        root.apply(|expr| {
            holds_published = expr
                .expression_id()
                .is_some_and(|id| published.contains(&id));
            Ok(stop_if(holds_published))
        })
    })?;
    if !holds_published || !parquet.table_parquet_options().global.bloom_filter_on_read {
        return Ok(None);
    }
    let source = parquet.clone().with_bloom_filter_on_read(false);
    let config = FileScanConfigBuilder::from(config.clone())
        .with_source(Arc::new(source))
        .build();
    Ok(Some(DataSourceExec::from_data_source(config)))
}

fn stop_if(found: bool) -> TreeNodeRecursion {
    match found {
        true => TreeNodeRecursion::Stop,
        false => TreeNodeRecursion::Continue,
    }
}

/// Whether dropping the probe rows whose keys no build row holds leaves
/// the join's answer as it is: unmatched probe rows are not part of it
/// (inner, semi and anti joins on the build side, left joins), keys equal
/// only when neither is NULL (a `IS NOT DISTINCT FROM` join matches NULL
/// keys, which the filter drops), and not a null-aware anti join (whose
/// answer changes with whether the probe side is empty).
fn filters_soundly(join: &HashJoinExec) -> bool {
    // "Preserved" for ON-clause pushdown: a filter on the probe side may go
    // below the join (DataFusion's own condition for these filters).
    let (_, probe_preserved) = join.join_type().on_lr_is_preserved();
    probe_preserved && join.null_equality() == NullEquality::NullEqualsNothing && !join.null_aware
}

fn identity(plan: &Arc<dyn ExecutionPlan>) -> *const () {
    Arc::as_ptr(plan) as *const ()
}

/// Whether a scan (or other consumer) in `plan` holds the filter `id`:
/// without one, collecting the build keys would be wasted.
fn holds(plan: &Arc<dyn ExecutionPlan>, id: u64) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        node.apply_expressions(&mut |root| {
            root.apply(|expr| {
                found = expr.expression_id() == Some(id);
                Ok(stop_if(found))
            })
        })?;
        Ok(stop_if(found))
    });
    found
}

/// The hash joins of `plan` that execute one partition when `plan` does:
/// no operator above them merges or re-routes partitions.
fn joins_run_for_one_partition(plan: &Arc<dyn ExecutionPlan>) -> HashSet<*const ()> {
    fn visit(node: &Arc<dyn ExecutionPlan>, single: bool, found: &mut HashSet<*const ()>) {
        if single && node.is::<HashJoinExec>() {
            found.insert(identity(node));
        }
        let merges = node.is::<CoalescePartitionsExec>()
            || node.is::<SortPreservingMergeExec>()
            || node.is::<RepartitionExec>();
        let partitions = node.output_partitioning().partition_count();
        for child in node.children() {
            let child_partitions = child.output_partitioning().partition_count();
            let child_single =
                child_partitions == 1 || (single && !merges && child_partitions == partitions);
            visit(child, child_single, found);
        }
    }
    let mut found = HashSet::new();
    visit(plan, true, &mut found);
    found
}
