//! `TableWriteExec`: the tasks that compute a statement's rows write them
//! into the table's directory themselves, in parallel, and answer only
//! what they wrote.
//!
//! Each partition writes its rows as part files named by the statement
//! (`write_id`, the job's id), the partition and the task attempt, so a
//! task run again never overwrites, and the coordinator commits exactly the
//! files the successful attempt reported (one row per file: path, bytes,
//! rows). A partition with no rows writes no file.
//!
//! The rewrite of an UPDATE or DELETE carries whether each row matched as
//! a last boolean column (`RowFlag`): it is counted (the rows the statement
//! changed) and dropped before writing, and for DELETE the matched rows
//! are dropped too.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::compute::kernels::boolean::not;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{internal_err, DataFusionError, Result};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use futures::{Stream, StreamExt};

use crate::plan::node_children::{one_input, recomputed};
use squadron_storage::format::{
    as_table_rows, written_batch, written_schema, PartFile, PartTarget, StoredFormat, Written,
};

/// A part file is closed and another started past this size, so no file
/// grows without bound and readers can split a large table's files.
pub const MAX_PART_BYTES: u64 = 512 * 1024 * 1024;

/// What the input's last column means, if it carries a row flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFlag {
    /// No flag: every column is the table's.
    None,
    /// UPDATE: count the flagged rows, write every row.
    Count,
    /// DELETE: count the flagged rows and write only the others.
    CountAndDrop,
}

/// Where and how a statement writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteTarget {
    /// The table's directory, a URL (`file:///…/`, `s3://bucket/…/`).
    pub table_url: String,
    /// Names the statement's files: the job's id.
    pub write_id: String,
    pub format: StoredFormat,
    /// The table's columns: rows are cast to them.
    pub table_schema: SchemaRef,
    pub flag: RowFlag,
}

impl WriteTarget {
    /// The name of part `index` of `partition`, written by `attempt`.
    pub fn part_name(&self, partition: usize, attempt: u32, index: usize) -> String {
        format!(
            "part-{}-{partition:05}-{attempt}-{index}{}",
            self.write_id,
            self.format.extension()
        )
    }

    /// The prefix every file of this statement starts with.
    pub fn part_prefix(write_id: &str) -> String {
        format!("part-{write_id}-")
    }
}

#[derive(Debug)]
pub struct TableWriteExec {
    input: Arc<dyn ExecutionPlan>,
    target: WriteTarget,
    /// The task attempt running it (bound by the task runner; 0 when the
    /// coordinator runs it itself).
    attempt: u32,
    properties: Arc<PlanProperties>,
}

impl TableWriteExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, target: WriteTarget) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(written_schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            input,
            target,
            attempt: 0,
            properties: Arc::new(properties),
        }
    }

    pub fn target(&self) -> &WriteTarget {
        &self.target
    }

    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }

    /// This node for task attempt `attempt`.
    pub fn for_attempt(&self, attempt: u32) -> Self {
        Self {
            attempt,
            ..Self::new(Arc::clone(&self.input), self.target.clone())
        }
    }
}

impl DisplayAs for TableWriteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "TableWriteExec: table={}, format={}",
            self.target.table_url,
            self.target.format.name()
        )?;
        match self.target.flag {
            RowFlag::None => Ok(()),
            RowFlag::Count => write!(f, ", flagged=count"),
            RowFlag::CountAndDrop => write!(f, ", flagged=drop"),
        }
    }
}

impl ExecutionPlan for TableWriteExec {
    fn name(&self) -> &str {
        "TableWriteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_input(children, "TableWriteExec")?;
        Ok(Arc::new(Self {
            attempt: self.attempt,
            ..Self::new(input, self.target.clone())
        }))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        recomputed(self, children)
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition >= self.input.output_partitioning().partition_count() {
            return internal_err!("TableWriteExec has no partition {partition}");
        }
        let writer = PartitionWriter::new(
            self.target.clone(),
            partition,
            self.attempt,
            &context.runtime_env(),
        )?;
        let rows = self.input.execute(partition, context)?;
        let output = futures::stream::once(async move {
            writer.write(rows).await.and_then(|w| written_batch(&w))
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            written_schema(),
            output,
        )))
    }
}

/// One partition's write: its rows as part files of the target table.
pub struct PartitionWriter {
    target: WriteTarget,
    partition: usize,
    attempt: u32,
    dir: object_store::path::Path,
    store: Arc<dyn object_store::ObjectStore>,
    local: bool,
}

impl PartitionWriter {
    /// Partition `partition`'s write for task attempt `attempt`, through
    /// the stores of `runtime`.
    pub fn new(
        target: WriteTarget,
        partition: usize,
        attempt: u32,
        runtime: &RuntimeEnv,
    ) -> Result<Self> {
        let url = ListingTableUrl::parse(&target.table_url)?;
        let store = runtime.object_store(&url)?;
        Ok(Self {
            local: url.scheme() == "file",
            dir: url.prefix().clone(),
            target,
            partition,
            attempt,
            store,
        })
    }

    /// Writes every row of `rows` (a file at a time, the next begun when
    /// one reaches `MAX_PART_BYTES`); what it wrote. A failure aborts the
    /// file being written; files finished before stay for the caller to
    /// remove (they are named by the write).
    pub async fn write<S>(self, mut rows: S) -> Result<Written>
    where
        S: Stream<Item = Result<RecordBatch>> + Unpin,
    {
        let mut written = Written::default();
        let mut open: Option<PartFile> = None;
        let result = async {
            while let Some(batch) = rows.next().await {
                let batch = self.table_rows(batch?, &mut written.flagged)?;
                if batch.num_rows() == 0 {
                    continue;
                }
                let file = match open.as_mut() {
                    Some(file) => file,
                    None => open.insert(self.create(written.files.len(), &batch)?),
                };
                file.write(&batch).await?;
                if file.bytes() >= MAX_PART_BYTES {
                    let full = open.take().expect("a file is open");
                    written.files.push(full.finish().await?);
                }
            }
            if let Some(last) = open.take() {
                written.files.push(last.finish().await?);
            }
            Ok::<_, DataFusionError>(())
        }
        .await;
        if let Err(e) = result {
            if let Some(file) = open {
                file.abort().await;
            }
            return Err(e);
        }
        Ok(written)
    }

    fn create(&self, index: usize, sample: &RecordBatch) -> Result<PartFile> {
        let name = self.target.part_name(self.partition, self.attempt, index);
        let target = PartTarget::new(Arc::clone(&self.store), &self.dir, &name, self.local);
        PartFile::create(
            target,
            &self.target.table_schema,
            self.target.format,
            Some(sample),
        )
    }

    /// `batch` as the table's rows: its flag counted into `flagged` and
    /// dropped (with the flagged rows, for DELETE), cast to the table.
    fn table_rows(&self, batch: RecordBatch, flagged: &mut u64) -> Result<RecordBatch> {
        let batch = match self.target.flag {
            RowFlag::None => batch,
            flag => {
                let last = batch.num_columns() - 1;
                let matched = batch.column(last).as_boolean().clone();
                *flagged += matched.true_count() as u64;
                let data = batch.project(&(0..last).collect::<Vec<_>>())?;
                if flag == RowFlag::CountAndDrop {
                    filter_record_batch(&data, &not(&matched)?)?
                } else {
                    data
                }
            }
        };
        as_table_rows(batch, &self.target.table_schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BooleanArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::prelude::SessionContext;
    use futures::TryStreamExt;
    use squadron_storage::format::read_written;

    fn batch(keys: &[i64], matched: &[bool]) -> RecordBatch {
        RecordBatch::try_from_iter([
            ("k", Arc::new(Int64Array::from(keys.to_vec())) as _),
            (
                "matched",
                Arc::new(BooleanArray::from(matched.to_vec())) as _,
            ),
        ])
        .unwrap()
    }

    /// Runs a write of two partitions (the second empty) into `dir`; what
    /// each partition answered.
    async fn write(dir: &std::path::Path, flag: RowFlag, attempt: u32) -> Vec<Written> {
        let rows = batch(&[1, 2, 3], &[true, false, true]);
        let input =
            MemorySourceConfig::try_new_exec(&[vec![rows.clone()], vec![]], rows.schema(), None)
                .unwrap();
        let table_schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let target = WriteTarget {
            table_url: format!("file://{}/", dir.display()),
            write_id: "w1".into(),
            format: StoredFormat::Parquet,
            table_schema,
            flag,
        };
        let write = TableWriteExec::new(input, target).for_attempt(attempt);
        let ctx = SessionContext::new().task_ctx();
        let mut answers = vec![];
        for partition in 0..2 {
            let batches: Vec<RecordBatch> = write
                .execute(partition, Arc::clone(&ctx))
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            answers.push(read_written(&batches[0]).unwrap());
        }
        answers
    }

    #[tokio::test]
    async fn each_partition_writes_its_rows_as_files_named_by_write_and_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let answers = write(dir.path(), RowFlag::Count, 2).await;
        assert_eq!(answers[0].rows(), 3);
        assert_eq!(answers[0].flagged, 2);
        assert_eq!(answers[1], Written::default(), "no rows, no file");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["part-w1-00000-2-0.parquet"]);
        assert_eq!(
            answers[0].files[0].location.filename(),
            Some("part-w1-00000-2-0.parquet")
        );
        // Another attempt writes files of its own.
        write(dir.path(), RowFlag::Count, 3).await;
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[tokio::test]
    async fn a_delete_drops_the_flagged_rows_and_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let answers = write(dir.path(), RowFlag::CountAndDrop, 0).await;
        assert_eq!(answers[0].flagged, 2);
        assert_eq!(answers[0].rows(), 1);
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "t",
            dir.path().to_str().unwrap(),
            datafusion::prelude::ParquetReadOptions::default(),
        )
        .await
        .unwrap();
        let kept = ctx
            .sql("SELECT k FROM t")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(
            kept[0]
                .column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .values(),
            &[2]
        );
    }
}
