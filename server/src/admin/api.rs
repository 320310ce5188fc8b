//! The JSON the UI's script polls: the same records `system.queries`,
//! `system.tasks` and `system.workers` show, so the numbers agree.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::physical_plan::displayable;
use serde_json::{json, Value};
use squadron_coordinator::queries::QueryRow;
use squadron_coordinator::scheduler::TaskRun;

use super::state::Admin;

fn millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the coordinator is shutting down",
    )
        .into_response()
}

fn query_json(row: &QueryRow, progress: Option<(usize, usize)>) -> Value {
    json!({
        "id": row.id,
        "user": row.user,
        "state": row.state,
        "started_ms": millis(row.started),
        "elapsed_ms": row.elapsed_ms,
        "stages": row.stages,
        "tasks_done": progress.map(|p| p.0),
        "tasks_total": progress.map(|p| p.1),
        "sql": row.sql,
        "error": row.error,
        "rows": row.rows,
        "bytes": row.bytes,
    })
}

fn task_json(run: &TaskRun) -> Value {
    let m = run.metrics.as_ref();
    json!({
        "stage": run.stage,
        "task": run.partition,
        "attempt": run.attempt,
        "worker": run.worker,
        "state": run.state,
        "started_ms": millis(run.started),
        "ended_ms": run.ended.map(millis),
        "output_rows": m.map(|m| m.output_rows),
        "output_bytes": m.map(|m| m.output_bytes),
        "input_rows": m.map(|m| m.input_rows),
        "input_bytes": m.map(|m| m.input_bytes),
        "compute_us": m.map(|m| m.elapsed_compute_nanos / 1000),
        "spilled_bytes": m.map(|m| m.spilled_bytes),
        "peak_memory_bytes": m.map(|m| m.peak_memory_bytes),
        "error": run.error,
    })
}

pub async fn queries(State(admin): State<Admin>) -> Response {
    let Some(live) = admin.queries.upgrade() else {
        return unavailable();
    };
    let rows: Vec<Value> = live
        .live_queries()
        .iter()
        .map(|(row, progress)| query_json(row, *progress))
        .collect();
    Json(rows).into_response()
}

pub async fn query(State(admin): State<Admin>, Path(id): Path<String>) -> Response {
    let Some(live) = admin.queries.upgrade() else {
        return unavailable();
    };
    let Some(job) = live.query_job(&id) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no query {id} is remembered"),
        )
            .into_response();
    };
    let stages: Vec<Value> = job
        .graph
        .iter()
        .flat_map(|graph| graph.stages.iter())
        .map(|stage| {
            json!({
                "id": stage.id,
                "tasks": stage.tasks,
                "inputs": stage.inputs,
                "output": stage.output().to_string(),
                "plan": displayable(stage.plan.as_ref()).indent(false).to_string(),
            })
        })
        .collect();
    Json(json!({
        "query": query_json(&job.query, job.progress),
        "stages": stages,
        "tasks": job.runs.iter().map(task_json).collect::<Vec<_>>(),
    }))
    .into_response()
}

pub async fn workers(State(admin): State<Admin>) -> Response {
    let sql = "SELECT url, state, running_tasks, last_seen FROM system.workers ORDER BY url";
    let batches = match admin.session.sql(sql).await {
        Ok(frame) => frame.collect().await,
        Err(e) => Err(e),
    };
    let batches = match batches {
        Ok(batches) => batches,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let mut rows = vec![];
    for batch in &batches {
        let columns: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .filter_map(|c| cast(c, &DataType::Utf8).ok())
            .collect();
        let column = |i: usize| columns.get(i)?.as_any().downcast_ref::<StringArray>();
        let (Some(url), Some(state), Some(tasks), Some(seen)) =
            (column(0), column(1), column(2), column(3))
        else {
            continue;
        };
        for i in 0..batch.num_rows() {
            rows.push(json!({
                "url": url.value(i),
                "state": state.value(i),
                "running_tasks": tasks.value(i).parse::<u64>().unwrap_or(0),
                "last_seen": (!seen.is_null(i)).then(|| seen.value(i)),
            }));
        }
    }
    Json(rows).into_response()
}
