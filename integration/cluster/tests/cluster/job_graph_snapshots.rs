//! The stages a few TPC-H queries are cut into. A change here is a change
//! in how queries are distributed: review the new snapshot.

use crate::support::{tpch_data, tpch_query};
use datafusion::prelude::SessionContext;
use squadron_planner::build_job_graph;
use squadron_planner::context::coordinator_session_config;

#[tokio::test]
async fn tpch_job_graphs() {
    let (_dir, tables) = tpch_data(0.01);
    let ctx = SessionContext::new_with_config(coordinator_session_config(4));
    for t in &tables {
        t.register(&ctx).await.unwrap();
    }
    for n in [1, 3, 5, 13, 16, 17, 18, 22] {
        let plan = ctx
            .sql(&tpch_query(n))
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let graph = build_job_graph(plan, &Default::default()).unwrap();
        insta::assert_snapshot!(format!("q{n}"), graph.display_compact());
    }
}
