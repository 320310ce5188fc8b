//! Squadron's cluster tests: coordinators, worker processes and real Flight
//! SQL clients. One test binary for all of them — each binary links all of
//! DataFusion (~280 MB unoptimized), so one per file filled CI's disk and
//! spent minutes linking.

mod support;

mod client_errors;
mod concurrent_clients;
mod coordinator_health;
mod copy_to;
mod dynamic_filters;
mod early_start;
mod exchange_shapes;
mod fault_tolerant;
mod graceful_shutdown;
mod job_graph_snapshots;
mod join_order;
mod key_range_splits;
mod lifecycle;
mod poll_and_schema;
mod pruned_ranges;
mod reused_plans;
mod security;
mod shared_shuffles;
mod slow_reader;
mod socket_options;
mod stage_plans;
mod table_formats;
mod task_rewrites;
mod tpch_distributed;
mod volatile_and_extremes;
mod worker_faults;
mod worker_loss;
