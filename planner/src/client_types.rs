//! The column types clients receive.
//!
//! Clients read `Utf8`/`Binary` everywhere; string and binary *views* are
//! unknown to the JDBC driver and many older Arrow clients, and a slice of
//! a view array carries every data buffer of its source. Dictionaries are
//! hydrated by Flight encoders anyway. So a query whose result has such
//! columns gets a cast on top, on the workers: they send exactly the
//! schema the client was promised, and the coordinator only forwards their
//! messages (it never decodes results).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::Result;
use datafusion::physical_expr::expressions::{CastExpr, Column};
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

/// The type a column of `data_type` reaches clients as.
pub fn client_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, values) => client_type(values),
        DataType::List(item) => DataType::List(client_field(item)),
        DataType::LargeList(item) => DataType::LargeList(client_field(item)),
        DataType::FixedSizeList(item, n) => DataType::FixedSizeList(client_field(item), *n),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(client_field).collect()),
        other => other.clone(),
    }
}

/// A schema with every column as clients receive it (metadata kept).
pub fn client_schema(schema: &Schema) -> Schema {
    Schema::new_with_metadata(
        schema
            .fields()
            .iter()
            .map(|f| Field::clone(f).with_data_type(client_type(f.data_type())))
            .collect::<Vec<_>>(),
        schema.metadata().clone(),
    )
}

fn client_field(field: &FieldRef) -> FieldRef {
    Arc::new(Field::clone(field).with_data_type(client_type(field.data_type())))
}

/// `plan` with its output cast to the client types, if any differ. A
/// top-level `CoalescePartitionsExec` stays on top (the job output merges
/// in its place), so the cast runs in the partitions below it.
pub fn for_clients(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let differs = schema
        .fields()
        .iter()
        .any(|f| client_type(f.data_type()) != *f.data_type());
    if !differs {
        return Ok(plan);
    }
    if let Some(merge) = plan.downcast_ref::<CoalescePartitionsExec>() {
        if merge.fetch().is_none() {
            let input = for_clients(Arc::clone(merge.input()))?;
            return Ok(Arc::new(CoalescePartitionsExec::new(input)));
        }
    }
    let exprs = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| {
            let column = Arc::new(Column::new(field.name(), i));
            let wanted = client_type(field.data_type());
            let expr: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
                if wanted == *field.data_type() {
                    column
                } else {
                    Arc::new(CastExpr::new(column, wanted, None))
                };
            ProjectionExpr {
                expr,
                alias: field.name().clone(),
            }
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[test]
    fn views_and_dictionaries_become_plain_types() {
        assert_eq!(client_type(&DataType::Utf8View), DataType::Utf8);
        assert_eq!(client_type(&DataType::BinaryView), DataType::Binary);
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8View));
        assert_eq!(client_type(&dict), DataType::Utf8);
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8View, true)));
        assert_eq!(
            client_type(&list),
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
        );
        assert_eq!(client_type(&DataType::Int64), DataType::Int64);
    }

    #[tokio::test]
    async fn a_view_result_is_cast_and_answers_the_same() {
        let ctx = SessionContext::new();
        let sql = "SELECT arrow_cast(column1, 'Utf8View') AS s, column2 AS n \
                   FROM (VALUES ('a', 1), ('bb', 2), (NULL, 3))";
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert_eq!(plan.schema().field(0).data_type(), &DataType::Utf8View);
        let cast = for_clients(plan).unwrap();
        assert_eq!(cast.schema().field(0).data_type(), &DataType::Utf8);
        assert_eq!(cast.schema().field(0).name(), "s");
        let batches = datafusion::physical_plan::collect(cast, ctx.task_ctx())
            .await
            .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(text.contains("| bb |"), "{text}");
        assert!(text.contains("|    | 3 |"), "{text}");
    }

    #[tokio::test]
    async fn plain_results_are_left_alone() {
        let ctx = SessionContext::new();
        let plan = ctx
            .sql("SELECT 1 AS one")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let same = for_clients(Arc::clone(&plan)).unwrap();
        assert!(Arc::ptr_eq(&plan, &same));
    }
}
