//! What a join's build side tells the rows meant for it, in a form that
//! travels: the build keys as ranges and lists (`keys`), or as a Bloom
//! filter (`bloom`). A task wires them into its own plan
//! (`squadron_task_rewrites::dynamic_filters`); a stage read sends them to
//! the producers it reads (`stream::filter`), which drop the rows they
//! rule out before sending them.

mod bloom;
mod keys;

pub use bloom::{KeyBloomBuilder, KeyBloomExpr, MAX_BLOOM_KEYS};
pub use keys::{
    is_integral, BuildKeys, Membership, MAX_BITMAP_SPAN, MAX_DISTINCT_TRACKED, MAX_LISTED,
    MAX_RANGES,
};
