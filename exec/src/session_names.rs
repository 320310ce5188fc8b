//! `current_catalog` (SQL's keyword, written without parentheses),
//! `current_database()` and `current_schema()`: the session's default
//! catalog and schema, which BI tools and SQL editors (DBeaver, Superset's
//! dialects) ask for on connect. They read the
//! settings the function is called with, so a coordinator's session and a
//! worker's task (which applies the query's settings) answer alike; both
//! register them.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// Which default a function names.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Named {
    Catalog,
    Schema,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionName {
    name: &'static str,
    named: Named,
    signature: Signature,
}

/// The functions, to register on every session that plans or runs SQL.
pub fn session_name_functions() -> Vec<Arc<ScalarUDF>> {
    [
        ("current_catalog", Named::Catalog),
        // PostgreSQL's name for the catalog, which its dialects use.
        ("current_database", Named::Catalog),
        ("current_schema", Named::Schema),
    ]
    .into_iter()
    .map(|(name, named)| {
        Arc::new(ScalarUDF::new_from_impl(SessionName {
            name,
            named,
            // Fixed for a statement, like `now()`: folded when planned.
            signature: Signature::nullary(Volatility::Stable),
        }))
    })
    .collect()
}

fn value(named: Named, options: &ConfigOptions) -> String {
    match named {
        Named::Catalog => options.catalog.default_catalog.clone(),
        Named::Schema => options.catalog.default_schema.clone(),
    }
}

impl ScalarUDFImpl for SessionName {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = value(self.named, &args.config_options);
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::prelude::{SessionConfig, SessionContext};

    async fn answer(ctx: &SessionContext, sql: &str) -> Vec<String> {
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let batch = &batches[0];
        (0..batch.num_columns())
            .map(|i| batch.column(i).as_string::<i32>().value(0).to_string())
            .collect()
    }

    #[tokio::test]
    async fn they_name_the_sessions_defaults() {
        let config = SessionConfig::new().with_default_catalog_and_schema("warehouse", "sales");
        let ctx = SessionContext::new_with_config(config);
        for udf in session_name_functions() {
            ctx.register_udf(udf.as_ref().clone());
        }
        let sql = "SELECT current_catalog, current_database(), current_schema()";
        assert_eq!(answer(&ctx, sql).await, ["warehouse", "warehouse", "sales"]);
        ctx.sql("CREATE SCHEMA warehouse.staging").await.unwrap();
        ctx.sql("SET datafusion.catalog.default_schema = 'staging'")
            .await
            .unwrap();
        assert_eq!(
            answer(&ctx, sql).await,
            ["warehouse", "warehouse", "staging"]
        );
    }
}
