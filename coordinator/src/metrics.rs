//! The coordinator's Prometheus metrics (served by
//! `squadron_common::metrics::serve` on `--metrics-listen`). Every name the
//! Grafana dashboard uses is one of these; a test checks it.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

pub const QUERIES: &str = "squadron_queries_total";
pub const QUERY_SECONDS: &str = "squadron_query_duration_seconds";
pub const QUERIES_ACTIVE: &str = "squadron_queries_active";
pub const PLANNING_SECONDS: &str = "squadron_planning_duration_seconds";
pub const PLANS_REUSED: &str = "squadron_plans_reused_total";
pub const FLIGHT_REQUESTS: &str = "squadron_flight_requests_total";
pub const STAGES: &str = "squadron_stages_total";
pub const TASKS: &str = "squadron_tasks_total";
pub const JOB_RETRIES: &str = "squadron_job_retries_total";
pub const TASK_RERUNS: &str = "squadron_task_reruns_total";
pub const SPOOLED_BYTES: &str = "squadron_result_spooled_bytes_total";
pub const STAGE_SECONDS: &str = "squadron_stage_duration_seconds";
pub const TASK_SPILLED_BYTES: &str = "squadron_task_spilled_bytes_total";
pub const WORKERS_KNOWN: &str = "squadron_workers_known";
pub const WORKERS_HEALTHY: &str = "squadron_workers_healthy";
pub const CLIENT_BYTES: &str = "squadron_client_sent_bytes_total";
pub const CLIENT_BATCHES: &str = "squadron_client_sent_batches_total";
pub const AUTH_FAILURES: &str = "squadron_auth_failures_total";
pub const CATALOG_COMMITS: &str = "squadron_catalog_commits_total";
pub const SWEPT_FILES: &str = "squadron_swept_files_total";

/// `outcome` of a query: it sent its whole answer, failed, or its client
/// went away (or cancelled it) first.
pub const QUERY_OUTCOMES: &[&str] = &["ok", "error", "cancelled"];
/// `kind` of an authentication failure: a wrong password at login, or a
/// missing, malformed, expired or wrongly signed token on a call.
pub const AUTH_FAILURE_KINDS: &[&str] = &["login", "token"];
/// `outcome` of a catalog commit: written, lost a race to another
/// coordinator's (and applied again), or failed (the store refused).
pub const COMMIT_OUTCOMES: &[&str] = &["committed", "conflict", "failed"];

/// `outcome` of a task, as its coordinator saw it.
pub const TASK_OUTCOMES: &[&str] = &["succeeded", "failed", "lost"];

/// Describes the coordinator's metrics and creates them at zero.
pub fn describe() {
    describe_counter!(QUERIES, "Queries and statements run, by outcome");
    describe_histogram!(
        QUERY_SECONDS,
        Unit::Seconds,
        "Time from a query's start to its last row sent"
    );
    describe_gauge!(QUERIES_ACTIVE, "Queries running now");
    describe_histogram!(
        PLANNING_SECONDS,
        Unit::Seconds,
        "Physical planning and stage cutting of one statement"
    );
    describe_counter!(
        PLANS_REUSED,
        "Statements planned from a kept plan of the same statement with other constants"
    );
    describe_counter!(
        FLIGHT_REQUESTS,
        "Flight SQL calls, by method and the status they were answered with"
    );
    describe_counter!(STAGES, "Stages dispatched (per job attempt)");
    describe_counter!(TASKS, "Tasks ended, by outcome");
    describe_counter!(JOB_RETRIES, "Job attempts re-run after a lost worker");
    describe_counter!(
        TASK_RERUNS,
        "Tasks run again after a lost worker or a broken read (retry policy 'task')"
    );
    describe_counter!(
        SPOOLED_BYTES,
        Unit::Bytes,
        "Bytes of fault-tolerant results the coordinator spooled to disk before sending them"
    );
    describe_histogram!(
        STAGE_SECONDS,
        Unit::Seconds,
        "Stages of completed jobs: their first task's start to their last task's end"
    );
    describe_counter!(
        TASK_SPILLED_BYTES,
        Unit::Bytes,
        "Bytes tasks spilled to disk (operators and exchange outputs), as they reported"
    );
    describe_gauge!(WORKERS_KNOWN, "Workers the resolver lists");
    describe_gauge!(WORKERS_HEALTHY, "Workers that may take tasks now");
    describe_counter!(
        CLIENT_BYTES,
        Unit::Bytes,
        "Bytes of results streamed to clients"
    );
    describe_counter!(
        CLIENT_BATCHES,
        "Record batches of results streamed to clients"
    );
    describe_counter!(
        AUTH_FAILURES,
        "Failed logins and calls refused for want of a valid token, by kind"
    );
    describe_counter!(
        CATALOG_COMMITS,
        "Catalog versions this coordinator tried to commit, by outcome"
    );
    describe_counter!(
        SWEPT_FILES,
        "Warehouse files no catalog version named, removed by the sweep"
    );
    for outcome in COMMIT_OUTCOMES {
        counter!(CATALOG_COMMITS, "outcome" => *outcome).increment(0);
    }
    for outcome in QUERY_OUTCOMES {
        counter!(QUERIES, "outcome" => *outcome).increment(0);
    }
    for outcome in TASK_OUTCOMES {
        counter!(TASKS, "outcome" => *outcome).increment(0);
    }
    for kind in AUTH_FAILURE_KINDS {
        counter!(AUTH_FAILURES, "kind" => *kind).increment(0);
    }
    for name in [
        STAGES,
        JOB_RETRIES,
        TASK_RERUNS,
        SPOOLED_BYTES,
        TASK_SPILLED_BYTES,
        CLIENT_BYTES,
        CLIENT_BATCHES,
        PLANS_REUSED,
        SWEPT_FILES,
    ] {
        counter!(name).increment(0);
    }
    for name in [QUERIES_ACTIVE, WORKERS_KNOWN, WORKERS_HEALTHY] {
        gauge!(name).increment(0.0);
    }
}

/// Flight SQL commands and actions (`command` label); anything else
/// counts as `other`, so the label has a fixed set of values.
const COMMANDS: &[&str] = &[
    "CommandStatementQuery",
    "CommandStatementUpdate",
    "CommandStatementIngest",
    "CommandPreparedStatementQuery",
    "CommandPreparedStatementUpdate",
    "CommandGetCatalogs",
    "CommandGetDbSchemas",
    "CommandGetTables",
    "CommandGetTableTypes",
    "CommandGetSqlInfo",
    "CommandGetXdbcTypeInfo",
    "CommandGetPrimaryKeys",
    "CommandGetExportedKeys",
    "CommandGetImportedKeys",
    "CommandGetCrossReference",
    "TicketStatementQuery",
    "CreatePreparedStatement",
    "ClosePreparedStatement",
    "CancelQuery",
    "CancelFlightInfo",
    "SetSessionOptions",
    "GetSessionOptions",
    "CloseSession",
];

/// The command a descriptor or ticket carries (an `Any`), by name.
pub fn command_of(bytes: &[u8]) -> &'static str {
    use prost::Message;
    let Ok(any) = arrow_flight::sql::Any::decode(bytes) else {
        return "other";
    };
    known_command(any.type_url.rsplit('.').next().unwrap_or_default())
}

/// `name` if it is a known command or action, else `other`.
pub fn known_command(name: &str) -> &'static str {
    COMMANDS
        .iter()
        .find(|c| **c == name)
        .copied()
        .unwrap_or("other")
}

/// Counts one Flight call: its method, command, and the status it was
/// answered with (for streams, the status at the start of the answer).
pub fn flight_request<T>(
    method: &'static str,
    command: &'static str,
    result: &Result<T, tonic::Status>,
) {
    let code = match result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    counter!(
        FLIGHT_REQUESTS,
        "method" => method,
        "command" => command,
        "code" => code_name(code)
    )
    .increment(1);
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
