"""record_outcomes' parameters and its statement's placeholders agree: the n-th column of
OUTCOME_COLUMNS is the statement's $n, under the same name in every unnest(...) AS alias(...) list
and cast to the same element type everywhere it appears."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from outbox_mailer.decide import Transition
from outbox_mailer.delivery import Delivery, OutcomeKind, RefusedRecipient, Status
from outbox_mailer.store import AttemptRecord, OutcomeWrite
from outbox_mailer.store.outcomes import OUTCOME_COLUMNS, outcome_parameters
from outbox_mailer.store.queries import sql

UNNEST = re.compile(r"unnest\((?P<args>[^()]*)\)\s+AS\s+\w+\((?P<names>[^()]*)\)", re.IGNORECASE)
PLACEHOLDER = re.compile(r"\$(\d+)::(\w+)\[\]")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_every_unnest_list_names_each_placeholder_as_its_column_does() -> None:
    statement = sql("record_outcomes")
    lists = list(UNNEST.finditer(statement))
    assert len(lists) == 2, "the decided rows and the attempts"
    for found in lists:
        numbers = [int(n) for n, _ in PLACEHOLDER.findall(found["args"])]
        names = [n.strip() for n in found["names"].split(",")]
        assert len(numbers) == len(names)
        assert [OUTCOME_COLUMNS[n - 1].name for n in numbers] == names


def test_every_placeholder_is_a_column_cast_to_its_element_type() -> None:
    used = PLACEHOLDER.findall(sql("record_outcomes"))
    assert {int(n) for n, _ in used} == set(range(1, len(OUTCOME_COLUMNS) + 1))
    for n, element in used:
        assert OUTCOME_COLUMNS[int(n) - 1].element == element, f"${n}"
    assert not re.search(r"\$\d+(?!\d*::\w+\[\])", sql("record_outcomes")), "every placeholder is cast to an array"


def test_the_parameters_hold_one_element_per_write_in_column_order() -> None:
    delivery = Delivery(id=7, dedupe_key="k", claim_token=uuid.uuid4(), attempts=2, max_attempts=None,
                        from_address=None, to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(),
                        reply_to=None, subject="s", text_body="b", html_body=None, headers={}, attachments=[],
                        metadata={}, transport=None, priority=0, scheduled_at=NOW, expires_at=None, created_at=NOW)
    refused = (RefusedRecipient("b@example.com", 550, "5.1.1 no such user"),)
    write = OutcomeWrite(delivery, Transition(Status.SENT, sent_at=NOW, provider_message_id="q1",
                                              refused_recipients=("b@example.com",)),
                         AttemptRecord(2, NOW, NOW, OutcomeKind.SENT, 250, "2.0.0", None, "smtp", "w1",
                                       refused=refused, message_id="<m@x>", reply="250 ok q1", rescue=True))
    params = dict(zip([c.name for c in OUTCOME_COLUMNS], outcome_parameters([write, write]), strict=True))
    assert all(len(values) == 2 for values in params.values())
    assert params["delivery_id"][0] == 7 and params["claim_token"][0] == delivery.claim_token
    assert params["status"][0] == "sent" and params["outcome"][0] == "sent" and params["refund"][0] == 0
    assert params["refused_recipients"][0] == '["b@example.com"]' and params["retry_recipients"][0] is None
    assert params["worker"][0] == "rescuer w1", "a rescue is shown as the rescuer's in the attempts table"
    assert params["message_id"][0] == "<m@x>" and params["reply"][0] == "250 ok q1"
