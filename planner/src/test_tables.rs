//! Small in-memory tables and answers for the planner's unit tests.

use std::sync::Arc;

use datafusion::arrow::array::Int64Array;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

/// `(k, v)` rows in `partitions` partitions (`k` may be NULL).
pub fn key_value_table(rows: &[(Option<i64>, i64)], partitions: usize) -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, false),
    ]));
    let batches = rows
        .chunks(rows.len().div_ceil(partitions))
        .map(|chunk| {
            let k: Int64Array = chunk.iter().map(|(k, _)| *k).collect();
            let v: Int64Array = chunk.iter().map(|(_, v)| Some(*v)).collect();
            vec![RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(k), Arc::new(v)]).unwrap()]
        })
        .collect();
    MemTable::try_new(schema, batches).unwrap()
}

/// The lines of `batches` as a table, sorted: an answer whatever its order.
pub fn sorted_lines(batches: &[RecordBatch]) -> Vec<String> {
    let text = pretty_format_batches(batches).unwrap().to_string();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// DataFusion's physical plan of `sql` in `ctx`.
pub async fn physical_plan(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
    ctx.sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap()
}

/// `config` with every equi-join partitioned: no build side is small
/// enough to collect.
pub fn without_collected_joins(config: &mut SessionConfig) {
    let optimizer = &mut config.options_mut().optimizer;
    optimizer.hash_join_single_partition_threshold = 0;
    optimizer.hash_join_single_partition_threshold_rows = 0;
}

/// One Parquet file of 8,000 rows sorted on `k` (and `v = 2k`), in row
/// groups of 1,000, as table `t` of `ctx`; the file's size.
pub async fn sorted_table(ctx: &SessionContext, dir: &std::path::Path) -> u64 {
    let file = dir.join("t.parquet");
    let statements = [
        "SET datafusion.execution.parquet.max_row_group_size = 1000".to_string(),
        format!(
            "COPY (SELECT value AS k, value * 2 AS v FROM generate_series(1, 8000)) \
             TO '{}' STORED AS PARQUET",
            file.display()
        ),
        format!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'",
            file.display()
        ),
    ];
    for sql in statements {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    std::fs::metadata(&file).unwrap().len()
}
