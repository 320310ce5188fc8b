//! Operators that can emit many batches for each one they read yield to
//! the runtime between them.
//!
//! A task or a query is stopped (timeout, cancel, a client gone, a lost
//! job) by dropping its future, which takes effect the next time the
//! future yields. DataFusion makes the leaves cooperative: a scan returns
//! `Pending` once the task's tokio budget (128 polls) is spent. A join
//! emits from memory once its build side is collected: a cross join of
//! small inputs emits billions of rows per probe batch without polling
//! its input again, and an aggregation above it pulls in a loop that never
//! sees `Pending`. Such a plan held its thread for hours, and stopping its
//! query answered the client but left the thread computing. Each join's
//! and unnest's output therefore goes through `CooperativeExec`, which
//! spends the budget per batch emitted: they yield every 128 batches, and
//! a stopped plan ends within one of them.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::ExecutionPlan;

/// Operators that may emit more batches than they read.
fn multiplies(plan: &Arc<dyn ExecutionPlan>) -> bool {
    match plan.name() {
        "UnionExec" | "InterleaveExec" => false,
        "UnnestExec" => true,
        _ => plan.children().len() > 1,
    }
}

/// `plan` with the output of each operator that may emit more batches
/// than it reads passed through `CooperativeExec`.
pub fn yielding(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if !multiplies(&node) {
            return Ok(Transformed::no(node));
        }
        let wrapped: Arc<dyn ExecutionPlan> = Arc::new(CooperativeExec::new(node));
        Ok(Transformed::yes(wrapped))
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::SessionContext;
    use std::time::{Duration, Instant};

    /// 250³ rows through a cross join into a count: seconds of work in a
    /// test build, none of it spent polling a scan.
    const CROSS_JOIN: &str = "SELECT count(*) FROM \
        (SELECT * FROM generate_series(1, 250) AS a(x)) a, \
        (SELECT * FROM generate_series(1, 250) AS b(y)) b, \
        (SELECT * FROM generate_series(1, 250) AS c(z)) c \
        WHERE x + y + z > 0";

    async fn physical_plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let frame = ctx.sql(sql).await.unwrap();
        frame.create_physical_plan().await.unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_timeout_stops_a_cross_join_at_once() {
        let ctx = SessionContext::new();
        let plan = yielding(physical_plan(&ctx, CROSS_JOIN).await).unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert!(shown.contains("CooperativeExec"), "{shown}");

        // One thread: the timer fires only if the plan yields.
        let started = Instant::now();
        let run = collect(plan, ctx.task_ctx());
        let stopped = tokio::time::timeout(Duration::from_millis(50), run).await;
        let took = started.elapsed();
        assert!(stopped.is_err(), "the join finished first: make it bigger");
        assert!(took < Duration::from_millis(500), "stopped after {took:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn yielding_plans_answer_as_before() {
        let ctx = SessionContext::new();
        let sql = "SELECT x, count(*) AS n FROM \
            (SELECT * FROM generate_series(1, 30) AS a(x)) a \
            JOIN (SELECT * FROM generate_series(1, 30) AS b(y)) b ON x % 7 = y % 7 \
            CROSS JOIN (SELECT unnest([1, 2, 3]) AS z) c \
            GROUP BY x ORDER BY x";
        // A plan runs once (repartitions keep state): one plan for each run.
        let expected = collect(physical_plan(&ctx, sql).await, ctx.task_ctx()).await;
        let wrapped = yielding(physical_plan(&ctx, sql).await).unwrap();
        let shown = displayable(wrapped.as_ref()).indent(true).to_string();
        assert_eq!(shown.matches("CooperativeExec").count(), 3, "{shown}");
        let got = collect(wrapped, ctx.task_ctx()).await.unwrap();
        assert_eq!(got, expected.unwrap());
        assert_eq!(got.iter().map(|b| b.num_rows()).sum::<usize>(), 30);
    }
}
