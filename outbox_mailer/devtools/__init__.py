"""Development tools: the demo, the SMTP sink and the throwaway PostgreSQL cluster."""
