//! The type a prepared statement declares for each placeholder, which
//! drivers build their parameter vectors from, apart from the type the plan
//! wants (bound values are cast to that one).
//!
//! - A placeholder DataFusion leaves untyped takes the type of another of
//!   its uses, or of a `CAST(? AS T)` or `TRY_CAST` around it: declared as
//!   Null, the JDBC driver cannot bind it at all ("Can't set non-null value
//!   on NullVector").
//! - Timestamps and times are declared in milliseconds: the JDBC driver
//!   (18.3) writes `setTimestamp`'s and `setTime`'s milliseconds into the
//!   declared vector unscaled, so a nanosecond declaration bound 1970
//!   dates. Values bound in any unit are cast to the plan's own type,
//!   which keeps an ADBC client's microseconds.

use std::collections::HashMap;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::{Cast, Expr, LogicalPlan, TryCast};

/// Types for placeholders DataFusion leaves untyped, by id (`$1`): the
/// type one of its other uses has (DataFusion types none of a
/// placeholder's uses when one of them is untyped, as in `SELECT $1 = TIME
/// '12:00', $1`), else the type of a CAST or TRY_CAST directly around it.
pub fn inferred_placeholder_types(plan: &LogicalPlan) -> Result<HashMap<String, DataType>> {
    let (mut typed, mut cast) = (HashMap::new(), HashMap::new());
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|expr| {
            expr.apply(|e| {
                match e {
                    Expr::Placeholder(Placeholder {
                        id,
                        field: Some(field),
                    }) => {
                        typed
                            .entry(id.clone())
                            .or_insert_with(|| field.data_type().clone());
                    }
                    Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
                        if let Expr::Placeholder(placeholder) = expr.as_ref() {
                            cast.entry(placeholder.id.clone())
                                .or_insert_with(|| field.data_type().clone());
                        }
                    }
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    cast.extend(typed);
    Ok(cast)
}

/// The type to declare for a placeholder the plan types as `wanted`.
pub fn declared_type(wanted: &DataType) -> DataType {
    match wanted {
        DataType::Timestamp(_, zone) => DataType::Timestamp(TimeUnit::Millisecond, zone.clone()),
        DataType::Time32(_) | DataType::Time64(_) => DataType::Time32(TimeUnit::Millisecond),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn casts_type_the_placeholders_they_convert_and_typed_uses_come_first() {
        let ctx = SessionContext::new();
        let plan = ctx
            .state()
            .create_logical_plan(
                "SELECT CAST($1 AS INT), TRY_CAST($2 AS VARCHAR), CAST($3 + 1 AS BIGINT) \
                 WHERE EXISTS (SELECT 1 WHERE CAST($4 AS DATE) IS NOT NULL)",
            )
            .await
            .unwrap();
        let types = inferred_placeholder_types(&plan).unwrap();
        assert_eq!(types.get("$1"), Some(&DataType::Int32));
        // VARCHAR, as the session maps it (a view type by default).
        assert!(matches!(
            types.get("$2"),
            Some(DataType::Utf8 | DataType::Utf8View)
        ));
        // A typed use (`$3 + 1`) comes before the CAST around it.
        assert_eq!(types.get("$3"), Some(&DataType::Int64));
        assert_eq!(types.get("$4"), Some(&DataType::Date32));
    }

    #[tokio::test]
    async fn a_placeholder_used_twice_takes_the_type_of_its_typed_use() {
        let ctx = SessionContext::new();
        let plan = ctx
            .state()
            .create_logical_plan("SELECT $1 = TIME '12:34:56', $1")
            .await
            .unwrap();
        let types = inferred_placeholder_types(&plan).unwrap();
        assert_eq!(
            types.get("$1"),
            Some(&DataType::Time64(TimeUnit::Nanosecond))
        );
    }

    #[test]
    fn times_are_declared_in_milliseconds() {
        let utc = Some("UTC".into());
        assert_eq!(
            declared_type(&DataType::Timestamp(TimeUnit::Nanosecond, utc.clone())),
            DataType::Timestamp(TimeUnit::Millisecond, utc)
        );
        assert_eq!(
            declared_type(&DataType::Time64(TimeUnit::Nanosecond)),
            DataType::Time32(TimeUnit::Millisecond)
        );
        assert_eq!(declared_type(&DataType::Int64), DataType::Int64);
    }
}
