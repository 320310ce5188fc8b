//! The engine build peers must share.

/// The engine a plan is executed with. Hash shuffles route a row to the same
/// partition only when producer and consumer hash identically, so a
/// coordinator and a worker of different builds must not work together.
pub fn engine_build() -> String {
    format!(
        "squadron {} / datafusion {}",
        env!("CARGO_PKG_VERSION"),
        datafusion::DATAFUSION_VERSION
    )
}
