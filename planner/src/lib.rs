//! From a physical plan to a job graph of stages; `pipeline` lists every
//! step in order.

pub mod allow_list;
pub mod build_side;
pub mod cached_footers;
pub mod children;
pub mod client_types;
pub mod column_origins;
pub mod context;
pub mod current_user;
pub mod cut;
pub mod encode;
pub mod fence;
pub mod file_group_partitions;
pub mod filter_pushdown_fence;
pub mod float_top_k;
pub mod job_graph;
pub mod join_order;
pub mod key_range_splits;
pub mod local;
pub mod nan_safe_pruning;
pub mod nulled_constants;
pub mod one_partition;
pub mod passed_columns;
pub mod pipeline;
pub mod placeholders;
pub mod projection_pushdown_fence;
pub mod pruned_scan_ranges;
pub mod readers;
pub mod reduced_shuffles;
pub mod rows_read;
pub mod scalar_subquery;
pub mod statistics_bounds;
pub mod subset_key_shuffles;
pub mod templates;
#[cfg(test)]
mod test_tables;
pub mod volatile;

pub use client_types::for_clients;
pub use encode::encode_stages;
pub use job_graph::{JobGraph, Stage, StageOutput};
pub use pipeline::{build_job_graph, build_job_graph_verbose};
pub use pruned_scan_ranges::{prune_scan_ranges, without_scan_range_pruning};
