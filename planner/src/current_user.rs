//! `current_user` (SQL's keyword; `session_user` and `current_user()` too):
//! who sent the statement, which BI tools and SQL editors ask on connect.
//!
//! Sessions are shared by users who change no setting, so the user is not
//! a session's: each statement's plan gets, in place of the function every
//! session registers (which refuses to run), one that knows the statement's
//! user. It is immutable, so planning folds it to a constant on the
//! coordinator and no worker meets it; and a plan holding it is never kept
//! as a template for other users' statements (`mentions_current_user`).

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// The names the function answers to.
const NAMES: [&str; 2] = ["current_user", "session_user"];

/// What `current_user` answers where the server authenticates nobody.
pub const ANONYMOUS: &str = "anonymous";

#[derive(Debug, PartialEq, Eq, Hash)]
struct CurrentUser {
    name: &'static str,
    /// `None` in the function sessions register: not yet bound to a user.
    user: Option<String>,
    signature: Signature,
}

impl ScalarUDFImpl for CurrentUser {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match &self.user {
            Some(user) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(user.clone())))),
            None => exec_err!(
                "{} is bound to the statement's user by the coordinator; this plan was not",
                self.name
            ),
        }
    }
}

fn function(name: &'static str, user: Option<String>) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(CurrentUser {
        name,
        user,
        // Fixed for a statement, and folded when it is planned.
        signature: Signature::nullary(Volatility::Immutable),
    }))
}

/// The functions every session registers, so SQL naming them plans.
pub fn current_user_functions() -> Vec<Arc<ScalarUDF>> {
    NAMES.into_iter().map(|name| function(name, None)).collect()
}

fn is_current_user(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::ScalarFunction(call) => NAMES
            .into_iter()
            .find(|name| call.func.name() == *name && call.args.is_empty()),
        _ => None,
    }
}

/// Whether `plan` (or a subquery of it) calls `current_user`.
pub fn mentions_current_user(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                found |= is_current_user(e).is_some();
                Ok(match found {
                    true => TreeNodeRecursion::Stop,
                    false => TreeNodeRecursion::Continue,
                })
            })
        })
    });
    found
}

/// `plan` with every `current_user` answering `user` ("" where nobody
/// authenticated: `ANONYMOUS`).
pub fn with_current_user(plan: LogicalPlan, user: &str) -> Result<LogicalPlan> {
    if !mentions_current_user(&plan) {
        return Ok(plan);
    }
    let user = if user.is_empty() { ANONYMOUS } else { user };
    plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|expr| {
            expr.transform_up(|e| match is_current_user(&e) {
                Some(name) => Ok(Transformed::yes(Expr::ScalarFunction(
                    ScalarFunction::new_udf(function(name, Some(user.to_string())), vec![]),
                ))),
                None => Ok(Transformed::no(e)),
            })
        })
    })
    .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::prelude::SessionContext;

    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        for udf in current_user_functions() {
            ctx.register_udf(udf.as_ref().clone());
        }
        ctx
    }

    async fn answer(ctx: &SessionContext, sql: &str, user: &str) -> (Vec<String>, Vec<String>) {
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let plan = with_current_user(plan, user).unwrap();
        let batches = ctx
            .execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let batch = &batches[0];
        let schema = batch.schema();
        let names = schema.fields().iter().map(|f| f.name().clone());
        let values = (0..batch.num_columns()).map(|i| {
            let column = datafusion::arrow::compute::cast(batch.column(i), &DataType::Utf8);
            column.unwrap().as_string::<i32>().value(0).to_string()
        });
        (names.collect(), values.collect())
    }

    #[tokio::test]
    async fn each_statement_answers_its_own_user() {
        let ctx = context();
        let sql = "SELECT current_user, session_user, \
                   (SELECT count(*) FROM (VALUES ('alice')) v(u) WHERE u = current_user) AS mine";
        let (names, values) = answer(&ctx, sql, "alice").await;
        assert_eq!(values, ["alice", "alice", "1"]);
        // The columns keep the function's names.
        assert_eq!(names[0], "current_user()");
        let (_, values) = answer(&ctx, sql, "bob").await;
        assert_eq!(values, ["bob", "bob", "0"]);
        let (_, values) = answer(&ctx, "SELECT current_user", "").await;
        assert_eq!(values, [ANONYMOUS]);
    }

    #[tokio::test]
    async fn an_unbound_plan_refuses_to_run_and_is_recognised() {
        let ctx = context();
        let plan = ctx
            .state()
            .create_logical_plan("SELECT 1 WHERE current_user = 'x'")
            .await
            .unwrap();
        assert!(mentions_current_user(&plan));
        assert!(ctx
            .execute_logical_plan(plan)
            .await
            .unwrap()
            .collect()
            .await
            .is_err());
        let plain = ctx.state().create_logical_plan("SELECT 1").await.unwrap();
        assert!(!mentions_current_user(&plain));
    }
}
