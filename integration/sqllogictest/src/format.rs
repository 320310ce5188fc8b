//! Query results as sqllogictest text, by DataFusion's runner's rules: the
//! column type letters, `NULL`, `(empty)` strings, floats and decimals
//! rounded to 12 places, multi-line last cells split into numbered rows.
//! Both engines go through this one function, so a difference in the
//! table is a difference in the data, never in its rendering.

use std::str::FromStr;

use bigdecimal::BigDecimal;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Decimal32Type, Decimal64Type, DecimalType, Fields,
    Float16Type, Float32Type, Float64Type,
};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{ColumnType, DBOutput};

/// The column type letters of DataFusion's `.slt` files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SltType {
    Boolean,
    DateTime,
    Integer,
    Float,
    Text,
    Timestamp,
    Other,
}

impl ColumnType for SltType {
    fn from_char(value: char) -> Option<Self> {
        Some(match value {
            'B' => Self::Boolean,
            'D' => Self::DateTime,
            'I' => Self::Integer,
            'P' => Self::Timestamp,
            'R' => Self::Float,
            'T' => Self::Text,
            _ => Self::Other,
        })
    }

    fn to_char(&self) -> char {
        match self {
            Self::Boolean => 'B',
            Self::DateTime => 'D',
            Self::Integer => 'I',
            Self::Timestamp => 'P',
            Self::Float => 'R',
            Self::Text => 'T',
            Self::Other => '?',
        }
    }
}

pub type SltOutput = DBOutput<SltType>;

/// A result: no columns and no rows is a completed statement.
pub fn output(fields: &Fields, batches: &[RecordBatch]) -> Result<SltOutput, ArrowError> {
    let types: Vec<SltType> = fields.iter().map(|f| type_of(f.data_type())).collect();
    let mut rows = vec![];
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|column| cell(column, row))
                .collect::<Result<Vec<_>, _>>()?;
            rows.extend(split_lines(cells));
        }
    }
    if rows.is_empty() && types.is_empty() {
        Ok(DBOutput::StatementComplete(0))
    } else {
        Ok(DBOutput::Rows { types, rows })
    }
}

fn type_of(data_type: &DataType) -> SltType {
    use DataType::*;
    match data_type {
        Boolean => SltType::Boolean,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 => SltType::Integer,
        Float16 | Float32 | Float64 => SltType::Float,
        Decimal32(..) | Decimal64(..) | Decimal128(..) | Decimal256(..) => SltType::Float,
        Utf8 | LargeUtf8 | Utf8View => SltType::Text,
        Date32 | Date64 | Time32(_) | Time64(_) => SltType::DateTime,
        Timestamp(..) => SltType::Timestamp,
        Dictionary(key, value)
            if key.is_integer() && matches!(**value, Utf8 | LargeUtf8 | Utf8View) =>
        {
            SltType::Text
        }
        _ => SltType::Other,
    }
}

fn cell(column: &ArrayRef, row: usize) -> Result<String, ArrowError> {
    if column.is_null(row) {
        return Ok("NULL".into());
    }
    Ok(match column.data_type() {
        DataType::Null => "NULL".into(),
        DataType::Boolean => column.as_boolean().value(row).to_string(),
        DataType::Float16 => {
            let value = column.as_primitive::<Float16Type>().value(row);
            float(value.is_nan(), value.to_f64(), value.to_string())
        }
        DataType::Float32 => {
            let value = column.as_primitive::<Float32Type>().value(row);
            float(value.is_nan(), value as f64, value.to_string())
        }
        DataType::Float64 => {
            let value = column.as_primitive::<Float64Type>().value(row);
            float(value.is_nan(), value, value.to_string())
        }
        DataType::Decimal32(_, scale) => {
            decimal::<Decimal32Type>(column.as_primitive::<Decimal32Type>().value(row), *scale)
        }
        DataType::Decimal64(_, scale) => {
            decimal::<Decimal64Type>(column.as_primitive::<Decimal64Type>().value(row), *scale)
        }
        DataType::Decimal128(_, scale) => {
            decimal::<Decimal128Type>(column.as_primitive::<Decimal128Type>().value(row), *scale)
        }
        DataType::Decimal256(_, scale) => {
            decimal::<Decimal256Type>(column.as_primitive::<Decimal256Type>().value(row), *scale)
        }
        DataType::Utf8 => text(column.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => text(column.as_string::<i64>().value(row)),
        DataType::Utf8View => text(column.as_string_view().value(row)),
        DataType::Dictionary(..) => {
            let dictionary = column.as_any_dictionary();
            let key = dictionary.normalized_keys()[row];
            return cell(dictionary.values(), key);
        }
        _ => {
            // DataFusion's display settings, as its runner renders them
            let settings = datafusion::config::FormatOptions {
                null: "NULL".into(),
                ..Default::default()
            };
            let options: FormatOptions = (&settings).try_into()?;
            let text = ArrayFormatter::try_new(column.as_ref(), &options)?
                .value(row)
                .to_string();
            text
        }
    })
}

/// Floats print through their own shortest decimal form (so an `f32` is
/// not shown with `f64` noise), rounded to 12 places; NaN has no sign.
fn float(is_nan: bool, value: f64, shortest: String) -> String {
    if is_nan {
        "NaN".into()
    } else if value == f64::INFINITY {
        "Infinity".into()
    } else if value == f64::NEG_INFINITY {
        "-Infinity".into()
    } else {
        rounded(&shortest, 12)
    }
}

/// Decimals keep their scale's digits, without trailing zeros.
fn decimal<T: DecimalType>(value: T::Native, scale: i8) -> String {
    rounded(&T::format_decimal(value, u8::MAX, scale), i64::from(scale))
}

fn rounded(plain: &str, digits: i64) -> String {
    match BigDecimal::from_str(plain) {
        Ok(value) => value.round(digits).normalized().to_plain_string(),
        Err(_) => plain.to_string(),
    }
}

/// Empty strings are `(empty)`; trailing newlines go, NUL is escaped.
fn text(value: &str) -> String {
    if value.is_empty() {
        "(empty)".into()
    } else {
        value.trim_end_matches('\n').replace('\0', "\\0")
    }
}

/// A last cell of several lines (plan text) becomes one row per line,
/// numbered, with leading spaces as dashes: sqllogictest ignores runs of
/// whitespace, and plans are indented.
fn split_lines(mut cells: Vec<String>) -> Vec<Vec<String>> {
    let Some(last) = cells.last() else {
        return vec![cells];
    };
    if !last.contains('\n') {
        return vec![cells];
    }
    let last = cells.pop().unwrap_or_default();
    let mut rows = vec![cells];
    for (n, line) in last.split('\n').enumerate() {
        let content = line.trim_start();
        let indent = "-".repeat(line.len() - content.len());
        rows.push(vec![format!("{:02}){indent}{content}", n + 1)]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_like_datafusions_runner() {
        assert_eq!(float(false, 0.1 + 0.2, (0.1f64 + 0.2).to_string()), "0.3");
        assert_eq!(
            float(false, 1e20, 1e20f64.to_string()),
            "100000000000000000000"
        );
        assert_eq!(float(false, 0.1f32 as f64, 0.1f32.to_string()), "0.1");
        assert_eq!(float(true, f64::NAN, String::new()), "NaN");
        assert_eq!(float(false, f64::NEG_INFINITY, String::new()), "-Infinity");
        assert_eq!(decimal::<Decimal128Type>(12_300, 3), "12.3");
        assert_eq!(decimal::<Decimal128Type>(-5, 0), "-5");
    }

    #[test]
    fn strings_and_plans() {
        assert_eq!(text(""), "(empty)");
        assert_eq!(text("a\0b\n"), "a\\0b");
        let rows = split_lines(vec!["plan".into(), "Sort\n  Scan".into()]);
        assert_eq!(
            rows,
            vec![
                vec!["plan".to_string()],
                vec!["01)Sort".into()],
                vec!["02)--Scan".into()]
            ]
        );
    }
}
