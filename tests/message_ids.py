"""Message-IDs of the form the claim writes (outbox_mailer/message/message_ids.py), for tests that
compose a row without claiming it from a database: one per dedupe key."""

from __future__ import annotations

import hashlib


def claimed_message_id(dedupe_key: str, domain: str = "example.com") -> str:
    return f"<{hashlib.sha256(dedupe_key.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}@{domain}>"
