//! What the admin port's handlers read.

use std::sync::{Arc, Weak};

use datafusion::prelude::SessionContext;
use squadron_common::metrics::PrometheusHandle;
use squadron_coordinator::queries::LiveQueries;

use crate::security::auth::Authenticator;

/// What the admin port reads.
#[derive(Clone)]
pub struct Admin {
    pub metrics: PrometheusHandle,
    pub queries: Weak<dyn LiveQueries>,
    /// The coordinator's session, for `system.workers`.
    pub session: SessionContext,
    pub auth: Option<Arc<Authenticator>>,
}
