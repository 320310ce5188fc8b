//! Where a column's values in partition *i* of an operator come from:
//! followed down through operators whose output partition *i* holds only
//! rows of one input's partition *i*, with the column passed unchanged,
//! to the table scan (or an input already split by key range) that
//! produced it.

use std::sync::Arc;

use datafusion::common::JoinType;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

/// The path from an operator down to the node a column comes from (child
/// indexes, top first), and that node's column.
#[derive(Debug, Clone)]
pub struct Traced {
    pub path: Vec<usize>,
    pub origin: Arc<dyn ExecutionPlan>,
    pub column: usize,
}

/// Follows `column` of `plan` down while it passes unchanged, partition by
/// partition; stops at a node with no such input (a scan, a split input,
/// a shuffle, a computed column, or an outer join's side that may be NULL
/// anywhere: such NULLs would not stay in one partition).
pub fn trace(plan: &Arc<dyn ExecutionPlan>, column: usize) -> Traced {
    let mut path = vec![];
    let mut node = Arc::clone(plan);
    let mut column = column;
    while let Some((child, child_column)) = passed_from(&node, column) {
        path.push(child);
        node = Arc::clone(node.children()[child]);
        column = child_column;
    }
    Traced {
        path,
        origin: node,
        column,
    }
}

/// The input (by index) and its column that `column` of `plan` is, when
/// `plan`'s partition *i* holds only rows of that input's partition *i*.
fn passed_from(plan: &Arc<dyn ExecutionPlan>, column: usize) -> Option<(usize, usize)> {
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let column = match filter.projection() {
            Some(projection) => *projection.get(column)?,
            None => column,
        };
        return Some((0, column));
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let expr = &projection.expr().get(column)?.expr;
        return Some((0, expr.downcast_ref::<Column>()?.index()));
    }
    if let Some(sort) = plan.downcast_ref::<SortExec>() {
        return sort.preserve_partitioning().then_some((0, column));
    }
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        let same_partitions = aggregate
            .properties()
            .output_partitioning()
            .partition_count()
            == aggregate.input().output_partitioning().partition_count();
        let groups = aggregate.group_expr();
        if !same_partitions || !groups.is_single() {
            return None;
        }
        let (expr, _) = groups.expr().get(column)?;
        return Some((0, expr.downcast_ref::<Column>()?.index()));
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        return passed_through_join(join, column);
    }
    None
}

/// A hash join passes a column of the input whose partition *i* its
/// partition *i* reads: either input of a partitioned join, the probe
/// (right) input of a collected one; and only from an input whose rows it
/// keeps as they are (an outer join's other side may be NULL anywhere).
fn passed_through_join(join: &HashJoinExec, column: usize) -> Option<(usize, usize)> {
    let column = match &join.projection {
        Some(projection) => *projection.get(column)?,
        None => column,
    };
    let left_columns = join.left().schema().fields().len();
    // The join's columns before its projection: the left input's then the
    // right's, or one input's alone (with a mark column after it, which
    // the range check below turns away).
    let (side, side_column) = match join.join_type() {
        JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => (1, column),
        JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => (0, column),
        _ if column < left_columns => (0, column),
        _ => (1, column - left_columns),
    };
    let kept_as_is = match side {
        0 => matches!(
            join.join_type(),
            JoinType::Inner
                | JoinType::Left
                | JoinType::LeftSemi
                | JoinType::LeftAnti
                | JoinType::LeftMark
        ),
        _ => matches!(
            join.join_type(),
            JoinType::Inner
                | JoinType::Right
                | JoinType::RightSemi
                | JoinType::RightAnti
                | JoinType::RightMark
        ),
    };
    let pairs_partitions = match join.partition_mode() {
        PartitionMode::Partitioned => true,
        // A collected join's partition i is its probe side's partition i.
        PartitionMode::CollectLeft => side == 1,
        PartitionMode::Auto => false,
    };
    let input = &join.children()[side];
    let in_range = side_column < input.schema().fields().len();
    (kept_as_is && pairs_partitions && in_range).then_some((side, side_column))
}
