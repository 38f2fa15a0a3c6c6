"""Provider batch sends (pure): the setting, the batch key, request shapes, limits, and every answer mapping."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

from outbox_mailer.delivery import (
    AttachmentFields,
    BatchOutcome,
    Cause,
    Delivery,
    MessageFields,
    Outcome,
    OutcomeKind,
    ProviderTemplate,
    SendSingly,
)
from outbox_mailer.errors import ConfigurationError
from outbox_mailer.message.compose import compose
from outbox_mailer.providers.batches import BatchItem, batch_provider
from outbox_mailer.providers.postmark import PostmarkApi
from outbox_mailer.providers.provider import ApiResponse, ProviderOptions
from outbox_mailer.providers.registry import API_PROVIDERS, BATCH_KINDS, has_batch_endpoint
from outbox_mailer.providers.resend import ResendApi
from outbox_mailer.providers.seam import batch_idempotency_key, resend_safe_until
from outbox_mailer.settings.config import load_settings
from tests.message_ids import claimed_message_id

NOW = datetime(2026, 3, 14, 15, 9, 26, tzinfo=UTC)
FIRST = NOW - timedelta(hours=1)
BATCH_KEY = "batch-" + "0" * 64
RESEND = ResendApi("re_key", "https://api.resend.test")
POSTMARK = PostmarkApi("pm-token", "https://api.postmark.test")


def make_delivery(key: str = "k-0", **overrides: Any) -> Delivery:
    fields: dict[str, Any] = dict(
        id=1, dedupe_key=key, claim_token=uuid.UUID(int=1), attempts=1, max_attempts=None,
        from_address="Shop <shop@example.com>", to_addresses=(f"{key}@example.com",), cc_addresses=(),
        bcc_addresses=(), reply_to=None, subject=f"about {key}", text_body="hello", html_body="<p>hello</p>",
        headers={"X-Test-Key": key}, attachments=[], metadata={"order": key}, transport=None, priority=0,
        scheduled_at=NOW, expires_at=None, created_at=NOW, first_attempt_at=FIRST,
    )  # fmt: skip
    fields.update(overrides)
    fields.setdefault("message_id", claimed_message_id(fields["dedupe_key"]))
    return Delivery(**fields)


def make_fields(to: str = "a@example.com", *, text: str = "hi", attachments: tuple[AttachmentFields, ...] = ()
                ) -> MessageFields:
    return MessageFields("Shop <shop@example.com>", (to,), (), (), None, "Hi", text, None,
                         (("X-Test-Key", to),), attachments)


def items(count: int, **kw: Any) -> list[BatchItem]:
    return [BatchItem(make_fields(f"m{i}@example.com", **kw), make_delivery(f"k-{i}"), f"<id{i}@example.com>")
            for i in range(count)]


def deliveries(count: int) -> list[Delivery]:
    return [make_delivery(f"k-{i}", first_attempt_at=FIRST - timedelta(minutes=i)) for i in range(count)]


def answer(status: int, body: Any = None, **headers: str) -> ApiResponse:
    raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return ApiResponse(status, {k.lower().replace("_", "-"): v for k, v in headers.items()}, raw)


def causes(outcomes: list[BatchOutcome]) -> list[Cause | type[SendSingly]]:
    return [SendSingly if isinstance(o, SendSingly) else o.cause for o in outcomes]


PDF = AttachmentFields("receipt.pdf", "application/pdf", b"%PDF-1.4")


# ---- the setting: OUTBOX_MAILER_TRANSPORTS__<NAME>__BATCH ------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith("OUTBOX_MAILER_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env
    return monkeypatch


def transport_env(env: pytest.MonkeyPatch, kind: str, **values: str) -> None:
    env.setenv("OUTBOX_MAILER_TRANSPORTS__X__KIND", kind)
    if kind == "http":
        env.setenv("OUTBOX_MAILER_TRANSPORTS__X__URL", "https://crm.example.com/mail")
    else:
        env.setenv("OUTBOX_MAILER_TRANSPORTS__X__API_KEY", "key")
    for name, value in values.items():
        env.setenv(f"OUTBOX_MAILER_TRANSPORTS__X__{name.upper()}", value)


@pytest.mark.parametrize(("kind", "expected"), [("resend", True), ("postmark", True), ("sendgrid", False),
                                                ("http", False)])
def test_batch_is_on_by_default_exactly_where_the_provider_has_a_batch_endpoint(
        clean_env: pytest.MonkeyPatch, kind: str, expected: bool) -> None:
    transport_env(clean_env, kind)
    assert load_settings().transports["x"].batch is expected  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["resend", "postmark"])
def test_batch_false_turns_batching_off(clean_env: pytest.MonkeyPatch, kind: str) -> None:
    transport_env(clean_env, kind, batch="false")
    assert load_settings().transports["x"].batch is False  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["sendgrid", "http"])
def test_batch_true_for_a_kind_without_a_batch_endpoint_is_refused_naming_the_setting(
        clean_env: pytest.MonkeyPatch, kind: str) -> None:
    transport_env(clean_env, kind, batch="true")
    with pytest.raises(ConfigurationError) as info:
        load_settings()
    assert "OUTBOX_MAILER_TRANSPORTS__X__BATCH" in str(info.value)
    assert f"kind {kind!r} has no batch endpoint" in str(info.value) and "'resend' and 'postmark'" in str(info.value)


@pytest.mark.parametrize("kind", ["sendgrid", "http"])
def test_batch_false_for_a_kind_without_a_batch_endpoint_is_accepted(clean_env: pytest.MonkeyPatch,
                                                                     kind: str) -> None:
    transport_env(clean_env, kind, batch="false")
    assert load_settings().transports["x"].batch is False  # type: ignore[union-attr]


def test_the_registry_knows_which_kinds_batch() -> None:
    assert BATCH_KINDS == ("resend", "postmark")
    assert [kind for kind in API_PROVIDERS if has_batch_endpoint(kind)] == ["resend", "postmark"]
    assert not has_batch_endpoint("smtp") and not has_batch_endpoint("carrier-pigeon")
    for kind, provider in API_PROVIDERS.items():
        made = provider.from_options(ProviderOptions("key", "https://api.example.test"))
        assert (batch_provider(made) is not None) is (kind in BATCH_KINDS)
    assert (ResendApi.batch_limit, PostmarkApi.batch_limit) == (100, 500)


# ---- the batch key ----------------------------------------------------------------------------------


def test_the_batch_key_is_the_same_for_the_same_members_and_differs_with_their_order() -> None:
    keys = ["order-1", "order-2", "order-3"]
    assert batch_idempotency_key(keys) == batch_idempotency_key(list(keys))
    assert batch_idempotency_key(keys) != batch_idempotency_key(list(reversed(keys)))
    assert batch_idempotency_key(keys) != batch_idempotency_key(keys[:2])


def test_the_batch_key_keeps_apart_member_lists_that_concatenate_alike() -> None:
    assert batch_idempotency_key(["ab", "c"]) != batch_idempotency_key(["a", "bc"])
    assert batch_idempotency_key(["a"]) != batch_idempotency_key(["a", ""])


def test_the_batch_key_is_the_documented_digest() -> None:
    keys = ["order-1", "zoë"]
    digest = hashlib.sha256()
    for key in keys:
        digest.update(len(key.encode()).to_bytes(4, "big") + key.encode())
    assert batch_idempotency_key(keys) == "batch-" + digest.hexdigest()


def test_the_batch_key_is_short_printable_ascii_whatever_the_members() -> None:
    key = batch_idempotency_key(["ü\u00a0" * 127 + "x"] * 100 + ["line\nbreak"])
    assert len(key) == 70 <= 256 and key.isascii() and key.isprintable() and key.startswith("batch-")


def test_a_batch_without_members_has_no_key() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        batch_idempotency_key([])


# ---- Resend: the request --------------------------------------------------------------------------


def test_resend_batch_is_one_post_with_the_batch_key_and_permissive_validation() -> None:
    members = items(3)
    request = RESEND.build_batch(members, BATCH_KEY)
    assert (request.method, request.url) == ("POST", "https://api.resend.test/emails/batch")
    assert request.headers["Idempotency-Key"] == BATCH_KEY and request.headers["x-batch-validation"] == "permissive"
    assert request.headers["Authorization"] == "Bearer re_key"
    singles = [RESEND.build(i.fields, i.delivery, i.message_id, "row-key", NOW).json() for i in members]
    assert request.json() == singles  # each member exactly as a single send would carry it, in order


def test_resend_batch_body_is_the_same_bytes_on_every_attempt() -> None:
    rows = [make_delivery(f"k-{i}") for i in range(3)]

    def body(now: datetime) -> bytes:
        provider = ResendApi("re_key", "https://api.resend.test")  # another process, another day
        messages = [compose(d, default_from=None, max_message_bytes=1 << 20, now=now)
                    for d in rows]
        batch = [BatchItem(m.fields, d, m.message_id) for m, d in zip(messages, rows, strict=True)]  # type: ignore[arg-type]
        return provider.build_batch(batch, batch_idempotency_key([d.dedupe_key for d in rows])).body or b""

    first = body(NOW)
    assert first == body(NOW + timedelta(hours=5)) and b"2026" not in first


@pytest.mark.parametrize("count", [0, 101])
def test_resend_batch_size_is_one_to_a_hundred(count: int) -> None:
    with pytest.raises(ValueError, match="Resend batch"):
        RESEND.build_batch(items(count), BATCH_KEY)
    assert len(RESEND.build_batch(items(100), BATCH_KEY).json()) == 100


def test_resend_sends_attachments_singly() -> None:
    assert RESEND.batchable(make_fields(), make_delivery())
    assert not RESEND.batchable(make_fields(attachments=(PDF,)), make_delivery())
    with pytest.raises(ValueError, match="no attachments in a batch"):
        RESEND.build_batch([*items(2), BatchItem(make_fields(attachments=(PDF,)), make_delivery(), "<a@b>")],
                           BATCH_KEY)


def test_a_postmark_batch_of_provider_template_rows_goes_to_batch_with_templates_and_a_mixed_one_is_refused() -> None:
    templated = BatchItem(make_fields(), make_delivery("t", provider_template=ProviderTemplate("welcome", {"n": 1})),
                          "<t@b>")
    request = POSTMARK.build_batch([templated, templated], BATCH_KEY)
    assert request.url == "https://api.postmark.test/email/batchWithTemplates"
    assert [m["TemplateAlias"] for m in request.json()["Messages"]] == ["welcome", "welcome"]
    with pytest.raises(ValueError, match="never both"):
        POSTMARK.build_batch([templated, BatchItem(make_fields(), make_delivery(), "<p@b>")], BATCH_KEY)


# ---- Resend: the answer ---------------------------------------------------------------------------


def test_resend_batch_accepted_gives_each_member_its_own_id_in_order() -> None:
    outcomes = RESEND.interpret_batch(answer(200, {"data": [{"id": "e-0"}, {"id": "e-1"}, {"id": "e-2"}]}),
                                      deliveries(3), NOW)
    assert [(o.cause, o.provider_message_id, o.reply_code) for o in outcomes] == [  # type: ignore[union-attr]
        (Cause.SENT, "e-0", 200), (Cause.SENT, "e-1", 200), (Cause.SENT, "e-2", 200)]


def test_resend_permissive_item_errors_fail_only_their_members_and_the_ids_skip_them() -> None:
    body = {"data": [{"id": "e-0"}, {"id": "e-2"}, {"id": "e-4"}],
            "errors": [{"index": 1, "message": "The `to` field is missing."}, {"index": 3, "message": "Invalid"}]}
    outcomes = RESEND.interpret_batch(answer(200, body), deliveries(5), NOW)
    assert causes(outcomes) == [Cause.SENT, Cause.PERMANENT, Cause.SENT, Cause.PERMANENT, Cause.SENT]
    assert [o.provider_message_id for o in outcomes] == ["e-0", None, "e-2", None, "e-4"]  # type: ignore[union-attr]
    assert "batch item 1: The `to` field is missing." in outcomes[1].error  # type: ignore[union-attr,operator]
    assert outcomes[1].charge_attempt  # type: ignore[union-attr]


@pytest.mark.parametrize("body", [
    {"data": [{"id": "e-0"}]},  # fewer ids than members
    {"data": [{"id": "e-0"}, {"id": "e-1"}], "errors": [{"index": 1, "message": "x"}]},  # ids and errors overlap
    {"data": [{"id": "e-0"}], "errors": [{"index": 7, "message": "x"}]},  # an error naming no member
    {"id": "e-0"}, None,
])  # fmt: skip
def test_resend_batch_answer_that_does_not_match_the_members_is_ambiguous_for_each(body: Any) -> None:
    members = deliveries(2)
    outcomes = RESEND.interpret_batch(answer(200, body), members, NOW)
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 2
    assert [o.resend_safe_until for o in outcomes] == [  # type: ignore[union-attr]
        resend_safe_until(d, RESEND.idempotency_window_seconds) for d in members]


@pytest.mark.parametrize(("status", "name"), [(422, "validation_error"), (400, "invalid_request"),
                                              (413, "payload_too_large"), (404, "not_found")])
def test_resend_batch_refused_as_a_whole_sends_every_member_singly(status: int, name: str) -> None:
    outcomes = RESEND.interpret_batch(answer(status, {"statusCode": status, "name": name, "message": "no"}),
                                      deliveries(3), NOW)
    assert causes(outcomes) == [SendSingly] * 3
    assert all(o.reply_code == status and name in o.reason and "refused as a whole" in o.reason
               for o in outcomes if isinstance(o, SendSingly))


@pytest.mark.parametrize("status", [401, 403])
def test_resend_batch_with_refused_credentials_pauses_for_each_member(status: int) -> None:
    outcomes = RESEND.interpret_batch(answer(status, {"name": "invalid_api_key", "message": "API key is invalid"}),
                                      deliveries(2), NOW)
    assert causes(outcomes) == [Cause.PAUSED] * 2
    assert all(o.pause_seconds == 300 and not o.charge_attempt for o in outcomes)  # type: ignore[union-attr]


def test_resend_batch_rate_limited_is_transient_for_each_member_with_retry_after() -> None:
    outcomes = RESEND.interpret_batch(answer(429, {"name": "rate_limit_exceeded", "message": "Too many"},
                                             retry_after="1"), deliveries(2), NOW)
    assert causes(outcomes) == [Cause.TRANSIENT] * 2
    assert [o.retry_after_seconds for o in outcomes] == [1.0, 1.0]  # type: ignore[union-attr]


def test_resend_batch_over_quota_pauses_for_each_member() -> None:
    outcomes = RESEND.interpret_batch(answer(429, {"name": "daily_quota_exceeded", "message": "quota"},
                                             retry_after="60"), deliveries(2), NOW)
    assert causes(outcomes) == [Cause.PAUSED] * 2 and {o.pause_seconds for o in outcomes} == {60}  # type: ignore[union-attr]


def test_resend_batch_key_in_progress_is_transient_for_each_member() -> None:
    outcomes = RESEND.interpret_batch(answer(409, {"name": "concurrent_idempotent_requests", "message": "busy"}),
                                      deliveries(2), NOW)
    assert causes(outcomes) == [Cause.TRANSIENT] * 2 and {o.retry_after_seconds for o in outcomes} == {1.0}  # type: ignore[union-attr]


def test_resend_batch_key_reused_with_another_payload_is_ambiguous_without_a_safe_resend() -> None:
    outcomes = RESEND.interpret_batch(answer(409, {"name": "invalid_idempotent_request", "message": "other payload"}),
                                      deliveries(2), NOW)
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 2
    assert all(o.resend_safe_until is None and "in_doubt" in o.error for o in outcomes)  # type: ignore[union-attr,operator]


def test_resend_batch_5xx_is_ambiguous_and_safe_to_resend_within_each_members_window() -> None:
    members = deliveries(3)
    outcomes = RESEND.interpret_batch(answer(500, {"name": "application_error", "message": "oops"}), members, NOW)
    assert causes(outcomes) == [Cause.AMBIGUOUS] * 3
    windows = [o.resend_safe_until for o in outcomes]  # type: ignore[union-attr]
    assert windows == [d.first_attempt_at + timedelta(hours=24 * 0.9) for d in members]  # type: ignore[operator]
    assert len(set(windows)) == 3  # counted from each member's own first attempt


def test_resend_batch_member_without_a_first_attempt_has_no_safe_resend() -> None:
    [outcome] = RESEND.interpret_batch(answer(503), [make_delivery(first_attempt_at=None)], NOW)
    assert outcome.cause is Cause.AMBIGUOUS and outcome.resend_safe_until is None  # type: ignore[union-attr]


# ---- Postmark: the request ------------------------------------------------------------------------


def test_postmark_batch_is_one_post_without_a_key() -> None:
    members = items(3)
    request = POSTMARK.build_batch(members, BATCH_KEY)
    assert (request.method, request.url) == ("POST", "https://api.postmark.test/email/batch")
    assert "Idempotency-Key" not in request.headers and request.headers["X-Postmark-Server-Token"] == "pm-token"
    singles = [POSTMARK.build(i.fields, i.delivery, i.message_id, "row-key", NOW).json() for i in members]
    assert request.json() == singles
    assert [doc["Headers"][0] for doc in request.json()] == [{"Name": "Message-ID", "Value": i.message_id}
                                                             for i in members]


def test_postmark_batch_body_is_the_same_bytes_for_the_same_members() -> None:
    assert POSTMARK.build_batch(items(4), BATCH_KEY).body == PostmarkApi("pm-token", "https://api.postmark.test"
                                                                         ).build_batch(items(4), "other").body


@pytest.mark.parametrize("count", [0, 501])
def test_postmark_batch_size_is_one_to_five_hundred(count: int) -> None:
    with pytest.raises(ValueError, match="Postmark batch"):
        POSTMARK.build_batch(items(count), BATCH_KEY)
    assert len(POSTMARK.build_batch(items(500), BATCH_KEY).json()) == 500


class SmallPostmark(PostmarkApi):
    batch_limit: ClassVar[int] = 4
    batch_bytes_limit: ClassVar[int] = 12_000  # a member's share: 3,000 less the slack (2,000)


def test_postmark_batch_over_its_byte_bound_is_not_built() -> None:
    small = SmallPostmark("pm-token", "https://api.postmark.test")
    assert small.member_bytes_limit == 1_000
    with pytest.raises(ValueError, match="over the limit of 12000"):
        small.build_batch(items(2, text="x" * 7_000), BATCH_KEY)
    assert small.build_batch(items(2, text="x" * 5_000), BATCH_KEY).body


def test_postmark_batches_attachments_but_sends_a_message_over_its_share_of_the_bound_singly() -> None:
    assert POSTMARK.member_bytes_limit == 50_000_000 // 500 - 2_000
    assert POSTMARK.batchable(make_fields(attachments=(PDF,)), make_delivery())
    assert POSTMARK.batchable(make_fields(text="x" * 90_000), make_delivery())
    assert not POSTMARK.batchable(make_fields(text="x" * 98_000), make_delivery())
    small = SmallPostmark("pm-token", "https://api.postmark.test")
    assert small.batchable(make_fields(), make_delivery()) and not small.batchable(make_fields(text="x" * 900),
                                                                                  make_delivery())


# ---- Postmark: the answer -------------------------------------------------------------------------


def result(code: int, message: str = "OK", message_id: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"ErrorCode": code, "Message": message, "To": "a@example.com"}
    if message_id:
        out["MessageID"] = message_id
    return out


def test_postmark_batch_maps_each_error_code_to_its_own_member() -> None:
    results = [result(0, message_id="pm-0"), result(406, "inactive"), result(300, "Invalid 'To'"),
               result(429, "rate limit"), result(10, "bad token"), result(405, "not allowed"),
               result(0, message_id="pm-6")]
    outcomes = POSTMARK.interpret_batch(answer(200, results, retry_after="3"), deliveries(7), NOW)
    assert causes(outcomes) == [Cause.SENT, Cause.PERMANENT, Cause.PERMANENT, Cause.TRANSIENT, Cause.PAUSED,
                                Cause.PAUSED, Cause.SENT]
    sent, inactive, invalid, limited, token, _, last = outcomes
    assert (sent.provider_message_id, last.provider_message_id) == ("pm-0", "pm-6")  # type: ignore[union-attr]
    assert "batch item 1: ErrorCode 406: inactive" in inactive.error  # type: ignore[union-attr,operator]
    assert "ErrorCode 300" in invalid.error and limited.retry_after_seconds == 3.0  # type: ignore[union-attr,operator]
    assert "credentials refused" in token.error and not token.charge_attempt  # type: ignore[union-attr,operator]


@pytest.mark.parametrize("code", [406, 300, 429, 10, 405, 412])
def test_postmark_batch_item_reads_like_the_same_error_code_on_a_single_send(code: int) -> None:
    [item] = POSTMARK.interpret_batch(answer(200, [result(code, "why")]), deliveries(1), NOW)
    single = POSTMARK.interpret(answer(422, {"ErrorCode": code, "Message": "why"}), make_delivery(), NOW)
    assert isinstance(item, Outcome) and (item.cause, item.pause_seconds) == (single.cause, single.pause_seconds)


@pytest.mark.parametrize("body", [[result(0, message_id="pm-0")], {"ErrorCode": 0}, None,
                                  [result(0, message_id="pm-0"), {"MessageID": "pm-1"}]])
def test_postmark_batch_answer_that_does_not_match_the_members_is_ambiguous(body: Any) -> None:
    outcomes = POSTMARK.interpret_batch(answer(200, body), deliveries(2), NOW)
    unmatched = outcomes if not (isinstance(body, list) and len(body) == 2) else outcomes[1:]
    assert all(o.cause is Cause.AMBIGUOUS and o.resend_safe_until is None for o in unmatched)  # type: ignore[union-attr]
    assert len(outcomes) == 2


@pytest.mark.parametrize(("status", "body", "expected"), [
    (401, {"ErrorCode": 10, "Message": "bad token"}, Cause.PAUSED),
    (422, {"ErrorCode": 10, "Message": "bad token"}, Cause.PAUSED),
    (422, {"ErrorCode": 405, "Message": "out of credits"}, Cause.PAUSED),
    (429, {"ErrorCode": 429, "Message": "slow down"}, Cause.TRANSIENT),
    (422, {"ErrorCode": 429, "Message": "slow down"}, Cause.TRANSIENT),
    (422, {"ErrorCode": 300, "Message": "Invalid JSON"}, SendSingly),
    (413, None, SendSingly),
    (500, {"Message": "oops"}, Cause.AMBIGUOUS),
])  # fmt: skip
def test_postmark_whole_batch_answers(status: int, body: Any, expected: Any) -> None:
    outcomes = POSTMARK.interpret_batch(answer(status, body), deliveries(3), NOW)
    assert causes(outcomes) == [expected] * 3
    if expected is Cause.AMBIGUOUS:  # no idempotency key: the in_doubt policy decides
        assert all(o.resend_safe_until is None for o in outcomes)  # type: ignore[union-attr]


# ---- every answer: one result per member, in order ---------------------------------------------------


ANSWERS = [answer(200, {"data": [{"id": "a"}, {"id": "b"}]}), answer(200, []), answer(200, b"not json"),
           answer(302), answer(400), answer(401), answer(409), answer(422, {"ErrorCode": 300}), answer(429),
           answer(500), answer(503, {"name": "x"})]


@pytest.mark.parametrize("provider", [RESEND, POSTMARK], ids=["resend", "postmark"])
@pytest.mark.parametrize("response", ANSWERS)
@pytest.mark.parametrize("count", [1, 2, 7])
def test_every_answer_gives_exactly_one_result_per_member(provider: Any, response: ApiResponse, count: int) -> None:
    outcomes = provider.interpret_batch(response, deliveries(count), NOW)
    assert len(outcomes) == count and all(isinstance(o, Outcome | SendSingly) for o in outcomes)


def test_send_singly_is_not_an_attempt_outcome_but_can_be_held_back() -> None:
    singly = SendSingly("the batch request was refused as a whole (HTTP 422: no)", reply_code=422)
    held = singly.held_back()
    assert (held.cause, held.kind, held.charge_attempt, held.reply_code) == (
        Cause.HELD_BACK, OutcomeKind.TRANSIENT, False, 422)
    assert held.error == "the batch request was refused as a whole (HTTP 422: no); to be sent singly"
    assert not isinstance(singly, Outcome)
