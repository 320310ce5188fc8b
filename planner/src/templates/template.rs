//! One statement's physical plan, kept to be re-used with other constants.
//!
//! Capturing checks that the plan is one whose constants can be swapped
//! without planning again: a filtered read of one Parquet table, each
//! constant compared with a column of its own, found in the physical plan
//! as a literal that stands for exactly one of the statement's constants.
//! Everything else DataFusion decides for such a plan does not depend on
//! the values: the columns read, the ranges of the files, the operators
//! and their order. What does depend on them is done again per statement
//! by the caller (the ranges pruned by the footers, where it runs).

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::catalog::{Session as CatalogSession, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result, ScalarValue, TableReference};
use datafusion::datasource::listing::ListingTable;
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, FileSource, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::source_as_provider;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use squadron_exec::plan::unshared_copy;

use crate::column_origins::ColumnOrigin;

use squadron_storage::managed_table::ManagedTable;

/// Operators that only pass rows on (no literal may sit in them).
const PASS_THROUGH: &[&str] = &[
    "ProjectionExec",
    "CoalescePartitionsExec",
    "CoalesceBatchesExec",
    "RepartitionExec",
    "CooperativeExec",
];

/// A file of the table as it was listed when the plan was made.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FileStamp {
    location: String,
    size: u64,
    last_modified: DateTime<Utc>,
}

/// A plan made for one set of constants (`values`), re-usable for others.
#[derive(Debug)]
pub struct Template {
    /// Before any pruning that depends on the values.
    plan: Arc<dyn ExecutionPlan>,
    table: TableReference,
    provider: Arc<dyn TableProvider>,
    files: Vec<FileStamp>,
    values: Vec<ScalarValue>,
    /// The table each result column is read from (see `column_origins`).
    origins: Vec<Option<ColumnOrigin>>,
}

impl Template {
    /// Whether the statement `logical` (as planned from SQL, before any
    /// optimization) written with `values` is a filtered read of one
    /// Parquet table whose constants can be swapped; the table if so.
    pub fn table_of(
        logical: &LogicalPlan,
        values: &[ScalarValue],
    ) -> Option<(TableReference, Arc<dyn TableProvider>)> {
        let mut node = logical;
        if let LogicalPlan::Projection(projection) = node {
            if !projection.expr.iter().all(|e| matches!(e, Expr::Column(_))) {
                return None;
            }
            node = projection.input.as_ref();
        }
        let LogicalPlan::Filter(filter) = node else {
            return None;
        };
        if !compares_columns_with(&filter.predicate, values) {
            return None;
        }
        let LogicalPlan::TableScan(scan) = filter.input.as_ref() else {
            return None;
        };
        if !scan.filters.is_empty() || scan.fetch.is_some() {
            return None;
        }
        let provider = source_as_provider(&scan.source).ok()?;
        // Partition columns are pruned by value while listing. (Formats
        // other than Parquet fail the check of the physical plan.)
        let listed_whole = match provider.downcast_ref::<ListingTable>() {
            Some(listing) => listing.options().table_partition_cols.is_empty(),
            None => provider.downcast_ref::<ManagedTable>().is_some(),
        };
        listed_whole.then(|| (scan.table_name.clone(), provider))
    }

    /// The template of `plan`, made for `values` from a statement that
    /// `table_of` accepted; `None` when a literal in it cannot be told to
    /// stand for exactly one of the values, or sits where it cannot be
    /// swapped.
    pub async fn capture(
        state: &SessionState,
        plan: Arc<dyn ExecutionPlan>,
        (table, provider): (TableReference, Arc<dyn TableProvider>),
        values: Vec<ScalarValue>,
    ) -> Result<Option<Self>> {
        let mut found = vec![false; values.len()];
        if !literals_map_to(&plan, &values, &mut found)? || found.contains(&false) {
            return Ok(None);
        }
        let Some(files) = files_of(state, &provider).await? else {
            return Ok(None);
        };
        Ok(Some(Self {
            plan,
            table,
            provider,
            files,
            values,
            origins: vec![],
        }))
    }

    /// The template, knowing the table each result column is read from.
    pub fn with_origins(self, origins: Vec<Option<ColumnOrigin>>) -> Self {
        Self { origins, ..self }
    }

    /// The table each result column is read from.
    pub fn origins(&self) -> &[Option<ColumnOrigin>] {
        &self.origins
    }

    /// The plan for `values` (same kinds, in the same order as the
    /// template's).
    pub async fn instantiate(
        &self,
        ctx: &SessionContext,
        state: &SessionState,
        values: &[ScalarValue],
    ) -> Result<Instance> {
        if values.len() != self.values.len() {
            return Ok(Instance::Inexact);
        }
        let Ok(provider) = ctx.table_provider(self.table.clone()).await else {
            return Ok(Instance::Stale);
        };
        if !same_provider(&provider, &self.provider)
            || files_of(state, &provider).await?.as_ref() != Some(&self.files)
        {
            return Ok(Instance::Stale);
        }
        let task_ctx = ctx.task_ctx();
        let swap = Swap {
            from: &self.values,
            to: values,
            task_ctx: &task_ctx,
        };
        Ok(match swap.plan(&self.plan)? {
            Some(plan) => Instance::Plan(plan),
            None => Instance::Inexact,
        })
    }
}

/// A template applied to a statement's values.
pub enum Instance {
    Plan(Arc<dyn ExecutionPlan>),
    /// The table was replaced or its files changed since the template was
    /// made.
    Stale,
    /// A value does not convert exactly to the type its literal has in the
    /// plan: DataFusion would plan it differently.
    Inexact,
}

/// Whether `predicate` is `column op value AND …`, each of `values` once,
/// each column once, `op` a comparison.
fn compares_columns_with(predicate: &Expr, values: &[ScalarValue]) -> bool {
    let conjuncts = split_conjunction(predicate);
    if conjuncts.len() != values.len() {
        return false;
    }
    let mut columns: HashSet<&Column> = HashSet::new();
    let mut used = vec![false; values.len()];
    for conjunct in conjuncts {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = conjunct else {
            return false;
        };
        let comparison = matches!(
            op,
            Operator::Eq
                | Operator::NotEq
                | Operator::Lt
                | Operator::LtEq
                | Operator::Gt
                | Operator::GtEq
        );
        let (Expr::Column(column), Expr::Literal(value, None)) = (left.as_ref(), right.as_ref())
        else {
            return false;
        };
        let Some(index) = values
            .iter()
            .enumerate()
            .position(|(i, v)| !used[i] && v == value)
        else {
            return false;
        };
        used[index] = true;
        if !comparison || value.is_null() || !columns.insert(column) {
            return false;
        }
    }
    true
}

/// Checks every literal of `plan` against `values`, marking in `found`
/// the values met; false when a literal sits outside a filter or a scan's
/// predicate, or does not stand for exactly one value.
fn literals_map_to(
    plan: &Arc<dyn ExecutionPlan>,
    values: &[ScalarValue],
    found: &mut [bool],
) -> Result<bool> {
    let mut predicates: Vec<Arc<dyn PhysicalExpr>> = vec![];
    if let Some(filter) = plan.downcast_ref::<FilterExec>() {
        predicates.push(Arc::clone(filter.predicate()));
    } else if let Some(scan) = plan.downcast_ref::<DataSourceExec>() {
        let Some((_, parquet)) = scan.downcast_to_file_source::<ParquetSource>() else {
            return Ok(false);
        };
        let projection = parquet.projection();
        if projection.is_some_and(|p| p.expr_iter().any(|e| has_literal_in(&e))) {
            return Ok(false);
        }
        predicates.extend(parquet.filter());
    } else if !PASS_THROUGH.contains(&plan.name()) || has_literal(plan)? {
        return Ok(false);
    }
    for predicate in predicates {
        let mut mapped = true;
        predicate.apply(|expr| {
            if let Some(literal) = expr.downcast_ref::<Literal>() {
                let matches: Vec<usize> = (0..values.len())
                    .filter(|i| stands_for(&values[*i], literal))
                    .collect();
                match matches[..] {
                    [i] if !has_metadata(literal) => found[i] = true,
                    _ => mapped = false,
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if !mapped {
            return Ok(false);
        }
    }
    for child in plan.children() {
        if !literals_map_to(child, values, found)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether `literal` is `value` converted exactly to the literal's type.
fn stands_for(value: &ScalarValue, literal: &Literal) -> bool {
    exact_cast(value, literal.value()).as_ref() == Some(literal.value())
}

/// `value` converted to the type of `like`, if the conversion is exact
/// (it converts back to `value`) and not NULL.
fn exact_cast(value: &ScalarValue, like: &ScalarValue) -> Option<ScalarValue> {
    let target = like.data_type();
    if value.data_type() == target {
        return (!value.is_null()).then(|| value.clone());
    }
    let cast = value.cast_to(&target).ok()?;
    let back = cast.cast_to(&value.data_type()).ok()?;
    (!cast.is_null() && back == *value).then_some(cast)
}

/// A literal whose field carries metadata would lose it when swapped.
fn has_metadata(literal: &Literal) -> bool {
    let schema = datafusion::arrow::datatypes::Schema::empty();
    literal
        .return_field(&schema)
        .map_or(true, |field| !field.metadata().is_empty())
}

fn has_literal(plan: &Arc<dyn ExecutionPlan>) -> Result<bool> {
    let mut any = false;
    plan.apply_expressions(&mut |expr| {
        any |= has_literal_in(expr);
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(any)
}

fn has_literal_in(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.exists(|e| Ok(e.downcast_ref::<Literal>().is_some()))
        .unwrap_or(true)
}

/// The files a scan of `provider` reads now, in a stable order; `None`
/// for a table that is not a listing of files.
async fn files_of(
    state: &SessionState,
    provider: &Arc<dyn TableProvider>,
) -> Result<Option<Vec<FileStamp>>> {
    if let Some(created) = provider.downcast_ref::<ManagedTable>() {
        // Its committed files: a commit swaps them in place.
        let mut files: Vec<FileStamp> = created
            .files()
            .files
            .iter()
            .map(|file| FileStamp {
                location: file.name.clone(),
                size: file.bytes,
                last_modified: DateTime::<Utc>::UNIX_EPOCH,
            })
            .collect();
        files.sort();
        return Ok(Some(files));
    }
    let Some(listing) = provider.downcast_ref::<ListingTable>() else {
        return Ok(None);
    };
    let listed = listing
        .list_files_for_scan(state as &dyn CatalogSession, &[], None)
        .await?;
    let mut files: Vec<FileStamp> = listed
        .file_groups
        .iter()
        .flat_map(|group| group.iter())
        .map(|file| FileStamp {
            location: file.object_meta.location.to_string(),
            size: file.object_meta.size,
            last_modified: file.object_meta.last_modified,
        })
        .collect();
    files.sort();
    Ok(Some(files))
}

fn same_provider(a: &Arc<dyn TableProvider>, b: &Arc<dyn TableProvider>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Rewrites a template's literals from the values it was made with to
/// new ones.
struct Swap<'a> {
    from: &'a [ScalarValue],
    to: &'a [ScalarValue],
    task_ctx: &'a TaskContext,
}

impl Swap<'_> {
    /// `plan` rebuilt bottom-up with its literals swapped, so that every
    /// operator's properties are computed for the new values; `None` when
    /// a value does not convert exactly.
    fn plan(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let mut children = Vec::with_capacity(plan.children().len());
        for child in plan.children() {
            let Some(child) = self.plan(child)? else {
                return Ok(None);
            };
            children.push(child);
        }
        if let Some(filter) = plan.downcast_ref::<FilterExec>() {
            let Some(predicate) = self.expr(filter.predicate())? else {
                return Ok(None);
            };
            let input = children.pop().expect("a filter has one input");
            let rebuilt = FilterExecBuilder::from(filter)
                .with_predicate(predicate)
                .with_input(input)
                .build()?;
            return Ok(Some(Arc::new(rebuilt)));
        }
        if let Some(scan) = plan.downcast_ref::<DataSourceExec>() {
            let Some((config, parquet)) = scan.downcast_to_file_source::<ParquetSource>() else {
                return Ok(None);
            };
            let source = match parquet.filter() {
                Some(predicate) => match self.expr(&predicate)? {
                    Some(predicate) => parquet.with_predicate(predicate),
                    None => return Ok(None),
                },
                None => parquet.clone(),
            };
            let config = FileScanConfigBuilder::from(config.clone())
                .with_source(Arc::new(source))
                .build();
            // Not a clone: clones of a Parquet source share its metrics,
            // which every run would add to without end.
            let scan = unshared_copy(DataSourceExec::from_data_source(config), self.task_ctx)?;
            return Ok(Some(scan));
        }
        #[allow(deprecated)] // replace_children needs options we have no use for
        let rebuilt = Arc::clone(plan).with_new_children(children)?;
        Ok(Some(rebuilt))
    }

    fn expr(&self, expr: &Arc<dyn PhysicalExpr>) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let mut exact = true;
        let swapped = Arc::clone(expr).transform_up(|e| {
            let Some(literal) = e.downcast_ref::<Literal>() else {
                return Ok(Transformed::no(e));
            };
            // The one value the literal stands for (checked on capture).
            let new = self
                .from
                .iter()
                .position(|v| stands_for(v, literal))
                .and_then(|i| exact_cast(&self.to[i], literal.value()));
            match new {
                Some(value) => Ok(Transformed::yes(Arc::new(Literal::new(value)) as _)),
                None => {
                    exact = false;
                    Ok(Transformed::no(e))
                }
            }
        })?;
        Ok(exact.then_some(swapped.data))
    }
}
