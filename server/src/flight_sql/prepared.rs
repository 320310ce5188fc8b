//! Prepared statements: a parsed statement, its parameter types, and the
//! parameter rows a client bound with DoPut.
//!
//! A handle lives until ClosePreparedStatement or until it has been idle
//! for the TTL; the store holds at most `capacity` handles, and expired
//! ones are dropped whenever a new one is made, so clients that never
//! close their statements (the JDBC driver on a crash, a script) cannot
//! grow it without bound.

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::LogicalPlanBuilder;
use squadron_common::error::to_status;
use tonic::Status;

use super::column_metadata::described;
use super::handles::HandleMap;
use super::parameter_types::{declared_type, inferred_placeholder_types};
use squadron_coordinator::statements::parameter_names;
use squadron_planner::client_types::{client_schema, client_type};
use squadron_planner::column_origins::ColumnOrigin;
use squadron_planner::templates::StatementKey;

pub const DEFAULT_TTL: Duration = Duration::from_secs(600);
pub const DEFAULT_CAPACITY: usize = 4096;

/// One prepared statement.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement with its placeholders.
    pub plan: LogicalPlan,
    /// One field per placeholder, in order: `$1`, `$2`, ….
    pub parameters: SchemaRef,
    /// The type the plan wants for each placeholder (Null where it fixes
    /// none): bound values are cast to it, or else to the declared type.
    wanted: Vec<DataType>,
    /// The result schema a client is promised (empty for statements that
    /// return no rows).
    pub dataset: SchemaRef,
    /// The parameter rows last bound, if any.
    pub bound: Option<RecordBatch>,
    /// For a statement without parameters, the key under which it may
    /// re-use a plan (see `planner::templates`).
    pub key: Option<StatementKey>,
    /// The SQL it was prepared from (`system.queries`).
    pub sql: Option<Arc<str>>,
}

impl Prepared {
    pub fn new(plan: LogicalPlan) -> Result<Self, Status> {
        let types = plan.get_parameter_types().map_err(|e| to_status(&e))?;
        let inferred = inferred_placeholder_types(&plan).map_err(|e| to_status(&e))?;
        let mut wanted = vec![];
        let fields: Vec<Field> = parameter_names(&plan)?
            .into_iter()
            .map(|name| {
                // A placeholder DataFusion leaves untyped takes the type of
                // another of its uses or of the CAST around it; a bound value
                // is cast to that. Else it takes whatever the client binds
                // (`SELECT $1`).
                let plan_type = types
                    .get(&name)
                    .cloned()
                    .flatten()
                    .or_else(|| inferred.get(&name).cloned());
                let declared = plan_type
                    .as_ref()
                    .map_or(DataType::Null, |t| declared_type(&client_type(t)));
                wanted.push(plan_type.unwrap_or(DataType::Null));
                Field::new(name, declared, true)
            })
            .collect();
        let dataset = if returns_rows(&plan) {
            Arc::new(client_schema(plan.schema().as_arrow()))
        } else {
            Arc::new(Schema::empty())
        };
        Ok(Self {
            plan,
            parameters: Arc::new(described(&Schema::new(fields), &[])),
            wanted,
            dataset: Arc::new(described(&dataset, &[])),
            bound: None,
            key: None,
            sql: None,
        })
    }

    /// The statement, its result columns described as read from
    /// `origins` (see `column_metadata`).
    pub fn with_origins(mut self, origins: &[Option<ColumnOrigin>]) -> Self {
        self.dataset = Arc::new(described(&self.dataset, origins));
        self
    }

    /// The statement as prepared from `sql`.
    pub fn with_sql(mut self, sql: &str) -> Self {
        self.sql = Some(sql.into());
        self
    }

    /// With `key`, if the statement has no parameters (bound values are
    /// not part of a key).
    pub fn with_key(mut self, key: Option<StatementKey>) -> Self {
        if self.parameters.fields().is_empty() {
            self.key = key;
        }
        self
    }

    /// The statement to run: the plan with each bound row's values in
    /// place of its placeholders, one execution per row, concatenated.
    pub fn bound_plan(&self) -> Result<LogicalPlan, Status> {
        let mut plans = self.bound_plans()?.into_iter();
        let first = plans.next().expect("at least one plan");
        plans.try_fold(first, |all, next| {
            LogicalPlanBuilder::from(all)
                .union(next)
                .and_then(|b| b.build())
                .map_err(|e| to_status(&e))
        })
    }

    /// One plan per bound row (the plan itself without parameters): an
    /// update runs each and adds up their counts.
    pub fn bound_plans(&self) -> Result<Vec<LogicalPlan>, Status> {
        let wanted = self.parameters.fields();
        if wanted.is_empty() {
            return Ok(vec![self.plan.clone()]);
        }
        let batch = match &self.bound {
            Some(batch) if batch.num_rows() > 0 => batch,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "the prepared statement has {} parameter(s) and no values were bound",
                    wanted.len()
                )))
            }
        };
        if batch.num_columns() != wanted.len() {
            return Err(Status::invalid_argument(format!(
                "{} parameter value(s) bound, the statement has {} parameter(s)",
                batch.num_columns(),
                wanted.len()
            )));
        }
        (0..batch.num_rows())
            .map(|row| {
                let values = batch
                    .columns()
                    .iter()
                    .zip(wanted.iter().zip(&self.wanted))
                    .map(|(column, (field, plan_type))| bound_value(column, row, field, plan_type))
                    .collect::<Result<Vec<_>, Status>>()?;
                self.plan
                    .clone()
                    .with_param_values(ParamValues::from(values))
                    .map_err(|e| to_status(&e))
            })
            .collect()
    }
}

/// Row `row` of a bound column, as the type the plan wants for its
/// placeholder, or else the type declared to clients (clients bind `int`
/// for a `BIGINT` column, a string for a date, milliseconds where the
/// plan holds nanoseconds). A union column
/// (flightsql-dbapi binds every parameter as a dense union of the types
/// it may hold) gives each row's value in its active child: Arrow's cast
/// of the union itself answers NULL for a decimal or date target.
fn bound_value(
    column: &datafusion::arrow::array::ArrayRef,
    row: usize,
    field: &Field,
    plan_type: &DataType,
) -> Result<ScalarValue, Status> {
    let value = match ScalarValue::try_from_array(column, row).map_err(|e| to_status(&e))? {
        ScalarValue::Union(Some((_, value)), _, _) => *value,
        ScalarValue::Union(None, _, _) => ScalarValue::Null,
        value => value,
    };
    let target = match plan_type {
        DataType::Null => field.data_type(),
        wanted => wanted,
    };
    if target == &DataType::Null || value.data_type() == *target {
        return Ok(value);
    }
    let cannot = |why: &dyn std::fmt::Display| {
        Status::invalid_argument(format!(
            "parameter {}: cannot use the {} value {value} as {target}: {why}",
            field.name(),
            value.data_type(),
        ))
    };
    let cast = value.cast_to(target).map_err(|e| cannot(&e))?;
    // A value that became NULL on the way would silently match nothing.
    if cast.is_null() && !value.is_null() {
        return Err(cannot(&"the conversion gives NULL"));
    }
    Ok(cast)
}

/// Whether running `plan` produces a result set (DDL and DML give none to
/// a prepared statement's reader: they report a row count instead).
fn returns_rows(plan: &LogicalPlan) -> bool {
    !matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(_)
    )
}

pub struct PreparedStore {
    entries: HandleMap<Prepared>,
}

impl Default for PreparedStore {
    fn default() -> Self {
        Self::new(DEFAULT_TTL, DEFAULT_CAPACITY)
    }
}

impl PreparedStore {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            entries: HandleMap::new("prepared statements", ttl, capacity),
        }
    }

    /// Keeps `prepared`, made by `user` (a quota key), under a new handle.
    pub fn insert(&self, prepared: Prepared, user: &str) -> Result<String, Status> {
        self.entries.insert(prepared, user)
    }

    /// The statement with id `id`; using it keeps it alive.
    pub fn get(&self, id: &str) -> Result<Prepared, Status> {
        self.entries.get(id).ok_or_else(unknown_handle)
    }

    /// Binds parameter batches (a DoPut) to the statement with id `id`.
    pub fn bind(&self, id: &str, batches: &[RecordBatch]) -> Result<(), Status> {
        let bound = match batches.first() {
            None => None,
            Some(first) => Some(
                concat_batches(&first.schema(), batches)
                    .map_err(|e| Status::invalid_argument(format!("parameter batches: {e}")))?,
            ),
        };
        self.entries
            .with(id, |prepared| {
                let wanted = prepared.parameters.fields().len();
                if let Some(batch) = &bound {
                    if batch.num_columns() != wanted && batch.num_rows() > 0 {
                        return Err(Status::invalid_argument(format!(
                            "{} parameter value(s) bound, the statement has {wanted} parameter(s)",
                            batch.num_columns(),
                        )));
                    }
                }
                prepared.bound = bound;
                Ok(())
            })
            .ok_or_else(unknown_handle)?
    }

    /// Frees the statement with id `id`.
    pub fn remove(&self, id: &str) -> Result<(), Status> {
        if self.entries.remove(id) {
            Ok(())
        } else {
            Err(unknown_handle())
        }
    }

    /// Drops the statements idle for the TTL.
    pub fn expire(&self) -> usize {
        self.entries.expire()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn unknown_handle() -> Status {
    Status::not_found("unknown prepared statement handle (closed, expired, or never issued)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        ArrayRef, Float64Array, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray,
        TimestampMillisecondArray, UnionArray,
    };
    use datafusion::arrow::datatypes::TimeUnit;
    use datafusion::arrow::datatypes::UnionFields;
    use datafusion::prelude::SessionContext;

    async fn prepare(sql: &str) -> Prepared {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, b VARCHAR) AS VALUES (1, 'x'), (2, 'y'), (3, 'z')")
            .await
            .unwrap();
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        Prepared::new(plan).unwrap()
    }

    #[tokio::test]
    async fn parameters_are_typed_and_ordered() {
        let p = prepare("SELECT b FROM t WHERE a = $2 AND b = $1").await;
        let names: Vec<_> = p
            .parameters
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["$1", "$2"]);
        assert_eq!(p.parameters.field(0).data_type(), &DataType::Utf8);
        assert_eq!(p.parameters.field(1).data_type(), &DataType::Int64);
        assert_eq!(p.dataset.field(0).name(), "b");
    }

    /// `count(*)` of `prepared` bound to `batch`, over `ctx`'s tables.
    async fn count_bound(ctx: &SessionContext, prepared: &Prepared, batch: RecordBatch) -> i64 {
        let mut prepared = prepared.clone();
        prepared.bound = Some(batch);
        let batches = ctx
            .execute_logical_plan(prepared.bound_plan().unwrap())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let counts = batches[0].column(0).as_any().downcast_ref::<Int64Array>();
        counts.unwrap().value(0)
    }

    #[tokio::test]
    async fn timestamps_are_declared_in_milliseconds_and_casts_type_their_placeholder() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE e (at TIMESTAMP) AS VALUES (TIMESTAMP '2024-05-01 12:00:00.123')")
            .await
            .unwrap();
        let sql = "SELECT count(*) FROM e WHERE at = $1 AND CAST($2 AS INT) = 7";
        let plan = ctx.state().create_logical_plan(sql).await.unwrap();
        let p = Prepared::new(plan).unwrap();
        let declared: Vec<_> = p
            .parameters
            .fields()
            .iter()
            .map(|f| f.data_type())
            .collect();
        assert_eq!(
            declared,
            [
                &DataType::Timestamp(TimeUnit::Millisecond, None),
                &DataType::Int32
            ]
        );
        let millis = 1_714_564_800_123;
        let seven = Arc::new(Int32Array::from(vec![7])) as ArrayRef;
        // As the JDBC driver binds: milliseconds in the declared vector.
        let jdbc = RecordBatch::try_from_iter([
            (
                "0",
                Arc::new(TimestampMillisecondArray::from(vec![millis])) as _,
            ),
            ("1", Arc::clone(&seven)),
        ])
        .unwrap();
        assert_eq!(count_bound(&ctx, &p, jdbc).await, 1);
        // As ADBC binds a Python datetime: microseconds, kept exact.
        let micros = TimestampMicrosecondArray::from(vec![millis * 1000 + 1]);
        let adbc =
            RecordBatch::try_from_iter([("0", Arc::new(micros) as _), ("1", seven)]).unwrap();
        assert_eq!(count_bound(&ctx, &p, adbc).await, 0);
    }

    #[tokio::test]
    async fn each_bound_row_runs_once_with_values_cast_to_the_parameter_type() {
        let mut p = prepare("SELECT b FROM t WHERE a = $1").await;
        assert_eq!(
            p.bound_plan().unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        // Int32 bound for a BIGINT parameter.
        let batch =
            RecordBatch::try_from_iter([("0", Arc::new(Int32Array::from(vec![1, 3])) as _)])
                .unwrap();
        p.bound = Some(batch);
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a BIGINT, b VARCHAR) AS VALUES (1, 'x'), (2, 'y'), (3, 'z')")
            .await
            .unwrap();
        let batches = ctx
            .execute_logical_plan(p.bound_plan().unwrap())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut got: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                let col = datafusion::arrow::compute::cast(b.column(0), &DataType::Utf8).unwrap();
                let col = col.as_any().downcast_ref::<StringArray>().unwrap().clone();
                col.iter()
                    .map(|v| v.unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        got.sort();
        assert_eq!(got, ["x", "z"]);
    }

    /// flightsql-dbapi's parameters: a dense union of int64, float64 and
    /// utf8, one child active per row.
    fn dense_union(floats: Vec<f64>, strings: Vec<&str>) -> ArrayRef {
        let fields = UnionFields::try_new(
            [0, 1, 2],
            [
                Field::new("int64", DataType::Int64, true),
                Field::new("float64", DataType::Float64, true),
                Field::new("string", DataType::Utf8, true),
            ],
        )
        .unwrap();
        let type_ids: Vec<i8> = std::iter::repeat_n(1, floats.len())
            .chain(std::iter::repeat_n(2, strings.len()))
            .collect();
        let offsets: Vec<i32> = (0..floats.len() as i32)
            .chain(0..strings.len() as i32)
            .collect();
        let children: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(Vec::<i64>::new())),
            Arc::new(Float64Array::from(floats)),
            Arc::new(StringArray::from(strings)),
        ];
        Arc::new(
            UnionArray::try_new(fields, type_ids.into(), Some(offsets.into()), children).unwrap(),
        )
    }

    #[test]
    fn union_parameters_give_their_active_value_in_the_placeholder_type() {
        let union = dense_union(vec![0.03], vec!["2024-02-29", "not a date"]);
        let decimal = Field::new("$1", DataType::Decimal128(15, 2), true);
        assert_eq!(
            bound_value(&union, 0, &decimal, &DataType::Null).unwrap(),
            ScalarValue::Decimal128(Some(3), 15, 2)
        );
        let date = Field::new("$1", DataType::Date32, true);
        assert_eq!(
            bound_value(&union, 1, &date, &DataType::Null).unwrap(),
            ScalarValue::Date32(Some(19782))
        );
        let refused = bound_value(&union, 2, &date, &DataType::Null).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert!(
            refused.message().contains("$1") && refused.message().contains("not a date"),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn handles_are_closed_expire_and_are_bounded() {
        let p = prepare("SELECT 1").await;
        let store = PreparedStore::new(DEFAULT_TTL, 2);
        let h = store.insert(p.clone(), "a").unwrap();
        assert!(store.get(&h).is_ok());
        store.remove(&h).unwrap();
        assert_eq!(store.get(&h).unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            store.get("forged").unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert_eq!(store.get("").unwrap_err().code(), tonic::Code::NotFound);
        store.insert(p.clone(), "a").unwrap();
        store.insert(p.clone(), "b").unwrap();
        assert_eq!(
            store.insert(p.clone(), "c").unwrap_err().code(),
            tonic::Code::ResourceExhausted
        );

        // Abandoned handles are reclaimed once idle for the TTL.
        let store = PreparedStore::new(Duration::from_millis(1), 2);
        let abandoned: Vec<String> = ["a", "b"]
            .iter()
            .map(|user| store.insert(p.clone(), user).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            store.get(&abandoned[0]).unwrap_err().code(),
            tonic::Code::NotFound
        );
        for _ in 0..10 {
            store.insert(p.clone(), "a").unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(store.len() <= 2);
    }
}
