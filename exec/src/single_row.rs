//! `squadron_scalar_subquery_value(rows, value)`: the value of a scalar
//! subquery, or the error DataFusion gives when it returned more than one
//! row.
//!
//! Single-node DataFusion runs uncorrelated scalar subqueries with a
//! `ScalarSubqueryExec` that hands the subquery's value to expressions in
//! other operators, which a stage cut can separate from it. Squadron has
//! DataFusion rewrite them to joins instead, and the coordinator wraps each
//! subquery first in `count(*)`/`first_value` and this function, so the
//! join keeps the check the rewrite would lose. Workers evaluate it, so
//! both sides register it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{exec_err, internal_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

pub const NAME: &str = "squadron_scalar_subquery_value";

/// The function, to register and to call.
pub fn scalar_subquery_value() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ScalarSubqueryValue {
        signature: Signature::any(2, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ScalarSubqueryValue {
    signature: Signature,
}

impl ScalarUDFImpl for ScalarSubqueryValue {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [_, value] => Ok(value.clone()),
            _ => internal_err!("{NAME} takes (rows, value)"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [rows, value] = args.args.as_slice() else {
            return internal_err!("{NAME} takes (rows, value)");
        };
        let more_than_one = match rows {
            ColumnarValue::Scalar(ScalarValue::Int64(n)) => n.is_some_and(|n| n > 1),
            ColumnarValue::Array(array) => match array.as_any().downcast_ref::<Int64Array>() {
                Some(counts) => counts.iter().any(|n| n.is_some_and(|n| n > 1)),
                None => return internal_err!("{NAME}: rows must be Int64"),
            },
            _ => return internal_err!("{NAME}: rows must be Int64"),
        };
        if more_than_one {
            return exec_err!("Scalar subquery returned more than one row");
        }
        Ok(value.clone())
    }
}
