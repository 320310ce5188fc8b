//! A stage read's filter that gives itself up once it has shown it keeps
//! nearly every row.
//!
//! A filter over a read is evaluated on every row read. When the build
//! side's keys cover nearly all probe keys it drops almost nothing, and a
//! filter of many ranges costs more than the rows it saves: in TPC-H q7 at
//! SF1, 32 ranges of customer keys kept 99.6 % of the orders and took
//! 82 ms of each join task's 200. So the filter is tried on the first
//! `TRIAL_ROWS` rows after its build side published it, and from then on
//! passes every row if it kept more than nine in ten (the joins above
//! still drop what does not match). The producers' filters do the same per
//! channel (`stream::filter::FilterTrials`).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::AsArray;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

use super::row_form::row_form;
use squadron_exec::stream::filter::{given_up, TRIAL_ROWS};

#[derive(Debug)]
pub struct TrialFilter {
    filter: Arc<dyn PhysicalExpr>,
    /// The filter's row form (`row_form`) for the generation it was made
    /// of.
    row_form: Mutex<Option<(u64, Arc<dyn PhysicalExpr>)>>,
    /// Rows tried since the filter was published, and how many it kept.
    seen: AtomicU64,
    kept: AtomicU64,
}

impl TrialFilter {
    /// `filter` (a dynamic filter, `true` until its build side publishes
    /// it), on trial.
    pub fn new(filter: Arc<dyn PhysicalExpr>) -> Self {
        Self {
            filter,
            row_form: Mutex::new(None),
            seen: AtomicU64::new(0),
            kept: AtomicU64::new(0),
        }
    }

    /// The filter as published now, in its row form.
    fn now(&self) -> Result<Arc<dyn PhysicalExpr>> {
        let generation = self.filter.snapshot_generation();
        let mut cached = self.row_form.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((made_of, form)) = cached.as_ref() {
            if *made_of == generation {
                return Ok(Arc::clone(form));
            }
        }
        let form = row_form(&self.filter)?;
        *cached = Some((generation, Arc::clone(&form)));
        Ok(form)
    }

    fn given_up(&self) -> bool {
        given_up(
            self.seen.load(Ordering::Relaxed),
            self.kept.load(Ordering::Relaxed),
        )
    }
}

impl fmt::Display for TrialFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.filter)?;
        if self.given_up() {
            write!(f, " (given up: kept nearly every row)")?;
        }
        Ok(())
    }
}

impl PartialEq for TrialFilter {
    fn eq(&self, other: &Self) -> bool {
        self.filter.as_ref() == other.filter.as_ref()
    }
}

impl Eq for TrialFilter {}

impl Hash for TrialFilter {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.filter.hash(state);
    }
}

impl PhysicalExpr for TrialFilter {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.filter.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        if self.given_up() {
            return Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))));
        }
        let value = self.now()?.evaluate(batch)?;
        // Generation 1 is the filter before its build side published it.
        let published = self.filter.snapshot_generation() > 1;
        if published && self.seen.load(Ordering::Relaxed) < TRIAL_ROWS {
            let rows = batch.num_rows() as u64;
            let kept = match &value {
                // Nulls are not kept.
                ColumnarValue::Array(array) => array.as_boolean().true_count() as u64,
                ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))) => rows,
                ColumnarValue::Scalar(_) => 0,
            };
            self.seen.fetch_add(rows, Ordering::Relaxed);
            self.kept.fetch_add(kept, Ordering::Relaxed);
        }
        Ok(value)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.filter]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match children.pop() {
            Some(filter) if children.is_empty() => Ok(Arc::new(TrialFilter::new(filter))),
            _ => datafusion::common::internal_err!("TrialFilter takes one child"),
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.filter.fmt_sql(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::Field;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit, DynamicFilterPhysicalExpr};

    fn rows(from: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let keys = Int64Array::from_iter_values(from..from + 8192);
        RecordBatch::try_new(schema, vec![Arc::new(keys)]).unwrap()
    }

    /// A trial of a dynamic filter that `publish` then sets to `k <op> bound`.
    fn published(op: Operator, bound: i64) -> (TrialFilter, impl Fn()) {
        let schema = rows(0).schema();
        let k = col("k", &schema).unwrap();
        let dynamic = Arc::new(DynamicFilterPhysicalExpr::new(
            vec![Arc::clone(&k)],
            lit(true),
        ));
        let trial = TrialFilter::new(Arc::clone(&dynamic) as Arc<dyn PhysicalExpr>);
        let set = binary(k, op, lit(ScalarValue::Int64(Some(bound))), &schema).unwrap();
        let publish = move || {
            dynamic.update(Arc::clone(&set)).unwrap();
            dynamic.mark_complete();
        };
        (trial, publish)
    }

    fn is_all_true(value: &ColumnarValue) -> bool {
        matches!(
            value,
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(true)))
        )
    }

    #[test]
    fn rows_before_publication_do_not_count_and_an_unselective_filter_is_given_up() {
        let (trial, publish) = published(Operator::Gt, 1);
        for n in 0..20 {
            trial.evaluate(&rows(n * 8192)).unwrap();
        }
        assert!(!trial.given_up(), "true before publication is no verdict");
        publish();
        let first = trial.evaluate(&rows(0)).unwrap();
        assert!(!is_all_true(&first), "tried: rows 0 and 1 dropped");
        for n in 1..20 {
            trial.evaluate(&rows(n * 8192)).unwrap();
        }
        assert!(trial.given_up());
        assert!(is_all_true(&trial.evaluate(&rows(0)).unwrap()));
        assert!(trial.to_string().contains("given up"), "{trial}");
    }

    #[test]
    fn a_selective_filter_stays() {
        let (trial, publish) = published(Operator::Lt, 100);
        publish();
        for n in 0..20 {
            let value = trial.evaluate(&rows(n * 8192)).unwrap();
            assert!(!is_all_true(&value));
        }
        assert!(!trial.given_up());
    }
}
