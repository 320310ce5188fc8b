//! Filters as Delta kernel predicates, so the kernel skips files whose
//! statistics (min/max/null count per column, partition values) show
//! they hold no matching row. Skipping only ever keeps more files than
//! needed: a filter part with no kernel form is left out of an AND, and
//! DataFusion still applies every filter to the rows read.

use datafusion::arrow::datatypes::{DataType, Schema, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use delta_kernel::expressions::{Expression, Scalar};
use delta_kernel::Predicate;

/// An IN list longer than this is not worth a disjunction per value.
const MAX_IN_LIST: usize = 64;

/// The kernel form of the conjunction of `filters`, or `None` when no
/// part of it has one.
pub fn skipping_predicate(filters: &[Expr], schema: &Schema) -> Option<Predicate> {
    let parts: Vec<Predicate> = filters
        .iter()
        .filter_map(|filter| predicate(filter, schema, Mode::MayWiden))
        .collect();
    (!parts.is_empty()).then(|| Predicate::and_from(parts))
}

/// Whether a translation may drop parts of a conjunction. Dropping
/// widens a predicate, which is sound where it is used positively but not
/// under a NOT (NOT (a AND b) is wider than NOT a).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    MayWiden,
    Exact,
}

fn predicate(expr: &Expr, schema: &Schema, mode: Mode) -> Option<Predicate> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => {
                let left = predicate(left, schema, mode);
                let right = predicate(right, schema, mode);
                match (left, right, mode) {
                    (Some(l), Some(r), _) => Some(Predicate::and(l, r)),
                    (Some(one), None, Mode::MayWiden) | (None, Some(one), Mode::MayWiden) => {
                        Some(one)
                    }
                    _ => None,
                }
            }
            Operator::Or => Some(Predicate::or(
                predicate(left, schema, mode)?,
                predicate(right, schema, mode)?,
            )),
            _ => comparison(left, *op, right, schema),
        },
        Expr::Not(inner) => Some(Predicate::not(predicate(inner, schema, Mode::Exact)?)),
        Expr::IsNull(inner) => Some(Predicate::is_null(column(inner, schema)?.0)),
        Expr::IsNotNull(inner) => Some(Predicate::is_not_null(column(inner, schema)?.0)),
        Expr::Between(Between {
            expr,
            negated: false,
            low,
            high,
        }) => Some(Predicate::and(
            comparison(low, Operator::LtEq, expr, schema)?,
            comparison(expr, Operator::LtEq, high, schema)?,
        )),
        Expr::InList(list) if !list.negated && list.list.len() <= MAX_IN_LIST => {
            let equalities: Option<Vec<Predicate>> = list
                .list
                .iter()
                .map(|value| comparison(&list.expr, Operator::Eq, value, schema))
                .collect();
            equalities?.into_iter().reduce(Predicate::or)
        }
        _ => None,
    }
}

/// `column op literal` (either way round) with the literal of the
/// column's own type; anything else has no kernel form here.
fn comparison(left: &Expr, op: Operator, right: &Expr, schema: &Schema) -> Option<Predicate> {
    let (column, literal, op) = match (column(left, schema), column(right, schema)) {
        (Some((column, data_type)), None) => (column, literal(right, data_type)?, op),
        (None, Some((column, data_type))) => (column, literal(left, data_type)?, op.swap()?),
        _ => return None,
    };
    let literal = Expression::literal(literal);
    Some(match op {
        Operator::Eq => Predicate::eq(column, literal),
        Operator::NotEq => Predicate::ne(column, literal),
        Operator::Lt => Predicate::lt(column, literal),
        Operator::LtEq => Predicate::le(column, literal),
        Operator::Gt => Predicate::gt(column, literal),
        Operator::GtEq => Predicate::ge(column, literal),
        _ => return None,
    })
}

fn column<'a>(expr: &Expr, schema: &'a Schema) -> Option<(Expression, &'a DataType)> {
    let Expr::Column(column) = expr else {
        return None;
    };
    let field = schema.field_with_name(&column.name).ok()?;
    Some((
        Expression::column([field.name().as_str()]),
        field.data_type(),
    ))
}

/// A non-null literal of exactly `data_type` as a kernel scalar.
fn literal(expr: &Expr, data_type: &DataType) -> Option<Scalar> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    if &value.data_type() != data_type {
        return None;
    }
    Some(match value {
        ScalarValue::Boolean(Some(v)) => Scalar::Boolean(*v),
        ScalarValue::Int8(Some(v)) => Scalar::Byte(*v),
        ScalarValue::Int16(Some(v)) => Scalar::Short(*v),
        ScalarValue::Int32(Some(v)) => Scalar::Integer(*v),
        ScalarValue::Int64(Some(v)) => Scalar::Long(*v),
        ScalarValue::Float32(Some(v)) => Scalar::Float(*v),
        ScalarValue::Float64(Some(v)) => Scalar::Double(*v),
        ScalarValue::Utf8(Some(v)) | ScalarValue::LargeUtf8(Some(v)) => Scalar::String(v.clone()),
        ScalarValue::Date32(Some(v)) => Scalar::Date(*v),
        ScalarValue::TimestampMicrosecond(Some(v), zone) => match (zone, data_type) {
            (Some(_), DataType::Timestamp(TimeUnit::Microsecond, Some(_))) => Scalar::Timestamp(*v),
            (None, _) => Scalar::TimestampNtz(*v),
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::prelude::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("region", DataType::Utf8, true),
        ])
    }

    fn text(filters: &[Expr]) -> Option<String> {
        skipping_predicate(filters, &schema()).map(|p| p.to_string())
    }

    #[test]
    fn comparisons_with_literals_of_the_column_type_become_kernel_predicates() {
        let got = text(&[col("id").gt(lit(5i64)), lit("eu").eq(col("region"))]).unwrap();
        assert!(got.contains("Column(id) > 5"), "{got}");
        assert!(got.contains("Column(region) = 'eu'"), "{got}");
    }

    #[test]
    fn parts_without_a_kernel_form_are_left_out_of_a_conjunction_only() {
        let unknown = col("id").like(lit("1%"));
        let got = text(&[col("id").gt(lit(5i64)).and(unknown.clone())]).unwrap();
        assert!(got.contains("Column(id) > 5"), "{got}");
        assert!(!got.contains("LIKE"), "{got}");
        // Dropping under NOT or OR would skip files that hold matches.
        assert_eq!(text(&[col("id").gt(lit(5i64)).or(unknown.clone())]), None);
        assert_eq!(
            text(&[Expr::Not(Box::new(col("id").gt(lit(5i64)).and(unknown)))]),
            None
        );
        // A literal of another type (here Int32 against Int64) is not guessed at.
        assert_eq!(text(&[col("id").eq(lit(5i32))]), None);
    }

    #[test]
    fn in_lists_and_betweens_become_disjunctions_and_ranges() {
        let got = text(&[col("region").in_list(vec![lit("eu"), lit("us")], false)]).unwrap();
        assert!(got.contains("OR"), "{got}");
        let got = text(&[col("id").between(lit(1i64), lit(9i64))]).unwrap();
        assert!(got.contains("AND"), "{got}");
        assert_eq!(text(&[col("region").in_list(vec![lit("eu")], true)]), None);
    }
}
