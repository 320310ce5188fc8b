//! Squadron's execution layer: what a stage's plan is made of beyond
//! DataFusion's own nodes, and how it travels.
//!
//! - `plan/`: `StageReadExec` (a stage boundary's read side), the
//!   datafusion-proto extension codec and its wire repairs, plan guards
//! - `stream/`: a task's output channels, routing of its batches to them,
//!   and the registry of streams waiting for their reader
//! - `key_filters`: a join's build keys as ranges, lists and Bloom
//!   filters, in the form that travels to the producers of its input
//! - `write/`: the plan nodes that write created tables' part files and
//!   external tables' files from the tasks
//! - `squadron_options`: the `squadron.*` session settings
//! - `rewrites`: every plan rewrite in order, with its setting
//! - `execution_runtime`: the threads plans execute on, apart from the
//!   threads serving gRPC
//! - `single_row`, `configured_functions`: values and functions a task's
//!   session needs to plan as the coordinator did
//!
//! What a task changes in its own plan for speed is
//! `squadron_task_rewrites`; where tables live and their format is
//! `squadron_storage`.

pub mod configured_functions;
pub mod execution_runtime;
pub mod key_filters;
pub mod plan;
pub mod rewrites;
pub mod session_names;
pub mod single_row;
pub mod squadron_options;
pub mod stream;
pub mod write;
