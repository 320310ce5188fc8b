//! Where a join's dynamic filter must land, found by column position.
//!
//! DataFusion 55's filter pushdown maps a pushed filter onto a child's
//! columns by name, so where an operator outputs two columns of one name
//! (`a.k` and `b.k` above a join) a filter on the second lands on the
//! first and drops rows that match (apache/datafusion#25244, #25296;
//! fixed upstream by mapping positions, in a later release). Where a probe
//! side holds such names, the filter is kept only if every scan that
//! received it received it over a column its key is read from, followed
//! here position by position; otherwise the join gets no filter.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, Result};
use datafusion::datasource::memory::DataSourceExec;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::ExecutionPlan;

/// A scan (by address) and one of its columns (by name).
type Origin = (usize, String);

fn address(plan: &Arc<dyn ExecutionPlan>) -> usize {
    Arc::as_ptr(plan) as *const () as usize
}

/// Whether an operator below `plan`, or `plan`, outputs two columns of
/// one name, or joins inputs that hold one name each: a join maps a pushed
/// filter onto its inputs by name too, and its own projection may hide
/// the repeat (seed 62001, query 422: a self-join's semi join output only
/// `a0.k2`, and a filter on it landed on `a2.k2` of the other input).
pub fn has_repeated_column_names(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut repeated = false;
    plan.apply(|node| {
        let repeats = |fields: Vec<&String>| {
            let mut names = HashSet::new();
            fields.into_iter().any(|name| !names.insert(name))
        };
        let schema = node.schema();
        let inputs: Vec<_> = node.children().iter().map(|c| c.schema()).collect();
        repeated = repeats(schema.fields().iter().map(|f| f.name()).collect())
            || (inputs.len() > 1
                && repeats(
                    inputs
                        .iter()
                        .flat_map(|s| s.fields().iter().map(|f| f.name()))
                        .collect(),
                ));
        Ok(match repeated {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    })?;
    Ok(repeated)
}

/// The scan columns column `i` of `plan`'s output is read from, followed by
/// position through projections, filters, joins, group keys, unions and
/// operators that pass their input's columns on; `None` through anything
/// else (a computed column, an operator not followed).
pub fn origins(plan: &Arc<dyn ExecutionPlan>, i: usize) -> Option<Vec<Origin>> {
    if plan.is::<DataSourceExec>() {
        return Some(vec![(address(plan), plan.schema().field(i).name().clone())]);
    }
    if let Some(projection) = plan.downcast_ref::<ProjectionExec>() {
        let column = projection.expr().get(i)?.expr.downcast_ref::<Column>()?;
        return origins(projection.input(), column.index());
    }
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        let j = match filter.projection() {
            Some(projection) => *projection.get(i)?,
            None => i,
        };
        return origins(filter.input(), j);
    }
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let j = match &join.projection {
            Some(projection) => *projection.get(i)?,
            None => i,
        };
        let left = join.left().schema().fields().len();
        return match join.join_type() {
            JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                if j < left {
                    origins(join.left(), j)
                } else {
                    origins(join.right(), j - left)
                }
            }
            JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => origins(join.left(), j),
            JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                origins(join.right(), j)
            }
        };
    }
    if plan.is::<CrossJoinExec>() {
        let [left, right] = plan.children()[..] else {
            return None;
        };
        let width = left.schema().fields().len();
        return match i < width {
            true => origins(left, i),
            false => origins(right, i - width),
        };
    }
    if let Some(aggregate) = plan.downcast_ref::<AggregateExec>() {
        let (expr, _) = aggregate.group_expr().expr().get(i)?;
        let column = expr.downcast_ref::<Column>()?;
        return origins(aggregate.input(), column.index());
    }
    if plan.is::<UnionExec>() {
        let mut all = vec![];
        for child in plan.children() {
            all.extend(origins(child, i)?);
        }
        return Some(all);
    }
    // One input whose columns pass on as they are (repartitions, sorts,
    // merges, limits, batch coalescing).
    match plan.children().as_slice() {
        [child] if same_columns(plan, child) => origins(child, i),
        _ => None,
    }
}

fn same_columns(plan: &Arc<dyn ExecutionPlan>, child: &Arc<dyn ExecutionPlan>) -> bool {
    let (ours, theirs) = (plan.schema(), child.schema());
    ours.fields().len() == theirs.fields().len()
        && ours
            .fields()
            .iter()
            .zip(theirs.fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
}

/// Whether every operator under `probe` holding the filter `id` holds it
/// over scan columns the probe `keys` (columns of `probe`'s output) are
/// read from (true where none holds it: a stage read takes it by
/// position). Where a child does not take a filter, DataFusion places it
/// in a `FilterExec` over the child (over a cross join, seed 43001 query
/// 6002): its columns are followed from there; a filter held anywhere
/// else is not known to be where it should.
pub fn lands_on_its_keys(
    probe: &Arc<dyn ExecutionPlan>,
    keys: &[Arc<dyn PhysicalExpr>],
    id: u64,
) -> Result<bool> {
    let mut landed: Vec<Origin> = vec![];
    let mut unknown = false;
    probe.apply(|node| {
        let mut columns = vec![];
        node.apply_expressions(&mut |root| {
            root.apply(|expr| {
                if expr.expression_id() != Some(id) {
                    return Ok(TreeNodeRecursion::Continue);
                }
                expr.apply(|inner| {
                    if let Some(column) = inner.downcast_ref::<Column>() {
                        columns.push(column.clone());
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
                Ok(TreeNodeRecursion::Jump)
            })
        })?;
        if node.is::<DataSourceExec>() {
            landed.extend(
                columns
                    .iter()
                    .map(|c| (address(node), c.name().to_string())),
            );
        } else if let Some(filter) = node.downcast_ref::<FilterExec>() {
            for column in &columns {
                match origins(filter.input(), column.index()) {
                    Some(found) => landed.extend(found),
                    None => unknown = true,
                }
            }
        } else if !columns.is_empty() {
            unknown = true;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if unknown {
        return Ok(false);
    }
    if landed.is_empty() {
        return Ok(true);
    }
    let mut expected = HashSet::new();
    for key in keys {
        let found = key
            .downcast_ref::<Column>()
            .and_then(|column| origins(probe, column.index()));
        match found {
            Some(found) => expected.extend(found),
            None => return Ok(false),
        }
    }
    Ok(landed.iter().all(|origin| expected.contains(origin)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;

    fn table(columns: [&str; 2]) -> Arc<MemTable> {
        let schema = Arc::new(Schema::new(
            columns
                .map(|name| Field::new(name, DataType::Int64, true))
                .to_vec(),
        ));
        let values = Arc::new(Int64Array::from(vec![1, 2, 3]));
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), vec![values.clone(), values]).unwrap();
        Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap())
    }

    /// `a.k` and `b.k` above a join: the second `k` is read from `b`'s
    /// scan, not from the first `k`'s.
    #[tokio::test]
    async fn a_repeated_name_is_followed_to_its_own_scan() {
        let ctx = SessionContext::new();
        ctx.register_table("a", table(["k", "v"])).unwrap();
        ctx.register_table("b", table(["k", "w"])).unwrap();
        let plan = ctx
            .sql("SELECT a.k, b.k FROM a JOIN b ON a.v = b.w")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert!(has_repeated_column_names(&plan).unwrap());
        let first = origins(&plan, 0).unwrap();
        let second = origins(&plan, 1).unwrap();
        assert_eq!((first.len(), second.len()), (1, 1));
        assert_eq!((first[0].1.as_str(), second[0].1.as_str()), ("k", "k"));
        assert_ne!(first[0].0, second[0].0, "two scans");
        let unique = ctx
            .sql("SELECT a.k, b.w FROM a JOIN b ON a.v = b.w")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert!(!has_repeated_column_names(&unique).unwrap());
    }

    /// A self-join's semi join outputs one side's columns only, but maps
    /// a filter onto its inputs, which repeat every name.
    #[tokio::test]
    async fn names_a_join_hides_in_its_output_still_repeat() {
        let ctx = SessionContext::new();
        ctx.register_table("a", table(["k", "v"])).unwrap();
        let plan = ctx
            .sql("SELECT a0.k FROM a a0 WHERE EXISTS (SELECT 1 FROM a a2 WHERE a2.v = a0.k AND a2.k = a0.v)")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let output_repeats = plan.exists(|node| {
            let mut names = HashSet::new();
            Ok(!node
                .schema()
                .fields()
                .iter()
                .all(|f| names.insert(f.name())))
        });
        assert!(!output_repeats.unwrap(), "no operator outputs a name twice");
        assert!(has_repeated_column_names(&plan).unwrap());
    }
    /// A filter DataFusion placed in a `FilterExec` over a cross join,
    /// mapped by name onto the first `k` where the key is the second.
    #[tokio::test]
    async fn a_filter_held_over_a_cross_join_is_followed_to_its_scan() {
        use datafusion::physical_expr::expressions::{lit, DynamicFilterPhysicalExpr};
        let ctx = SessionContext::new();
        ctx.register_table("a", table(["k", "v"])).unwrap();
        ctx.register_table("b", table(["k", "w"])).unwrap();
        let cross = ctx
            .sql("SELECT a.k, b.k FROM a CROSS JOIN b")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let held_over = |column: usize| -> (Arc<dyn ExecutionPlan>, u64) {
            let on: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", column));
            let filter = Arc::new(DynamicFilterPhysicalExpr::new(vec![on], lit(true)));
            let id = filter.expression_id().unwrap();
            let plan = FilterExec::try_new(filter, Arc::clone(&cross)).unwrap();
            (Arc::new(plan), id)
        };
        let key: Arc<dyn PhysicalExpr> = Arc::new(Column::new("k", 1));
        let (wrong, id) = held_over(0);
        assert!(!lands_on_its_keys(&wrong, &[Arc::clone(&key)], id).unwrap());
        let (right, id) = held_over(1);
        assert!(lands_on_its_keys(&right, &[key], id).unwrap());
    }
}
