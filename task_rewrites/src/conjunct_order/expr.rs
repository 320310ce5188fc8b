//! `AdaptiveConjunction`: a filter's `a AND b AND …` evaluated in the order
//! its own batches show is cheapest, each term on the rows the terms
//! before it kept.
//!
//! DataFusion evaluates the terms in the order the query wrote them, each
//! on the whole batch until fewer than a fifth of its rows are left. In
//! TPC-H q12 that puts a string comparison (`l_shipmode IN ('MAIL',
//! 'SHIP')`, keeping 2/7) and a column comparison before the date range
//! that keeps 1/7: 24 ns a row over 30 M line items per task, against
//! 12 ns with the range first. The order that costs least, for terms
//! independent of each other, is ascending `cost per row / (1 -
//! selectivity)`; both are measured on the batches as they pass, and the
//! order is decided again from time to time, so it follows the data
//! rather than an estimate.
//!
//! Only in a filter, where a row that is NULL counts as dropped: the result
//! is a mask without nulls. And only for terms that cannot fail
//! (`super::cannot_fail`): which rows a later term sees depends on the
//! order, so a term that could raise an error on some rows might raise it
//! in one order and not in another.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::{filter, filter_record_batch, prep_null_mask_filter};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{internal_err, Result};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::PhysicalExpr;

/// Below this share of a batch's rows left, later terms see only those
/// rows (copied out) rather than the whole batch.
const COMPACT_BELOW: f64 = 0.25;

/// Batches after which the order is first decided, and then again every
/// `REORDER_EVERY` batches.
const FIRST_REORDER: u64 = 4;
const REORDER_EVERY: u64 = 64;

/// What one term kept, summed over the batches it saw, and what it cost.
#[derive(Debug, Clone, Copy)]
struct Observed {
    rows: u64,
    kept: u64,
    /// Its time per row in its fastest batch: a batch's time counts every
    /// moment the thread was not running (preempted by another task or
    /// process), which only ever adds, so the least is the term's own
    /// cost. A sum let one 10 ms stall of the cheap term's first batches
    /// put the costly term first for the rest of the task.
    nanos_per_row: f64,
}

impl Default for Observed {
    fn default() -> Self {
        Self {
            rows: 0,
            kept: 0,
            nanos_per_row: f64::INFINITY,
        }
    }
}

impl Observed {
    /// One batch of `rows` rows, of which the term kept `kept`, in `nanos`.
    fn batch(rows: usize, kept: usize, nanos: u128) -> Self {
        Self {
            rows: rows as u64,
            kept: kept as u64,
            nanos_per_row: nanos.max(1) as f64 / rows.max(1) as f64,
        }
    }

    fn add(&mut self, batch: &Observed) {
        self.rows += batch.rows;
        self.kept += batch.kept;
        self.nanos_per_row = self.nanos_per_row.min(batch.nanos_per_row);
    }

    /// Ascending is cheapest first: time per row over the share dropped.
    fn rank(&self) -> f64 {
        if self.rows == 0 {
            return f64::INFINITY;
        }
        let dropped = 1.0 - self.kept as f64 / self.rows as f64;
        self.nanos_per_row / dropped.max(1e-3)
    }
}

#[derive(Debug)]
struct State {
    /// Indices into `terms`, in the order they are evaluated.
    order: Arc<[usize]>,
    observed: Vec<Observed>,
    batches: u64,
}

#[derive(Debug)]
pub struct AdaptiveConjunction {
    terms: Vec<Arc<dyn PhysicalExpr>>,
    state: Mutex<State>,
}

impl AdaptiveConjunction {
    pub fn new(terms: Vec<Arc<dyn PhysicalExpr>>) -> Self {
        let n = terms.len();
        Self {
            terms,
            state: Mutex::new(State {
                order: (0..n).collect(),
                observed: vec![Observed::default(); n],
                batches: 0,
            }),
        }
    }

    /// The terms in the order they are evaluated now.
    pub fn ordered_terms(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        let order = Arc::clone(&self.state().order);
        order.iter().map(|&i| Arc::clone(&self.terms[i])).collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain numbers: a panic elsewhere cannot leave them inconsistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a batch's observations and, when due, orders the terms again.
    fn record(&self, seen: &[(usize, Observed)]) {
        let mut state = self.state();
        for (term, o) in seen {
            state.observed[*term].add(o);
        }
        state.batches += 1;
        let due = state.batches == FIRST_REORDER
            || (state.batches > FIRST_REORDER && state.batches.is_multiple_of(REORDER_EVERY));
        if due {
            let mut order: Vec<usize> = state.order.to_vec();
            let observed = state.observed.clone();
            // Stable: terms never reached keep their places at the end.
            order.sort_by(|a, b| observed[*a].rank().total_cmp(&observed[*b].rank()));
            state.order = order.into();
        }
    }
}

/// Where the rows still in play are, as the terms are evaluated.
enum Alive {
    /// A mask over the whole batch.
    Mask(BooleanBuffer),
    /// The rows left, copied out, and their positions in the batch.
    Compact(RecordBatch, UInt32Array),
}

/// A term's result as kept rows: true, not null.
fn kept(result: ColumnarValue, rows: usize) -> Result<BooleanBuffer> {
    let array = result.into_array(rows)?;
    let Some(mask) = array.as_boolean_opt() else {
        return internal_err!("a filter term gave {}, not booleans", array.data_type());
    };
    Ok(match mask.null_count() {
        0 => mask.values().clone(),
        _ => prep_null_mask_filter(mask).values().clone(),
    })
}

impl AdaptiveConjunction {
    fn mask(&self, batch: &RecordBatch) -> Result<BooleanBuffer> {
        let rows = batch.num_rows();
        let order = Arc::clone(&self.state().order);
        let mut seen = Vec::with_capacity(order.len());
        let mut alive: Option<Alive> = None;
        for &term in order.iter() {
            let input = match &alive {
                None | Some(Alive::Mask(_)) => batch,
                Some(Alive::Compact(rows_left, _)) => rows_left,
            };
            let start = Instant::now();
            let result = kept(self.terms[term].evaluate(input)?, input.num_rows())?;
            let o = Observed::batch(
                input.num_rows(),
                result.count_set_bits(),
                start.elapsed().as_nanos(),
            );
            seen.push((term, o));
            alive = Some(match alive {
                None => Alive::Mask(result),
                Some(Alive::Mask(mask)) => Alive::Mask(&mask & &result),
                Some(Alive::Compact(rows_left, positions)) => {
                    let keep = BooleanArray::new(result, None);
                    let positions = filter(&positions, &keep)?;
                    Alive::Compact(
                        filter_record_batch(&rows_left, &keep)?,
                        positions.as_primitive().clone(),
                    )
                }
            });
            // Fewer rows left: later terms see only them.
            if let Some(Alive::Mask(mask)) = &alive {
                let left = mask.count_set_bits();
                if left == 0 {
                    break;
                }
                if (left as f64) < COMPACT_BELOW * rows as f64 {
                    let keep = BooleanArray::new(mask.clone(), None);
                    let positions: UInt32Array = mask.set_indices().map(|i| i as u32).collect();
                    alive = Some(Alive::Compact(
                        filter_record_batch(batch, &keep)?,
                        positions,
                    ));
                }
            }
            if let Some(Alive::Compact(rows_left, _)) = &alive {
                if rows_left.num_rows() == 0 {
                    break;
                }
            }
        }
        self.record(&seen);
        Ok(match alive {
            None => BooleanBuffer::new_set(rows),
            Some(Alive::Mask(mask)) => mask,
            Some(Alive::Compact(_, positions)) => {
                let mut mask = vec![false; rows];
                for &p in positions.values().iter() {
                    mask[p as usize] = true;
                }
                BooleanBuffer::from(mask)
            }
        })
    }
}

impl fmt::Display for AdaptiveConjunction {
    /// The terms in the order last chosen.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .ordered_terms()
            .iter()
            .map(|term| match term.downcast_ref::<BinaryExpr>() {
                // Binds looser than the ANDs around it.
                Some(binary) if *binary.op() == Operator::Or => format!("({term})"),
                _ => term.to_string(),
            })
            .collect();
        write!(f, "{}", terms.join(" AND "))
    }
}

impl PartialEq for AdaptiveConjunction {
    fn eq(&self, other: &Self) -> bool {
        self.terms == other.terms
    }
}

impl Eq for AdaptiveConjunction {}

impl Hash for AdaptiveConjunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.terms.hash(state);
    }
}

impl PhysicalExpr for AdaptiveConjunction {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let mask = self.mask(batch)?;
        Ok(ColumnarValue::Array(
            Arc::new(BooleanArray::new(mask, None)) as ArrayRef,
        ))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.terms.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if children.len() != self.terms.len() {
            return internal_err!(
                "AdaptiveConjunction has {} terms, got {} children",
                self.terms.len(),
                children.len()
            );
        }
        Ok(Arc::new(Self::new(children)))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::physical_expr::expressions::lit;

    use super::*;

    #[test]
    fn a_stall_while_timing_one_batch_does_not_reorder_the_terms() {
        // Term 0 costly and unselective (keeps 5/7), term 1 cheap and
        // selective (keeps 1/12), written costly first.
        let conjunction = AdaptiveConjunction::new(vec![lit(true), lit(true)]);
        for batch in 0..FIRST_REORDER {
            // The thread preempted for 10 ms while term 1 ran, once.
            let cheap_nanos = if batch == 1 { 10_000_000 } else { 1_000 };
            conjunction.record(&[
                (0, Observed::batch(1024, 731, 20_000)),
                (1, Observed::batch(1024, 85, cheap_nanos)),
            ]);
        }
        assert_eq!(&*conjunction.state().order, &[1, 0]);
    }
}
