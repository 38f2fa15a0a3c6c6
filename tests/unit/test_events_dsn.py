"""parse_dsn: RFC 3464 bounces as Postfix, Exim and sendmail write them, and what is not one.

The fixtures under tests/fixtures/dsn/ follow the shapes those MTAs produce (Postfix's
"Undelivered Mail Returned to Sender" and "Delayed Mail (still being retried)" with
text/rfc822-headers or message/rfc822, Exim's "Mail delivery failed: returning message to sender"
with Status 5.0.0 and the real code in Diagnostic-Code, sendmail's report with a failed and a
delayed recipient); the contents are made up.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox_mailer.delivery_events import dsn
from outbox_mailer.delivery_events.dsn import MAX_GROUPS, parse_dsn
from outbox_mailer.delivery_events.model import BounceClass, Kind, ProviderEvent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dsn"
RECEIVED = datetime(2024, 3, 10, 12, 0, tzinfo=UTC)
OUR_ID = "<3f2a9c0d8e7b41a6b5c4d3e2f1a09b8c@shop.example.com>"


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def event_id(dsn_message_id: str, recipient: str, action: str) -> str:
    return hashlib.sha256(f"id:{dsn_message_id}\n{recipient}\n{action}".encode()).hexdigest()


def parsed(raw: bytes) -> list[ProviderEvent]:
    events = parse_dsn(raw, RECEIVED)
    assert events is not None
    return events


def report(status_body: bytes, *, top: bytes = b"", returned: bytes | None = None,
           message_id: bytes = b"<report-1@mx.example.net>") -> bytes:
    """A minimal DSN around a message/delivery-status body."""
    if returned is None:
        returned = b"Content-Type: text/rfc822-headers\n\nMessage-ID: " + OUR_ID.encode() + b"\nSubject: hi\n"
    own_id = b"Message-Id: " + message_id + b"\n" if message_id else b""
    return (
        b"From: MAILER-DAEMON@mx.example.net\n"
        b"To: bounces@shop.example.com\n"
        b"Subject: Undelivered Mail Returned to Sender\n"
        b"Date: Fri, 01 Mar 2024 10:15:02 +0000\n" + own_id + top
        + b"MIME-Version: 1.0\n"
        b'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\n\n'
        b"--B\nContent-Type: text/plain\n\nYour message could not be delivered.\n\n"
        b"--B\nContent-Type: message/delivery-status\n\n"
        b"Reporting-MTA: dns; mx.example.net\n\n" + status_body + b"\n"
        b"--B\n" + returned + b"\n--B--\n"
    )


def group(status: str | None = "5.1.1", *, action: str = "failed", recipient: str = "rfc822; user@example.net",
          diagnostic: str | None = None, extra: str = "") -> bytes:
    lines = [f"Final-Recipient: {recipient}", f"Action: {action}"]
    if status is not None:
        lines.append(f"Status: {status}")
    if diagnostic is not None:
        lines.append(f"Diagnostic-Code: {diagnostic}")
    return ("\n".join(lines) + "\n" + extra).encode()


# --- the fixtures -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("postfix_failed_headers.eml", [(Kind.BOUNCED, BounceClass.HARD, "nobody@example.net",
                                         "<3f2a9c0d8e7b41a6b5c4d3e2f1a09b8c@shop.example.com>",
                                         datetime(2024, 3, 1, 10, 15, 2, tzinfo=UTC))]),
        # mailbox full is soft even though Postfix gave up (5.x.x); the local part keeps its case
        ("postfix_failed_message.eml", [(Kind.BOUNCED, BounceClass.SOFT, "Jane.Doe@example.org",
                                         "<b0c1d2e3f405162738495a6b7c8d9e0f@shop.example.com>",
                                         datetime(2024, 3, 4, 7, 30, 41, tzinfo=UTC))]),
        # the returned headers fold Message-ID onto a continuation line
        ("postfix_delayed.eml", [(Kind.DELAYED, None, "ops@example.org",
                                  "<7d6c5b4a392817060f1e2d3c4b5a6978@shop.example.com>",
                                  datetime(2024, 3, 1, 14, 20, 11, tzinfo=UTC))]),
        ("postfix_no_message_id.eml", [(Kind.BOUNCED, BounceClass.HARD, "info@nonexistent.example", None,
                                        datetime(2024, 3, 6, 9, 5, 40, tzinfo=UTC))]),
        # Exim: Status 5.0.0, the real code (5.1.1) in Diagnostic-Code
        ("exim_failed.eml", [(Kind.BOUNCED, BounceClass.HARD, "ghost@example.org",
                              "<0a1b2c3d4e5f60718293a4b5c6d7e8f9@shop.example.com>",
                              datetime(2024, 3, 2, 8, 1, 11, tzinfo=UTC))]),
        # Exim: Status 5.0.0 but the remote said 550 5.7.1 (a content policy): never hard
        ("exim_policy.eml", [(Kind.BOUNCED, BounceClass.UNDETERMINED, "buyer@example.com",
                              "<c4d5e6f708192a3b4c5d6e7f8091a2b3@shop.example.com>",
                              datetime(2024, 3, 5, 16, 44, 2, tzinfo=UTC))]),
        # one failed and one delayed recipient; each at its own Last-Attempt-Date
        ("sendmail_failed_and_delayed.eml", [
            (Kind.BOUNCED, BounceClass.HARD, "gone@example.com",
             "<9e8d7c6b5a49382716051f2e3d4c5b6a@shop.example.com>", datetime(2024, 3, 3, 12, 0, 5, tzinfo=UTC)),
            (Kind.DELAYED, None, "slow@example.com",
             "<9e8d7c6b5a49382716051f2e3d4c5b6a@shop.example.com>", datetime(2024, 3, 3, 12, 0, 4, tzinfo=UTC)),
        ]),
    ],
)
def test_fixture_events(name: str, expected: list[tuple[Kind, BounceClass | None, str, str | None, datetime]]) -> None:
    events = parsed(fixture(name))
    got = [(e.kind, e.bounce_class, e.recipient, e.message_id, e.occurred_at) for e in events]
    assert got == expected
    for event in events:
        assert event.provider == "smtp"
        assert event.provider_message_id is None and event.dedupe_key is None
        assert event.occurred_at is not None and event.occurred_at.utcoffset() is not None
        json.dumps(event.detail)


@pytest.mark.parametrize("name", ["plain_reply.eml", "out_of_office.eml", "garbage.bin"])
def test_not_a_dsn(name: str) -> None:
    assert parse_dsn(fixture(name), RECEIVED) is None


def test_postfix_detail_is_the_report_fields_unfolded() -> None:
    (event,) = parsed(fixture("postfix_failed_headers.eml"))
    assert event.detail == {
        "status": "5.1.1",
        "action": "failed",
        "diagnostic_code": "smtp; 550 5.1.1 <nobody@example.net>: Recipient address rejected: "
                           "User unknown in virtual mailbox table",
        "remote_mta": "dns; mx.example.net",
        "reporting_mta": "dns; relay.shop.example.com",
    }


def test_delayed_detail_without_remote_mta() -> None:
    (event,) = parsed(fixture("postfix_delayed.eml"))
    assert event.detail["status"] == "4.4.1"
    assert event.detail["remote_mta"] == ""
    assert event.detail["diagnostic_code"] == "X-Postfix; connect to mx.example.org[203.0.113.9]:25: Connection timed out"


# --- dedup ids ------------------------------------------------------------------------------------

def test_event_ids_digest_the_reports_message_id_recipient_and_action() -> None:
    events = parsed(fixture("sendmail_failed_and_delayed.eml"))
    own = "<202403031200.423C05Ab012345@mail.example.com>"
    assert [e.provider_event_id for e in events] == [
        event_id(own, "gone@example.com", "failed"),
        event_id(own, "slow@example.com", "delayed"),
    ]
    (postfix,) = parsed(fixture("postfix_failed_headers.eml"))
    assert postfix.provider_event_id == event_id(
        "<20240301101502.8A2C31A0F2@relay.shop.example.com>", "nobody@example.net", "failed")


def test_the_same_bounce_piped_twice_has_the_same_ids_even_with_other_line_endings() -> None:
    raw = fixture("exim_failed.eml")
    first = [e.provider_event_id for e in parsed(raw)]
    assert first == [e.provider_event_id for e in parsed(raw)]
    assert first == [e.provider_event_id for e in parsed(raw.replace(b"\n", b"\r\n"))]
    assert first == [e.provider_event_id for e in parse_dsn(raw, RECEIVED + timedelta(days=1)) or []]


def test_without_its_own_message_id_the_raw_bytes_identify_the_report() -> None:
    raw = report(group(), message_id=b"")
    (event,) = parsed(raw)
    basis = "raw:" + hashlib.sha256(raw).hexdigest()
    assert event.provider_event_id == hashlib.sha256(f"{basis}\nuser@example.net\nfailed".encode()).hexdigest()
    (other,) = parsed(raw + b"\n")
    assert other.provider_event_id != event.provider_event_id


def test_the_same_recipient_and_action_twice_is_one_event() -> None:
    events = parsed(report(group() + b"\n" + group(recipient="rfc822; user@EXAMPLE.net")
                           + b"\n" + group(action="delayed", status="4.2.0")))
    assert [(e.recipient, e.kind) for e in events] == [("user@example.net", Kind.BOUNCED),
                                                        ("user@example.net", Kind.DELAYED)]
    assert len({e.provider_event_id for e in events}) == 2


# --- classification --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("status", "diagnostic", "expected"),
    [
        ("5.1.1", None, BounceClass.HARD),
        ("5.1.1 (bad destination mailbox address)", None, BounceClass.HARD),
        ("5.1.2", None, BounceClass.HARD),
        ("5.1.10", None, BounceClass.HARD),
        ("5.2.1", None, BounceClass.HARD),
        ("5.4.4", None, BounceClass.HARD),
        ("5.5.0", "smtp; 550 5.5.0 Requested action not taken: mailbox unavailable", BounceClass.HARD),
        ("5.2.2", None, BounceClass.SOFT),
        ("5.2.3", None, BounceClass.SOFT),
        ("5.3.1", None, BounceClass.SOFT),
        ("5.3.4", None, BounceClass.SOFT),
        ("5.4.7", None, BounceClass.SOFT),
        ("4.4.1", None, BounceClass.SOFT),  # Postfix gave up after the queue lifetime
        ("4.2.2", None, BounceClass.SOFT),
        ("5.7.1", None, BounceClass.UNDETERMINED),
        ("5.7.26", None, BounceClass.UNDETERMINED),  # DMARC
        ("5.6.0", None, BounceClass.UNDETERMINED),
        ("5.1.8", None, BounceClass.UNDETERMINED),  # our sender's domain
        ("2.0.0", None, BounceClass.UNDETERMINED),
        (None, None, BounceClass.UNDETERMINED),
        ("bogus", None, BounceClass.UNDETERMINED),
        # the generic x.0.0 (Exim) or no Status: the SMTP diagnostic decides
        ("5.0.0", None, BounceClass.HARD),
        ("5.0.0", "smtp; 550 5.1.1 <user@example.net>: User unknown", BounceClass.HARD),
        ("5.0.0", "smtp; 552 5.2.2 mailbox full", BounceClass.SOFT),
        ("5.0.0", "smtp; 550-5.7.1 [192.0.2.1] Our system has detected spam", BounceClass.UNDETERMINED),
        ("5.0.0", "smtp; 451 4.4.1 timeout, retry time exceeded", BounceClass.SOFT),
        ("5.0.0", "smtp; 451 Temporary local problem", BounceClass.SOFT),
        ("5.0.0", "smtp; 550 No such user here", BounceClass.HARD),
        ("5.0.0", "smtp; 550 4.2.2 odd mix", BounceClass.HARD),  # classes disagree: the reply's class
        ("5.0.0", "X-str; 550 5.7.1 not an SMTP diagnostic", BounceClass.HARD),
        (None, "smtp; 550 5.7.1 Relaying denied", BounceClass.UNDETERMINED),
        (None, "smtp; 550 5.1.1 unknown", BounceClass.HARD),
        # a specific Status wins over the diagnostic
        ("5.1.1", "smtp; 552 5.2.2 mailbox full", BounceClass.HARD),
        # an IP address in the diagnostic is not a code
        ("5.0.0", "smtp; host 203.0.113.7 said: 550 5.2.2 full", BounceClass.SOFT),
    ],
)
def test_bounce_class(status: str | None, diagnostic: str | None, expected: BounceClass) -> None:
    (event,) = parsed(report(group(status, diagnostic=diagnostic)))
    assert (event.kind, event.bounce_class) == (Kind.BOUNCED, expected)


@pytest.mark.parametrize(
    ("action", "kind"),
    [("failed", Kind.BOUNCED), ("FAILED", Kind.BOUNCED), ("failed (permanent)", Kind.BOUNCED),
     ("delayed", Kind.DELAYED), ("delivered", Kind.DELIVERED), ("relayed", Kind.DELIVERED),
     ("expanded", Kind.DELIVERED)],
)
def test_actions(action: str, kind: Kind) -> None:
    (event,) = parsed(report(group("2.0.0" if kind is Kind.DELIVERED else "4.4.1", action=action)))
    assert event.kind is kind
    assert event.detail["action"] == action.split()[0].lower()
    assert (event.bounce_class is None) == (kind is not Kind.BOUNCED)


@pytest.mark.parametrize("action", ["bogus", "", "5.1.1"])
def test_an_unknown_action_is_no_event(action: str) -> None:
    assert parsed(report(group(action=action))) == []


# --- recipients --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("field", "recipient"),
    [
        ("rfc822; user@example.net", "user@example.net"),
        ("RFC822;Mixed.Case@Example.NET", "Mixed.Case@example.net"),
        ("rfc822; <angled@Example.net>", "angled@example.net"),
        ("plain@Example.net", "plain@example.net"),  # no address type (broken, but seen)
        ("utf-8; jos\u00e9@example.net", "jos\u00e9@example.net"),
    ],
)
def test_recipient(field: str, recipient: str) -> None:
    (event,) = parsed(report(group(recipient=field)))
    assert event.recipient == recipient


def test_original_recipient_when_final_recipient_is_unusable() -> None:
    body = group(recipient="x400; /C=US/O=Example/S=User/", extra="Original-Recipient: rfc822;User@Example.COM\n")
    (event,) = parsed(report(body))
    assert event.recipient == "User@example.com"


@pytest.mark.parametrize(
    "field",
    ["rfc822;", "rfc822; no-at-sign", "rfc822; @example.net", "rfc822; user@", "rfc822; two words@example.net",
     "x400; user@example.net", "rfc822; " + "a" * 400 + "@example.net"],
)
def test_a_group_without_a_usable_address_is_no_event(field: str) -> None:
    assert parsed(report(group(recipient=field))) == []


# --- dates ---------------------------------------------------------------------------------------------

def test_occurred_at_falls_back_from_last_attempt_to_date_to_arrival_to_received() -> None:
    attempt = "Last-Attempt-Date: Fri, 1 Mar 2024 11:00:00 +0100\n"
    (event,) = parsed(report(group(extra=attempt)))
    assert event.occurred_at == datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
    assert event.occurred_at.utcoffset() == timedelta(hours=1)

    (event,) = parsed(report(group(extra="Last-Attempt-Date: not a date\n")))
    assert event.occurred_at == datetime(2024, 3, 1, 10, 15, 2, tzinfo=UTC)  # the report's Date

    undated = report(group()).replace(b"Date: Fri, 01 Mar 2024 10:15:02 +0000\n", b"")
    (event,) = parsed(undated)
    assert event.occurred_at == RECEIVED

    arrival = undated.replace(b"Reporting-MTA: dns; mx.example.net\n",
                              b"Reporting-MTA: dns; mx.example.net\nArrival-Date: Fri, 1 Mar 2024 09:00:00 -0500\n")
    (event,) = parsed(arrival)
    assert event.occurred_at == datetime(2024, 3, 1, 14, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "value",
    ["Fri, 1 Mar 2024 10:00:00 -0000", "Fri, 1 Mar 2024 10:00:00 GMT", "1 Mar 2024 10:00:00 UT"],
)
def test_dates_without_a_known_zone_are_utc(value: str) -> None:
    (event,) = parsed(report(group(extra=f"Last-Attempt-Date: {value}\n")))
    assert event.occurred_at == datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
    assert event.occurred_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("value", ["Fri, 1 Mar 2024 10:00:00 +9999", "Fri, 1 Mar 99999 10:00:00 +0000",
                                   "Fri, 31 Feb 2024 10:00:00 +0000", "\xff\xfe"])
def test_an_impossible_date_is_ignored(value: str) -> None:
    (event,) = parsed(report(group(extra=f"Last-Attempt-Date: {value}\n")))
    assert event.occurred_at == datetime(2024, 3, 1, 10, 15, 2, tzinfo=UTC)


def test_received_at_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_dsn(fixture("exim_failed.eml"), datetime(2024, 3, 10))
    assert parse_dsn(b"", datetime(2024, 3, 10, tzinfo=timezone(timedelta(hours=2)))) is None


# --- shapes: what is a DSN, what is returned ------------------------------------------------------------

def test_other_reports_and_forwarded_bounces_are_not_dsns() -> None:
    mdn = report(group()).replace(b"report-type=delivery-status", b"report-type=disposition-notification")
    mdn = mdn.replace(b"message/delivery-status", b"message/disposition-notification")
    assert parse_dsn(mdn, RECEIVED) is None
    forwarded = (b"From: someone@example.net\nSubject: Fwd: bounce\nMIME-Version: 1.0\n"
                 b'Content-Type: multipart/mixed; boundary="F"\n\n--F\nContent-Type: text/plain\n\nsee below\n'
                 b"--F\nContent-Type: message/rfc822\n\n" + fixture("postfix_failed_headers.eml") + b"\n--F--\n")
    assert parse_dsn(forwarded, RECEIVED) is None


def test_a_report_wrapped_in_multipart_mixed_is_read() -> None:
    inner = fixture("exim_failed.eml")
    head, _, body = inner.partition(b"\n\n")
    content_type = b"Content-Type: multipart/report; report-type=delivery-status; boundary=1709366471-eximdsn-1714636915"
    wrapped = (b"From: gateway@example.org\nMessage-Id: <wrap-1@example.org>\nMIME-Version: 1.0\n"
               b'Content-Type: multipart/mixed; boundary="W"\n\n--W\n' + content_type + b"\n\n" + body
               + b"\n--W\nContent-Type: text/plain\n\nScanned by the gateway.\n--W--\n")
    assert head  # the fixture has headers
    (event,) = parsed(wrapped)
    assert (event.kind, event.bounce_class, event.recipient) == (Kind.BOUNCED, BounceClass.HARD, "ghost@example.org")
    assert event.message_id == "<0a1b2c3d4e5f60718293a4b5c6d7e8f9@shop.example.com>"
    assert event.provider_event_id == event_id("<wrap-1@example.org>", "ghost@example.org", "failed")


def test_a_delivery_report_without_a_usable_group_is_an_empty_list() -> None:
    no_status_part = report(group()).replace(b"message/delivery-status", b"text/plain")
    assert parse_dsn(no_status_part, RECEIVED) == []
    assert parse_dsn(report(b""), RECEIVED) == []  # only the per-message fields
    assert parse_dsn(report(b"Original-Envelope-Id: 42\n"), RECEIVED) == []


def test_blank_lines_between_groups_and_a_missing_per_message_block() -> None:
    raw = report(group() + b"\n\n\n" + group(recipient="rfc822; b@example.net", action="delayed", status="4.0.0"))
    assert [e.recipient for e in parsed(raw)] == ["user@example.net", "b@example.net"]
    merged = raw.replace(b"Reporting-MTA: dns; mx.example.net\n\n", b"Reporting-MTA: dns; mx.example.net\n")
    assert [e.recipient for e in parsed(merged)] == ["user@example.net", "b@example.net"]


@pytest.mark.parametrize(
    ("returned", "message_id"),
    [
        (b"Content-Type: message/rfc822\n\nMessage-Id: " + OUR_ID.encode() + b"\nSubject: x\n\nbody\n", OUR_ID),
        ((b"Content-Type: text/rfc822-headers\nContent-Transfer-Encoding: base64\n\n"
         b"TWVzc2FnZS1JRDogPGFiY0BleGFtcGxlLmNvbT4K\n"), "<abc@example.com>"),
        (b"Content-Type: text/rfc822-headers\n\nMessage-ID: junk <a@b> trailing\n", "<a@b>"),
        (b"Content-Type: text/rfc822-headers\n\nMessage-ID: not-an-id\n", None),
        (b"Content-Type: text/rfc822-headers\n\nSubject: no id\n", None),
        (b"Content-Type: text/plain\n\nMessage-ID: " + OUR_ID.encode() + b"\n", None),  # not a returned message
    ],
)
def test_returned_message_id(returned: bytes, message_id: str | None) -> None:
    (event,) = parsed(report(group(), returned=returned))
    assert event.message_id == message_id


# --- hostile input -----------------------------------------------------------------------------------------

def test_deep_nesting_is_not_a_dsn_and_raises_nothing() -> None:
    nested = b"Content-Type: multipart/mixed; boundary=b0\n\n" + b"".join(
        b"--b%d\nContent-Type: multipart/mixed; boundary=b%d\n\n" % (i - 1, i) for i in range(1, 3000))
    assert parse_dsn(nested, RECEIVED) is None
    assert parse_dsn(b"Content-Type: message/rfc822\n\n" * 3000, RECEIVED) is None


@pytest.mark.parametrize(("levels", "read"), [(1, True), (7, True), (8, False), (20, False)])
def test_a_report_nested_deeper_than_the_limit_is_not_read(levels: int, read: bool) -> None:
    raw = report(group())
    for level in range(levels):
        raw = (b'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="L%d"\n\n--L%d\n' % (level, level)
               + raw.partition(b"MIME-Version: 1.0\n")[2] + b"\n--L%d--\n" % level)
    result = parse_dsn(raw, RECEIVED)
    assert ([e.recipient for e in result] if result is not None else None) == (["user@example.net"] if read else None)


def test_huge_values_are_cut() -> None:
    raw = report(group(diagnostic="smtp; 550 5.1.1 " + "x" * 3_000_000, extra="Remote-MTA: dns; " + "m" * 5000 + "\n"))
    (event,) = parsed(raw)
    assert event.bounce_class is BounceClass.HARD
    assert len(event.detail["diagnostic_code"]) == 1000
    assert event.detail["diagnostic_code"].startswith("smtp; 550 5.1.1 xxx")
    assert len(event.detail["remote_mta"]) == 1000


def test_undecodable_bytes_and_control_characters_become_clean_text() -> None:
    body = (b"Final-Recipient: rfc822; user@example.net\nAction: failed\nStatus: 5.1.1\n"
            b"Diagnostic-Code: smtp; 550 5.1.1 caf\xc3\xa9 \xff\xfe bad\x00nul\x1b[31m\n"
            b"Remote-MTA: dns; mx.\xe9xample.net\n\n"
            b"Final-Recipient: rfc822; b\xffd@example.net\nAction: failed\nStatus: 5.1.1\n")
    (event,) = parsed(report(body))
    assert event.recipient == "user@example.net"  # the group with an undecodable address is dropped
    assert event.detail["diagnostic_code"] == "smtp; 550 5.1.1 caf\u00e9 \ufffd\ufffd bad nul [31m"
    assert event.detail["remote_mta"] == "dns; mx.\ufffdxample.net"
    json.dumps(event.detail, ensure_ascii=False).encode("utf-8")


def test_at_most_max_groups_events() -> None:
    body = b"\n".join(group(recipient=f"rfc822; user{i}@example.net") for i in range(MAX_GROUPS + 200))
    events = parsed(report(body))
    assert len(events) == MAX_GROUPS
    assert events[-1].recipient == f"user{MAX_GROUPS - 1}@example.net"


def test_only_the_first_max_parsed_bytes_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = report(group(), returned=b"Content-Type: message/rfc822\n\nMessage-ID: " + OUR_ID.encode()
                 + b"\n\n" + b"body line\n" * 10_000)
    monkeypatch.setattr(dsn, "MAX_PARSED_BYTES", len(raw) // 2)
    (event,) = parsed(raw)
    assert (event.recipient, event.message_id) == ("user@example.net", OUR_ID)
    # the digest still covers every byte
    assert parsed(raw.replace(b"Message-Id: <report-1@mx.example.net>\n", b""))[0].provider_event_id == (
        hashlib.sha256(("raw:" + hashlib.sha256(raw.replace(b"Message-Id: <report-1@mx.example.net>\n", b""))
                        .hexdigest() + "\nuser@example.net\nfailed").encode()).hexdigest())


def check_result(result: list[ProviderEvent] | None) -> None:
    if result is None:
        return
    for event in result:
        assert event.kind in Kind and event.provider == "smtp"
        assert len(event.provider_event_id) == 64
        assert event.occurred_at is not None and event.occurred_at.utcoffset() is not None
        texts = [event.recipient or "", event.message_id or "", *event.detail.values()]
        assert all(isinstance(text, str) for text in texts)
        for text in texts:
            text.encode("utf-8")  # no lone surrogates
            assert "\x00" not in text
        json.dumps(event.detail)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    check_result(parse_dsn(raw, RECEIVED))


SEEDS = sorted(p.name for p in FIXTURES.iterdir())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.randoms(use_true_random=False), st.integers(1, 40))
def test_mangled_fixtures_never_raise(name: str, rng: random.Random, edits: int) -> None:
    data = bytearray(fixture(name))
    for _ in range(edits):
        position = rng.randrange(len(data) + 1)
        choice = rng.randrange(4)
        if choice == 0 and data:
            del data[position:position + rng.randrange(1, 200)]
        elif choice == 1:
            data[position:position] = rng.choice([b"\n", b"\n\n", b"\r", b"\x00", b"\xff", b";", b":", b"--",
                                                  b"\n--8A2C31A0F2.1709288102/relay.shop.example.com\n",
                                                  b"Content-Type: multipart/report; boundary=", b"<", b"@"])
        elif choice == 2 and data:
            data[min(position, len(data) - 1)] = rng.randrange(256)
        else:
            data = data[:position]
    check_result(parse_dsn(bytes(data), RECEIVED))
