// Enqueue one email over JDBC inside the application's transaction, then read its status.
//
//   DATABASE_URL=postgresql://user:pass@host:5432/db \
//   java -cp /usr/share/java/postgresql.jar Enqueue.java KEY RECIPIENT [--rollback | --template NAME]
//
// With --template, the row names a stored template and gives its data instead of a subject and a body;
// a template that does not exist is refused at the INSERT (an SQLException naming it).

import java.net.URI;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;

public class Enqueue {
    static final String INSERT = """
        INSERT INTO email_deliveries (dedupe_key, to_addresses, subject, text_body)
        VALUES (?, ?, ?, ?)
        ON CONFLICT (dedupe_key) DO NOTHING""";
    static final String INSERT_TEMPLATE = """
        INSERT INTO email_deliveries (dedupe_key, to_addresses, template, template_data)
        VALUES (?, ?, ?, ?::jsonb)
        ON CONFLICT (dedupe_key) DO NOTHING""";
    static final String STATUS = "SELECT status FROM email_deliveries WHERE dedupe_key = ?";

    public static void main(String[] args) throws SQLException {
        String key = args[0], recipient = args[1];
        boolean rollback = args.length > 2 && args[2].equals("--rollback");
        String template = args.length > 3 && args[2].equals("--template") ? args[3] : null;
        try (Connection conn = connect(System.getenv("DATABASE_URL"))) {
            conn.setAutoCommit(false); // BEGIN: the application's own transaction
            try (PreparedStatement insert = conn.prepareStatement(template != null ? INSERT_TEMPLATE : INSERT)) {
                // ... the application's own writes go here, in the same transaction ...
                insert.setString(1, key);
                insert.setArray(2, conn.createArrayOf("text", new String[] {recipient}));
                if (template != null) {
                    insert.setString(3, template);
                    insert.setString(4, "{\"order\": " + quote(key) + "}"); // JSON text, cast to jsonb
                } else {
                    insert.setString(3, "Your order");
                    insert.setString(4, "Thank you for your order.");
                }
                insert.executeUpdate();
                if (rollback) {
                    conn.rollback(); // the row never existed: nothing is ever sent
                } else {
                    conn.commit();
                }
            } catch (SQLException e) {
                conn.rollback();
                throw e;
            }
            conn.setAutoCommit(true);
            try (PreparedStatement status = conn.prepareStatement(STATUS)) {
                status.setString(1, key);
                try (ResultSet rs = status.executeQuery()) {
                    String value = rs.next() ? quote(rs.getString(1)) : "null";
                    System.out.println("{\"dedupe_key\": " + quote(key) + ", \"status\": " + value + "}");
                }
            }
        }
    }

    /** A JSON string (dedupe keys never contain control characters). */
    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /** libpq-style postgresql://user:pass@host:port/db?... to a JDBC connection. */
    static Connection connect(String url) throws SQLException {
        URI uri = URI.create(url);
        Properties props = new Properties();
        if (uri.getUserInfo() != null) {
            String[] user = uri.getUserInfo().split(":", 2);
            props.setProperty("user", user[0]);
            if (user.length > 1) props.setProperty("password", user[1]);
        }
        String port = uri.getPort() == -1 ? "" : ":" + uri.getPort();
        String query = uri.getRawQuery() == null ? "" : "?" + uri.getRawQuery();
        String jdbcUrl = "jdbc:postgresql://" + uri.getHost() + port + uri.getRawPath() + query;
        return DriverManager.getConnection(jdbcUrl, props);
    }
}
