//! What the server's statements run against: the coordinator (planning,
//! jobs, sessions) and the warehouse catalog that DDL, DML and ingest
//! commit to. The coordinator crate knows nothing of the warehouse; the
//! two meet here, a layer above both.

use std::ops::Deref;
use std::sync::Arc;

use squadron_coordinator::Coordinator;

use crate::warehouse::WarehouseCatalog;

pub struct Engine {
    coordinator: Arc<Coordinator>,
    catalog: Option<Arc<WarehouseCatalog>>,
}

impl Engine {
    pub fn new(coordinator: Arc<Coordinator>, catalog: Option<Arc<WarehouseCatalog>>) -> Self {
        Self {
            coordinator,
            catalog,
        }
    }

    /// The catalog of created tables, when the server has a warehouse.
    pub fn catalog(&self) -> Option<&Arc<WarehouseCatalog>> {
        self.catalog.as_ref()
    }

    pub fn coordinator(&self) -> &Arc<Coordinator> {
        &self.coordinator
    }
}

/// Statements use the coordinator's planning and jobs as they are.
impl Deref for Engine {
    type Target = Coordinator;

    fn deref(&self) -> &Coordinator {
        &self.coordinator
    }
}
