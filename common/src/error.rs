//! Squadron's error: what went wrong, with its kind as data, carried
//! through planning, updates and the warehouse; turned into a gRPC status
//! only where a call leaves through gRPC (`From<Error> for Status`). And
//! DataFusion errors classified into kinds, the same on workers and the
//! coordinator, so a task's failure reaches the client with the right code.

use datafusion::arrow::error::ArrowError;
use datafusion::common::DataFusionError;
use tonic::{Code, Status};

/// What kind of failure an `Error` is: what a client can do about it.
/// One per gRPC code Squadron answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad SQL, a bad reference, an error in the data, a malformed request.
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    Unauthenticated,
    /// Over a limit: memory, concurrent queries, handles.
    ResourceExhausted,
    /// The request does not fit the state things are in (a mixed-version
    /// cluster, a table of another kind).
    FailedPrecondition,
    /// Lost a race with a concurrent change: retrying may succeed.
    Aborted,
    /// Something needed could not be reached (a worker, a store).
    Unavailable,
    DeadlineExceeded,
    Cancelled,
    Unimplemented,
    /// Stored state that cannot be read back.
    DataLoss,
    /// A bug or an unexpected failure.
    Internal,
}

impl ErrorKind {
    /// The gRPC code a client sees for this kind.
    pub fn code(self) -> Code {
        match self {
            ErrorKind::InvalidArgument => Code::InvalidArgument,
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::AlreadyExists => Code::AlreadyExists,
            ErrorKind::PermissionDenied => Code::PermissionDenied,
            ErrorKind::Unauthenticated => Code::Unauthenticated,
            ErrorKind::ResourceExhausted => Code::ResourceExhausted,
            ErrorKind::FailedPrecondition => Code::FailedPrecondition,
            ErrorKind::Aborted => Code::Aborted,
            ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
            ErrorKind::Cancelled => Code::Cancelled,
            ErrorKind::Unimplemented => Code::Unimplemented,
            ErrorKind::DataLoss => Code::DataLoss,
            ErrorKind::Internal => Code::Internal,
        }
    }

    /// The kind of a status received from a peer (`Unknown` and codes
    /// Squadron never answers with are internal).
    pub fn of_code(code: Code) -> Self {
        match code {
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidArgument,
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::AlreadyExists,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            Code::ResourceExhausted => ErrorKind::ResourceExhausted,
            Code::FailedPrecondition => ErrorKind::FailedPrecondition,
            Code::Aborted => ErrorKind::Aborted,
            Code::Unavailable => ErrorKind::Unavailable,
            Code::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Code::Cancelled => ErrorKind::Cancelled,
            Code::Unimplemented => ErrorKind::Unimplemented,
            Code::DataLoss => ErrorKind::DataLoss,
            Code::Ok | Code::Unknown | Code::Internal => ErrorKind::Internal,
        }
    }
}

/// A failure in planning, running or committing a statement: its kind and
/// what to tell the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

macro_rules! constructors {
    ($($name:ident => $kind:ident),* $(,)?) => {
        impl Error {
            $(
                #[doc = concat!("An error of kind `", stringify!($kind), "`.")]
                pub fn $name(message: impl Into<String>) -> Self {
                    Self::new(ErrorKind::$kind, message)
                }
            )*
        }
    };
}

constructors! {
    invalid_argument => InvalidArgument,
    not_found => NotFound,
    already_exists => AlreadyExists,
    permission_denied => PermissionDenied,
    unauthenticated => Unauthenticated,
    resource_exhausted => ResourceExhausted,
    failed_precondition => FailedPrecondition,
    aborted => Aborted,
    unavailable => Unavailable,
    deadline_exceeded => DeadlineExceeded,
    cancelled => Cancelled,
    unimplemented => Unimplemented,
    data_loss => DataLoss,
    internal => Internal,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same kind, its message prefixed with where it happened.
    pub fn context(self, what: impl std::fmt::Display) -> Self {
        Self::new(self.kind, format!("{what}: {}", self.message))
    }
}

/// Where a call leaves through gRPC.
impl From<Error> for Status {
    fn from(e: Error) -> Self {
        Status::new(e.kind.code(), e.message)
    }
}

/// A status from a gRPC call (a worker, a store's client) keeps its kind.
impl From<Status> for Error {
    fn from(status: Status) -> Self {
        Self::new(ErrorKind::of_code(status.code()), status.message())
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Self {
        Self::of(&e)
    }
}

impl Error {
    /// The error a client sees for a DataFusion error.
    pub fn of(e: &DataFusionError) -> Self {
        Self::new(kind_of(e), e.to_string())
    }
}

/// Bad SQL, bad references and errors in the data (division by zero, a
/// failed cast, overflow) are the client's: InvalidArgument, or NotFound
/// for a missing file. Unsupported features are Unimplemented; an error
/// of Squadron's or a status from a peer keeps its kind; the rest is
/// Internal.
pub fn kind_of(e: &DataFusionError) -> ErrorKind {
    if let Some(store) = object_store_error(e) {
        return store_kind(store);
    }
    match e.find_root() {
        DataFusionError::SQL(..) => ErrorKind::InvalidArgument,
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => ErrorKind::InvalidArgument,
        DataFusionError::NotImplemented(_) => ErrorKind::Unimplemented,
        // An unknown table format or option: the statement's fault.
        DataFusionError::Configuration(_) => ErrorKind::InvalidArgument,
        DataFusionError::ResourcesExhausted(_) => ErrorKind::ResourceExhausted,
        // DataFusion's own catalogs refuse a second CREATE VIEW (or table,
        // schema) of a name with a plain execution error; its text is all
        // that tells it from a failure.
        DataFusionError::Execution(message) if message.ends_with("already exists") => {
            ErrorKind::AlreadyExists
        }
        DataFusionError::ArrowError(arrow, _) => match arrow.as_ref() {
            ArrowError::DivideByZero
            | ArrowError::ArithmeticOverflow(_)
            | ArrowError::CastError(_)
            | ArrowError::ParseError(_)
            | ArrowError::InvalidArgumentError(_)
            | ArrowError::ComputeError(_) => ErrorKind::InvalidArgument,
            _ => ErrorKind::Internal,
        },
        DataFusionError::External(inner) => {
            if let Some(error) = inner.downcast_ref::<Error>() {
                error.kind
            } else if let Some(status) = inner.downcast_ref::<Status>() {
                ErrorKind::of_code(status.code())
            } else if let Some(upstream) = inner.downcast_ref::<UpstreamError>() {
                ErrorKind::of_code(upstream.0.code())
            } else {
                ErrorKind::Internal
            }
        }
        _ => ErrorKind::Internal,
    }
}

/// The gRPC code of a DataFusion error (`kind_of`).
pub fn status_code(e: &DataFusionError) -> Code {
    kind_of(e).code()
}

/// The object store failure behind `e`, however DataFusion, Arrow or
/// Parquet wrapped it.
fn object_store_error(e: &DataFusionError) -> Option<&object_store::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = current {
        if let Some(store) = error.downcast_ref::<object_store::Error>() {
            return Some(store);
        }
        current = error.source();
    }
    None
}

/// A missing object or bucket is NOT_FOUND, refused credentials
/// PERMISSION_DENIED, and a store that could not be reached (connection
/// refused, timeouts, server errors after the retries) UNAVAILABLE.
pub fn store_kind(e: &object_store::Error) -> ErrorKind {
    use object_store::Error;
    match e {
        Error::NotFound { .. } => ErrorKind::NotFound,
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => {
            ErrorKind::PermissionDenied
        }
        Error::Generic { .. } => generic_store_kind(&e.to_string()),
        Error::InvalidPath { .. } | Error::UnknownConfigurationKey { .. } => {
            ErrorKind::InvalidArgument
        }
        Error::NotSupported { .. } | Error::NotImplemented { .. } => ErrorKind::Unimplemented,
        _ => ErrorKind::Internal,
    }
}

/// A store's HTTP failure the client library reports generically (a
/// listing refused with 403, say): the status it carries decides, as
/// object_store itself does for reads; without one the store was not
/// reached. The one place a kind is read from text: object_store keeps
/// the HTTP status of such a failure in a crate-private `RetryError`
/// (0.13) and gives out only its message.
fn generic_store_kind(message: &str) -> ErrorKind {
    if message.contains("status code: 401") || message.contains("status code: 403") {
        ErrorKind::PermissionDenied
    } else if message.contains("status code: 404") {
        ErrorKind::NotFound
    } else {
        ErrorKind::Unavailable
    }
}

/// Reading an input stream from another task failed: a symptom, whose
/// cause is that task's own failure (or the loss of its worker). Keeps the
/// upstream status code, so a data error in one task reaches the client as
/// such and not as an internal failure.
#[derive(Debug)]
pub struct UpstreamError(pub Status);

impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.message())
    }
}

impl std::error::Error for UpstreamError {}

/// An error reading the stream `describe` with upstream status `status`.
pub fn upstream_error(describe: &str, status: &Status) -> DataFusionError {
    let status = Status::new(
        status.code(),
        format!("reading stream {describe}: {}", status.message()),
    );
    DataFusionError::External(Box::new(UpstreamError(status)))
}

/// Whether `e` is only a failure to read an input stream.
pub fn is_upstream(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::External(inner) if inner.is::<UpstreamError>())
}

/// The status a client (or consumer task) sees for a DataFusion error.
pub fn to_status(e: &DataFusionError) -> Status {
    Status::new(status_code(e), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;
    use tonic::Code;

    async fn plan_error(sql: &str) -> Status {
        let ctx = SessionContext::new();
        let e = ctx.sql(sql).await.expect_err("planning should fail");
        to_status(&e)
    }

    #[tokio::test]
    async fn a_second_view_of_one_name_already_exists() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE VIEW v AS SELECT 1").await.unwrap();
        let e = ctx.sql("CREATE VIEW v AS SELECT 2").await.unwrap_err();
        assert_eq!(status_code(&e), Code::AlreadyExists, "{e}");
    }

    #[test]
    fn object_store_failures_keep_their_meaning_through_wrappers() {
        let missing = object_store::Error::NotFound {
            path: "tpch/lineitem.parquet".into(),
            source: "404".into(),
        };
        let wrapped = DataFusionError::ParquetError(Box::new(
            datafusion::parquet::errors::ParquetError::External(Box::new(missing)),
        ));
        assert_eq!(status_code(&wrapped), Code::NotFound);
        let denied =
            DataFusionError::ObjectStore(Box::new(object_store::Error::PermissionDenied {
                path: "x".into(),
                source: "403".into(),
            }));
        assert_eq!(status_code(&denied), Code::PermissionDenied);
        let down = DataFusionError::Context(
            "reading".into(),
            Box::new(DataFusionError::ObjectStore(Box::new(
                object_store::Error::Generic {
                    store: "S3",
                    source: "connection refused".into(),
                },
            ))),
        );
        assert_eq!(status_code(&down), Code::Unavailable);
        let listing_refused = object_store::Error::Generic {
            store: "S3",
            source: "Error performing list request: Server returned non-2xx status code: \
                     403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code></Error>"
                .into(),
        };
        let refused = DataFusionError::ObjectStore(Box::new(listing_refused));
        assert_eq!(status_code(&refused), Code::PermissionDenied);
    }

    #[test]
    fn an_error_leaves_as_the_status_of_its_kind_and_comes_back_the_same() {
        let error = Error::aborted("a concurrent commit won");
        let status = Status::from(error.clone());
        assert_eq!(status.code(), Code::Aborted);
        assert_eq!(status.message(), "a concurrent commit won");
        assert_eq!(Error::from(status), error);
        assert_eq!(
            Error::from(Status::unknown("?")).kind(),
            ErrorKind::Internal
        );
        let wrapped = DataFusionError::External(Box::new(Error::not_found("t")));
        assert_eq!(Error::from(wrapped).kind(), ErrorKind::NotFound);
        let context = Error::unavailable("refused").context("reading s3://b/x");
        assert_eq!(context.kind(), ErrorKind::Unavailable);
        assert_eq!(context.message(), "reading s3://b/x: refused");
    }

    #[tokio::test]
    async fn a_plan_error_is_the_statements_fault() {
        let status = plan_error("SELECT * FROM nowhere").await;
        assert_eq!(status.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn syntax_error_is_invalid_argument() {
        let status = plan_error("SELEC 1").await;
        assert_eq!(status.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn unknown_column_is_invalid_argument() {
        let status = plan_error("SELECT nope FROM (VALUES (1)) AS t(a)").await;
        assert_eq!(status.code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn errors_in_the_data_are_invalid_argument() {
        let ctx = SessionContext::new();
        let e = ctx
            .sql("SELECT CAST(a AS INT) / CAST(a - a AS INT) FROM (VALUES (1)) AS t(a)")
            .await
            .unwrap()
            .collect()
            .await
            .expect_err("division by zero");
        assert_eq!(status_code(&e), Code::InvalidArgument, "{e}");
    }

    #[test]
    fn a_peer_status_keeps_its_code() {
        let e = DataFusionError::External(Box::new(Status::not_found("gone")));
        assert_eq!(status_code(&e), Code::NotFound);
        assert!(!is_upstream(&e));
        let e = upstream_error("s1/p0", &Status::invalid_argument("Divide by zero"));
        assert_eq!(status_code(&e), Code::InvalidArgument);
        assert!(is_upstream(&e));
        assert!(
            e.to_string()
                .contains("reading stream s1/p0: Divide by zero"),
            "{e}"
        );
    }
}
