"""The transport contract: one suite, run against every transport (like River's driver test suite).

Every test runs against each kind the registry knows (``outbox_mailer.providers.registry``)
and SMTP, each against its fake on loopback: SMTP (one command at a time, and pipelined)
against aiosmtpd (tests/smtp_server.py), ``resend``, ``postmark``, ``sendgrid`` and the
in-house ``http`` kind against the fake provider server (tests/provider_server.py). A
:class:`Harness` says, per transport, how its fake refuses, drops or stalls; the tests
state what the daemon relies on, whatever the protocol:

=========================  ======================================================================
case                       every transport
=========================  ======================================================================
sent                       SENT, with the far side's message id as ``provider_message_id``
permanent refusal          PERMANENT, charged
refused for now            TRANSIENT, charged; ``retry_after_seconds`` from Retry-After where the
                           protocol has one (SMTP has none: None)
nothing listening          UNREACHABLE, not charged
connection dropped after   AMBIGUOUS (the far side may have accepted it); ``resend_safe_until``
the message went out       only with a key window
idempotency key            on the wire where the far side takes one (SMTP: only with
                           ``smtp.idempotency_header``); a key window only with a key
no answer (timeout)        before the message went out: not ambiguous; after: ambiguous; both
                           within the send timeout
=========================  ======================================================================
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from email.parser import BytesHeaderParser
from typing import Any

import pytest

from outbox_mailer.delivery import Cause, ComposedMessage, Delivery, Outcome, Transport, idempotency_key
from outbox_mailer.message.compose import compose
from outbox_mailer.providers.registry import API_PROVIDERS, in_house
from outbox_mailer.settings.transports import ApiTransportSettings, SmtpSettings
from outbox_mailer.transports.api.http import HttpApiTransport
from outbox_mailer.transports.smtp import SmtpTransport
from tests.message_ids import claimed_message_id
from tests.provider_server import ProviderServer
from tests.smtp_server import SmtpTestServer, free_port, running_smtp_server

pytestmark = pytest.mark.anyio

TOKEN = "test"  # what the provider server accepts
KEY_HEADER = "X-Idempotency-Key"  # smtp.idempotency_header when a test sets one
TIMEOUT = 1.0  # each transport's send timeout in this suite
STALL = 3.0  # how long a stalled fake holds its answer: longer than TIMEOUT


def make_delivery(key: str = "contract-1") -> Delivery:
    now = datetime.now(UTC)
    return Delivery(
        id=1, dedupe_key=key, claim_token=uuid.uuid4(), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=("Zoë <zoe@example.com>",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject="hello", text_body="body", html_body=None, headers={},
        attachments=[], metadata={}, transport=None, priority=0, scheduled_at=now, expires_at=None,
        created_at=now, first_attempt_at=now, message_id=claimed_message_id(key),
    )  # fmt: skip


def message_for(delivery: Delivery) -> ComposedMessage:
    return compose(delivery, default_from=None, max_message_bytes=1 << 20,
                   now=datetime.now(UTC))


class Harness:
    """One transport and its fake: how to build it, how the fake misbehaves, what it saw."""

    has_retry_after = True  # the protocol carries Retry-After

    def __init__(self) -> None:
        self.made: list[Any] = []  # closed at the end of the test

    async def make(self, *, port: int | None = None, with_key: bool = False) -> Transport:
        """The transport aimed at the fake (or at ``port`` on 127.0.0.1); ``with_key``: configure a key header."""
        transport = self._build(port or None, with_key)
        self.made.append(transport)
        return transport

    def _build(self, port: int | None, with_key: bool) -> Transport:
        raise NotImplementedError

    def key_configurable(self) -> bool:
        """Whether sending the idempotency key is a setting (else it is the provider's rule)."""
        return False

    def expects_key(self, with_key: bool) -> bool:
        raise NotImplementedError

    def accept_with_id(self) -> None:
        """Make the fake's acceptance carry a message id (the providers always do)."""

    def refuse_permanently(self) -> None:
        raise NotImplementedError

    def refuse_for_now(self, retry_after: int) -> None:
        raise NotImplementedError

    def drop_after_body(self) -> None:
        raise NotImplementedError

    def stall_after_body(self) -> None:
        raise NotImplementedError

    async def stalled_before_body(self, stalled_port: int) -> Transport:
        """A transport whose send will get no answer before its message goes out."""
        raise NotImplementedError

    def key_on_wire(self) -> str | None:
        """The idempotency key the fake received with the last message, if any."""
        raise NotImplementedError


class SmtpHarness(Harness):
    has_retry_after = False

    def __init__(self, server: SmtpTestServer) -> None:
        super().__init__()
        self.server = server

    def _build(self, port: int | None, with_key: bool) -> Transport:
        settings = SmtpSettings(
            host="127.0.0.1", port=port or self.server.port, tls="none", helo_name="client.example.com",
            pool_size=1, connect_timeout_seconds=TIMEOUT, command_timeout_seconds=TIMEOUT,
            data_timeout_seconds=TIMEOUT, send_timeout_seconds=TIMEOUT,
            idempotency_header=KEY_HEADER if with_key else None,
        )  # fmt: skip
        return SmtpTransport(settings)

    def key_configurable(self) -> bool:
        return True

    def expects_key(self, with_key: bool) -> bool:
        return with_key

    def accept_with_id(self) -> None:
        self.server.fail("DATA", "250 2.0.0 Ok: queued as 4ABC12")

    def refuse_permanently(self) -> None:
        self.server.fail("RCPT", "550 5.1.1 no such user")

    def refuse_for_now(self, retry_after: int) -> None:
        self.server.fail("MAIL", "451 4.3.0 try again later")  # SMTP has no Retry-After

    def drop_after_body(self) -> None:
        self.server.drop("DATA")  # reads the whole message, closes without a reply

    def stall_after_body(self) -> None:
        self.server.delay("DATA", STALL)

    async def stalled_before_body(self, stalled_port: int) -> Transport:
        self.server.delay("MAIL", STALL)  # connected and greeted; MAIL gets no reply
        return await self.make()

    def key_on_wire(self) -> str | None:
        [*_, message] = self.server.messages
        value = BytesHeaderParser().parsebytes(message.data, headersonly=True).get(KEY_HEADER)
        return None if value is None else str(value)


class ApiHarness(Harness):
    def __init__(self, kind: str, server: ProviderServer) -> None:
        super().__init__()
        self.kind = kind
        self.server = server
        self.path = {"resend": "/emails", "postmark": "/email", "sendgrid": "/v3/mail/send", "http": "/hook"}[kind]

    def _build(self, port: int | None, with_key: bool) -> Transport:
        base = f"http://127.0.0.1:{port}" if port else self.server.base_url
        values: dict[str, Any] = {"kind": self.kind, "timeout_seconds": TIMEOUT}
        if in_house(self.kind):
            values["url"] = f"{base}/hook"
        else:
            values.update(api_key=TOKEN, base_url=base)
        return HttpApiTransport(ApiTransportSettings(**values), name=self.kind)

    def expects_key(self, with_key: bool) -> bool:
        return self.kind in ("resend", "http")  # Postmark and SendGrid take no idempotency key

    def _reply(self, status: int, body: Any, **headers: str) -> None:
        self.server.add_fault("reply", status=status, body=body, headers=headers, count=1)

    def refuse_permanently(self) -> None:
        body = {"resend": {"statusCode": 422, "name": "validation_error", "message": "Invalid `to` field"},
                "postmark": {"ErrorCode": 300, "Message": "Invalid email request"},
                "sendgrid": {"errors": [{"message": "Invalid to", "field": "personalizations.0.to"}]},
                "http": {"message": "invalid recipient"}}[self.kind]
        self._reply(400 if self.kind in ("sendgrid", "http") else 422, body)

    def refuse_for_now(self, retry_after: int) -> None:
        body = {"resend": {"statusCode": 429, "name": "rate_limit_exceeded", "message": "Too many requests"},
                "postmark": {"ErrorCode": 429, "Message": "Rate limit exceeded"},
                "sendgrid": {"errors": [{"message": "too many requests"}]},
                "http": {"message": "slow down"}}[self.kind]
        self._reply(429, body, **{"Retry-After": str(retry_after)})

    def drop_after_body(self) -> None:
        self.server.add_fault("accept_drop", count=1)

    def stall_after_body(self) -> None:
        self.server.add_fault("slow", delay=STALL, count=1)

    async def stalled_before_body(self, stalled_port: int) -> Transport:
        return await self.make(port=stalled_port)  # the connection is never accepted

    def key_on_wire(self) -> str | None:
        [*_, request] = self.server.sends(self.path)
        return request.headers.get("idempotency-key")


KINDS = ["smtp", "smtp-pipelining", *API_PROVIDERS]


@pytest.fixture(params=KINDS)
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    kind: str = request.param
    with ExitStack() as stack:
        h: Harness
        if kind.startswith("smtp"):
            server = stack.enter_context(running_smtp_server(pipelining=kind == "smtp-pipelining"))
            h = SmtpHarness(server)
        else:
            provider = ProviderServer(token=TOKEN).start()
            stack.callback(provider.stop)
            h = ApiHarness(kind, provider)
        try:
            yield h
        finally:
            for transport in h.made:
                await transport.aclose()


@pytest.fixture
def stalled_port() -> Iterator[int]:
    """A port that listens but never accepts: connecting to it hangs (its one-slot backlog is full)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)
    try:
        yield port
    finally:
        filler.close()
        listener.close()


async def send(transport: Transport, delivery: Delivery | None = None) -> Outcome:
    delivery = delivery or make_delivery()
    return await transport.send(message_for(delivery), delivery)


# ---- the contract ------------------------------------------------------------------------------


async def test_accepted_message_is_sent_with_the_far_sides_message_id(harness: Harness) -> None:
    harness.accept_with_id()
    outcome = await send(await harness.make())
    assert outcome.cause is Cause.SENT and outcome.charge_attempt, outcome
    assert outcome.provider_message_id, outcome
    assert outcome.error is None and outcome.refused == ()


async def test_permanent_refusal_is_permanent_and_charged(harness: Harness) -> None:
    harness.refuse_permanently()
    outcome = await send(await harness.make())
    assert outcome.cause is Cause.PERMANENT and outcome.charge_attempt, outcome
    assert outcome.reply_code is not None and outcome.error
    assert outcome.provider_message_id is None


async def test_refusal_for_now_is_transient_with_the_retry_after_the_protocol_carries(harness: Harness) -> None:
    harness.refuse_for_now(retry_after=7)
    outcome = await send(await harness.make())
    assert outcome.cause is Cause.TRANSIENT and outcome.charge_attempt, outcome
    assert outcome.pause_seconds is None
    assert outcome.retry_after_seconds == (7.0 if harness.has_retry_after else None)


async def test_nothing_listening_is_unreachable_and_not_charged(harness: Harness) -> None:
    outcome = await send(await harness.make(port=free_port()))
    assert outcome.cause is Cause.UNREACHABLE and not outcome.charge_attempt, outcome
    assert outcome.error


async def test_connection_dropped_after_the_message_went_out_is_ambiguous(harness: Harness) -> None:
    harness.drop_after_body()
    transport = await harness.make()
    outcome = await send(transport)
    assert outcome.cause is Cause.AMBIGUOUS and outcome.charge_attempt, outcome
    assert "may have accepted" in (outcome.error or "")
    assert (outcome.resend_safe_until is not None) == bool(transport.idempotency_window_seconds)


async def test_idempotency_key_is_on_the_wire_where_the_far_side_takes_one(harness: Harness) -> None:
    for with_key in (False, True) if harness.key_configurable() else (False,):
        transport = await harness.make(with_key=with_key)
        delivery = make_delivery("order-42")
        message = message_for(delivery)
        outcome = await transport.send(message, delivery)
        assert outcome.cause is Cause.SENT, outcome
        expected = idempotency_key(delivery, message) if harness.expects_key(with_key) else None
        assert harness.key_on_wire() == expected, f"with_key={with_key}"
        if expected is None:  # a key window without a key would make the daemon resend unsafely
            assert transport.idempotency_window_seconds is None


async def test_no_answer_after_the_message_went_out_is_ambiguous_within_the_send_timeout(
        harness: Harness) -> None:
    harness.stall_after_body()
    transport = await harness.make()
    started = time.monotonic()
    outcome = await send(transport)
    assert time.monotonic() - started < TIMEOUT + 0.9
    assert outcome.cause is Cause.AMBIGUOUS and outcome.charge_attempt, outcome


async def test_no_answer_before_the_message_went_out_is_not_ambiguous(harness: Harness, stalled_port: int) -> None:
    transport = await harness.stalled_before_body(stalled_port)
    started = time.monotonic()
    outcome = await send(transport)
    assert time.monotonic() - started < TIMEOUT + 0.9
    assert outcome.cause in (Cause.TRANSIENT, Cause.UNREACHABLE), outcome
    assert outcome.resend_safe_until is None
