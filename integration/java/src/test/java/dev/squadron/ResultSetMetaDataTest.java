package dev.squadron;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import org.junit.jupiter.api.Test;

/**
 * {@link ResultSetMetaData} of every TPC-H column type, as the Arrow Flight
 * SQL JDBC driver builds it from the server's Flight SQL column metadata:
 * decimal precision and scale, integer digits, the table a column is read
 * from, case sensitivity. Without that metadata the driver reports a
 * DECIMAL(15,2) as precision 0, scale 0, and no table.
 */
class ResultSetMetaDataTest extends Cluster {
    private static final String[] TABLES = {
        "lineitem", "orders", "customer", "part", "partsupp", "supplier", "nation", "region"
    };


    /** Each column of `table` as TPC-H declares it, read from `table`. */
    private static void assertDescribed(ResultSetMetaData meta, String table) throws SQLException {
        assertTrue(meta.getColumnCount() > 0, table);
        for (int i = 1; i <= meta.getColumnCount(); i++) {
            String where = table + "." + meta.getColumnName(i);
            assertEquals(table, meta.getTableName(i), where);
            assertEquals("public", meta.getSchemaName(i), where);
            assertTrue(meta.isReadOnly(i), where);
            switch (meta.getColumnType(i)) {
                case Types.DECIMAL:
                    assertEquals(15, meta.getPrecision(i), where);
                    assertEquals(2, meta.getScale(i), where);
                    assertFalse(meta.isCaseSensitive(i), where);
                    break;
                case Types.BIGINT:
                    assertEquals(19, meta.getPrecision(i), where);
                    assertEquals(0, meta.getScale(i), where);
                    break;
                case Types.INTEGER:
                    assertEquals(10, meta.getPrecision(i), where);
                    break;
                case Types.VARCHAR:
                    assertTrue(meta.isCaseSensitive(i), where);
                    break;
                case Types.DATE:
                    break;
                default:
                    throw new AssertionError(where + ": a type TPC-H does not have: "
                            + meta.getColumnTypeName(i));
            }
        }
    }

    @Test
    void everyTpchColumnIsDescribedInAStatementsResult() throws SQLException {
        for (String table : TABLES) {
            try (Statement stmt = conn.createStatement();
                    ResultSet rs = stmt.executeQuery("SELECT * FROM " + table + " LIMIT 1")) {
                assertDescribed(rs.getMetaData(), table);
            }
        }
    }

    @Test
    void aPreparedStatementDescribesItsResultBeforeItRuns() throws SQLException {
        for (String table : TABLES) {
            try (PreparedStatement stmt =
                    conn.prepareStatement("SELECT * FROM " + table + " LIMIT 1")) {
                assertDescribed(stmt.getMetaData(), table);
            }
        }
    }

    /**
     * An empty result, through a PreparedStatement: its columns once, typed.
     * (Through a plain Statement the 18.3 driver reports them twice: its
     * ArrowFlightStatement adds the prepared columns to a signature that
     * holds them already, and only a stream with rows replaces them.)
     */
    @Test
    void anEmptyResultIsDescribedThroughAPreparedStatement() throws SQLException {
        for (String sql : new String[] {
            "SELECT * FROM nation LIMIT 0", "SELECT * FROM nation WHERE n_nationkey < 0"
        }) {
            try (PreparedStatement stmt = conn.prepareStatement(sql);
                    ResultSet rs = stmt.executeQuery()) {
                assertFalse(rs.next(), sql);
                assertDescribed(rs.getMetaData(), "nation");
                assertEquals(4, rs.getMetaData().getColumnCount(), sql);
            }
        }
    }

    @Test
    void computedColumnsHaveTheirTypeAndNoTable() throws SQLException {
        try (Statement stmt = conn.createStatement();
                ResultSet rs = stmt.executeQuery(
                        "SELECT l_returnflag, sum(l_extendedprice) AS revenue, count(*) AS n "
                                + "FROM lineitem GROUP BY l_returnflag")) {
            ResultSetMetaData meta = rs.getMetaData();
            assertEquals("lineitem", meta.getTableName(1));
            assertEquals(Types.DECIMAL, meta.getColumnType(2));
            // DataFusion widens a sum of DECIMAL(15,2) by ten digits.
            assertEquals(25, meta.getPrecision(2));
            assertEquals(2, meta.getScale(2));
            // The driver answers null where JDBC says "": no table either way.
            String table = meta.getTableName(2);
            assertTrue(table == null || table.isEmpty(), table);
            assertEquals(19, meta.getPrecision(3));
            int rows = 0;
            while (rs.next()) {
                rows++;
            }
            assertTrue(rows > 0);
        }
    }
}
