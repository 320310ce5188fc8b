//! The two engines the files run on, behind sqllogictest's `AsyncDB`:
//! single-node DataFusion set up as DataFusion's own runner sets it up, and
//! Squadron through the Flight SQL protocol.

use std::sync::Arc;
use std::time::Duration;

use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use async_trait::async_trait;
use datafusion::arrow::datatypes::Fields;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;
use sqllogictest::AsyncDB;
use squadron_exec::plan::yielding;
use tonic::transport::Channel;

use crate::format::{output, SltOutput, SltType};

/// Tasks per stage on both sides: DataFusion's runner fixes 4 so plans are
/// deterministic; the cluster gets the same number.
pub const PARTITIONS: usize = 4;

/// An error as the `.slt` files expect to see it (`statement error
/// <regex>` is matched against this text).
#[derive(Debug)]
pub struct EngineError(pub String);

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EngineError {}

/// A statement's columns and rows, or its error.
pub type Answer = Result<(Fields, Vec<RecordBatch>), EngineError>;

/// Single-node DataFusion, one fresh context per file.
pub struct Baseline {
    ctx: SessionContext,
    deadline: Duration,
}

impl Baseline {
    pub fn new(deadline: Duration) -> Self {
        Self::with_physical_rules(deadline, PhysicalOptimizer::new().rules)
    }

    /// DataFusion with `rules` as its physical optimizer rules (the
    /// fuzzer's oracle takes the fix of a DataFusion bug Squadron has).
    pub fn with_physical_rules(
        deadline: Duration,
        rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
    ) -> Self {
        let config = SessionConfig::new().with_target_partitions(PARTITIONS);
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(Arc::new(RuntimeEnv::default()))
            .with_default_features()
            .with_physical_optimizer_rules(rules)
            .build();
        Self {
            ctx: SessionContext::new_with_state(state),
            deadline,
        }
    }

    pub async fn answer(&self, sql: &str) -> Answer {
        let df = self.ctx.sql(sql).await.map_err(datafusion_error)?;
        let task_ctx = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await.map_err(datafusion_error)?;
        let fields = plan.schema().fields().clone();
        // Joins yield between the batches they emit, as in Squadron: a
        // statement past its deadline is dropped, and a cross join of
        // small inputs feeding an aggregate otherwise never yields, so
        // it kept computing and starved the fuzzer's next statements
        // (seed 52001 stalled at query ~2000 for half an hour).
        let plan = yielding(plan).map_err(datafusion_error)?;
        let batches = collect(plan, task_ctx).await.map_err(datafusion_error)?;
        Ok((fields, batches))
    }
}

fn datafusion_error(e: datafusion::error::DataFusionError) -> EngineError {
    EngineError(format!("DataFusion error: {}", e.strip_backtrace()))
}

/// Squadron's coordinator, spoken to as any Flight SQL client does: each
/// statement is a `CommandStatementQuery` (GetFlightInfo), then DoGet of
/// every endpoint. One connection — one session — per file.
pub struct Squadron {
    client: FlightSqlServiceClient<Channel>,
    deadline: Duration,
}

impl Squadron {
    pub async fn connect(addr: &str, deadline: Duration) -> anyhow::Result<Self> {
        let channel = Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?;
        let mut squadron = Self {
            client: FlightSqlServiceClient::new(channel),
            deadline,
        };
        // Squadron shows information_schema by default; DataFusion's runner
        // starts each file without it (files turn it on themselves).
        squadron
            .answer("SET datafusion.catalog.information_schema = false")
            .await
            .map_err(|e| {
                anyhow::anyhow!("starting the session as DataFusion's runner does: {e}")
            })?;
        Ok(squadron)
    }

    pub async fn answer(&mut self, sql: &str) -> Answer {
        let info = self
            .client
            .execute(sql.to_string(), None)
            .await
            .map_err(flight_error)?;
        let schema = info
            .clone()
            .try_decode_schema()
            .map_err(|e| EngineError(format!("Squadron sent an unreadable schema: {e}")))?;
        let mut batches = vec![];
        for endpoint in info.endpoint {
            let ticket = endpoint
                .ticket
                .ok_or_else(|| EngineError("Squadron sent an endpoint without a ticket".into()))?;
            let stream = self.client.do_get(ticket).await.map_err(flight_error)?;
            let mut got: Vec<RecordBatch> = stream.try_collect().await.map_err(flight_error)?;
            batches.append(&mut got);
        }
        Ok((schema.fields().clone(), batches))
    }
}

impl Squadron {
    /// The single integer a query like `SELECT count(*) …` returns.
    pub async fn count(&mut self, sql: &str) -> anyhow::Result<u64> {
        use datafusion::arrow::array::AsArray;
        use datafusion::arrow::datatypes::Int64Type;
        let (_, batches) = self
            .answer(sql)
            .await
            .map_err(|e| anyhow::anyhow!("{sql}: {e}"))?;
        let value = batches
            .iter()
            .find(|b| b.num_rows() > 0)
            .and_then(|b| {
                b.column(0)
                    .as_primitive_opt::<Int64Type>()
                    .map(|a| a.value(0))
            })
            .unwrap_or(0);
        Ok(u64::try_from(value).unwrap_or(0))
    }
}

/// The status's message is the DataFusion error's text; it gets the same
/// prefix DataFusion's runner puts on its errors, so the files' expected
/// error patterns apply unchanged.
fn flight_error(e: FlightError) -> EngineError {
    match e {
        FlightError::Tonic(status) => {
            EngineError(format!("DataFusion error: {}", status.message()))
        }
        other => EngineError(format!("DataFusion error: {other}")),
    }
}

async fn within(deadline: Duration, answer: impl std::future::Future<Output = Answer>) -> Answer {
    tokio::time::timeout(deadline, answer)
        .await
        .unwrap_or_else(|_| Err(EngineError(format!("no answer within {deadline:?}"))))
}

fn rendered(answer: Answer) -> Result<SltOutput, EngineError> {
    let (fields, batches) = answer?;
    output(&fields, &batches).map_err(|e| EngineError(format!("Arrow error: {e}")))
}

#[async_trait]
impl AsyncDB for Baseline {
    type Error = EngineError;
    type ColumnType = SltType;

    async fn run(&mut self, sql: &str) -> Result<SltOutput, EngineError> {
        rendered(within(self.deadline, self.answer(sql)).await)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "DataFusion"
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

#[async_trait]
impl AsyncDB for Squadron {
    type Error = EngineError;
    type ColumnType = SltType;

    async fn run(&mut self, sql: &str) -> Result<SltOutput, EngineError> {
        let deadline = self.deadline;
        rendered(within(deadline, self.answer(sql)).await)
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "DataFusion"
    }

    async fn sleep(duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
