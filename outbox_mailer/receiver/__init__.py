"""Taking delivery events in: the webhook HTTP server and the intake shared with ingest-dsn."""
