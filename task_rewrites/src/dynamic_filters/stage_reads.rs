//! A join's filter applied to rows read from other stages.
//!
//! DataFusion pushes a join's filter down by the probe key's own column
//! and stops at what cannot take it: a stage read, or the build side of a
//! join below, where the probe key comes from. TPC-H q18 at SF10 is that
//! shape: the semi join on the order keys of big orders (624 keys) probes
//! an orders ⋈ lineitem join whose inputs both arrive by shuffle, and the
//! inner join built 7.5 M orders per task and probed 30 M line items to
//! keep the rows of those 624. Here the filter follows the key through
//! projections, filters and inner joins (on both of a join's inputs when
//! the key is one of its join keys: its output keeps only rows where they
//! are equal) down to the stage reads, and a `FilterExec` over each read
//! drops the rows whose key the build side does not hold. Rows read before
//! the filter is published pass (the filter is `true` until then). The
//! read also sends the filter to the tasks producing its streams, which
//! then stop sending those rows (`plan::producer_filter`). Both give a
//! filter up once it has shown it keeps nearly every row (`trial`).

use std::sync::Arc;

use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::expressions::{Column, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{replace_children_if_necessary, ExecutionPlan};

use super::trial::TrialFilter;
use squadron_exec::plan::StageReadExec;

/// `plan` with `filter` (over the probe key, here column `key` of `plan`'s
/// output) applied above the stage reads the key comes from; `None` when
/// it reaches none.
pub fn filter_stage_reads(
    plan: &Arc<dyn ExecutionPlan>,
    key: usize,
    filter: &Arc<DynamicFilterPhysicalExpr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(read) = plan.downcast_ref::<StageReadExec>() {
        let field = plan.schema().field(key).name().clone();
        let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&field, key));
        let predicate = Arc::clone(filter).with_new_children(vec![column])?;
        let read = Arc::new(read.with_producer_filter(Arc::clone(&predicate)));
        let on_trial = Arc::new(TrialFilter::new(predicate));
        return Ok(Some(Arc::new(FilterExec::try_new(on_trial, read)?)));
    }
    // Nodes that pass every input row on unchanged, in the same columns.
    // (CoalesceBatchesExec, deprecated in DataFusion, by name.)
    let passes_rows = plan.name() == "CoalesceBatchesExec"
        || plan.is::<CooperativeExec>()
        || plan.is::<RepartitionExec>()
        || plan
            .downcast_ref::<SortExec>()
            .is_some_and(|sort| sort.fetch().is_none())
        || plan
            .downcast_ref::<CoalescePartitionsExec>()
            .is_some_and(|coalesce| coalesce.fetch().is_none());
    if passes_rows {
        return with_child(plan, 0, key, filter);
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let Some(source) = projection.projection_expr().iter().nth(key) else {
            return Ok(None);
        };
        let Some(column) = source.expr.downcast_ref::<Column>() else {
            return Ok(None);
        };
        return with_child(plan, 0, column.index(), filter);
    }
    if let Some(filter_exec) = plan.downcast_ref::<FilterExec>() {
        if let Some(placed) = placed_over_read(plan, filter_exec, filter)? {
            return Ok(Some(placed));
        }
        let input_key = match filter_exec.projection() {
            Some(projection) => match projection.get(key) {
                Some(index) => *index,
                None => return Ok(None),
            },
            None => key,
        };
        return with_child(plan, 0, input_key, filter);
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return through_join(plan, join, key, filter);
    }
    Ok(None)
}

/// DataFusion's `FilterExec` of this very filter over a stage read (it adds
/// one where a node it pushes the filter through keeps it above a child
/// that refuses it), with the read sending it to its producers; `None` for
/// any other filter.
fn placed_over_read(
    plan: &Arc<dyn ExecutionPlan>,
    filter_exec: &FilterExec,
    filter: &Arc<DynamicFilterPhysicalExpr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let predicate = filter_exec.predicate();
    let same =
        predicate.expression_id().is_some() && predicate.expression_id() == filter.expression_id();
    let Some(read) = filter_exec.input().downcast_ref::<StageReadExec>() else {
        return Ok(None);
    };
    if !same || !predicate.is::<DynamicFilterPhysicalExpr>() {
        return Ok(None);
    }
    let read: Arc<dyn ExecutionPlan> = Arc::new(read.with_producer_filter(Arc::clone(predicate)));
    if filter_exec.projection().is_some() {
        return Ok(Some(replace_children_if_necessary(
            Arc::clone(plan),
            vec![read],
        )?));
    }
    let on_trial = Arc::new(TrialFilter::new(Arc::clone(predicate)));
    Ok(Some(Arc::new(FilterExec::try_new(on_trial, read)?)))
}

/// `plan` with its child `child` filtered on its column `key`.
fn with_child(
    plan: &Arc<dyn ExecutionPlan>,
    child: usize,
    key: usize,
    filter: &Arc<DynamicFilterPhysicalExpr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let mut children: Vec<_> = plan.children().into_iter().cloned().collect();
    let Some(filtered) = filter_stage_reads(&children[child], key, filter)? else {
        return Ok(None);
    };
    children[child] = filtered;
    Ok(Some(replace_children_if_necessary(
        Arc::clone(plan),
        children,
    )?))
}

/// An inner join: the key's side, and the other side too when the key is
/// one of the join's keys.
fn through_join(
    plan: &Arc<dyn ExecutionPlan>,
    join: &HashJoinExec,
    key: usize,
    filter: &Arc<DynamicFilterPhysicalExpr>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if *join.join_type() != JoinType::Inner || join.filter().is_some() {
        return Ok(None);
    }
    let key = match &join.projection {
        Some(projection) => match projection.get(key) {
            Some(index) => *index,
            None => return Ok(None),
        },
        None => key,
    };
    let left_width = join.left().schema().fields().len();
    let (side, side_key) = match key < left_width {
        true => (0, key),
        false => (1, key - left_width),
    };
    let mut keys = [None, None];
    keys[side] = Some(side_key);
    // The other input's key where the join equates them.
    for (left, right) in join.on() {
        let (this, other) = match side {
            0 => (left, right),
            _ => (right, left),
        };
        let is_key = this
            .downcast_ref::<Column>()
            .is_some_and(|c| c.index() == side_key);
        if let (true, Some(other)) = (is_key, other.downcast_ref::<Column>()) {
            keys[1 - side] = Some(other.index());
        }
    }
    let mut children: Vec<_> = plan.children().into_iter().cloned().collect();
    let mut filtered_any = false;
    for (child, key) in keys.into_iter().enumerate() {
        let Some(key) = key else { continue };
        if let Some(filtered) = filter_stage_reads(&children[child], key, filter)? {
            children[child] = filtered;
            filtered_any = true;
        }
    }
    if !filtered_any {
        return Ok(None);
    }
    Ok(Some(replace_children_if_necessary(
        Arc::clone(plan),
        children,
    )?))
}
