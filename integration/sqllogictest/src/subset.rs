//! The files CI runs on every change: joins, aggregates, windows,
//! subqueries, unions, NULL handling, types, DDL and DML. The whole corpus
//! is the documented command (`--subset all`).

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Subset {
    All,
    Ci,
}

const CI_FILES: &[&str] = &[
    // joins
    "join_only.slt",
    "join_disable_repartition_joins.slt",
    "join_is_not_distinct_from.slt",
    "join_limit_pushdown.slt",
    "join_lists.slt",
    "joins.slt",
    "lateral_join.slt",
    "null_aware_anti_join.slt",
    "same_column_name_cross_join.slt",
    "eliminate_outer_join.slt",
    "propagate_empty_relation_outer_join.slt",
    "push_down_filter_outer_joins.slt",
    // aggregates
    "aggregate_skip_partial.slt",
    "aggregates_simplify.slt",
    "aggregates_topk.slt",
    "count_star_rule.slt",
    "distinct_on.slt",
    "group.slt",
    "group_by.slt",
    "grouping.slt",
    // windows
    "window.slt",
    "window_limits.slt",
    "window_topk_pushdown.slt",
    "lead_lag_extreme_offsets.slt",
    "qualify.slt",
    // subqueries and set operations
    "subquery.slt",
    "subquery_sort.slt",
    "cte.slt",
    "union.slt",
    "union_by_name.slt",
    "intersection.slt",
    // NULLs, expressions, types
    "nullif.slt",
    "nvl.slt",
    "nvl2.slt",
    "coalesce.slt",
    "case.slt",
    "predicates.slt",
    "in_list.slt",
    "type_coercion.slt",
    "decimal.slt",
    "order.slt",
    "limit.slt",
    "topk.slt",
    "select.slt",
    // DDL and DML
    "ddl.slt",
    "insert.slt",
    "insert_to_external.slt",
    "create_external_table.slt",
    "truncate.slt",
    "prepare.slt",
];

impl Subset {
    pub fn includes(self, file: &Path) -> bool {
        match self {
            Subset::All => true,
            Subset::Ci => CI_FILES.iter().any(|name| file == Path::new(name)),
        }
    }
}
