//! How many rows a plan reads, by its tables' statistics.
//!
//! Rules that trade parallelism or repeated work for fewer stages bound
//! the work they risk by the rows read below them; the statistics of the
//! leaves (file footers, in-memory tables) are known before anything runs.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::{ExecutionPlan, StatisticsArgs, StatisticsContext};

/// The rows all leaves of `plan` read, summed; `None` when a leaf's count
/// is unknown. An estimate where statistics are inexact (a file's row
/// count is exact; a pruned scan's may be an upper bound).
pub fn rows_read(plan: &Arc<dyn ExecutionPlan>) -> Option<usize> {
    let statistics = StatisticsContext::new();
    let mut rows = Some(0usize);
    let _ = plan.apply(|node| {
        if node.children().is_empty() {
            let leaf = statistics
                .compute(node.as_ref(), &StatisticsArgs::new())
                .ok()
                .and_then(|stats| stats.num_rows.get_value().copied());
            rows = rows.zip(leaf).map(|(sum, n)| sum.saturating_add(n));
            if rows.is_none() {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    rows
}
