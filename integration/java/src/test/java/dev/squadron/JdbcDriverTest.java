package dev.squadron;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Time;
import java.sql.Timestamp;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The Arrow Flight SQL JDBC driver against a Squadron cluster serving TPC-H
 * sample data. Expected values are either TPC-H's fixed contents (region and
 * nation names are part of the specification) or the same question asked
 * another way over the same connection (a bound parameter against a literal).
 */
class JdbcDriverTest extends Cluster {

    private static List<String> column(ResultSet rs, int index) throws SQLException {
        List<String> values = new ArrayList<>();
        while (rs.next()) {
            values.add(rs.getString(index));
        }
        return values;
    }

    private static long single(ResultSet rs) throws SQLException {
        assertTrue(rs.next(), "one row expected");
        long value = rs.getLong(1);
        assertFalse(rs.next(), "only one row expected");
        return value;
    }

    @Test
    void statementQueriesReturnRows() throws SQLException {
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery("SELECT r_name FROM region ORDER BY r_regionkey")) {
            assertEquals(List.of("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"), column(rs, 1));
        }
    }

    @Test
    void queriesThatShuffleAndJoinReturnRows() throws SQLException {
        String sql = "SELECT r_name, count(*) FROM nation JOIN region ON n_regionkey = r_regionkey "
                + "GROUP BY r_name ORDER BY r_name";
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            int regions = 0;
            while (rs.next()) {
                regions++;
                // TPC-H puts five nations in each region.
                assertEquals(5, rs.getLong(2), rs.getString(1));
            }
            assertEquals(5, regions);
        }
    }

    @Test
    void preparedStatementsBindIntStringAndDate() throws SQLException {
        try (PreparedStatement ps =
                conn.prepareStatement("SELECT n_name FROM nation WHERE n_nationkey = ?")) {
            ps.setInt(1, 7);
            try (ResultSet rs = ps.executeQuery()) {
                assertEquals(List.of("GERMANY"), column(rs, 1));
            }
            // The same handle, bound again.
            ps.setInt(1, 12);
            try (ResultSet rs = ps.executeQuery()) {
                assertEquals(List.of("JAPAN"), column(rs, 1));
            }
        }
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT count(*) FROM nation JOIN region ON n_regionkey = r_regionkey WHERE r_name = ?")) {
            ps.setString(1, "ASIA");
            try (ResultSet rs = ps.executeQuery()) {
                assertEquals(5, single(rs));
            }
        }
        long literal;
        try (Statement st = conn.createStatement();
                ResultSet rs = st.executeQuery(
                        "SELECT count(*) FROM orders WHERE o_orderdate < DATE '1995-01-01'")) {
            literal = single(rs);
        }
        assertTrue(literal > 0);
        try (PreparedStatement ps =
                conn.prepareStatement("SELECT count(*) FROM orders WHERE o_orderdate < ?")) {
            ps.setDate(1, Date.valueOf("1995-01-01"));
            try (ResultSet rs = ps.executeQuery()) {
                assertEquals(literal, single(rs));
            }
        }
    }

    /** The single value of `sql` bound by `bind`. */
    private interface Binder {
        void bind(PreparedStatement ps) throws SQLException;
    }

    private static String boundValue(String sql, Binder bind) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(sql)) {
            bind.bind(ps);
            try (ResultSet rs = ps.executeQuery()) {
                assertTrue(rs.next(), sql);
                return rs.getString(1);
            }
        }
    }

    private static String literalValue(String sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            assertTrue(rs.next(), sql);
            return rs.getString(1);
        }
    }

    @Test
    void preparedStatementsBindTimestampsTimesDecimalsAndCastPlaceholders() throws SQLException {
        // Timestamps and times: declared in milliseconds, as the driver
        // writes them (a nanosecond declaration bound 1970 dates).
        String counted = "SELECT count(*) FROM orders WHERE CAST(o_orderdate AS TIMESTAMP) < ";
        String before1995 = literalValue(counted + "TIMESTAMP '1995-01-01 00:00:00'");
        assertTrue(Long.parseLong(before1995) > 0);
        assertEquals(before1995, boundValue(counted + "?",
                ps -> ps.setTimestamp(1, Timestamp.valueOf("1995-01-01 00:00:00"))));
        assertEquals("true", boundValue(
                "SELECT ? = TIMESTAMP '2024-05-01 12:00:00.123'",
                ps -> ps.setTimestamp(1, Timestamp.valueOf("2024-05-01 12:00:00.123"))));
        assertEquals("true", boundValue("SELECT ? = TIME '12:34:56'",
                ps -> ps.setTime(1, Time.valueOf("12:34:56"))));
        // Decimals at the column's scale.
        String discount = "SELECT count(*) FROM lineitem WHERE l_discount < ";
        assertEquals(literalValue(discount + "0.03"), boundValue(discount + "?",
                ps -> ps.setBigDecimal(1, new BigDecimal("0.03"))));
        // A placeholder typed by the CAST around it (declared Null before:
        // "Can't set non-null value on NullVector").
        assertEquals("8", boundValue("SELECT CAST(? AS INT) + 1", ps -> ps.setInt(1, 7)));
        assertEquals("GERMANY", boundValue(
                "SELECT n_name FROM nation WHERE n_name = CAST(? AS VARCHAR)",
                ps -> ps.setString(1, "GERMANY")));
    }

    @Test
    void preparedStatementsBindEverySetter() throws SQLException {
        assertEquals("true", boundValue("SELECT ? = CAST(9000000000 AS BIGINT)",
                ps -> ps.setLong(1, 9_000_000_000L)));
        assertEquals("true", boundValue("SELECT ? = CAST(7 AS SMALLINT)",
                ps -> ps.setShort(1, (short) 7)));
        assertEquals("true", boundValue("SELECT ? = CAST(7 AS TINYINT)",
                ps -> ps.setByte(1, (byte) 7)));
        assertEquals("true", boundValue("SELECT ? = CAST(2.25 AS DOUBLE)",
                ps -> ps.setDouble(1, 2.25)));
        assertEquals("true", boundValue("SELECT ? = CAST(1.5 AS REAL)",
                ps -> ps.setFloat(1, 1.5f)));
        assertEquals("true", boundValue("SELECT ? = true", ps -> ps.setBoolean(1, true)));
        assertEquals("true", boundValue("SELECT ? = X'00FF'",
                ps -> ps.setBytes(1, new byte[] {0, (byte) 0xff})));
        assertEquals("true", boundValue("SELECT CAST(? AS INT) IS NULL",
                ps -> ps.setNull(1, java.sql.Types.INTEGER)));
        assertEquals("true", boundValue("SELECT ? = CAST(7 AS INT)", ps -> ps.setObject(1, 7)));
        assertEquals("true", boundValue("SELECT ? = 'naïve ☃'", ps -> ps.setString(1, "naïve ☃")));
    }

    @Test
    void updatesReportTheRowsTheyWrite() throws SQLException {
        String table = "jdbc_asia_" + System.nanoTime();
        try (Statement st = conn.createStatement()) {
            // TPC-H: five nations in region 2 (ASIA).
            assertEquals(5, st.executeUpdate("CREATE TABLE " + table
                    + " AS SELECT n_nationkey, n_name FROM nation WHERE n_regionkey = 2"));
            try (PreparedStatement ps =
                    conn.prepareStatement("INSERT INTO " + table + " VALUES (?, ?)")) {
                ps.setInt(1, 100);
                ps.setString(2, "ATLANTIS");
                ps.addBatch();
                ps.setInt(1, 101);
                ps.setString(2, "LEMURIA");
                ps.addBatch();
                int total = 0;
                for (int n : ps.executeBatch()) {
                    total += n;
                }
                assertEquals(2, total);
                ps.setInt(1, 102);
                ps.setString(2, "MU");
                assertEquals(1, ps.executeUpdate());
            }
            try (ResultSet rs = st.executeQuery("SELECT n_name FROM " + table
                    + " WHERE n_nationkey >= 100 ORDER BY n_nationkey")) {
                assertEquals(List.of("ATLANTIS", "LEMURIA", "MU"), column(rs, 1));
            }
            try (ResultSet rs = st.executeQuery("SELECT count(*) FROM " + table)) {
                assertEquals(8, single(rs));
            }
            st.executeUpdate("DROP TABLE " + table);
            assertThrows(SQLException.class, () -> st.executeQuery("SELECT * FROM " + table).close());
        }
    }

    @Test
    void badSqlIsAnSqlException() {
        SQLException e = assertThrows(SQLException.class, () -> {
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELEC nothing").close();
            }
        });
        assertTrue(e.getMessage().toLowerCase().contains("sql"), e.getMessage());
        SQLException missing = assertThrows(SQLException.class, () -> {
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT * FROM no_such_table").close();
            }
        });
        assertTrue(missing.getMessage().contains("no_such_table"), missing.getMessage());
    }

    @Test
    void databaseMetaDataDescribesTheCatalog() throws SQLException {
        DatabaseMetaData md = conn.getMetaData();
        assertEquals("Squadron", md.getDatabaseProductName());
        try (ResultSet rs = md.getCatalogs()) {
            assertTrue(column(rs, 1).contains("datafusion"));
        }
        try (ResultSet rs = md.getSchemas()) {
            assertTrue(column(rs, 1).contains("public"));
        }
        try (ResultSet rs = md.getTables(null, null, "line%", null)) {
            assertEquals(List.of("lineitem"), column(rs, 3));
        }
        try (ResultSet rs = md.getColumns(null, null, "nation", null)) {
            List<String> names = new ArrayList<>();
            List<String> types = new ArrayList<>();
            while (rs.next()) {
                names.add(rs.getString("COLUMN_NAME"));
                types.add(rs.getString("TYPE_NAME"));
            }
            assertEquals(List.of("n_nationkey", "n_name", "n_regionkey", "n_comment"), names);
            assertFalse(types.contains(null), types.toString());
        }
        try (ResultSet rs = md.getPrimaryKeys(null, null, "nation")) {
            assertFalse(rs.next(), "tables declare no keys");
        }
        // The driver (18.x) answers getTypeInfo itself, without asking the
        // server (Squadron's GetXdbcTypeInfo is tested with pyarrow); it must
        // still give a well-formed result.
        try (ResultSet rs = md.getTypeInfo()) {
            assertEquals("TYPE_NAME", rs.getMetaData().getColumnName(1));
        }
    }

    private static String show(Connection c, String key) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SHOW " + key)) {
            assertTrue(rs.next(), "one row expected");
            return rs.getString(2);
        }
    }

    @Test
    void setChangesOnlyThisConnectionsSession() throws SQLException {
        try (Connection other = connect()) {
            try (Statement st = other.createStatement()) {
                st.execute("SET datafusion.execution.batch_size = 100");
            }
            assertEquals("100", show(other, "datafusion.execution.batch_size"));
            assertEquals("8192", show(conn, "datafusion.execution.batch_size"));
            try (Statement st = other.createStatement()) {
                SQLException refused = assertThrows(SQLException.class,
                        () -> st.execute("SET datafusion.runtime.memory_limit = '1G'"));
                assertTrue(refused.getMessage().contains("server setting"), refused.getMessage());
            }
        }
    }
}
