//! Squadron's execution layer: what a stage's plan is made of beyond
//! DataFusion's own nodes, and how it travels.
//!
//! - `plan/`: `StageReadExec` (a stage boundary's read side), the
//!   datafusion-proto extension codec and its wire repairs, plan guards
//! - `stream/`: a task's output channels, routing of its batches to them,
//!   and the registry of streams waiting for their reader
//! - `write/`: part files of created tables, written by the tasks
//! - `managed_table`: created tables, exactly their committed part files
//! - `object_stores`: remote tables' stores, built from the environment
//! - `dynamic_filters`: a task's join build sides and TopK thresholds
//!   pruning its scans
//! - `narrow_decimals`, `like_substrings`, `conjunct_order`: what a task
//!   changes in its plan for speed alone (decimal arithmetic in 64 bits,
//!   `LIKE` patterns of several literals as substring searches, filter
//!   terms in the order their batches show is cheapest)
//! - `squadron_options`: the `squadron.*` session settings
//! - `execution_runtime`: the threads plans execute on, apart from the
//!   threads serving gRPC
//! - `single_row`, `configured_functions`: values and functions a task's
//!   session needs to plan as the coordinator did

pub mod configured_functions;
pub mod conjunct_order;
pub mod dynamic_filters;
pub mod execution_runtime;
pub mod like_substrings;
pub mod managed_table;
pub mod narrow_decimals;
pub mod object_stores;
pub mod plan;
pub mod single_row;
pub mod squadron_options;
pub mod stream;
pub mod write;
