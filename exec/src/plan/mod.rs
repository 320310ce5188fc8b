//! Squadron's plan nodes and their wire encoding.

pub mod codec;
pub mod file_bounds;
mod float16_literals;
mod grouping_sets;
pub mod guard;
pub mod node_children;
mod nulled_constants;
mod plain_strings;
mod producer_filter;
mod recursive;
pub mod stage_read;
pub mod stage_write;
mod top_k;
pub mod wire;
mod yielding;

pub use codec::{decode_plan, encode_plan, unshared_copy, SquadronCodec};
pub use grouping_sets::{grouping_sets_unordered, OrderUnknownExec};
pub use nulled_constants::nulled_constants_unordered;
pub use plain_strings::prepare_parquet_scans;
pub use stage_read::{StageBinding, StageReadExec, BYTES_RECEIVED};
pub use stage_write::{StageOutput, StageWriteExec};
pub use yielding::yielding;

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;

/// `plan`, planned or decoded, ready to execute in this process: its
/// Parquet scans read as Squadron reads them, its final aggregates over
/// grouping sets unordered (`grouping_sets`), and its joins yield.
pub fn ready_to_execute(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
) -> Result<Arc<dyn ExecutionPlan>> {
    yielding(grouping_sets_unordered(prepare_parquet_scans(plan, ctx)?)?)
}
