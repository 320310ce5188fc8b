//! From a physical plan to a job graph of stages.

pub mod build_side;
pub mod cut;
pub mod job_graph;
pub mod readers;

pub use cut::build_job_graph;
pub use job_graph::{JobGraph, Stage, StageOutput};
