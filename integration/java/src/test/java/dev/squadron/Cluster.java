package dev.squadron;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;

/** The running Squadron server the tests connect to (`-Dsquadron.port`). */
final class Cluster {
    private Cluster() {}

    /** A new plaintext connection to the server. */
    static Connection connect() throws SQLException {
        String port = System.getProperty("squadron.port");
        if (port == null || port.isEmpty()) {
            throw new IllegalStateException("run with -Dsquadron.port=PORT of a running server");
        }
        return DriverManager.getConnection(
                "jdbc:arrow-flight-sql://127.0.0.1:" + port + "/?useEncryption=false");
    }
}
