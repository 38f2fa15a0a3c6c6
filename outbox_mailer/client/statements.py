"""The client's two statements, written once and rendered in each driver's placeholder style.

Each statement is SQL text whose parameters are written ``:name``; :meth:`Statement.render` puts each driver's
placeholder in their place (``$1`` for asyncpg, ``%s`` for psycopg and DB-API ``format``, ``%(name)s`` for
``pyformat``, ``:name`` for SQLAlchemy's ``text()`` and ``named``, ``?`` for ``qmark``, ``:1`` for ``numeric``),
and :meth:`Statement.arguments` gives the values in the matching shape. The text holds no other ``%``, ``?``,
``$`` or ``::`` (every cast is ``CAST(... AS ...)``), so it means the same in every style.

``enqueue``: every email of one call in one statement, as one JSON array (``jsonb_to_recordset``, with
ordinality): the first email of each dedupe key is inserted (``ON CONFLICT (dedupe_key) DO NOTHING``), and the
answer is one array of booleans in input order: true for an email that made a new row; false for a key that
existed, or that an email earlier in the same call holds.

``status``: the columns of :class:`EmailStatus`, in its field order, for one dedupe key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

__all__ = ["ENQUEUE", "STATUS", "EmailStatus", "Statement"]

PARAMSTYLES = ("numeric_dollar", "format", "pyformat", "named", "qmark", "numeric")
_PARAMETER = re.compile(r"(?<![:\w]):([a-z_]+)\b")


@dataclass(frozen=True, slots=True)
class Statement:
    name: str
    text: str  # parameters as :name, in the order `parameters` lists them

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(_PARAMETER.findall(self.text)))

    def render(self, style: str) -> str:
        """The SQL text with ``style``'s placeholders (a DB-API ``paramstyle``, or ``numeric_dollar``)."""
        if style not in PARAMSTYLES:
            raise TypeError(f"the parameter style {style!r} is not one of {', '.join(PARAMSTYLES)}")
        numbers = {name: i for i, name in enumerate(self.parameters, start=1)}

        def placeholder(match: re.Match[str]) -> str:
            name = match.group(1)
            return {"numeric_dollar": f"${numbers[name]}", "format": "%s", "pyformat": f"%({name})s",
                    "named": f":{name}", "qmark": "?", "numeric": f":{numbers[name]}"}[style]

        return _PARAMETER.sub(placeholder, self.text)

    def arguments(self, style: str, values: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """``values`` in the shape ``style`` takes them: by name for named styles, else in order."""
        if style in ("pyformat", "named"):
            return {name: values[name] for name in self.parameters}
        return tuple(values[name] for name in self.parameters)


@dataclass(frozen=True, slots=True)
class EmailStatus:
    """Where one email is (the contract columns of its row that a status reader needs)."""

    dedupe_key: str
    status: str  # pending, sending, sent, failed, cancelled, in_doubt
    attempts: int
    max_attempts: int | None  # None: the daemon's configured default
    last_error: str | None
    provider_message_id: str | None
    sent_at: datetime | None
    scheduled_at: datetime  # not before; the daemon moves it forward on a retry
    expires_at: datetime | None
    transport: str | None
    delivery_event: str | None  # delivered, delayed, bounced, complained; None while unknown
    delivery_event_at: datetime | None
    created_at: datetime
    updated_at: datetime


# The columns an application writes, with their types, in the table's order.
COLUMNS = (
    ("dedupe_key", "text"), ("from_address", "text"), ("to_addresses", "text[]"), ("cc_addresses", "text[]"),
    ("bcc_addresses", "text[]"), ("reply_to", "text"), ("subject", "text"), ("text_body", "text"),
    ("html_body", "text"), ("headers", "jsonb"), ("attachments", "jsonb"), ("metadata", "jsonb"),
    ("transport", "text"), ("priority", "smallint"), ("scheduled_at", "timestamptz"),
    ("expires_at", "timestamptz"), ("max_attempts", "integer"), ("ignore_suppressions", "boolean"),
    ("traceparent", "text"), ("template", "text"), ("template_data", "jsonb"), ("locale", "text"),
    ("unsubscribe_category", "text"),
    ("provider_template", "text"),
)
_NAMES = ", ".join(name for name, _ in COLUMNS)
_VALUES = ", ".join("coalesce(scheduled_at, now())" if name == "scheduled_at" else name for name, _ in COLUMNS)
_DEFINITIONS = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)

ENQUEUE = Statement("enqueue", f"""
WITH given AS (
    SELECT e.*, e.position = min(e.position) OVER (PARTITION BY e.dedupe_key) AS first
    FROM ROWS FROM (jsonb_to_recordset(CAST(CAST(:emails AS text) AS jsonb)) AS ({_DEFINITIONS}))
        WITH ORDINALITY AS e({_NAMES}, position)
), inserted AS (
    INSERT INTO email_deliveries ({_NAMES})
    SELECT {_VALUES} FROM given WHERE first ORDER BY position
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING dedupe_key
)
SELECT coalesce(array_agg(g.first AND i.dedupe_key IS NOT NULL ORDER BY g.position), '{{}}')
FROM given g LEFT JOIN inserted i ON i.dedupe_key = g.dedupe_key
""".strip())

STATUS = Statement("status", f"""
SELECT {", ".join(f.name for f in fields(EmailStatus))}
FROM email_deliveries
WHERE dedupe_key = CAST(:dedupe_key AS text)
""".strip())
