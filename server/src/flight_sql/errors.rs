//! DataFusion errors as gRPC statuses a client can act on.

use datafusion::common::DataFusionError;
use tonic::{Code, Status};

/// Bad SQL and bad references are the client's (InvalidArgument, NotFound
/// for a missing table); unsupported features are Unimplemented; the rest
/// is Internal. The message is DataFusion's.
pub fn to_status(e: &DataFusionError) -> Status {
    Status::new(code_of(e), e.to_string())
}

fn code_of(e: &DataFusionError) -> Code {
    match e.find_root() {
        DataFusionError::SQL(..) => Code::InvalidArgument,
        DataFusionError::Plan(msg) if msg.contains("not found") => Code::NotFound,
        DataFusionError::Plan(_) | DataFusionError::SchemaError(..) => Code::InvalidArgument,
        DataFusionError::NotImplemented(_) => Code::Unimplemented,
        DataFusionError::ResourcesExhausted(_) => Code::ResourceExhausted,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn plan_error(sql: &str) -> Status {
        let ctx = SessionContext::new();
        let e = ctx.sql(sql).await.expect_err("planning should fail");
        to_status(&e)
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
}
