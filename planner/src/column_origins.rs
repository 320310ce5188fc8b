//! Which table each result column is read from, when it is a table's
//! column passed through unchanged (JDBC's `ResultSetMetaData.getTableName`
//! and BI tools' column lineage ask). Followed down the logical plan as
//! planned from SQL: a column renamed, filtered, sorted, joined or grouped
//! by keeps its table; anything computed has none.

use datafusion::common::config::ConfigOptions;
use datafusion::common::Column;
use datafusion::logical_expr::{Distinct, Expr, JoinType, LogicalPlan};

/// The table a result column comes from, as its catalog names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnOrigin {
    pub catalog: String,
    pub schema: String,
    pub table: String,
}

/// One entry per output column of `plan`; names a table leaves out of
/// its catalog or schema take the session's defaults (`options`).
pub fn column_origins(plan: &LogicalPlan, options: &ConfigOptions) -> Vec<Option<ColumnOrigin>> {
    let defaults = &options.catalog;
    (0..plan.schema().fields().len())
        .map(|index| {
            origin(
                plan,
                index,
                &defaults.default_catalog,
                &defaults.default_schema,
            )
        })
        .collect()
}

/// How deep a chain of plan nodes is followed: deeper plans are
/// statements nobody writes by hand, and a bound keeps this off the stack.
const MOST_NODES: usize = 256;

fn origin(plan: &LogicalPlan, index: usize, catalog: &str, schema: &str) -> Option<ColumnOrigin> {
    let (mut plan, mut index) = (plan, index);
    for _ in 0..MOST_NODES {
        (plan, index) = match plan {
            // An index past the scan's columns (a right mark join's mark,
            // followed down as an index of its right input) has no table.
            LogicalPlan::TableScan(scan) if index >= scan.projected_schema.fields().len() => {
                return None;
            }
            LogicalPlan::TableScan(scan) => {
                let table = &scan.table_name;
                return Some(ColumnOrigin {
                    catalog: table.catalog().unwrap_or(catalog).to_string(),
                    schema: table.schema().unwrap_or(schema).to_string(),
                    table: table.table().to_string(),
                });
            }
            LogicalPlan::Projection(projection) => {
                let column = plain_column(projection.expr.get(index)?)?;
                let input = projection.input.as_ref();
                (input, input.schema().index_of_column(column).ok()?)
            }
            LogicalPlan::Aggregate(aggregate) => {
                // Output: the grouping columns, then the aggregates.
                let column = plain_column(aggregate.group_expr.get(index)?)?;
                let input = aggregate.input.as_ref();
                (input, input.schema().index_of_column(column).ok()?)
            }
            LogicalPlan::Join(join) => {
                let left = join.left.schema().fields().len();
                match join.join_type {
                    JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => {
                        (join.right.as_ref(), index)
                    }
                    _ if index < left => (join.left.as_ref(), index),
                    JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => return None,
                    _ => (join.right.as_ref(), index - left),
                }
            }
            // Output: the input's columns, then the window functions'.
            LogicalPlan::Window(window) if index < window.input.schema().fields().len() => {
                (window.input.as_ref(), index)
            }
            LogicalPlan::Filter(filter) => (filter.input.as_ref(), index),
            LogicalPlan::Sort(sort) => (sort.input.as_ref(), index),
            LogicalPlan::Limit(limit) => (limit.input.as_ref(), index),
            LogicalPlan::SubqueryAlias(alias) => (alias.input.as_ref(), index),
            LogicalPlan::Repartition(repartition) => (repartition.input.as_ref(), index),
            LogicalPlan::Distinct(Distinct::All(input)) => (input.as_ref(), index),
            _ => return None,
        };
    }
    None
}

/// The column `expr` is, under any aliases.
fn plain_column(expr: &Expr) -> Option<&Column> {
    match expr {
        Expr::Column(column) => Some(column),
        Expr::Alias(alias) => plain_column(&alias.expr),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn origins(sql: &str) -> Vec<Option<String>> {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE nation (n_nationkey BIGINT, n_name VARCHAR, n_regionkey BIGINT)")
            .await
            .unwrap();
        ctx.sql("CREATE SCHEMA s").await.unwrap();
        ctx.sql("CREATE TABLE s.region (r_regionkey BIGINT, r_name VARCHAR)")
            .await
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        column_origins(&plan, ctx.state().config_options())
            .into_iter()
            .map(|o| o.map(|o| format!("{}.{}.{}", o.catalog, o.schema, o.table)))
            .collect()
    }

    fn named(names: &[Option<&str>]) -> Vec<Option<String>> {
        names.iter().map(|n| n.map(str::to_string)).collect()
    }

    #[tokio::test]
    async fn columns_passed_through_keep_their_table() {
        assert_eq!(
            origins(
                "SELECT n.n_name AS name, n_nationkey + 1, r.r_name \
                 FROM nation n JOIN s.region r ON n.n_regionkey = r.r_regionkey \
                 WHERE r.r_name <> 'x' ORDER BY 1 LIMIT 3"
            )
            .await,
            named(&[
                Some("datafusion.public.nation"),
                None,
                Some("datafusion.s.region")
            ])
        );
    }

    #[tokio::test]
    async fn grouping_columns_keep_their_table_and_aggregates_have_none() {
        assert_eq!(
            origins("SELECT r_name, count(*) FROM (SELECT * FROM s.region) t GROUP BY r_name")
                .await,
            named(&[Some("datafusion.s.region"), None])
        );
        assert_eq!(
            origins(
                "SELECT n_name FROM nation WHERE n_nationkey IN (SELECT r_regionkey FROM s.region)"
            )
            .await,
            named(&[Some("datafusion.public.nation")])
        );
        assert_eq!(origins("SELECT 1 AS one").await, named(&[None]));
    }
}
