//! Functions whose behaviour depends on the session's settings.
//!
//! Some built-in functions (`to_timestamp` and its kin answer in the
//! session time zone) are created for one set of settings. DataFusion's
//! own `SET` re-creates them; a session whose settings change any other
//! way — the coordinator's session commands, a worker applying a query's
//! settings to its task — must do the same, or the planner promises one
//! type and the function returns another.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::FunctionRegistry;

/// Re-creates the functions of `state` that depend on its settings.
pub fn refresh_configured_functions(state: &mut SessionState) -> Result<()> {
    let options = state.config().options();
    let updated: Vec<_> = state
        .scalar_functions()
        .values()
        .filter_map(|udf| udf.inner().with_updated_config(options).map(Arc::new))
        .collect();
    for udf in updated {
        state.register_udf(udf)?;
    }
    Ok(())
}
