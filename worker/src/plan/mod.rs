//! Squadron's plan nodes and their wire encoding.

pub mod codec;
pub mod file_bounds;
mod float16_literals;
pub mod guard;
mod plain_strings;
mod recursive;
pub mod stage_read;
mod top_k;
pub mod wire;

pub use codec::{decode_plan, encode_plan, SquadronCodec};
pub use plain_strings::prepare_parquet_scans;
pub use stage_read::{StageBinding, StageReadExec};
