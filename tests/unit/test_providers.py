"""Provider API modules (pure): request shapes and every answer mapping, for every provider."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from outbox_mailer.delivery import (
    AttachmentFields,
    Delivery,
    MessageFields,
    OutcomeKind,
)
from outbox_mailer.providers.batches import BatchItem
from outbox_mailer.providers.postmark import PostmarkApi
from outbox_mailer.providers.provider import (
    ApiResponse,
    seconds_until_utc_midnight,
    split_address,
    string_values,
)
from outbox_mailer.providers.registry import API_PROVIDERS, PROVIDERS, TRANSPORT_KINDS
from outbox_mailer.providers.resend import ResendApi, tags
from outbox_mailer.providers.seam import parse_retry_after, resend_safe_until
from outbox_mailer.providers.sendgrid import SendGridApi
from outbox_mailer.providers.webhook import WebhookApi, signature, verify
from outbox_mailer.settings.transports import API_DEFAULT_BASE_URLS, ApiTransportSettings
from outbox_mailer.transports.api.http import provider_for
from tests.message_ids import claimed_message_id

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
FIRST = NOW - timedelta(hours=1)
KEY = "order-42"
MSGID = "<abc123@example.com>"
API_KEY = "re_SECRET_key_123"


def make_delivery(**overrides: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1, dedupe_key=KEY, claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
        from_address=None, to_addresses=("a@example.com",), cc_addresses=(), bcc_addresses=(), reply_to=None,
        subject="s", text_body="t", html_body=None, headers={}, attachments=[],
        metadata={"order_id": 42, "kind": "receipt", "bad tag": "x", "note": "has space", "none": None},
        transport=None, priority=0, scheduled_at=NOW, expires_at=None, created_at=NOW, first_attempt_at=FIRST,
    )  # fmt: skip
    fields.update(overrides)
    fields.setdefault("message_id", claimed_message_id(fields["dedupe_key"]))
    return Delivery(**fields)


FULL = MessageFields(
    from_address='"Shop, Inc." <shop@example.com>',
    to=("Zoë Müller <zoe@example.com>", "bob@example.com"),
    cc=("Carol <carol@example.com>",),
    bcc=("dave@example.com",),
    reply_to="help@example.com",
    subject="Your order 42",
    text="Thanks!",
    html="<p>Thanks!</p>",
    headers=(("X-Campaign", "spring"), ("X-Test-Key", KEY)),
    attachments=(AttachmentFields("receipt.pdf", "application/pdf", b"%PDF-1.4 bytes"),),
)
MINIMAL = MessageFields("shop@example.com", ("a@example.com",), (), (), None, "Hi", "text only", None, (), ())
PDF_B64 = base64.b64encode(b"%PDF-1.4 bytes").decode()
D = make_delivery()


def answer(status: int, body: Any = None, **headers: str) -> ApiResponse:
    raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return ApiResponse(status, {k.lower().replace("_", "-"): v for k, v in headers.items()}, raw)


# ---- shared helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("7", 7.0), (" 2.5 ", 2.5), ("0", 0.0), ("-3", 0.0), (None, None), ("", None), ("soon", None),
    ("inf", None), ("nan", None),
    (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
    (format_datetime(NOW - timedelta(seconds=90), usegmt=True), 0.0),
])  # fmt: skip
def test_retry_after_is_seconds_or_an_http_date(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_seconds_until_the_next_utc_midnight() -> None:
    assert seconds_until_utc_midnight(datetime(2026, 3, 14, 23, 59, 0, tzinfo=UTC)) == 60.0
    assert seconds_until_utc_midnight(datetime(2026, 3, 14, 0, 0, 0, tzinfo=UTC)) == 86_400.0


def test_resend_safe_until_is_ninety_percent_of_the_window_after_the_first_attempt() -> None:
    assert resend_safe_until(D, 86_400) == FIRST + timedelta(seconds=77_760)
    assert resend_safe_until(D, None) is None
    assert resend_safe_until(make_delivery(first_attempt_at=None), 86_400) is None


@pytest.mark.parametrize(("display", "expected"), [
    ("bob@example.com", (None, "bob@example.com")),
    ("Bob <bob@example.com>", ("Bob", "bob@example.com")),
    ('"Shop, Inc." <shop@example.com>', ("Shop, Inc.", "shop@example.com")),
    ('"A \\"quoted\\" name" <q@example.com>', ('A "quoted" name', "q@example.com")),
    ("Zoë Müller <zoe@example.com>", ("Zoë Müller", "zoe@example.com")),
])  # fmt: skip
def test_split_address(display: str, expected: tuple[str | None, str]) -> None:
    assert split_address(display) == expected


def test_metadata_as_strings_drops_nones_and_encodes_structures() -> None:
    assert string_values({"a": 1, "b": "x", "c": None, "d": {"k": [1, 2]}, "e": True}) == {
        "a": "1", "b": "x", "d": '{"k":[1,2]}', "e": "true"}


def test_provider_for_each_kind_and_windows() -> None:
    def settings(**kw: Any) -> ApiTransportSettings:
        return ApiTransportSettings(**kw)

    resend = provider_for(settings(kind="resend", api_key="k"))
    assert isinstance(resend, ResendApi) and resend.idempotency_window_seconds == 86_400
    assert resend.base_url == "https://api.resend.com"
    assert isinstance(provider_for(settings(kind="postmark", api_key="k")), PostmarkApi)
    assert isinstance(provider_for(settings(kind="sendgrid", api_key="k", base_url="http://x/")), SendGridApi)
    hook = provider_for(settings(kind="http", url="https://mail.internal/send", signing_secret="s"))
    assert isinstance(hook, WebhookApi) and hook.idempotency_window_seconds is None
    for kind in ("postmark", "sendgrid"):
        assert provider_for(settings(kind=kind, api_key="k")).idempotency_window_seconds is None


def test_registry_lists_every_kind_once_and_the_settings_follow_it() -> None:
    assert TRANSPORT_KINDS == ("smtp", "resend", "postmark", "sendgrid", "http")
    assert len(API_PROVIDERS) == len(PROVIDERS) and all(kind == p.kind for kind, p in API_PROVIDERS.items())
    assert API_DEFAULT_BASE_URLS == {"resend": "https://api.resend.com", "postmark": "https://api.postmarkapp.com",
                                     "sendgrid": "https://api.sendgrid.com"}
    assert ApiTransportSettings(kind="resend", api_key="k").effective_rate_per_second == 2.0
    assert ApiTransportSettings(kind="postmark", api_key="k").effective_rate_per_second is None
    with pytest.raises(ValueError, match="signing_secret applies to kind 'http' only"):
        ApiTransportSettings(kind="resend", api_key="k", signing_secret="s")
    with pytest.raises(ValueError, match="a transport of kind 'http' needs url"):
        ApiTransportSettings(kind="http")


def test_importing_the_transports_leaves_other_libraries_loggers_alone() -> None:
    code = ("import logging, outbox_mailer.transports.api.http, outbox_mailer.transports.smtp; "
            "print(logging.getLogger('httpx').level, logging.getLogger('aiosmtplib').level)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0", "0"]


# ---- Resend ------------------------------------------------------------------------------------

RESEND = ResendApi(API_KEY, "http://127.0.0.1:9/")


def test_resend_request_shape() -> None:
    request = RESEND.build(FULL, D, MSGID, KEY, NOW)
    assert (request.method, request.url) == ("POST", "http://127.0.0.1:9/emails")
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["Idempotency-Key"] == KEY
    assert request.headers["Content-Type"] == "application/json"
    assert request.json() == {
        "from": '"Shop, Inc." <shop@example.com>',
        "to": ["Zoë Müller <zoe@example.com>", "bob@example.com"],
        "cc": ["Carol <carol@example.com>"],
        "bcc": ["dave@example.com"],
        "reply_to": "help@example.com",
        "subject": "Your order 42",
        "text": "Thanks!",
        "html": "<p>Thanks!</p>",
        "headers": {"X-Campaign": "spring", "X-Test-Key": KEY},
        "attachments": [{"filename": "receipt.pdf", "content": PDF_B64, "content_type": "application/pdf"}],
        "tags": [{"name": "order_id", "value": "42"}, {"name": "kind", "value": "receipt"},
                 {"name": "dedupe_key", "value": KEY}],
    }


def test_resend_minimal_request_leaves_empty_fields_out_and_is_byte_stable() -> None:
    request = RESEND.build(MINIMAL, make_delivery(metadata={}), MSGID, KEY, NOW)
    assert request.json() == {"from": "shop@example.com", "to": ["a@example.com"], "subject": "Hi",
                              "text": "text only", "tags": [{"name": "dedupe_key", "value": KEY}]}
    later = RESEND.build(MINIMAL, make_delivery(metadata={}, attempts=5), MSGID, KEY, NOW + timedelta(hours=2))
    assert later.body == request.body  # same payload on every retry: the key replays, never conflicts


def test_resend_tags_only_take_safe_names_and_values() -> None:
    assert tags({"a": "ok-1_2", "b c": "x", "d": "x y", "e": 3, "f": None, "g": "é", "h": "x" * 257}) == [
        {"name": "a", "value": "ok-1_2"}, {"name": "e", "value": "3"}]


@pytest.mark.parametrize("key", ["has space", "é-key", "k" * 257, "a/b"])
def test_resend_leaves_out_a_dedupe_key_that_is_no_valid_tag(key: str) -> None:
    body = RESEND.build(MINIMAL, make_delivery(dedupe_key=key, metadata={"order": 7}), MSGID, key, NOW).json()
    assert body["tags"] == [{"name": "order", "value": "7"}]  # the row is then matched by email_id alone
    assert "tags" not in RESEND.build(MINIMAL, make_delivery(dedupe_key=key, metadata={}), MSGID, key, NOW).json()


def test_resend_dedupe_key_tag_is_always_the_rows_key_never_the_applications() -> None:
    body = RESEND.build(MINIMAL, make_delivery(metadata={"dedupe_key": "other"}), MSGID, KEY, NOW).json()
    assert body["tags"] == [{"name": "dedupe_key", "value": KEY}]
    longest = "k" * 256
    body = RESEND.build(MINIMAL, make_delivery(dedupe_key=longest, metadata={"dedupe_key": "x"}), MSGID, KEY,
                        NOW).json()
    assert body["tags"] == [{"name": "dedupe_key", "value": longest}]


def test_resend_batch_members_carry_their_own_dedupe_key() -> None:
    items = [BatchItem(MINIMAL, make_delivery(id=n, dedupe_key=f"order-{n}", metadata={}), MSGID) for n in (1, 2)]
    documents = RESEND.build_batch(items, "batch-key").json()
    assert [d["tags"] for d in documents] == [[{"name": "dedupe_key", "value": "order-1"}],
                                              [{"name": "dedupe_key", "value": "order-2"}]]


def test_resend_check_is_an_authenticated_get_of_domains() -> None:
    request = RESEND.check_request()
    assert (request.method, request.url, request.body) == ("GET", "http://127.0.0.1:9/domains", None)
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"


def resend(status: int, body: Any = None, **headers: str) -> Any:
    return RESEND.interpret(answer(status, body, **headers), D, NOW)


def test_resend_200_is_sent_with_the_id() -> None:
    outcome = resend(200, {"id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"})
    assert outcome.kind is OutcomeKind.SENT and outcome.provider_message_id == "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"
    assert outcome.reply_code == 200
    assert resend(200, b"not json").kind is OutcomeKind.SENT


@pytest.mark.parametrize("status", [400, 404, 422])
def test_resend_invalid_requests_are_permanent(status: int) -> None:
    outcome = resend(status, {"statusCode": status, "name": "validation_error", "message": "Invalid `to` field."})
    assert outcome.kind is OutcomeKind.PERMANENT and outcome.reply_code == status
    assert "validation_error" in outcome.error and "Invalid `to` field." in outcome.error


def test_resend_409_concurrent_is_transient_and_retried_in_a_second() -> None:
    outcome = resend(409, {"name": "concurrent_idempotent_requests", "message": "in progress"})
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 1.0
    assert outcome.charge_attempt and outcome.pause_seconds is None


def test_resend_409_invalid_idempotent_request_is_permanent() -> None:
    outcome = resend(409, {"name": "invalid_idempotent_request", "message": "different payload"})
    assert outcome.kind is OutcomeKind.PERMANENT and "invalid_idempotent_request" in outcome.error


def test_resend_429_rate_limit_honours_retry_after() -> None:
    outcome = resend(429, {"name": "rate_limit_exceeded", "message": "Too many requests"}, retry_after="3")
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 3.0
    assert outcome.pause_seconds is None and outcome.charge_attempt
    dated = resend(429, {"name": "rate_limit_exceeded"},
                   retry_after=format_datetime(NOW + timedelta(seconds=30), usegmt=True))
    assert dated.retry_after_seconds == 30.0
    assert resend(429, {"name": "rate_limit_exceeded"}).retry_after_seconds is None


def test_resend_daily_quota_pauses_until_retry_after_or_utc_midnight() -> None:
    given = resend(429, {"name": "daily_quota_exceeded", "message": "daily quota"}, retry_after="120")
    assert given.kind is OutcomeKind.TRANSIENT and given.pause_seconds == 120.0 and not given.charge_attempt
    until_midnight = resend(429, {"name": "daily_quota_exceeded", "message": "daily quota"})
    assert until_midnight.pause_seconds == seconds_until_utc_midnight(NOW)
    assert not until_midnight.charge_attempt and "paused" in until_midnight.error


def test_resend_monthly_quota_pauses_a_day_without_retry_after() -> None:
    outcome = resend(429, {"name": "monthly_quota_exceeded", "message": "monthly quota"})
    assert outcome.pause_seconds == 86_400.0 and not outcome.charge_attempt
    assert resend(429, {"name": "monthly_quota_exceeded"}, retry_after="600").pause_seconds == 600.0


@pytest.mark.parametrize("status", [401, 403])
def test_resend_refused_credentials_pause_loudly_without_revealing_the_key(status: int) -> None:
    outcome = resend(status, {"name": "invalid_api_key", "message": "API key is invalid"})
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.pause_seconds == 300 and not outcome.charge_attempt
    assert "credentials refused: check api_key" in outcome.error and API_KEY not in outcome.error
    assert outcome.reply_code == status


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_resend_5xx_is_ambiguous_and_safe_to_resend_inside_the_key_window(status: int) -> None:
    outcome = resend(status, {"name": "application_error", "message": "boom"})
    assert outcome.kind is OutcomeKind.AMBIGUOUS and outcome.reply_code == status
    assert outcome.resend_safe_until == FIRST + timedelta(seconds=0.9 * 86_400)
    unknown_start = RESEND.interpret(answer(status, b"<html>oops</html>"), make_delivery(first_attempt_at=None), NOW)
    assert unknown_start.kind is OutcomeKind.AMBIGUOUS and unknown_start.resend_safe_until is None
    assert "oops" in unknown_start.error


def test_resend_other_statuses_are_not_taken_as_sent() -> None:
    assert resend(302, b"").kind is OutcomeKind.TRANSIENT


def test_auth_pause_is_configurable() -> None:
    api = ResendApi(API_KEY, "http://x", auth_pause_seconds=2)
    assert api.interpret(answer(401, {"name": "missing_api_key"}), D, NOW).pause_seconds == 2


# ---- Postmark ----------------------------------------------------------------------------------

POSTMARK = PostmarkApi("pm-token", "http://127.0.0.1:9")


def test_postmark_request_shape() -> None:
    request = POSTMARK.build(FULL, D, MSGID, KEY, NOW)
    assert (request.method, request.url) == ("POST", "http://127.0.0.1:9/email")
    assert request.headers["X-Postmark-Server-Token"] == "pm-token"
    assert request.headers["Accept"] == request.headers["Content-Type"] == "application/json"
    assert "Idempotency-Key" not in request.headers and "Authorization" not in request.headers
    assert request.json() == {
        "From": '"Shop, Inc." <shop@example.com>',
        "To": "Zoë Müller <zoe@example.com>, bob@example.com",
        "Cc": "Carol <carol@example.com>",
        "Bcc": "dave@example.com",
        "Subject": "Your order 42",
        "TextBody": "Thanks!",
        "HtmlBody": "<p>Thanks!</p>",
        "ReplyTo": "help@example.com",
        "Headers": [{"Name": "Message-ID", "Value": MSGID}, {"Name": "X-Campaign", "Value": "spring"},
                    {"Name": "X-Test-Key", "Value": KEY}],
        "Attachments": [{"Name": "receipt.pdf", "Content": PDF_B64, "ContentType": "application/pdf"}],
        "Metadata": {"order_id": "42", "kind": "receipt", "bad tag": "x", "note": "has space", "dedupe_key": KEY},
    }


def test_postmark_minimal_request() -> None:
    body = POSTMARK.build(MINIMAL, make_delivery(metadata={}), MSGID, KEY, NOW).json()
    assert set(body) == {"From", "To", "Subject", "TextBody", "Headers", "Metadata"}
    assert body["Metadata"] == {"dedupe_key": KEY}
    assert POSTMARK.check_request().url == "http://127.0.0.1:9/server"
    assert POSTMARK.check_request().headers["X-Postmark-Server-Token"] == "pm-token"


def test_postmark_leaves_out_a_dedupe_key_over_80_characters() -> None:
    key = "k" * 81
    body = POSTMARK.build(MINIMAL, make_delivery(dedupe_key=key, metadata={"order": 7}), MSGID, key, NOW).json()
    assert body["Metadata"] == {"order": "7"}  # the row is then matched by MessageID alone
    body = POSTMARK.build(MINIMAL, make_delivery(dedupe_key="k" * 80, metadata={}), MSGID, key, NOW).json()
    assert body["Metadata"] == {"dedupe_key": "k" * 80}


def test_postmark_dedupe_key_is_the_rows_in_any_case_and_never_an_eleventh_field() -> None:
    body = POSTMARK.build(MINIMAL, make_delivery(metadata={"Dedupe_Key": "other", "a": 1}), MSGID, KEY, NOW).json()
    assert body["Metadata"] == {"a": "1", "dedupe_key": KEY}
    ten = {f"f{n}": n for n in range(10)}
    body = POSTMARK.build(MINIMAL, make_delivery(metadata=ten), MSGID, KEY, NOW).json()
    assert body["Metadata"] == {name: str(n) for name, n in ten.items()}  # Postmark refuses an eleventh
    nine = {f"f{n}": n for n in range(9)}
    body = POSTMARK.build(MINIMAL, make_delivery(metadata=nine), MSGID, KEY, NOW).json()
    assert body["Metadata"]["dedupe_key"] == KEY and len(body["Metadata"]) == 10


def test_postmark_batch_members_carry_their_own_dedupe_key() -> None:
    items = [BatchItem(MINIMAL, make_delivery(id=n, dedupe_key=f"order-{n}", metadata={}), MSGID) for n in (1, 2)]
    documents = POSTMARK.build_batch(items, "unused").json()
    assert [d["Metadata"] for d in documents] == [{"dedupe_key": "order-1"}, {"dedupe_key": "order-2"}]


def postmark(status: int, body: Any = None, **headers: str) -> Any:
    return POSTMARK.interpret(answer(status, body, **headers), D, NOW)


def test_postmark_200_is_sent_with_the_message_id() -> None:
    outcome = postmark(200, {"To": "a@example.com", "MessageID": "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
                             "ErrorCode": 0, "Message": "OK"})
    assert outcome.kind is OutcomeKind.SENT and outcome.provider_message_id == "b7bc2f4a-e38e-4336-af7d-e6c392c2f817"


@pytest.mark.parametrize(("code", "message"), [(406, "inactive recipient"), (300, "Invalid email request"),
                                               (412, "pending approval"), (None, "no code")])
def test_postmark_422_is_permanent(code: int | None, message: str) -> None:
    outcome = postmark(422, {"ErrorCode": code, "Message": message} if code else {"Message": message})
    assert outcome.kind is OutcomeKind.PERMANENT and outcome.reply_code == 422 and message in outcome.error
    if code:
        assert f"ErrorCode {code}" in outcome.error


def test_postmark_error_code_429_is_transient() -> None:
    outcome = postmark(422, {"ErrorCode": 429, "Message": "Rate limit exceeded"}, retry_after="4")
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 4.0 and outcome.charge_attempt


def test_postmark_http_429_honours_retry_after() -> None:
    outcome = postmark(429, {"ErrorCode": 429, "Message": "slow down"}, retry_after="9")
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 9.0


@pytest.mark.parametrize(("status", "code"), [(401, 10), (401, None), (403, None), (422, 10)])
def test_postmark_refused_token_pauses(status: int, code: int | None) -> None:
    outcome = postmark(status, {"ErrorCode": code, "Message": "bad token"} if code else b"")
    assert outcome.pause_seconds == 300 and not outcome.charge_attempt and outcome.kind is OutcomeKind.TRANSIENT
    assert "credentials refused: check api_key" in outcome.error and "pm-token" not in outcome.error


def test_postmark_not_allowed_to_send_pauses() -> None:
    outcome = postmark(422, {"ErrorCode": 405, "Message": "You have run out of credits."})
    assert outcome.pause_seconds == 300 and not outcome.charge_attempt


@pytest.mark.parametrize("status", [500, 503])
def test_postmark_5xx_is_ambiguous_without_a_safe_resend(status: int) -> None:
    outcome = postmark(status, b"Internal Server Error")
    assert outcome.kind is OutcomeKind.AMBIGUOUS and outcome.resend_safe_until is None


def test_postmark_other_4xx_is_permanent() -> None:
    assert postmark(400, b"bad").kind is OutcomeKind.PERMANENT


# ---- SendGrid ----------------------------------------------------------------------------------

SENDGRID = SendGridApi("SG.key", "http://127.0.0.1:9")


def test_sendgrid_request_shape() -> None:
    request = SENDGRID.build(FULL, D, MSGID, KEY, NOW)
    assert (request.method, request.url) == ("POST", "http://127.0.0.1:9/v3/mail/send")
    assert request.headers["Authorization"] == "Bearer SG.key"
    assert "Idempotency-Key" not in request.headers
    assert request.json() == {
        "personalizations": [{
            "to": [{"email": "zoe@example.com", "name": "Zoë Müller"}, {"email": "bob@example.com"}],
            "cc": [{"email": "carol@example.com", "name": "Carol"}],
            "bcc": [{"email": "dave@example.com"}],
        }],
        "from": {"email": "shop@example.com", "name": "Shop, Inc."},
        "reply_to": {"email": "help@example.com"},
        "subject": "Your order 42",
        "content": [{"type": "text/plain", "value": "Thanks!"}, {"type": "text/html", "value": "<p>Thanks!</p>"}],
        "attachments": [{"content": PDF_B64, "filename": "receipt.pdf", "type": "application/pdf",
                         "disposition": "attachment"}],
        "headers": {"X-Campaign": "spring", "X-Test-Key": KEY},
        "custom_args": {"order_id": "42", "kind": "receipt", "bad tag": "x", "note": "has space", "dedupe_key": KEY},
    }  # fmt: skip


def test_sendgrid_minimal_request_has_no_empty_lists() -> None:
    body = SENDGRID.build(MINIMAL, make_delivery(metadata={}), MSGID, KEY, NOW).json()
    assert body == {"personalizations": [{"to": [{"email": "a@example.com"}]}], "from": {"email": "shop@example.com"},
                    "subject": "Hi", "content": [{"type": "text/plain", "value": "text only"}],
                    "custom_args": {"dedupe_key": KEY}}
    html_only = MessageFields("s@example.com", ("a@example.com",), (), (), None, "Hi", None, "<b>x</b>", (), ())
    assert SENDGRID.build(html_only, D, MSGID, KEY, NOW).json()["content"] == [{"type": "text/html",
                                                                                "value": "<b>x</b>"}]
    assert SENDGRID.check_request().url == "http://127.0.0.1:9/v3/scopes"


def test_sendgrid_custom_args_carry_the_dedupe_key_over_a_metadata_key_of_that_name() -> None:
    delivery = make_delivery(dedupe_key="order-7 ü", metadata={"dedupe_key": "theirs", "n": 1})
    assert SENDGRID.build(MINIMAL, delivery, MSGID, KEY, NOW).json()["custom_args"] == {
        "n": "1", "dedupe_key": "order-7 ü"}


def test_sendgrid_leaves_out_the_dedupe_key_where_it_would_pass_the_10000_byte_limit() -> None:
    def args(metadata: dict[str, Any], key: str = "k" * 255) -> Any:
        return SENDGRID.build(MINIMAL, make_delivery(dedupe_key=key, metadata=metadata), MSGID, KEY,
                              NOW).json().get("custom_args")

    near = {"big": "x" * 9_700}  # 9,710 bytes as JSON; with the key 9,981 (10,001 with 20 more)
    assert args(near)["dedupe_key"] == "k" * 255
    over = {"big": "x" * 9_720}
    assert args(over) == over  # as before the key was added: SendGrid took it then
    assert args(over | {"dedupe_key": "another row's"}) == over  # never a key that is not the row's
    assert args({"big": "x" * 9_700}, key="é" * 255) == {"big": "x" * 9_700}  # bytes, not characters


def sendgrid(status: int, body: Any = None, **headers: str) -> Any:
    return SENDGRID.interpret(answer(status, body, **headers), D, NOW)


def test_sendgrid_202_is_sent_with_x_message_id() -> None:
    outcome = sendgrid(202, None, x_message_id="W7X8aQ9sTx2n")
    assert outcome.kind is OutcomeKind.SENT and outcome.provider_message_id == "W7X8aQ9sTx2n"
    assert sendgrid(202).provider_message_id is None


@pytest.mark.parametrize("status", [400, 413])
def test_sendgrid_bad_requests_are_permanent_with_the_message(status: int) -> None:
    outcome = sendgrid(status, {"errors": [{"message": "Does not contain a valid address.",
                                            "field": "personalizations.0.to"}]})
    assert outcome.kind is OutcomeKind.PERMANENT
    assert "personalizations.0.to: Does not contain a valid address." in outcome.error


@pytest.mark.parametrize("status", [401, 403])
def test_sendgrid_refused_key_pauses(status: int) -> None:
    outcome = sendgrid(status, {"errors": [{"message": "authorization grant is invalid"}]})
    assert outcome.pause_seconds == 300 and not outcome.charge_attempt and "SG.key" not in outcome.error


def test_sendgrid_429_uses_retry_after_or_the_rate_limit_reset() -> None:
    assert sendgrid(429, {"errors": [{"message": "too many"}]}, retry_after="5").retry_after_seconds == 5.0
    reset = str(int(NOW.timestamp()) + 42)
    outcome = sendgrid(429, {"errors": [{"message": "too many"}]}, x_ratelimit_reset=reset)
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == pytest.approx(42, abs=1)
    assert sendgrid(429, b"").retry_after_seconds is None


def test_sendgrid_5xx_is_ambiguous_without_a_safe_resend() -> None:
    outcome = sendgrid(500, b"")
    assert outcome.kind is OutcomeKind.AMBIGUOUS and outcome.resend_safe_until is None


# ---- generic HTTP (webhook) -------------------------------------------------------------------

HOOK_URL = "https://mail.internal/v1/send"


def test_webhook_request_shape_without_secrets() -> None:
    request = WebhookApi(HOOK_URL).build(FULL, D, MSGID, KEY, NOW)
    assert (request.method, request.url) == ("POST", HOOK_URL)
    assert request.headers["Idempotency-Key"] == KEY
    assert "Authorization" not in request.headers and "X-Outbox-Signature" not in request.headers
    assert request.json() == {
        "dedupe_key": KEY,
        "message_id": MSGID,
        "from": '"Shop, Inc." <shop@example.com>',
        "to": ["Zoë Müller <zoe@example.com>", "bob@example.com"],
        "cc": ["Carol <carol@example.com>"],
        "bcc": ["dave@example.com"],
        "reply_to": "help@example.com",
        "subject": "Your order 42",
        "text": "Thanks!",
        "html": "<p>Thanks!</p>",
        "headers": {"X-Campaign": "spring", "X-Test-Key": KEY},
        "attachments": [{"filename": "receipt.pdf", "content_type": "application/pdf", "content_base64": PDF_B64}],
        "metadata": D.metadata,
    }


def test_webhook_bearer_and_a_signature_the_receiver_can_recompute() -> None:
    api = WebhookApi(HOOK_URL, bearer="tok", signing_secret="whsec")
    request = api.build(FULL, D, MSGID, KEY, NOW)
    assert request.headers["Authorization"] == "Bearer tok"
    stamp = request.headers["X-Outbox-Timestamp"]
    assert stamp == str(int(NOW.timestamp()))
    assert request.body is not None
    expected = hmac.new(b"whsec", f"{stamp}.".encode() + request.body, hashlib.sha256).hexdigest()
    assert request.headers["X-Outbox-Signature"] == f"v1={expected}"
    assert signature("whsec", stamp, request.body) == f"v1={expected}"
    now = NOW.timestamp()
    assert verify("whsec", stamp, request.body, request.headers["X-Outbox-Signature"], now=now)
    assert not verify("whsec", stamp, request.body + b" ", request.headers["X-Outbox-Signature"], now=now)
    assert not verify("other", stamp, request.body, request.headers["X-Outbox-Signature"], now=now)
    assert not verify("whsec", stamp, request.body, request.headers["X-Outbox-Signature"], now=now + 3600)
    assert not verify("whsec", "nope", request.body, request.headers["X-Outbox-Signature"], now=now)
    # the body does not change with time, so the idempotency key never sees another payload
    assert api.build(FULL, D, MSGID, KEY, NOW + timedelta(minutes=5)).body == request.body


def test_webhook_check_is_a_head_request() -> None:
    request = WebhookApi(HOOK_URL, bearer="tok").check_request()
    assert (request.method, request.url, request.body) == ("HEAD", HOOK_URL, None)


HOOK = WebhookApi(HOOK_URL)


def hook(status: int, body: Any = None, **headers: str) -> Any:
    return HOOK.interpret(answer(status, body, **headers), D, NOW)


def test_webhook_2xx_is_sent() -> None:
    assert hook(200, {"id": "m-1"}).provider_message_id == "m-1"
    assert hook(201, {"id": 7}).provider_message_id == "7"
    assert hook(202, {"status": "queued"}).kind is OutcomeKind.SENT
    assert hook(204).kind is OutcomeKind.SENT and hook(204).provider_message_id is None


@pytest.mark.parametrize("status", [429, 503])
def test_webhook_429_and_503_are_transient_with_retry_after(status: int) -> None:
    outcome = hook(status, {"message": "busy"}, retry_after="6")
    assert outcome.kind is OutcomeKind.TRANSIENT and outcome.retry_after_seconds == 6.0 and "busy" in outcome.error


def test_webhook_408_is_transient() -> None:
    assert hook(408, b"").kind is OutcomeKind.TRANSIENT


@pytest.mark.parametrize("status", [401, 403])
def test_webhook_refused_token_pauses(status: int) -> None:
    outcome = hook(status, {"error": "bad signature"})
    assert outcome.pause_seconds == 300 and not outcome.charge_attempt


@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_webhook_other_4xx_is_permanent(status: int) -> None:
    assert hook(status, {"detail": "nope"}).kind is OutcomeKind.PERMANENT


@pytest.mark.parametrize("status", [500, 502, 504])
def test_webhook_other_5xx_is_ambiguous_without_a_window(status: int) -> None:
    outcome = hook(status, b"")
    assert outcome.kind is OutcomeKind.AMBIGUOUS and outcome.resend_safe_until is None
