//! What `GetSqlInfo` reports about the server and its SQL dialect.

use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    SqlInfo, SqlNullOrdering, SqlOuterJoinsSupportLevel, SqlSupportedCaseSensitivity,
    SqlSupportedGroupBy, SqlSupportedResultSetConcurrency, SqlSupportedResultSetType,
    SqlSupportedSubqueries, SqlSupportedTransaction, SqlSupportedUnions,
    SqlTransactionIsolationLevel, SupportedSqlGrammar,
};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::keywords::ALL_KEYWORDS;

use super::prepared::DEFAULT_TTL as PREPARED_IDLE_TTL;
use conversions::supported_conversions;

mod conversions;

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

/// What GetSqlInfo answers: every item the Flight SQL spec defines except
/// the Substrait versions (no Substrait plans run, and the spec answers
/// those with null); the function lists are those of `ctx`. Drivers turn a
/// missing item into an error (the JDBC driver 18.3 throws
/// NullPointerException from `DatabaseMetaData`), so none is left out.
pub fn sql_info(ctx: &SessionContext) -> SqlInfoData {
    let mut builder = SqlInfoDataBuilder::new();
    for (info, sections) in FUNCTION_LISTS {
        builder.append(*info, functions_in(ctx, sections));
    }
    server(&mut builder);
    identifiers(&mut builder);
    grammar(&mut builder);
    limits(&mut builder);
    transactions(&mut builder);
    result_sets(&mut builder);
    builder.build().expect("static SqlInfo is valid")
}

/// `SupportedAnsi92SqlGrammarLevel::Ansi92EntrySql`, an enum arrow-flight
/// does not export.
const ANSI92_ENTRY_SQL: i32 = 0;

/// A bitmask of the given option numbers, as Flight SQL encodes sets.
fn bits(options: &[i32]) -> i32 {
    options.iter().fold(0, |mask, option| mask | (1 << option))
}

/// The server and what its Flight SQL endpoints do.
fn server(builder: &mut SqlInfoDataBuilder) {
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
    builder.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    builder.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    // A prepared statement idle this long is dropped; each use restarts it.
    let idle = i32::try_from(PREPARED_IDLE_TTL.as_millis()).unwrap_or(i32::MAX);
    builder.append(SqlInfo::FlightSqlServerStatementTimeout, idle);
    builder.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
}

/// Names: how identifiers fold, quote and qualify, and what DDL makes.
fn identifiers(builder: &mut SqlInfoDataBuilder) {
    builder.append(SqlInfo::SqlDdlTable, true);
    builder.append(SqlInfo::SqlDdlSchema, true);
    // CREATE DATABASE makes a catalog, but nothing drops one.
    builder.append(SqlInfo::SqlDdlCatalog, false);
    // Unquoted identifiers fold to lower case; "quoted" keep their case
    // and are compared as written, which the spec's enum has no name for:
    // ODBC drivers read its UNKNOWN as SQL_IC_SENSITIVE.
    builder.append(
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32,
    );
    builder.append(
        SqlInfo::SqlQuotedIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityUnknown as i32,
    );
    builder.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    // Besides letters, digits and `_` (sqlparser's generic dialect).
    builder.append(SqlInfo::SqlExtraNameCharacters, "@$#");
    // The metadata commands match their patterns with Arrow's LIKE, whose
    // escape character is the backslash.
    builder.append(SqlInfo::SqlSearchStringEscape, "\\");
    builder.append(SqlInfo::SqlSchemaTerm, "schema");
    builder.append(SqlInfo::SqlProcedureTerm, "procedure");
    builder.append(SqlInfo::SqlCatalogTerm, "catalog");
    builder.append(SqlInfo::SqlCatalogAtStart, true);
    // No procedures, indexes or privileges to name a schema or catalog in.
    builder.append(SqlInfo::SqlSchemasSupportedActions, 0i32);
    builder.append(SqlInfo::SqlCatalogsSupportedActions, 0i32);
    // Every table can be read by every user (no privileges yet).
    builder.append(SqlInfo::SqlAllTablesAreSelectable, true);
}

/// The SQL DataFusion parses and plans.
fn grammar(builder: &mut SqlInfoDataBuilder) {
    builder.append(SqlInfo::SqlKeywords, ALL_KEYWORDS);
    builder.append(
        SqlInfo::SqlSupportedGrammar,
        bits(&[
            SupportedSqlGrammar::SqlMinimumGrammar as i32,
            SupportedSqlGrammar::SqlCoreGrammar as i32,
        ]),
    );
    builder.append(SqlInfo::SqlAnsi92SupportedLevel, bits(&[ANSI92_ENTRY_SQL]));
    builder.append(
        SqlInfo::SqlSupportedGroupBy,
        bits(&[
            SqlSupportedGroupBy::SqlGroupByUnrelated as i32,
            SqlSupportedGroupBy::SqlGroupByBeyondSelect as i32,
        ]),
    );
    // The spec calls this an ordinal; the JDBC driver and the Java
    // server library read and write it as a set, as here.
    builder.append(
        SqlInfo::SqlOuterJoinsSupportLevel,
        bits(&[
            SqlOuterJoinsSupportLevel::SqlLimitedOuterJoins as i32,
            SqlOuterJoinsSupportLevel::SqlFullOuterJoins as i32,
        ]),
    );
    builder.append(
        SqlInfo::SqlSupportedSubqueries,
        bits(&[
            SqlSupportedSubqueries::SqlSubqueriesInComparisons as i32,
            SqlSupportedSubqueries::SqlSubqueriesInExists as i32,
            SqlSupportedSubqueries::SqlSubqueriesInIns as i32,
        ]),
    );
    builder.append(SqlInfo::SqlCorrelatedSubqueriesSupported, true);
    builder.append(
        SqlInfo::SqlSupportedUnions,
        bits(&[
            SqlSupportedUnions::SqlUnion as i32,
            SqlSupportedUnions::SqlUnionAll as i32,
        ]),
    );
    builder.append(SqlInfo::SqlSupportsColumnAliasing, true);
    // `NULL || 'a'` is NULL.
    builder.append(SqlInfo::SqlNullPlusNullIsNull, true);
    builder.append(SqlInfo::SqlSupportsConvert, supported_conversions());
    builder.append(SqlInfo::SqlSupportsTableCorrelationNames, true);
    // `FROM t AS t` is allowed: aliases need not differ from table names.
    builder.append(SqlInfo::SqlSupportsDifferentTableCorrelationNames, false);
    builder.append(SqlInfo::SqlSupportsExpressionsInOrderBy, true);
    builder.append(SqlInfo::SqlSupportsOrderByUnrelated, true);
    builder.append(SqlInfo::SqlSupportsLikeEscapeClause, true);
    builder.append(SqlInfo::SqlSupportsNonNullableColumns, true);
    // Declared keys are not enforced.
    builder.append(SqlInfo::SqlSupportsIntegrityEnhancementFacility, false);
    // Ascending puts NULLs last, descending first: NULL sorts as the
    // largest value (`datafusion.sql_parser.default_null_ordering`).
    builder.append(
        SqlInfo::SqlNullOrdering,
        SqlNullOrdering::SqlNullsSortedHigh as i32,
    );
    builder.append(SqlInfo::SqlSupportedPositionedCommands, 0i32);
    builder.append(SqlInfo::SqlSelectForUpdateSupported, false);
    builder.append(SqlInfo::SqlStoredProceduresSupported, false);
    builder.append(SqlInfo::SqlStoredFunctionsUsingCallSyntaxSupported, false);
    builder.append(SqlInfo::SqlNamedParametersSupported, false);
    builder.append(SqlInfo::SqlLocatorsUpdateCopy, false);
}

/// Maximum lengths and counts: 0 is "no limit" in the spec, and Squadron
/// sets none on names, literals, statements or rows. (Open handles are
/// bounded per server, not per connection: docs/configuration.md.)
fn limits(builder: &mut SqlInfoDataBuilder) {
    for info in [
        SqlInfo::SqlMaxBinaryLiteralLength,
        SqlInfo::SqlMaxCharLiteralLength,
        SqlInfo::SqlMaxColumnNameLength,
        SqlInfo::SqlMaxColumnsInGroupBy,
        SqlInfo::SqlMaxColumnsInIndex,
        SqlInfo::SqlMaxColumnsInOrderBy,
        SqlInfo::SqlMaxColumnsInSelect,
        SqlInfo::SqlMaxColumnsInTable,
        SqlInfo::SqlMaxConnections,
        SqlInfo::SqlMaxCursorNameLength,
        SqlInfo::SqlMaxIndexLength,
        SqlInfo::SqlDbSchemaNameLength,
        SqlInfo::SqlMaxProcedureNameLength,
        SqlInfo::SqlMaxCatalogNameLength,
        SqlInfo::SqlMaxRowSize,
        SqlInfo::SqlMaxStatementLength,
        SqlInfo::SqlMaxStatements,
        SqlInfo::SqlMaxTableNameLength,
        SqlInfo::SqlMaxTablesInSelect,
        SqlInfo::SqlMaxUsernameLength,
    ] {
        builder.append(info, 0i64);
    }
    builder.append(SqlInfo::SqlMaxRowSizeIncludesBlobs, true);
}

/// No transactions: each statement commits on its own.
fn transactions(builder: &mut SqlInfoDataBuilder) {
    builder.append(SqlInfo::SqlTransactionsSupported, false);
    // An int64, as the JDBC driver reads it (the spec says int32).
    builder.append(
        SqlInfo::SqlDefaultTransactionIsolation,
        SqlTransactionIsolationLevel::SqlTransactionNone as i64,
    );
    builder.append(
        SqlInfo::SqlSupportedTransactionsIsolationLevels,
        bits(&[SqlTransactionIsolationLevel::SqlTransactionNone as i32]),
    );
    builder.append(SqlInfo::SqlDataDefinitionCausesTransactionCommit, false);
    builder.append(SqlInfo::SqlDataDefinitionsInTransactionsIgnored, false);
    // A prepared update runs once per bound parameter row.
    builder.append(SqlInfo::SqlBatchUpdatesSupported, true);
    builder.append(SqlInfo::SqlSavepointsSupported, false);
}

/// Results stream forward once, read-only.
fn result_sets(builder: &mut SqlInfoDataBuilder) {
    builder.append(
        SqlInfo::SqlSupportedResultSetTypes,
        bits(&[SqlSupportedResultSetType::SqlResultSetTypeForwardOnly as i32]),
    );
    let read_only =
        bits(&[SqlSupportedResultSetConcurrency::SqlResultSetConcurrencyReadOnly as i32]);
    builder.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetUnspecified,
        read_only,
    );
    builder.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetForwardOnly,
        read_only,
    );
    builder.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetScrollSensitive,
        0i32,
    );
    builder.append(
        SqlInfo::SqlSupportedConcurrenciesForResultSetScrollInsensitive,
        0i32,
    );
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

    /// Every item the spec defines is answered, but the Substrait
    /// versions (null in the spec without Substrait).
    #[test]
    fn every_item_of_the_spec_is_answered() {
        let data = sql_info(&SessionContext::new());
        let substrait_versions = [
            SqlInfo::FlightSqlServerSubstraitMinVersion as u32,
            SqlInfo::FlightSqlServerSubstraitMaxVersion as u32,
        ];
        let defined: Vec<u32> = (0..1000u32)
            .filter(|id| SqlInfo::try_from(*id as i32).is_ok())
            .filter(|id| !substrait_versions.contains(id))
            .collect();
        assert!(defined.len() > 80, "{defined:?}");
        for id in defined {
            let rows = data.record_batch([id]).unwrap().num_rows();
            assert_eq!(rows, 1, "SqlInfo {:?}", SqlInfo::try_from(id as i32));
        }
    }

    #[test]
    fn sets_are_bitmasks_of_option_numbers() {
        assert_eq!(bits(&[]), 0);
        assert_eq!(
            bits(&[
                SqlOuterJoinsSupportLevel::SqlLimitedOuterJoins as i32,
                SqlOuterJoinsSupportLevel::SqlFullOuterJoins as i32,
            ]),
            0b110
        );
    }
}
