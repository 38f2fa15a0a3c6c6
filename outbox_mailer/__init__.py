"""outbox-mailer: a transactional email outbox for PostgreSQL.

Applications INSERT rows into ``email_deliveries`` inside their own
transaction; ``outbox-mailer run`` claims, sends, records and retries them.
"""

__version__ = "0.1.0"
