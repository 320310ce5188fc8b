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
    "joins.slt",
    "lateral_join.slt",
    "null_aware_anti_join.slt",
    "join_is_not_distinct_from.slt",
    "eliminate_outer_join.slt",
    "sort_merge_join.slt",
    "push_down_topk_through_join.slt",
    "same_column_name_cross_join.slt",
    "join_limit_pushdown.slt",
    "join_lists.slt",
    "propagate_empty_relation_outer_join.slt",
    "push_down_filter_outer_joins.slt",
    // aggregates
    "aggregates_topk.slt",
    "aggregate_skip_partial.slt",
    "array_agg.slt",
    "min_max/list.slt",
    "min_max/large_list.slt",
    "count_star_rule.slt",
    "distinct_on.slt",
    "group.slt",
    "aggregates_simplify.slt",
    "aggregate_any_value.slt",
    "agg_func_substitute.slt",
    "grouping.slt",
    "grouping_set_repartition.slt",
    // partitioning read from files, order-preserving repartitions
    "preserve_file_partitioning.slt",
    "repartition_subset_satisfaction.slt",
    // windows
    "window_limits.slt",
    "window_topn.slt",
    "window_topk_pushdown.slt",
    "lead_lag_extreme_offsets.slt",
    "qualify.slt",
    "array_agg_sliding_window.slt",
    // subqueries and set operations
    "subquery.slt",
    "functional_dependencies.slt",
    "subquery_sort.slt",
    "union_by_name.slt",
    "union.slt",
    "intersection.slt",
    // NULL handling and conditionals
    "case.slt",
    "predicates.slt",
    "nullif.slt",
    "nvl.slt",
    "nvl2.slt",
    // DDL, DML, COPY, settings and prepared statements
    "to_timestamp_timezone.slt",
    "listing_table_partitions.slt",
    "prepare.slt",
    "options.slt",
    "csv_files.slt",
    "dml_update.slt",
    "dml_delete.slt",
    "create_external_table.slt",
    "datetime/interval.slt",
    // types, expressions, sorting
    "type_coercion.slt",
    "cast_to_type.slt",
    "string_numeric_coercion.slt",
    "binary.slt",
    "expr.slt",
    "math.slt",
    "scalar.slt",
    "select.slt",
    "order.slt",
    "limit.slt",
    "unnest.slt",
    "topk.slt",
    // nested types, strings, dates
    "array/array_slice.slt",
    "array/make_array.slt",
    "array/array_to_string.slt",
    "table_functions.slt",
    "string/string.slt",
    "datetime/dates.slt",
    "regexp/regexp_like.slt",
    "imdb.slt",
];

impl Subset {
    pub fn includes(self, file: &Path) -> bool {
        match self {
            Subset::All => true,
            Subset::Ci => CI_FILES.iter().any(|name| file == Path::new(name)),
        }
    }
}
