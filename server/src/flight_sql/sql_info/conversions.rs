//! `SQL_SUPPORTS_CONVERT`: which SQL types `CAST` turns into which, read
//! from Arrow's cast kernel (what DataFusion's `CAST` runs), so the answer
//! follows the engine rather than a hand-kept table.

use std::collections::BTreeMap;

use arrow_flight::sql::SqlSupportsConvert;
use datafusion::arrow::compute::can_cast_types;
use datafusion::arrow::datatypes::{DataType, IntervalUnit, TimeUnit};

/// Each SQL type Flight SQL names, as the Arrow type DataFusion gives it.
fn sql_types() -> [(SqlSupportsConvert, DataType); 20] {
    use SqlSupportsConvert::*;
    [
        (SqlConvertBigint, DataType::Int64),
        (SqlConvertBinary, DataType::Binary),
        (SqlConvertBit, DataType::Boolean),
        (SqlConvertChar, DataType::Utf8),
        (SqlConvertDate, DataType::Date32),
        (SqlConvertDecimal, DataType::Decimal128(38, 10)),
        // JDBC's FLOAT is a double, REAL a single.
        (SqlConvertFloat, DataType::Float64),
        (SqlConvertInteger, DataType::Int32),
        (
            SqlConvertIntervalDayTime,
            DataType::Interval(IntervalUnit::DayTime),
        ),
        (
            SqlConvertIntervalYearMonth,
            DataType::Interval(IntervalUnit::YearMonth),
        ),
        (SqlConvertLongvarbinary, DataType::LargeBinary),
        (SqlConvertLongvarchar, DataType::LargeUtf8),
        (SqlConvertNumeric, DataType::Decimal128(38, 10)),
        (SqlConvertReal, DataType::Float32),
        (SqlConvertSmallint, DataType::Int16),
        (SqlConvertTime, DataType::Time64(TimeUnit::Microsecond)),
        (
            SqlConvertTimestamp,
            DataType::Timestamp(TimeUnit::Nanosecond, None),
        ),
        (SqlConvertTinyint, DataType::Int8),
        (SqlConvertVarbinary, DataType::Binary),
        (SqlConvertVarchar, DataType::Utf8),
    ]
}

/// From each SQL type, the SQL types a `CAST` reaches (itself included).
pub fn supported_conversions() -> BTreeMap<i32, Vec<i32>> {
    let types = sql_types();
    types
        .iter()
        .map(|(from, from_type)| {
            let reached = types
                .iter()
                .filter(|(_, to_type)| can_cast_types(from_type, to_type))
                .map(|(to, _)| *to as i32)
                .collect();
            (*from as i32, reached)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use SqlSupportsConvert::*;

    fn reaches(from: SqlSupportsConvert, to: SqlSupportsConvert) -> bool {
        supported_conversions()[&(from as i32)].contains(&(to as i32))
    }

    #[test]
    fn numbers_and_text_convert_both_ways() {
        assert!(reaches(SqlConvertInteger, SqlConvertVarchar));
        assert!(reaches(SqlConvertVarchar, SqlConvertDecimal));
        assert!(reaches(SqlConvertVarchar, SqlConvertTimestamp));
        assert!(reaches(SqlConvertDate, SqlConvertTimestamp));
        assert!(reaches(SqlConvertBigint, SqlConvertBigint));
    }

    #[test]
    fn conversions_the_cast_kernel_refuses_are_not_claimed() {
        assert!(!reaches(SqlConvertDate, SqlConvertBit));
        assert!(!reaches(SqlConvertIntervalYearMonth, SqlConvertDate));
        assert_eq!(supported_conversions().len(), 20);
    }
}
