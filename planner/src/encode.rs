//! Encoding each stage's plan once, at planning time.
//!
//! A plan that datafusion-proto cannot encode (an extension operator, a UDF
//! it does not know) is refused with UNIMPLEMENTED naming the operator, when
//! the client asks for the query: not as an internal error half-way through
//! dispatch.

use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::ExecutionPlan;
use squadron_exec::plan::encode_plan;

use super::job_graph::JobGraph;

/// Fills in every stage's encoded plan.
pub fn encode_stages(graph: &mut JobGraph) -> Result<()> {
    for stage in &mut graph.stages {
        let encoded =
            encode_plan(Arc::clone(&stage.plan)).map_err(|e| unencodable(&stage.plan, e))?;
        stage.encoded = encoded.into();
    }
    Ok(())
}

/// Names the lowest operator whose subtree does not encode.
fn unencodable(plan: &Arc<dyn ExecutionPlan>, error: DataFusionError) -> DataFusionError {
    let culprit = lowest_failing(plan).unwrap_or_else(|| plan.name().to_string());
    // datafusion-proto appends the whole plan's debug dump: keep the reason.
    let reason = error.to_string();
    let reason = reason.split(". Plan:").next().unwrap_or_default();
    let reason: String = reason
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(240)
        .collect();
    DataFusionError::NotImplemented(format!(
        "{culprit} cannot run on workers yet (its plan does not encode: {reason})"
    ))
}

fn lowest_failing(plan: &Arc<dyn ExecutionPlan>) -> Option<String> {
    for child in plan.children() {
        if let Some(name) = lowest_failing(child) {
            return Some(name);
        }
    }
    encode_plan(Arc::clone(plan))
        .is_err()
        .then(|| plan.name().to_string())
}
