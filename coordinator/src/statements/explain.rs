//! EXPLAIN: DataFusion's rows, then the join orders weighed
//! (`planner::join_order`), where the statement runs and its
//! stages (VERBOSE: every rewrite with its setting, and the plan after
//! each distributed pass too).

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::logical_expr::LogicalPlan;
use squadron_common::error::Error;

use crate::session::Session;
use squadron_planner::build_job_graph_verbose;

use super::{Coordinator, PlannedQuery, Work};

impl Coordinator {
    /// The answer to `EXPLAIN [VERBOSE] statement`, computed here.
    pub(super) async fn explain(
        &self,
        session: &Arc<Session>,
        logical: &LogicalPlan,
        explain: &datafusion::logical_expr::Explain,
        settings: Vec<(String, String)>,
    ) -> Result<PlannedQuery, Error> {
        let state = session.ctx().state();
        let batches = session
            .ctx()
            .execute_logical_plan(logical.clone())
            .await
            .map_err(Error::from)?
            .collect()
            .await
            .map_err(Error::from)?;
        let inner = state
            .create_physical_plan(&explain.plan)
            .await
            .map_err(Error::from)?;
        // VERBOSE adds the plan after each distributed pass
        // (`squadron_planner::pipeline`), as DataFusion's rows show
        // it after each of its rules.
        let optimized = state.optimize(&explain.plan).map_err(Error::from)?;
        let mut rows: Vec<(String, String)> =
            squadron_planner::join_order::describe(&optimized, &state)
                .await
                .map_err(Error::from)?
                .into_iter()
                .map(|decision| ("join_order".to_string(), decision))
                .collect();
        // VERBOSE first lists every rewrite a plan may meet, as this
        // session's settings leave them (`squadron_exec::rewrites`).
        if explain.verbose {
            let listed = squadron_exec::rewrites::describe(&session.squadron_options());
            rows.insert(0, ("squadron_rewrites".to_string(), listed));
        }
        match self.runs_here(&inner, session) {
            Some(_) => rows.push((
                "distributed_plan".to_string(),
                "Runs on the coordinator: it reads no table, or little \
                 (--coordinator-scan-limit)"
                    .to_string(),
            )),
            None => {
                let (graph, steps) = build_job_graph_verbose(inner, &session.squadron_options())
                    .map_err(Error::from)?;
                if explain.verbose {
                    rows.extend(steps);
                }
                rows.push(("distributed_plan".to_string(), graph.to_string()));
            }
        }
        let schema = explain.schema.inner().clone();
        let (types, plans): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
        let stages = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(types)),
                Arc::new(StringArray::from(plans)),
            ],
        )
        .map_err(|e| Error::internal(e.to_string()))?;
        let mut all = batches;
        all.push(stages);
        Ok(PlannedQuery {
            schema,
            work: Work::Immediate(all),
            settings,
            statement: None,
            origins: vec![],
        })
    }
}
