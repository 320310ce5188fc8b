//! `NarrowDecimalExpr`: a decimal `+`, `-` or `*` computed in 64 bits when
//! the batch's values allow it, and exactly as Arrow computes it otherwise.
//!
//! Arrow keeps every `Decimal128` value in an `i128` and checks each
//! operation for overflow, one row at a time in a loop the compiler cannot
//! vectorise: `l_extendedprice * (1 - l_discount)` costs about 13 ns a row,
//! a sixth of TPC-H q1's time. TPC-H's decimals, like most money, are far
//! below 2^63. So per batch the expression finds the largest magnitude of
//! each operand (one pass each) and, if the result cannot leave the `i64`
//! range, computes it with plain 64-bit arithmetic, which vectorises, and
//! widens it to `i128`. The result is the same value Arrow computes: within
//! `i64` neither overflows nor rounds, and the rescaling factors are the
//! ones Arrow applies (`10^(result scale - operand scale)` for `+`/`-`,
//! none for `*`). Its type is the wrapped expression's.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::PhysicalExpr;

/// The operations computed narrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum NarrowOp {
    /// `l * l_factor + r * r_factor`
    Add {
        l_factor: i64,
        r_factor: i64,
    },
    /// `l * l_factor - r * r_factor`
    Sub {
        l_factor: i64,
        r_factor: i64,
    },
    Mul,
}

/// One side of the operation, as evaluated for a batch.
enum Operand<'a> {
    Values(&'a PrimitiveArray<Decimal128Type>),
    Constant(i128),
}

impl Operand<'_> {
    /// The largest magnitude among the values (those under nulls too:
    /// they are computed as well, so they must not overflow either).
    fn largest_magnitude(&self) -> u128 {
        match self {
            Operand::Constant(v) => v.unsigned_abs(),
            Operand::Values(array) => {
                let (min, max) = array
                    .values()
                    .iter()
                    .fold((0i128, 0i128), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                min.unsigned_abs().max(max.unsigned_abs())
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct NarrowDecimalExpr {
    /// The expression as planned, which also computes every batch whose
    /// values do not fit.
    wide: Arc<dyn PhysicalExpr>,
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
    op: NarrowOp,
    result_type: DataType,
}

impl NarrowDecimalExpr {
    /// `binary` computed narrow where it can be: a `+`, `-` or `*` of two
    /// `Decimal128` operands with a `Decimal128` result; `None` otherwise.
    pub fn try_wrap(
        binary: &BinaryExpr,
        wide: &Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> Result<Option<Self>> {
        let scale = |expr: &Arc<dyn PhysicalExpr>| -> Result<Option<i8>> {
            Ok(match expr.data_type(schema)? {
                DataType::Decimal128(_, s) => Some(s),
                _ => None,
            })
        };
        let (Some(s1), Some(s2), DataType::Decimal128(_, result_scale)) = (
            scale(binary.left())?,
            scale(binary.right())?,
            wide.data_type(schema)?,
        ) else {
            return Ok(None);
        };
        let factor = |from: i8| -> Option<i64> {
            let exponent = u32::try_from(result_scale.checked_sub(from)?).ok()?;
            10i64.checked_pow(exponent)
        };
        let op = match binary.op() {
            Operator::Plus | Operator::Minus => {
                // Arrow's rule: the larger scale.
                if result_scale != s1.max(s2) {
                    return Ok(None);
                }
                let (Some(l_factor), Some(r_factor)) = (factor(s1), factor(s2)) else {
                    return Ok(None);
                };
                if *binary.op() == Operator::Plus {
                    NarrowOp::Add { l_factor, r_factor }
                } else {
                    NarrowOp::Sub { l_factor, r_factor }
                }
            }
            Operator::Multiply if i16::from(result_scale) == i16::from(s1) + i16::from(s2) => {
                NarrowOp::Mul
            }
            _ => return Ok(None),
        };
        // The operands may already be narrow; the wide form is the
        // expression as planned all the way down, so that it shows as
        // planned and computes as planned.
        let wide = Arc::clone(wide)
            .with_new_children(vec![as_planned(binary.left()), as_planned(binary.right())])?;
        Ok(Some(Self {
            result_type: wide.data_type(schema)?,
            wide,
            left: Arc::clone(binary.left()),
            right: Arc::clone(binary.right()),
            op,
        }))
    }

    /// Whether every result lies within `i64` (so no step overflows).
    fn fits(&self, l: &Operand, r: &Operand) -> bool {
        let (l, r) = (l.largest_magnitude(), r.largest_magnitude());
        let limit = i64::MAX as u128;
        let bound = match self.op {
            NarrowOp::Mul => l.checked_mul(r),
            NarrowOp::Add { l_factor, r_factor } | NarrowOp::Sub { l_factor, r_factor } => l
                .checked_mul(l_factor as u128)
                .zip(r.checked_mul(r_factor as u128))
                .and_then(|(a, b)| a.checked_add(b)),
        };
        bound.is_some_and(|b| b <= limit)
    }

    fn compute(&self, l: &Operand, r: &Operand, len: usize) -> PrimitiveArray<Decimal128Type> {
        let f: fn(i64, i64, i64, i64) -> i64 = match self.op {
            NarrowOp::Mul => |a, b, _, _| a * b,
            NarrowOp::Add { .. } => |a, b, fa, fb| a * fa + b * fb,
            NarrowOp::Sub { .. } => |a, b, fa, fb| a * fa - b * fb,
        };
        let (fa, fb) = match self.op {
            NarrowOp::Mul => (1, 1),
            NarrowOp::Add { l_factor, r_factor } | NarrowOp::Sub { l_factor, r_factor } => {
                (l_factor, r_factor)
            }
        };
        // `fits` bounds every intermediate: the casts keep the values.
        let values: Vec<i128> = match (l, r) {
            (Operand::Values(a), Operand::Values(b)) => a
                .values()
                .iter()
                .zip(b.values().iter())
                .map(|(&a, &b)| f(a as i64, b as i64, fa, fb) as i128)
                .collect(),
            (Operand::Values(a), Operand::Constant(b)) => {
                let b = *b as i64;
                a.values()
                    .iter()
                    .map(|&a| f(a as i64, b, fa, fb) as i128)
                    .collect()
            }
            (Operand::Constant(a), Operand::Values(b)) => {
                let a = *a as i64;
                b.values()
                    .iter()
                    .map(|&b| f(a, b as i64, fa, fb) as i128)
                    .collect()
            }
            (Operand::Constant(a), Operand::Constant(b)) => {
                vec![f(*a as i64, *b as i64, fa, fb) as i128; len]
            }
        };
        let nulls = match (l, r) {
            (Operand::Values(a), Operand::Values(b)) => NullBuffer::union(a.nulls(), b.nulls()),
            (Operand::Values(a), Operand::Constant(_)) => a.nulls().cloned(),
            (Operand::Constant(_), Operand::Values(b)) => b.nulls().cloned(),
            (Operand::Constant(_), Operand::Constant(_)) => None,
        };
        PrimitiveArray::new(values.into(), nulls)
    }
}

impl NarrowDecimalExpr {
    /// `batch`'s result computed in 64 bits, unless its values do not
    /// allow it (or an operand is a null constant or not a `Decimal128`).
    fn narrow(&self, batch: &RecordBatch) -> Result<Option<ArrayRef>> {
        let l = self.left.evaluate(batch)?;
        let r = self.right.evaluate(batch)?;
        let (Some(l), Some(r)) = (operand(&l), operand(&r)) else {
            return Ok(None);
        };
        if !self.fits(&l, &r) {
            return Ok(None);
        }
        let array = self
            .compute(&l, &r, batch.num_rows())
            .with_data_type(self.result_type.clone());
        Ok(Some(Arc::new(array)))
    }

    /// Whether `batch` is computed in 64 bits.
    #[cfg(test)]
    pub(super) fn is_narrow_for(&self, batch: &RecordBatch) -> Result<bool> {
        Ok(self.narrow(batch)?.is_some())
    }
}

/// `expr` as planned: the wide form of a narrow expression.
fn as_planned(expr: &Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
    match expr.downcast_ref::<NarrowDecimalExpr>() {
        Some(narrow) => Arc::clone(&narrow.wide),
        None => Arc::clone(expr),
    }
}

/// An operand as evaluated, unless it is a null constant or not a plain
/// `Decimal128` (both left to the wide path).
fn operand(value: &ColumnarValue) -> Option<Operand<'_>> {
    match value {
        ColumnarValue::Array(array) => match array.data_type() {
            DataType::Decimal128(_, _) => Some(Operand::Values(array.as_primitive())),
            _ => None,
        },
        ColumnarValue::Scalar(ScalarValue::Decimal128(Some(v), _, _)) => {
            Some(Operand::Constant(*v))
        }
        ColumnarValue::Scalar(_) => None,
    }
}

impl fmt::Display for NarrowDecimalExpr {
    // As planned: which batches run narrow is not part of the plan.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.wide, f)
    }
}

impl PartialEq for NarrowDecimalExpr {
    fn eq(&self, other: &Self) -> bool {
        self.wide.as_ref() == other.wide.as_ref()
    }
}

impl Eq for NarrowDecimalExpr {}

impl Hash for NarrowDecimalExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.wide.hash(state);
    }
}

impl PhysicalExpr for NarrowDecimalExpr {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.wide.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.wide.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        match self.narrow(batch)? {
            Some(array) => Ok(ColumnarValue::Array(array)),
            None => self.wide.evaluate(batch),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right] = <[_; 2]>::try_from(children).map_err(|c| {
            DataFusionError::Internal(format!(
                "NarrowDecimalExpr has two children, got {}",
                c.len()
            ))
        })?;
        let wide = Arc::clone(&self.wide)
            .with_new_children(vec![as_planned(&left), as_planned(&right)])?;
        Ok(Arc::new(Self {
            wide,
            left,
            right,
            op: self.op,
            result_type: self.result_type.clone(),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.wide.fmt_sql(f)
    }
}
