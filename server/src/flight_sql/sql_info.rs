//! What `GetSqlInfo` reports about the server and its SQL dialect.

use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    SqlInfo, SqlSupportedCaseSensitivity, SqlSupportedTransaction, SupportedSqlGrammar,
};
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

pub fn sql_info() -> SqlInfoData {
    let mut builder = SqlInfoDataBuilder::new();
    builder.append(SqlInfo::FlightSqlServerName, "Squadron");
    builder.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    builder.append(
        SqlInfo::FlightSqlServerArrowVersion,
        datafusion::arrow::ARROW_VERSION,
    );
    // Tables can be created, written and dropped (DDL, DML, ingest).
    builder.append(SqlInfo::FlightSqlServerReadOnly, false);
    builder.append(SqlInfo::FlightSqlServerSql, true);
    builder.append(SqlInfo::FlightSqlServerSubstrait, false);
    builder.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    builder.append(SqlInfo::FlightSqlServerCancel, true);
    builder.append(SqlInfo::SqlDdlTable, true);
    builder.append(SqlInfo::SqlDdlCatalog, false);
    builder.append(SqlInfo::SqlDdlSchema, false);
    // Unquoted identifiers fold to lower case; "quoted" keep their case.
    builder.append(
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32,
    );
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    builder.append(
        SqlInfo::SqlSupportedGrammar,
        (1 << SupportedSqlGrammar::SqlMinimumGrammar as i32)
            | (1 << SupportedSqlGrammar::SqlCoreGrammar as i32),
    );
    builder.append(SqlInfo::SqlKeywords, ALL_KEYWORDS);
    builder.append(SqlInfo::SqlTransactionsSupported, false);
    builder.build().expect("static SqlInfo is valid")
}
