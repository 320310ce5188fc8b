package dev.squadron;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The running Squadron server the tests connect to (`-Dsquadron.port`): a
 * test class extending it gets one connection, `conn`, for all its tests.
 */
abstract class Cluster {
    protected static Connection conn;

    /** A new plaintext connection to the server. */
    static Connection connect() throws SQLException {
        String port = System.getProperty("squadron.port");
        if (port == null || port.isEmpty()) {
            throw new IllegalStateException("run with -Dsquadron.port=PORT of a running server");
        }
        return DriverManager.getConnection(
                "jdbc:arrow-flight-sql://127.0.0.1:" + port + "/?useEncryption=false");
    }

    @BeforeAll
    static void open() throws SQLException {
        conn = connect();
    }

    @AfterAll
    static void close() throws SQLException {
        if (conn != null) {
            conn.close();
            conn = null;
        }
    }
}
