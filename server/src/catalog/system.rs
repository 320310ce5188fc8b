//! `system.workers`, `system.queries` and `system.tasks`: the coordinator's
//! live state as
//! tables. They are computed when scanned, as in-memory batches, so their
//! queries run on the coordinator (`planner::local`), never on workers.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray, UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{MemorySchemaProvider, SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use squadron_coordinator::cluster::{WorkerHealth, WorkerResolver};
use squadron_coordinator::queries::LiveQueries;
use squadron_proto::v1::TaskMetrics;

/// The schema the tables live in, in the default catalog.
pub const SYSTEM_SCHEMA: &str = "system";

type Rows = Box<dyn Fn() -> Result<RecordBatch> + Send + Sync>;

struct SystemTable {
    schema: SchemaRef,
    rows: Rows,
}

impl fmt::Debug for SystemTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SystemTable")
            .field("schema", &self.schema)
            .finish()
    }
}

#[tonic::async_trait]
impl TableProvider for SystemTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = (self.rows)()?;
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            Arc::clone(&self.schema),
            projection.cloned(),
        )?)
    }
}

/// Registers `system.workers`, `system.queries` and `system.tasks` in
/// `ctx`'s default catalog.
pub fn register(
    ctx: &SessionContext,
    coordinator: Weak<dyn LiveQueries>,
    resolver: Arc<dyn WorkerResolver>,
    health: WorkerHealth,
) -> Result<()> {
    let catalog_name = ctx
        .state()
        .config()
        .options()
        .catalog
        .default_catalog
        .clone();
    let catalog = ctx
        .catalog(&catalog_name)
        .ok_or_else(|| DataFusionError::Plan(format!("no default catalog {catalog_name}")))?;
    let schema = Arc::new(MemorySchemaProvider::new());
    schema.register_table("workers".into(), Arc::new(workers_table(resolver, health)))?;
    schema.register_table(
        "queries".into(),
        Arc::new(queries_table(Weak::clone(&coordinator))),
    )?;
    schema.register_table("tasks".into(), Arc::new(tasks_table(coordinator)))?;
    catalog.register_schema(SYSTEM_SCHEMA, schema)?;
    Ok(())
}

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The coordinator, unless it is shutting down.
fn live(coordinator: &Weak<dyn LiveQueries>) -> Result<Arc<dyn LiveQueries>> {
    coordinator
        .upgrade()
        .ok_or_else(|| DataFusionError::Execution("the coordinator is shutting down".into()))
}

/// Milliseconds since the epoch as UTC timestamps.
fn timestamps(values: impl IntoIterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from_iter(values).with_timezone("UTC"))
}

fn batch(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn workers_table(resolver: Arc<dyn WorkerResolver>, health: WorkerHealth) -> SystemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("url", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("running_tasks", DataType::UInt64, false),
        Field::new("last_seen", timestamp_type(), true),
    ]));
    let rows_schema = Arc::clone(&schema);
    SystemTable {
        schema,
        rows: Box::new(move || {
            let urls = resolver.get_urls();
            let states: Vec<&str> = urls.iter().map(|u| health.state_of(u)).collect();
            let tasks: Vec<u64> = urls.iter().map(|u| health.placed_tasks(u) as u64).collect();
            let seen: Vec<Option<i64>> = urls
                .iter()
                .map(|u| health.last_seen(u).map(millis))
                .collect();
            batch(
                &rows_schema,
                vec![
                    Arc::new(StringArray::from(urls)),
                    Arc::new(StringArray::from(states)),
                    Arc::new(UInt64Array::from(tasks)),
                    timestamps(seen),
                ],
            )
        }),
    }
}

fn queries_table(coordinator: Weak<dyn LiveQueries>) -> SystemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("user", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("started", timestamp_type(), false),
        Field::new("elapsed_ms", DataType::UInt64, false),
        Field::new("stages", DataType::UInt32, false),
        Field::new("tasks_done", DataType::UInt64, true),
        Field::new("tasks_total", DataType::UInt64, true),
        Field::new("sql", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("rows", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
    ]));
    let rows_schema = Arc::clone(&schema);
    SystemTable {
        schema,
        rows: Box::new(move || {
            let coordinator = live(&coordinator)?;
            let (rows, progress): (Vec<_>, Vec<_>) = coordinator.live_queries().into_iter().unzip();
            batch(
                &rows_schema,
                vec![
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.id))),
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.user))),
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.state))),
                    timestamps(rows.iter().map(|r| Some(millis(r.started)))),
                    Arc::new(UInt64Array::from_iter_values(
                        rows.iter().map(|r| r.elapsed_ms),
                    )),
                    Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.stages))),
                    Arc::new(UInt64Array::from_iter(
                        progress
                            .iter()
                            .map(|p| p.map(|(finished, _)| finished as u64)),
                    )),
                    Arc::new(UInt64Array::from_iter(
                        progress.iter().map(|p| p.map(|(_, tasks)| tasks as u64)),
                    )),
                    Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.sql))),
                    Arc::new(StringArray::from_iter(
                        rows.iter().map(|r| r.error.as_deref()),
                    )),
                    Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.rows))),
                    Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.bytes))),
                ],
            )
        }),
    }
}

fn tasks_table(coordinator: Weak<dyn LiveQueries>) -> SystemTable {
    let metric = |name: &str| Field::new(name, DataType::UInt64, true);
    let schema = Arc::new(Schema::new(vec![
        Field::new("query_id", DataType::Utf8, false),
        Field::new("stage", DataType::UInt32, false),
        Field::new("task", DataType::UInt32, false),
        Field::new("attempt", DataType::UInt32, false),
        Field::new("worker", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("started", timestamp_type(), false),
        Field::new("ended", timestamp_type(), true),
        Field::new("elapsed_ms", DataType::UInt64, false),
        metric("output_rows"),
        metric("output_rows_filtered"),
        metric("output_bytes"),
        metric("input_rows"),
        metric("input_bytes"),
        metric("compute_us"),
        metric("spilled_bytes"),
        metric("peak_memory_bytes"),
        Field::new("error", DataType::Utf8, true),
    ]));
    let rows_schema = Arc::clone(&schema);
    SystemTable {
        schema,
        rows: Box::new(move || {
            let coordinator = live(&coordinator)?;
            let (queries, runs): (Vec<_>, Vec<_>) = coordinator.live_tasks().into_iter().unzip();
            let now = SystemTime::now();
            let measured = |f: fn(&TaskMetrics) -> u64| -> ArrayRef {
                Arc::new(UInt64Array::from_iter(
                    runs.iter().map(|r| r.metrics.as_ref().map(f)),
                ))
            };
            batch(
                &rows_schema,
                vec![
                    Arc::new(StringArray::from_iter_values(queries)),
                    Arc::new(UInt32Array::from_iter_values(runs.iter().map(|r| r.stage))),
                    Arc::new(UInt32Array::from_iter_values(
                        runs.iter().map(|r| r.partition),
                    )),
                    Arc::new(UInt32Array::from_iter_values(
                        runs.iter().map(|r| r.attempt),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        runs.iter().map(|r| &r.worker),
                    )),
                    Arc::new(StringArray::from_iter_values(runs.iter().map(|r| r.state))),
                    timestamps(runs.iter().map(|r| Some(millis(r.started)))),
                    timestamps(runs.iter().map(|r| r.ended.map(millis))),
                    Arc::new(UInt64Array::from_iter_values(runs.iter().map(|r| {
                        let end = r.ended.unwrap_or(now);
                        end.duration_since(r.started)
                            .map_or(0, |d| d.as_millis() as u64)
                    }))),
                    measured(|m| m.output_rows),
                    measured(|m| m.output_rows_filtered),
                    measured(|m| m.output_bytes),
                    measured(|m| m.input_rows),
                    measured(|m| m.input_bytes),
                    measured(|m| m.elapsed_compute_nanos / 1000),
                    measured(|m| m.spilled_bytes),
                    measured(|m| m.peak_memory_bytes),
                    Arc::new(StringArray::from_iter(
                        runs.iter().map(|r| r.error.as_deref()),
                    )),
                ],
            )
        }),
    }
}
