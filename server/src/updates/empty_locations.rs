//! An external table defined over a location that holds nothing is
//! NOT_FOUND. DataFusion says so only in the words of a plan error ("No
//! files found at …"); rather than read them, a definition that failed is
//! looked at again: the store is asked whether the location holds an
//! object.

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use squadron_common::error::{Error, ErrorKind};

/// `error`, a failure to define a table whose schema was to be read from
/// its files, as NOT_FOUND (its words kept) when it is the statement's
/// fault and one of `locations` holds no object.
pub async fn or_not_found(ctx: &SessionContext, locations: &[String], error: Error) -> Error {
    if error.kind() != ErrorKind::InvalidArgument {
        return error;
    }
    for location in locations {
        if holds_nothing(ctx, location).await {
            return Error::new(ErrorKind::NotFound, error.message());
        }
    }
    error
}

/// Whether the store answers that `location` (an object, or a prefix of
/// some) holds nothing. Unknown when it cannot be asked: not nothing.
async fn holds_nothing(ctx: &SessionContext, location: &str) -> bool {
    let Ok(url) = ListingTableUrl::parse(location) else {
        return false;
    };
    let Ok(store) = ctx.runtime_env().object_store(&url) else {
        return false;
    };
    let prefix = url.prefix();
    if store.head(prefix).await.is_ok() {
        return false;
    }
    store.list(Some(prefix)).next().await.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_location_with_nothing_there_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part.csv"), "a\n1\n").unwrap();
        let ctx = SessionContext::new();
        let refused = || Error::invalid_argument("cannot infer the schema");
        let empty = format!("{}/nothing/", dir.path().display());
        let error = or_not_found(&ctx, &[empty], refused()).await;
        assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
        let held = [
            format!("{}/", dir.path().display()),
            format!("{}/part.csv", dir.path().display()),
        ];
        for location in held {
            let error = or_not_found(&ctx, &[location], refused()).await;
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
        }
        let denied = Error::permission_denied("outside --data-root");
        let missing = format!("{}/nothing/", dir.path().display());
        let error = or_not_found(&ctx, &[missing], denied).await;
        assert_eq!(error.kind(), ErrorKind::PermissionDenied);
    }
}
