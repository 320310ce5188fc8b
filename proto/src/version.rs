//! The protocol version coordinator and workers must agree on.

/// Bumped whenever a message or its meaning changes incompatibly. A worker
/// refuses a task from a coordinator speaking another version.
pub const PROTOCOL_VERSION: u32 = 7;
