"""Tracing (outbox_mailer/tracing, docs/tracing.md): off and unimported unless the process set a tracer provider;
the client's traceparent checked as the table checks it; the executor's spans with fakes at its ports, kept by
the SDK's in-memory exporter (the ``spans`` fixture, tests/otel_spans.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from outbox_mailer.client import Email, InvalidEmail
from outbox_mailer.daemon.executor import Executor
from outbox_mailer.delivery import Outcome
from outbox_mailer.tracing.traceparent import traceparent_problem
from tests.daemon_fakes import context, make_delivery
from tests.otel_spans import Spans, traceparent_of

pytestmark = pytest.mark.anyio

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# what a process that enqueues, sends or receives imports, and the calls that decide whether it traces
STARTS = """
import sys
import outbox_mailer.client, outbox_mailer.django.conversion, outbox_mailer.daemon.service
import outbox_mailer.receiver.server, outbox_mailer.cli
from outbox_mailer.tracing.spans import configured
from outbox_mailer.tracing.traceparent import current_traceparent
assert configured({"smtp": "smtp"}) is None
assert current_traceparent() is None
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
assert not loaded, loaded
"""
BLOCKER = """
import sys
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("extra", ["absent", "installed"])
def test_a_process_that_has_not_imported_opentelemetry_never_imports_it(extra: str) -> None:
    done = run((BLOCKER if extra == "absent" else "") + STARTS)
    assert done.returncode == 0, done.stderr


def test_a_process_that_imported_opentelemetry_without_a_tracer_provider_does_not_trace() -> None:
    done = run("import opentelemetry.trace\n" + STARTS.replace("assert not loaded, loaded", ""))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("value", [
    PARENT.upper(), "01" + PARENT[2:], PARENT + "-x", PARENT[:-1], PARENT + "\n", "",
    f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01",
])
def test_an_email_with_a_malformed_traceparent_is_refused_naming_it(value: str) -> None:
    with pytest.raises(InvalidEmail) as raised:
        Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t", traceparent=value)
    assert raised.value.field == "traceparent"
    assert raised.value.reason == traceparent_problem(value)


def test_an_emails_traceparent_is_its_rows() -> None:
    email = Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t", traceparent=PARENT)
    assert email.row["traceparent"] == PARENT
    assert Email(dedupe_key="k", to=["a@example.com"], subject="s", text="t").row["traceparent"] is None


async def test_each_attempt_is_a_producer_span_in_its_rows_trace_with_its_outcome(spans: Spans) -> None:
    b = context()
    traced, untraced = make_delivery(1, traceparent=PARENT), make_delivery(2)
    b.claim(traced, untraced)
    b.smtp.answers += [Outcome.sent("q-1"), Outcome.permanent("550 no such user", reply_code=550)]
    await Executor(b.ctx).carry(traced, name="smtp")
    await Executor(b.ctx).carry(untraced, name="smtp")
    first, second = spans.named("send smtp")
    assert first.kind.name == "PRODUCER"
    assert first.parent is not None and traceparent_of(first)[3:35] == PARENT[3:35]
    assert f"{first.parent.span_id:016x}" == PARENT[36:52], "a child of the application's span"
    assert dict(first.attributes or {}) == {
        "messaging.system": "smtp", "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.destination.name": "smtp", "outbox_mailer.dedupe_key": "k-1", "outbox_mailer.attempt": 1,
        "messaging.message.id": traced.message_id, "outbox_mailer.outcome": "sent", "outbox_mailer.cause": "sent",
        "outbox_mailer.provider_message_id": "q-1"}
    assert first.status.status_code.name == "UNSET"
    assert second.parent is None, "a row enqueued outside any trace starts its own"
    assert second.status.status_code.name == "ERROR" and second.status.description == "550 no such user"
    assert (second.attributes or {})["error.type"] == "permanent"


async def test_a_batch_request_is_one_client_span_linked_to_each_members_trace(spans: Spans) -> None:
    b = context()
    rows = [make_delivery(1, transport="api", traceparent=PARENT), make_delivery(2, transport="api"),
            make_delivery(3, transport="api", traceparent=OTHER)]
    b.claim(*rows)
    b.api.batch_answers.append([Outcome.sent("re-1"), Outcome.sent("re-2"), Outcome.transient("later")])
    await Executor(b.ctx).carry_batch(rows, "api")
    [batch] = spans.named("send api")
    assert batch.kind.name == "CLIENT" and batch.parent is None
    assert [f"00-{link.context.trace_id:032x}-{link.context.span_id:016x}-01" for link in batch.links] == [
        PARENT, OTHER]
    attributes = dict(batch.attributes or {})
    assert attributes["messaging.system"] == "resend" and attributes["messaging.batch.message_count"] == 3
    assert (attributes["outbox_mailer.outcomes.sent"], attributes["outbox_mailer.outcomes.transient"]) == (2, 1)
