//! Names of tables as statements give them, resolved.

use datafusion::common::TableReference;
use squadron_common::error::Error;

use crate::catalog::system::SYSTEM_SCHEMA;
use crate::engine::Engine;
use squadron_coordinator::session::Session;

/// `name` with the catalog and schema it resolves to in `session`, so
/// the shared catalog and the persisted one see one name per table.
/// PERMISSION_DENIED in the `system` schema: its tables are the server's.
pub fn full_name(session: &Session, name: &TableReference) -> Result<TableReference, Error> {
    let resolved = name.clone().resolve(&session.catalog(), &session.schema());
    if resolved.schema.as_ref() == SYSTEM_SCHEMA {
        return Err(Error::permission_denied(format!(
            "{name}: the {SYSTEM_SCHEMA} schema belongs to the server"
        )));
    }
    Ok(TableReference::full(
        resolved.catalog,
        resolved.schema,
        resolved.table,
    ))
}

pub fn exists(coord: &Engine, name: &TableReference) -> bool {
    coord.session().table_exist(name.clone()).unwrap_or(false)
}

/// Worded as single-node DataFusion words it (clients match on it).
pub fn already_exists(name: &TableReference) -> Error {
    Error::already_exists(format!("Execution error: Table '{name}' already exists"))
}
