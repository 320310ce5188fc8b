//! A client's session: the catalog and schema its table names resolve in,
//! and the DataFusion settings it changed with `SET` or
//! SetSessionOptions.
//!
//! Every session shares the server's catalogs (a table one client creates
//! is visible to all); only name resolution and settings are per client.
//! The settings a session changed travel with each of its tasks, so the
//! workers execute with them too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use datafusion::config::{ConfigField, ConfigOptions};
use datafusion::execution::context::SessionContext;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement};
use squadron_common::error::Error;
use squadron_exec::configured_functions::refresh_configured_functions;

use datafusion::common::config::ConfigExtension;
use squadron_exec::squadron_options::SquadronOptions;
use squadron_planner::templates::Templates;

/// Settings a client may change for itself. The rest shape the server
/// process (memory, spill directories, the catalog's storage) or the
/// cluster (tasks per stage: `--partitions`), and are the operator's.
const CLIENT_SETTINGS: &[&str] = &[
    "squadron.",
    "datafusion.execution.",
    "datafusion.optimizer.",
    "datafusion.sql_parser.",
    "datafusion.explain.",
    "datafusion.format.",
    "datafusion.catalog.default_catalog",
    "datafusion.catalog.default_schema",
    // Only what the session's own SQL sees (Flight SQL's metadata commands
    // do not depend on it).
    "datafusion.catalog.information_schema",
];

/// Within those, settings that are still the operator's.
const OPERATOR_SETTINGS: &[&str] = &["datafusion.execution.target_partitions"];

/// How far a session may raise its tasks per stage above the server's:
/// smaller tasks for a query that wants them, not a flood of tasks (each
/// shuffle has tasks x tasks streams).
const MAX_PARTITIONS_FACTOR: usize = 4;

const TARGET_PARTITIONS: &str = "datafusion.execution.target_partitions";
const DEFAULT_CATALOG: &str = "datafusion.catalog.default_catalog";
const DEFAULT_SCHEMA: &str = "datafusion.catalog.default_schema";

pub struct Session {
    ctx: SessionContext,
    /// The settings this session changed, by key.
    changed: Mutex<BTreeMap<String, String>>,
    /// The settings it started with, for RESET.
    initial: ConfigOptions,
    /// Plans kept for statements that differ only in their constants;
    /// planned with this session's settings.
    templates: Mutex<Templates>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("changed", &self.changed_settings())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// The session of clients that changed nothing: the server's own.
    pub fn shared(ctx: SessionContext) -> Self {
        let initial = ctx.state().config_options().as_ref().clone();
        Self {
            ctx,
            changed: Mutex::new(BTreeMap::new()),
            initial,
            templates: Mutex::new(Templates::default()),
        }
    }

    /// A new session starting from `base`'s settings, over its catalogs.
    pub fn derived_from(base: &SessionContext) -> Self {
        let base_state = base.state();
        let create_default = base_state
            .config_options()
            .catalog
            .create_default_catalog_and_schema;
        let mut state = SessionStateBuilder::new_from_existing(base_state).build();
        // DataFusion turns this off in a state built from another, so that
        // the build keeps the catalogs it was given; it is read only then,
        // and the session reports the server's own value (SHOW ALL).
        state
            .config_mut()
            .options_mut()
            .catalog
            .create_default_catalog_and_schema = create_default;
        Self::shared(SessionContext::new_with_state(state))
    }

    pub fn ctx(&self) -> &SessionContext {
        &self.ctx
    }

    /// The plans this session keeps for re-use (see `planner::templates`).
    pub fn templates(&self) -> MutexGuard<'_, Templates> {
        self.templates.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn task_ctx(&self) -> Arc<TaskContext> {
        self.ctx.task_ctx()
    }

    /// The session's `squadron.*` settings.
    pub fn squadron_options(&self) -> SquadronOptions {
        SquadronOptions::of(self.ctx.state_ref().read().config_options())
    }

    /// The settings this session changed, for its tasks.
    pub fn changed_settings(&self) -> Vec<(String, String)> {
        let changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        changed
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The value of one setting in this session.
    pub fn setting(&self, key: &str) -> Option<String> {
        self.ctx
            .state()
            .config_options()
            .entries()
            .into_iter()
            .find(|entry| entry.key == key)
            .and_then(|entry| entry.value)
    }

    pub fn catalog(&self) -> String {
        self.ctx
            .state()
            .config_options()
            .catalog
            .default_catalog
            .clone()
    }

    pub fn schema(&self) -> String {
        self.ctx
            .state()
            .config_options()
            .catalog
            .default_schema
            .clone()
    }

    /// Whether `key` names a setting of this session (DataFusion's or a
    /// registered extension's), whatever its value.
    pub fn has_setting(&self, key: &str) -> bool {
        let key = key.trim().to_ascii_lowercase();
        let state = self.ctx.state_ref();
        let state = state.read();
        let known = state
            .config_options()
            .entries()
            .iter()
            .any(|e| e.key == key);
        known
    }

    /// Changes one setting (`SET key = value`): refused with
    /// PERMISSION_DENIED for the operator's settings, INVALID_ARGUMENT for
    /// unknown keys, bad values, and catalogs or schemas that do not exist.
    pub fn set(&self, key: &str, value: &str) -> Result<(), Error> {
        let key = key.trim().to_ascii_lowercase();
        // DataFusion reads 0 as "the default": the server's, here (not
        // this machine's core count).
        let initial_partitions = self.initial.execution.target_partitions.to_string();
        let value = match key == TARGET_PARTITIONS && value.trim() == "0" {
            true => initial_partitions.as_str(),
            false => value,
        };
        let denied = check_client_may_set(&key).err();
        let state = self.ctx.state_ref();
        let mut state = state.write();
        // Tried on a copy first, so a bad value changes nothing.
        let mut options = state.config_options().as_ref().clone();
        let before = options.clone();
        // DataFusion's own words for unknown keys and bad values: scripts
        // written against it match on them.
        options.set(&key, value).map_err(|e| {
            denied
                .clone()
                .unwrap_or_else(|| Error::invalid_argument(e.to_string()))
        })?;
        if let Some(denied) = denied {
            if !self.operator_allows(&key, &before, &options) {
                return Err(denied);
            }
        }
        let catalog = options.catalog.default_catalog.clone();
        let schema = options.catalog.default_schema.clone();
        if key == DEFAULT_CATALOG || key == DEFAULT_SCHEMA {
            let Some(found) = state.catalog_list().catalog(&catalog) else {
                return Err(Error::invalid_argument(format!(
                    "there is no catalog {catalog:?}"
                )));
            };
            let information_schema =
                options.catalog.information_schema && schema == "information_schema";
            // The catalog may be set before the schema it will be used with
            // (`SET …default_catalog = c; SET …default_schema = s`), so the
            // schema is checked when it is the one being set.
            if key == DEFAULT_SCHEMA && found.schema(&schema).is_none() && !information_schema {
                return Err(Error::invalid_argument(format!(
                    "catalog {catalog:?} has no schema {schema:?}"
                )));
            }
        }
        *state.config_mut().options_mut() = options;
        refresh_configured_functions(&mut state)
            .map_err(|e| Error::internal(format!("re-creating functions: {e}")))?;
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        changed.insert(key, value.to_string());
        self.templates().clear();
        Ok(())
    }

    /// Whether an operator's setting may still change from `before` to
    /// `after`: set to the value it already has (a no-op, which scripts
    /// written for single-node DataFusion do), or target partitions
    /// within `MAX_PARTITIONS_FACTOR` times the server's.
    fn operator_allows(&self, key: &str, before: &ConfigOptions, after: &ConfigOptions) -> bool {
        let value_of = |options: &ConfigOptions| {
            options
                .entries()
                .into_iter()
                .find(|entry| entry.key == key)
                .and_then(|entry| entry.value)
        };
        if value_of(before) == value_of(after) {
            return true;
        }
        key == TARGET_PARTITIONS
            && after.execution.target_partitions
                <= MAX_PARTITIONS_FACTOR * self.initial.execution.target_partitions
    }

    /// Puts one setting back to the value the session started with
    /// (`RESET key`).
    pub fn reset(&self, key: &str) -> Result<(), Error> {
        let key = key.trim().to_ascii_lowercase();
        if key != TARGET_PARTITIONS {
            check_client_may_set(&key)?;
        }
        // DataFusion resets only its own namespace; an extension's key is
        // checked against the settings it lists.
        let extension = key.starts_with(&format!("{}.", SquadronOptions::PREFIX));
        if extension && !self.initial.entries().iter().any(|e| e.key == key) {
            return Err(Error::invalid_argument(format!("no setting {key}")));
        }
        if !extension {
            if let Err(e) = self.initial.clone().reset(&key) {
                return Err(Error::invalid_argument(e.to_string()));
            }
        }
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        changed.remove(&key);
        // The initial settings with the other changes made again: exact
        // even for settings whose default is "unset".
        let mut options = self.initial.clone();
        for (k, v) in changed.iter() {
            options
                .set(k, v)
                .map_err(|e| Error::internal(format!("re-applying {k}: {e}")))?;
        }
        let state = self.ctx.state_ref();
        let mut state = state.write();
        *state.config_mut().options_mut() = options;
        self.templates().clear();
        refresh_configured_functions(&mut state)
            .map_err(|e| Error::internal(format!("re-creating functions: {e}")))
    }

    /// Applies a statement that changes only this session (see
    /// `changes_session`).
    pub async fn apply_statement(&self, plan: &LogicalPlan) -> Result<(), Error> {
        // Whatever it changes, plans made before it may no longer be the
        // ones the session would make.
        self.templates().clear();
        match plan {
            LogicalPlan::Statement(Statement::SetVariable(set)) => {
                check_runtime_value(plan, &set.variable).await?;
                self.set(&set.variable, &set.value)
            }
            LogicalPlan::Statement(Statement::ResetVariable(reset)) => self.reset(&reset.variable),
            // DataFusion's own handling: CREATE FUNCTION needs a function
            // factory (there is none, as in DataFusion by default); DROP
            // FUNCTION removes a function from this session's planning.
            LogicalPlan::Ddl(DdlStatement::CreateFunction(_) | DdlStatement::DropFunction(_)) => {
                self.ctx
                    .execute_logical_plan(plan.clone())
                    .await
                    .map_err(|e| squadron_common::error::Error::of(&e))?;
                Ok(())
            }
            other => Err(Error::internal(format!(
                "not a session statement: {}",
                other.display()
            ))),
        }
    }

    /// Makes `catalog` the one unqualified names resolve in; its schema
    /// becomes the catalog's only schema, or else stays as it was.
    pub fn set_catalog(&self, catalog: &str) -> Result<(), Error> {
        let schema = self.schema();
        let schemas = self
            .ctx
            .catalog(catalog)
            .map(|c| c.schema_names())
            .unwrap_or_default();
        if !schemas.contains(&schema) && schemas.len() == 1 {
            self.set(DEFAULT_SCHEMA, &schemas[0])?;
        }
        self.set(DEFAULT_CATALOG, catalog)
    }
}

/// Whether `plan` changes the client's session (`SET`, `RESET`) rather
/// than reading or writing data.
pub fn changes_session(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Statement(Statement::SetVariable(_) | Statement::ResetVariable(_))
            | LogicalPlan::Ddl(DdlStatement::CreateFunction(_) | DdlStatement::DropFunction(_))
    )
}

/// A runtime setting (`datafusion.runtime.*`) is the operator's, but a
/// value DataFusion could not parse gets DataFusion's own error first, so a
/// client learns its value is wrong rather than only that it may not set it.
/// Parsed on a scratch context; never `temp_directory`, whose value is any
/// path and which would create directories there.
async fn check_runtime_value(plan: &LogicalPlan, key: &str) -> Result<(), Error> {
    let key = key.trim().to_ascii_lowercase();
    if !key.starts_with("datafusion.runtime.") || key == "datafusion.runtime.temp_directory" {
        return Ok(());
    }
    SessionContext::new()
        .execute_logical_plan(plan.clone())
        .await
        .map(|_| ())
        .map_err(|e| Error::invalid_argument(e.to_string()))
}

fn check_client_may_set(key: &str) -> Result<(), Error> {
    let allowed =
        CLIENT_SETTINGS.iter().any(|p| key.starts_with(p)) && !OPERATOR_SETTINGS.contains(&key);
    if allowed {
        Ok(())
    } else {
        Err(Error::permission_denied(format!(
            "{key} is a server setting a client cannot change; clients may change \
             squadron.*, datafusion.execution.*, datafusion.optimizer.*, datafusion.sql_parser.*, \
             datafusion.explain.*, datafusion.format.* (target_partitions up to \
             {MAX_PARTITIONS_FACTOR} times the server's), the default catalog and schema, \
             information_schema, and any setting to the value it already has"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use squadron_common::error::ErrorKind;

    async fn base() -> SessionContext {
        let ctx = SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_information_schema(true),
        );
        ctx.sql("CREATE SCHEMA other").await.unwrap();
        ctx
    }

    #[test]
    fn settings_are_known_by_key_whatever_their_value() {
        let config = squadron_exec::squadron_options::with_squadron_options(
            datafusion::prelude::SessionConfig::new(),
            SquadronOptions::default(),
        );
        let session = Session::shared(SessionContext::new_with_config(config));
        assert!(session.has_setting("datafusion.execution.batch_size"));
        assert!(session.has_setting(" Squadron.Reuse_Plans "));
        assert!(!session.has_setting("datafusion.execution.no_such_setting"));
        assert!(!session.has_setting("squadron.no_such_setting"));
    }

    #[tokio::test]
    async fn a_setting_changed_drops_the_sessions_plan_templates() {
        let session = Session::shared(SessionContext::new());
        let generation = session.templates().generation();
        session.templates().insert("shape".into(), None, generation);
        session
            .set("datafusion.execution.batch_size", "100")
            .unwrap();
        assert!(session.templates().is_empty());
    }

    #[tokio::test]
    async fn a_session_changes_only_itself() {
        let base = base().await;
        let session = Session::derived_from(&base);
        session
            .set("datafusion.execution.batch_size", "1000")
            .unwrap();
        session.set(DEFAULT_SCHEMA, "other").unwrap();
        assert_eq!(
            session
                .setting("datafusion.execution.batch_size")
                .as_deref(),
            Some("1000")
        );
        assert_eq!(base.copied_config().batch_size(), 8192);
        assert_eq!(session.schema(), "other");
        assert_eq!(
            session.changed_settings(),
            vec![
                (
                    "datafusion.catalog.default_schema".to_string(),
                    "other".to_string()
                ),
                (
                    "datafusion.execution.batch_size".to_string(),
                    "1000".to_string()
                ),
            ]
        );
        // Tables created through either are seen by both: one catalog.
        base.sql("CREATE TABLE other.t AS VALUES (1)")
            .await
            .unwrap();
        let rows = session
            .ctx()
            .sql("SELECT * FROM t")
            .await
            .unwrap()
            .count()
            .await;
        assert_eq!(rows.unwrap(), 1);
    }

    #[tokio::test]
    async fn bad_settings_are_refused_and_change_nothing() {
        let session = Session::derived_from(&base().await);
        let code = |r: Result<(), Error>| r.unwrap_err().kind();
        assert_eq!(
            code(session.set("datafusion.runtime.memory_limit", "1G")),
            ErrorKind::PermissionDenied
        );
        assert_eq!(
            code(session.set("datafusion.execution.target_partitions", "999")),
            ErrorKind::PermissionDenied
        );
        assert_eq!(
            code(session.set("datafusion.catalog.location", "/etc")),
            ErrorKind::PermissionDenied
        );
        assert_eq!(
            code(session.set("datafusion.execution.no_such", "1")),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            code(session.set("datafusion.execution.batch_size", "many")),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            code(session.set(DEFAULT_SCHEMA, "missing")),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            code(session.set_catalog("missing")),
            ErrorKind::InvalidArgument
        );
        assert_eq!(session.schema(), "public");
        assert!(session.changed_settings().is_empty());
    }

    #[tokio::test]
    async fn runtime_settings_are_refused_after_their_value_is_checked() {
        let session = Session::derived_from(&base().await);
        let apply = |sql: &'static str| {
            let session = &session;
            async move {
                let plan = session
                    .ctx()
                    .state()
                    .create_logical_plan(sql)
                    .await
                    .unwrap();
                session.apply_statement(&plan).await
            }
        };
        let bad = apply("SET datafusion.runtime.list_files_cache_ttl = ''")
            .await
            .unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
        assert!(
            bad.message().contains("Duration should not be empty"),
            "{bad}"
        );
        let good = apply("SET datafusion.runtime.memory_limit = '1G'")
            .await
            .unwrap_err();
        assert_eq!(good.kind(), ErrorKind::PermissionDenied);
        assert!(session.changed_settings().is_empty());
    }

    #[tokio::test]
    async fn operator_settings_may_be_restated_and_partitions_changed_within_bounds() {
        let session = Session::derived_from(&base().await);
        let partitions = session.ctx().state().config().target_partitions();
        let catalog_setup = "datafusion.catalog.has_header";
        session.set(catalog_setup, "true").unwrap();
        assert_eq!(
            session.set(catalog_setup, "false").unwrap_err().kind(),
            ErrorKind::PermissionDenied
        );
        let key = "datafusion.execution.target_partitions";
        let too_many = (MAX_PARTITIONS_FACTOR * partitions + 1).to_string();
        assert_eq!(
            session.set(key, &too_many).unwrap_err().kind(),
            ErrorKind::PermissionDenied
        );
        session.set(key, &(partitions + 1).to_string()).unwrap();
        assert_eq!(
            session.ctx().state().config().target_partitions(),
            partitions + 1
        );
        session.set(key, "0").unwrap();
        assert_eq!(
            session.ctx().state().config().target_partitions(),
            partitions
        );
        session.set(key, "1").unwrap();
        assert_eq!(session.ctx().state().config().target_partitions(), 1);
        session
            .set("datafusion.execution.planning_concurrency", "3")
            .unwrap();
        session.reset(key).unwrap();
        assert_eq!(
            session.ctx().state().config().target_partitions(),
            partitions
        );
    }
}
