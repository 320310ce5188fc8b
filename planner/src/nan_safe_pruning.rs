//! Parquet statistics leave NaN out of a float column's min and max, as the
//! format says they must, and DataFusion 55 prunes files, row groups and
//! pages by a predicate's bounds as if no NaN were there. But DataFusion
//! compares floats in IEEE total order: a NaN is greater than every number
//! (a NaN with its sign bit set, as x86 makes `0.0 / 0.0`, smaller). So
//! `f >= 1.25` skipped a row group whose max is -4.5 but which holds NaN
//! rows the same comparison keeps once read: the filter's count was 26
//! where `sum(CASE WHEN f >= 1.25 THEN 1 ELSE 0 END)` over the same rows
//! is 29 (the fuzzer's NoREC check, seed 92001 query 2534; single-node
//! DataFusion alike).
//!
//! This rule hides from the pruning each comparison of a float column with
//! a constant that a NaN can satisfy (every one but `=`): in a Parquet
//! scan's predicate it becomes `CASE WHEN isnan(f) THEN f >= c ELSE f >= c
//! END`, which evaluates to the same value on every row (so a scan that
//! filters rows itself keeps the same ones) and which statistics cannot
//! bound (so no range of the file is skipped by it). Equalities, and every
//! comparison of other types, prune as before. `squadron.nan_safe_pruning
//! = false` lets them prune again, for data known to hold no NaN.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::Result;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, FileSource, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, DynamicFilterPhysicalExpr, Literal, TryCastExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use squadron_exec::squadron_options::SquadronOptions;

/// The rule, for the coordinator's planning and the fuzzer's oracle.
#[derive(Debug, Default)]
pub struct NanSafePruning;

impl PhysicalOptimizerRule for NanSafePruning {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !SquadronOptions::of(config).nan_safe_pruning {
            return Ok(plan);
        }
        let config = Arc::new(config.clone());
        plan.transform_up(|node| {
            let Some(scan) = node.downcast_ref::<DataSourceExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some((scan_config, parquet)) = scan.downcast_to_file_source::<ParquetSource>()
            else {
                return Ok(Transformed::no(node));
            };
            let Some(predicate) = parquet.filter() else {
                return Ok(Transformed::no(node));
            };
            let schema = scan_config.file_schema();
            let guarded = guarded(predicate, schema, &config)?;
            if !guarded.transformed {
                return Ok(Transformed::no(node));
            }
            let source = parquet.with_predicate(guarded.data);
            let scan_config = FileScanConfigBuilder::from(scan_config.clone())
                .with_source(Arc::new(source))
                .build();
            let rebuilt: Arc<dyn ExecutionPlan> = DataSourceExec::from_data_source(scan_config);
            Ok(Transformed::yes(rebuilt))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "NanSafePruning"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `predicate` with each comparison a NaN can satisfy hidden from pruning.
/// Dynamic filters (from joins and top-k) are left as they are.
fn guarded(
    predicate: Arc<dyn PhysicalExpr>,
    schema: &Schema,
    config: &Arc<ConfigOptions>,
) -> Result<Transformed<Arc<dyn PhysicalExpr>>> {
    predicate.transform_down(|expr| {
        if expr.downcast_ref::<DynamicFilterPhysicalExpr>().is_some() {
            return Ok(Transformed::new(expr, false, TreeNodeRecursion::Jump));
        }
        let Some(binary) = expr.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(expr));
        };
        let compares = matches!(
            binary.op(),
            Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq | Operator::NotEq
        );
        let float = match (
            float_column(binary.left(), schema),
            float_column(binary.right(), schema),
        ) {
            (Some(column), None) if binary.right().downcast_ref::<Literal>().is_some() => {
                Some(column)
            }
            (None, Some(column)) if binary.left().downcast_ref::<Literal>().is_some() => {
                Some(column)
            }
            _ => None,
        };
        let (true, Some(column)) = (compares, float) else {
            return Ok(Transformed::no(expr));
        };
        let is_nan: Arc<dyn PhysicalExpr> = Arc::new(ScalarFunctionExpr::try_new(
            datafusion::functions::math::isnan(),
            vec![column],
            schema,
            Arc::clone(config),
        )?);
        let hidden: Arc<dyn PhysicalExpr> = Arc::new(CaseExpr::try_new(
            None,
            vec![(is_nan, Arc::clone(&expr))],
            Some(Arc::clone(&expr)),
        )?);
        Ok(Transformed::new(hidden, true, TreeNodeRecursion::Jump))
    })
}

/// The float column `expr` reads, directly or through a cast.
fn float_column(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Arc<dyn PhysicalExpr>> {
    let inner = if let Some(cast) = expr.downcast_ref::<CastExpr>() {
        cast.expr()
    } else if let Some(cast) = expr.downcast_ref::<TryCastExpr>() {
        cast.expr()
    } else {
        expr
    };
    let column = inner.downcast_ref::<Column>()?;
    let field = schema.fields().get(column.index())?;
    let is_float = matches!(
        field.data_type(),
        DataType::Float16 | DataType::Float32 | DataType::Float64
    );
    (is_float && field.name() == column.name()).then(|| Arc::clone(inner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, RecordBatch};
    use datafusion::arrow::datatypes::Field;
    use datafusion::execution::SessionStateBuilder;
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};

    /// Two row groups: numbers below 1.25 and a NaN, then numbers above.
    fn write_file(path: &std::path::Path) {
        let schema = Arc::new(Schema::new(vec![Field::new("f", DataType::Float64, true)]));
        let batch = |values: Vec<f64>| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Float64Array::from(values))],
            )
            .unwrap()
        };
        let properties = WriterProperties::builder()
            .set_max_row_group_row_count(Some(3))
            .build();
        let file = std::fs::File::create(path).unwrap();
        let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(properties)).unwrap();
        writer.write(&batch(vec![-4.5, f64::NAN, -1.0])).unwrap();
        writer.write(&batch(vec![2.0, 3.0, 4.0])).unwrap();
        writer.close().unwrap();
    }

    async fn count(guard: bool, path: &std::path::Path, sql: &str) -> i64 {
        count_with(guard, SquadronOptions::default(), path, sql).await
    }

    async fn count_with(
        guard: bool,
        options: SquadronOptions,
        path: &std::path::Path,
        sql: &str,
    ) -> i64 {
        let config = SessionConfig::new()
            .with_target_partitions(1)
            .with_option_extension(options);
        let mut builder = SessionStateBuilder::new()
            .with_config(config)
            .with_default_features();
        if guard {
            let mut rules =
                datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
            rules.push(Arc::new(NanSafePruning));
            builder = builder.with_physical_optimizer_rules(rules);
        }
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.register_parquet("t", path.to_str().unwrap(), ParquetReadOptions::default())
            .await
            .unwrap();
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let counts = batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>();
        counts.unwrap().value(0)
    }

    #[tokio::test]
    async fn a_nan_the_comparison_keeps_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        write_file(&path);
        let filtered = "SELECT count(*) FROM t WHERE f >= 1.25";
        let counted = "SELECT sum(CASE WHEN f >= 1.25 THEN 1 ELSE 0 END) FROM t";
        // DataFusion alone skips the first row group, NaN and all.
        assert_eq!(count(false, &path, counted).await, 4);
        assert_eq!(count(false, &path, filtered).await, 3);
        assert_eq!(count(true, &path, filtered).await, 4);
        // Comparisons a NaN fails answer as before.
        let below = "SELECT count(*) FROM t WHERE f < 0 AND f <> -1.0";
        assert_eq!(count(true, &path, below).await, 1);
        assert_eq!(
            count(true, &path, "SELECT count(*) FROM t WHERE f = 3.0").await,
            1
        );
        // The setting turns the guard off: DataFusion's pruning again.
        let off = SquadronOptions {
            nan_safe_pruning: false,
            ..SquadronOptions::default()
        };
        assert_eq!(count_with(true, off, &path, filtered).await, 3);
    }
}
