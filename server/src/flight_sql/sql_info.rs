//! What `GetSqlInfo` reports about the server and its SQL dialect.

use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    SqlInfo, SqlSupportedCaseSensitivity, SqlSupportedTransaction, SupportedSqlGrammar,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

/// DataFusion's documentation sections, as Flight SQL's function lists.
const FUNCTION_LISTS: &[(SqlInfo, &[&str])] = &[
    (SqlInfo::SqlNumericFunctions, &["Math Functions"]),
    (
        SqlInfo::SqlStringFunctions,
        &[
            "String Functions",
            "Binary String Functions",
            "Regular Expression Functions",
        ],
    ),
    (SqlInfo::SqlDatetimeFunctions, &["Time and Date Functions"]),
    (
        SqlInfo::SqlSystemFunctions,
        &[
            "Other Functions",
            "Conditional Functions",
            "Hashing Functions",
        ],
    ),
];

/// The scalar functions of `ctx` in the documentation sections `sections`,
/// sorted.
fn functions_in(ctx: &SessionContext, sections: &[&str]) -> Vec<String> {
    let state = ctx.state();
    let mut names: Vec<String> = state
        .scalar_functions()
        .iter()
        .filter(|(_, f)| {
            f.documentation()
                .is_some_and(|doc| sections.contains(&doc.doc_section.label))
        })
        .map(|(name, _)| name.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What GetSqlInfo answers; the function lists are those of `ctx`.
pub fn sql_info(ctx: &SessionContext) -> SqlInfoData {
    let mut builder = SqlInfoDataBuilder::new();
    for (info, sections) in FUNCTION_LISTS {
        builder.append(*info, functions_in(ctx, sections));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_lists_come_from_the_registry() {
        let ctx = SessionContext::new();
        let numeric = functions_in(&ctx, FUNCTION_LISTS[0].1);
        assert!(numeric.contains(&"abs".to_string()), "{numeric:?}");
        assert!(!numeric.contains(&"upper".to_string()));
        let strings = functions_in(&ctx, FUNCTION_LISTS[1].1);
        assert!(strings.contains(&"upper".to_string()), "{strings:?}");
        let dates = functions_in(&ctx, FUNCTION_LISTS[2].1);
        assert!(dates.contains(&"date_trunc".to_string()), "{dates:?}");
    }
}
