//! A statement's text with its constants taken out: what statements that
//! differ only in their constants have in common.

use std::ops::ControlFlow;

use datafusion::common::ScalarValue;
use datafusion::execution::session_state::SessionState;
use datafusion::sql::parser::Statement as DFStatement;
use datafusion::sql::sqlparser::ast::{visit_expressions_mut, Expr, Value};

/// A statement's shape and the constants it was written with, in order of
/// appearance. Only integer literals that fit an `i64` and single-quoted
/// strings are taken out; every other literal stays part of the shape.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementKey {
    pub shape: String,
    pub values: Vec<ScalarValue>,
}

impl StatementKey {
    /// The key of `sql`, parsed as the session parses it; `None` when it
    /// does not parse (planning reports why) or has no constant to take
    /// out.
    pub fn of(state: &SessionState, sql: &str) -> Option<Self> {
        let dialect = &state.config().options().sql_parser.dialect;
        let DFStatement::Statement(mut statement) = state.sql_to_statement(sql, dialect).ok()?
        else {
            return None;
        };
        let mut values = vec![];
        let _ = visit_expressions_mut(&mut *statement, |expr| {
            if let Expr::Value(literal) = expr {
                // Each kind gets a marker of its own: `k = 5` and
                // `k = '5'` plan differently.
                let taken = match &literal.value {
                    Value::Number(digits, false) if is_plain_integer(digits) => digits
                        .parse::<i64>()
                        .ok()
                        .map(|n| (ScalarValue::Int64(Some(n)), "int")),
                    Value::SingleQuotedString(text) => {
                        Some((ScalarValue::Utf8(Some(text.clone())), "str"))
                    }
                    _ => None,
                };
                if let Some((value, kind)) = taken {
                    literal.value = Value::Placeholder(format!("$__{kind}{}", values.len()));
                    values.push(value);
                }
            }
            ControlFlow::<()>::Continue(())
        });
        if values.is_empty() {
            return None;
        }
        Some(Self {
            shape: statement.to_string(),
            values,
        })
    }
}

/// Digits only: `1e3`, `1.5` and `0x10` are other types to DataFusion.
fn is_plain_integer(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    fn key(sql: &str) -> Option<StatementKey> {
        StatementKey::of(&SessionContext::new().state(), sql)
    }

    #[test]
    fn statements_that_differ_in_constants_share_a_shape() {
        let a = key("SELECT v FROM t WHERE k = 5 AND s = 'x'").unwrap();
        let b = key("select v from t where k = 77 and s = 'it''s'").unwrap();
        assert_eq!(a.shape, b.shape);
        assert_eq!(
            a.values,
            vec![
                ScalarValue::Int64(Some(5)),
                ScalarValue::Utf8(Some("x".into()))
            ]
        );
        assert_eq!(
            b.values,
            vec![
                ScalarValue::Int64(Some(77)),
                ScalarValue::Utf8(Some("it's".into()))
            ]
        );
    }

    #[test]
    fn constants_of_other_kinds_stay_in_the_shape() {
        let int = key("SELECT v FROM t WHERE k = 5").unwrap();
        let text = key("SELECT v FROM t WHERE k = '5'").unwrap();
        assert_ne!(int.shape, text.shape);
        // Not an i64, a float, a boolean: part of the shape, not taken out.
        for sql in [
            "SELECT v FROM t WHERE k = 99999999999999999999",
            "SELECT v FROM t WHERE k = 1.5",
            "SELECT v FROM t WHERE b = true",
        ] {
            assert_eq!(key(sql), None, "{sql}");
        }
        let mixed = key("SELECT v FROM t WHERE k = 1.5 AND j = 2").unwrap();
        assert!(mixed.shape.contains("1.5"), "{}", mixed.shape);
        assert_eq!(mixed.values, vec![ScalarValue::Int64(Some(2))]);
    }

    #[test]
    fn no_key_without_constants_or_for_what_does_not_parse() {
        assert_eq!(key("SELECT v FROM t"), None);
        assert_eq!(key("SELEC v FROM t WHERE k = 1"), None);
    }
}
