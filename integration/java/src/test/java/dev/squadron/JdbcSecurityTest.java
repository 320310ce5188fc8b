package dev.squadron;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Base64;
import java.util.Properties;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import org.junit.jupiter.api.Test;

/**
 * The JDBC driver against a server with TLS and authentication: a password
 * login (Basic handshake, then the server's bearer token) and the token=
 * path with a token from an external issuer sharing an HS256 secret.
 */
class JdbcSecurityTest {
    private static String property(String name) {
        String value = System.getProperty(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException("run with -D" + name + " (integration/java/run.sh)");
        }
        return value;
    }

    private static String url() {
        return "jdbc:arrow-flight-sql://localhost:" + property("squadron.tls.port") + "/";
    }

    private static Properties tls() {
        Properties props = new Properties();
        props.put("useEncryption", "true");
        props.put("tlsRootCerts", property("squadron.tls.ca"));
        return props;
    }

    private static long count(Connection conn, String sql) throws SQLException {
        try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            assertTrue(rs.next());
            return rs.getLong(1);
        }
    }

    private static String base64Url(byte[] bytes) {
        return Base64.getUrlEncoder().withoutPadding().encodeToString(bytes);
    }

    /** An HS256 JWT as an external identity provider signs it. */
    private static String token(String subject, long expiresIn) throws Exception {
        byte[] secret = Files.readAllBytes(Path.of(property("squadron.tls.jwt-secret")));
        long now = System.currentTimeMillis() / 1000;
        String header = base64Url("{\"alg\":\"HS256\",\"typ\":\"JWT\"}".getBytes(StandardCharsets.UTF_8));
        String claims = base64Url(String.format(
                "{\"sub\":\"%s\",\"iat\":%d,\"exp\":%d}", subject, now, now + expiresIn)
                .getBytes(StandardCharsets.UTF_8));
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(secret, "HmacSHA256"));
        byte[] signature = mac.doFinal((header + "." + claims).getBytes(StandardCharsets.UTF_8));
        return header + "." + claims + "." + base64Url(signature);
    }

    @Test
    void passwordLoginOverTls() throws SQLException {
        Properties props = tls();
        props.put("user", "alice");
        props.put("password", property("squadron.tls.password"));
        try (Connection conn = DriverManager.getConnection(url(), props)) {
            // TPC-H puts 25 nations in 5 regions.
            assertEquals(25, count(conn, "SELECT count(*) FROM nation JOIN region ON n_regionkey = r_regionkey"));
        }
    }

    @Test
    void tokenFromAnExternalIssuer() throws Exception {
        Properties props = tls();
        props.put("token", token("carol", 300));
        try (Connection conn = DriverManager.getConnection(url(), props)) {
            assertEquals(5, count(conn, "SELECT count(*) FROM region"));
        }
    }

    @Test
    void rejectedCredentials() throws Exception {
        Properties wrong = tls();
        wrong.put("user", "alice");
        wrong.put("password", "not the password");
        assertThrows(SQLException.class, () -> count(DriverManager.getConnection(url(), wrong), "SELECT 1"));

        Properties expired = tls();
        expired.put("token", token("carol", -60));
        assertThrows(SQLException.class, () -> count(DriverManager.getConnection(url(), expired), "SELECT 1"));

        Properties plaintext = new Properties();
        plaintext.put("useEncryption", "false");
        plaintext.put("user", "alice");
        plaintext.put("password", property("squadron.tls.password"));
        assertThrows(SQLException.class, () -> count(DriverManager.getConnection(url(), plaintext), "SELECT 1"));

        // The server still answers.
        Properties props = tls();
        props.put("token", token("carol", 300));
        try (Connection conn = DriverManager.getConnection(url(), props)) {
            assertEquals(1, count(conn, "SELECT 1"));
        }
    }
}
