//! `COPY (query) TO 'location' STORED AS …`: the query runs on the
//! workers like any other, and the tasks write its rows with DataFusion's
//! own file sinks (`sinks`), so formats, options and `PARTITIONED BY`
//! behave exactly as on single-node DataFusion. A sink that cannot run in
//! the tasks (Arrow IPC, Avro) writes on the coordinator from the job's
//! rows. The location is confined to `--data-root` like external tables.

use std::sync::Arc;

use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::dml::CopyTo;
use datafusion::logical_expr::LogicalPlan;
use squadron_common::error::Error;

use crate::engine::Engine;
use squadron_coordinator::session::Session;

/// Runs `copy`; returns the rows written.
pub async fn copy_to(coord: &Engine, session: &Arc<Session>, copy: CopyTo) -> Result<u64, Error> {
    coord.check_copy_location(&copy.output_url)?;
    let written = copy.output_url.clone();
    let rows = super::sinks::write_with_sink(coord, session, LogicalPlan::Copy(copy)).await?;
    forget_listings_around(coord, &written);
    Ok(rows)
}

/// Drops the cached file listings of every directory a COPY wrote into (a
/// table over that directory lists it again and sees the new files), and
/// of directories inside the written one.
pub fn forget_listings_around(coord: &Engine, written: &str) {
    let Ok(written) = ListingTableUrl::parse(written) else {
        return;
    };
    let runtime = coord.session().runtime_env();
    let Some(cache) = runtime.cache_manager.get_list_files_cache() else {
        return;
    };
    let written = written.prefix();
    for listed in cache.list_entries().into_keys() {
        if written.prefix_matches(&listed.path) || listed.path.prefix_matches(written) {
            cache.remove(&listed);
        }
    }
}
