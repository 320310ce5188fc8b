//! DataFusion errors as gRPC status codes, the same on workers and the
//! coordinator so a task's failure reaches the client with the right code.

use datafusion::arrow::error::ArrowError;
use datafusion::common::DataFusionError;
use tonic::{Code, Status};

/// Bad SQL, bad references and errors in the data (division by zero, a
/// failed cast, overflow) are the client's: InvalidArgument, or NotFound
/// for a missing table. Unsupported features are Unimplemented; a status
/// from a peer keeps its code; the rest is Internal.
pub fn status_code(e: &DataFusionError) -> Code {
    if let Some(store) = object_store_error(e) {
        return store_code(store);
    }
    match e.find_root() {
        DataFusionError::SQL(..) => Code::InvalidArgument,
        // "No files found at URL": a table location with nothing there.
        DataFusionError::Plan(msg)
            if msg.contains("not found") || msg.starts_with("No files found") =>
        {
            Code::NotFound
        }
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => Code::InvalidArgument,
        DataFusionError::NotImplemented(_) => Code::Unimplemented,
        // An unknown table format or option: the statement's fault.
        DataFusionError::Configuration(_) => Code::InvalidArgument,
        DataFusionError::ResourcesExhausted(_) => Code::ResourceExhausted,
        DataFusionError::ArrowError(arrow, _) => match arrow.as_ref() {
            ArrowError::DivideByZero
            | ArrowError::ArithmeticOverflow(_)
            | ArrowError::CastError(_)
            | ArrowError::ParseError(_)
            | ArrowError::InvalidArgumentError(_)
            | ArrowError::ComputeError(_) => Code::InvalidArgument,
            _ => Code::Internal,
        },
        DataFusionError::External(inner) => {
            if let Some(status) = inner.downcast_ref::<Status>() {
                status.code()
            } else if let Some(upstream) = inner.downcast_ref::<UpstreamError>() {
                upstream.0.code()
            } else {
                Code::Internal
            }
        }
        _ => Code::Internal,
    }
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
fn store_code(e: &object_store::Error) -> Code {
    use object_store::Error;
    match e {
        Error::NotFound { .. } => Code::NotFound,
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => Code::PermissionDenied,
        Error::Generic { .. } => generic_store_code(&e.to_string()),
        Error::InvalidPath { .. } | Error::UnknownConfigurationKey { .. } => Code::InvalidArgument,
        Error::NotSupported { .. } | Error::NotImplemented { .. } => Code::Unimplemented,
        _ => Code::Internal,
    }
}

/// A store's HTTP failure the client library reports generically (a
/// listing refused with 403, say): the status it carries decides, as
/// object_store itself does for reads; without one the store was not
/// reached.
fn generic_store_code(message: &str) -> Code {
    if message.contains("status code: 401") || message.contains("status code: 403") {
        Code::PermissionDenied
    } else if message.contains("status code: 404") {
        Code::NotFound
    } else {
        Code::Unavailable
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

    #[tokio::test]
    async fn missing_table_is_not_found() {
        let status = plan_error("SELECT * FROM nowhere").await;
        assert_eq!(status.code(), Code::NotFound);
        assert!(status.message().contains("nowhere"), "{}", status.message());
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
