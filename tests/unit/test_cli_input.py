"""Command-line input parsed strictly: durations, keys, numbers, the --stdin object, help text."""

from __future__ import annotations

import argparse
import json

import pytest

from outbox_mailer import cli
from outbox_mailer.cli import input as cli_input


@pytest.mark.parametrize("text", ["\u0661h", "1\u0660m", "\uff11h", "\u0967d", "1e3s", "-1h", "1 h", "1h\n1h",
                                  "99999999999999999999w", "522w", "inf" + "s"])
def test_duration_takes_ascii_digits_and_at_most_ten_years(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli_input.duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1.5h", 5400), ("7d", 604_800),
                                               ("520w", 520 * 604_800), (" 2w ", 1_209_600)])
def test_duration_keeps_what_it_always_took(text: str, seconds: float) -> None:
    assert cli_input.duration(text) == seconds


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_help_texts_are_plain_text_without_rst_backquotes() -> None:
    parser = cli.build_parser()
    assert "`" not in parser.format_help()
    for name, sub in _subparsers(parser).items():
        assert "`" not in sub.format_help(), name


def test_retry_help_states_how_many_new_tries_an_email_gets() -> None:
    text = _subparsers(cli.build_parser())["retry"].format_help()
    assert "own" in text and "max_attempts" in text and "--attempts" in text


def _parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "--key", "", "--to", "a@example.com"],
        ["status", "bad-\udcff-key"],
        ["status", ""],
        ["status", "a\nb"],
        ["status", "k" * 256],
        ["cancel", "bad-\udcff"],
        ["retry", "bad-\udcff"],
        ["resolve", "bad-\udcff", "--sent"],
        ["list", "--status", "failed", "--limit", "-1"],
        ["list", "--status", "failed", "--limit", "0"],
        ["list", "--status", "failed", "--limit", "\u0661"],
        ["list", "--status", "failed", "--since", "99999999999999999999w"],
        ["stats", "--interval", "-1"],
        ["stats", "--interval", "nan"],
        ["stats", "--interval", "inf"],
        ["enqueue", "--priority", "40000"],
        ["retry", "k", "--attempts", "0"],
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(*argv)
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_good_arguments_still_parse() -> None:
    assert _parse("status", "order-1", "héllo").keys == ["order-1", "héllo"]
    assert _parse("list", "--status", "failed", "--limit", "5").limit == 5
    assert _parse("stats", "--watch", "--interval", "0.2").interval == 0.2
    assert _parse("retry", "k", "--attempts", "3").attempts == 3
    assert _parse("retry", "k").attempts is None


# ---- the --stdin object ---------------------------------------------------------------------

GOOD = {"to_addresses": ["a@example.com"], "subject": "s", "text_body": "b"}


def _read(doc: object, limit: int = 1 << 20) -> dict[str, object]:
    from outbox_mailer.cli.input import read_email

    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return read_email(raw, limit)


def test_a_good_object_keeps_its_values() -> None:
    doc = {**GOOD, "dedupe_key": "k", "to_addresses": "one@example.com", "cc_addresses": None, "priority": -3,
           "max_attempts": 1, "headers": {"X-A": "1"}, "metadata": {"a": [1, {"b": None}], "c": 1.5},
           "attachments": [{"filename": "a.txt", "content_type": "text/plain", "content_base64": "eA=="}],
           "scheduled_at": "2099-01-01T00:00:00+00:00", "expires_at": None}
    email = _read(doc)
    assert email["to_addresses"] == ["one@example.com"] and email["cc_addresses"] is None
    assert email["priority"] == -3 and email["max_attempts"] == 1 and email["metadata"] == doc["metadata"]
    assert email["scheduled_at"].year == 2099  # type: ignore[union-attr]


def test_an_object_that_names_a_template_keeps_its_name_data_and_locale_and_needs_no_subject() -> None:
    email = _read({"to_addresses": ["a@example.com"], "template": "welcome", "template_data": {"name": ["Ana"]},
                   "locale": "pt-BR", "subject": None})
    assert email == {"to_addresses": ["a@example.com"], "template": "welcome", "template_data": {"name": ["Ana"]},
                     "locale": "pt-BR", "subject": None}


def test_an_object_without_a_template_needs_its_subject() -> None:
    from outbox_mailer.cli.input import UsageError

    with pytest.raises(UsageError, match="'subject' is required"):
        _read({"to_addresses": ["a@example.com"], "text_body": "b"})


def test_an_inline_attachments_content_id_is_taken_as_a_string_or_null() -> None:
    inline = {"filename": "logo.png", "content_type": "image/png", "content_base64": "eA==", "content_id": "logo@x"}
    email = _read({**GOOD, "attachments": [inline, {**inline, "content_id": None}]})
    assert email["attachments"] == [inline, {**inline, "content_id": None}]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"headers": []}, "headers"),
        ({"attachments": [{"filename": "a", "content_type": "a/b", "content_base64": "", "content_id": 1}]},
         "attachments[0].content_id"),
        ({"attachments": {}}, "attachments"),
        ({"metadata": []}, "metadata"),
        ({"priority": 1.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 2.0}, "max_attempts"),
        ({"scheduled_at": "2099-01-01T00:00:00"}, "scheduled_at"),
        ({"scheduled_at": 0}, "scheduled_at"),
        ({"dedupe_key": ""}, "dedupe_key"),
        ({"dedupe_key": None}, "dedupe_key"),
        ({"subject": None}, "subject"),
        ({"bcc_addresses": ["a@example.com", 7]}, "bcc_addresses[1]"),
        ({"attachments": [{"filename": "a", "content_type": "text/plain", "content_base64": "", "x": "y"}]},
         "attachments[0]"),
        ({"nonsense": 1}, "nonsense"),
        ({"template": 1}, "template"),
        ({"template": "welcome", "template_data": []}, "template_data"),
        ({"template": "welcome", "locale": ["pt"]}, "locale"),
    ],
)
def test_wrong_types_name_the_field(override: dict[str, object], field: str) -> None:
    from outbox_mailer.cli.input import UsageError

    with pytest.raises(UsageError) as info:
        _read({**GOOD, **override})
    assert field in str(info.value)


def test_depth_size_encoding_and_constants_are_bounded() -> None:
    from outbox_mailer.cli.input import MAX_JSON_DEPTH, UsageError, json_depth

    assert json_depth('{"a": "[[[[[[", "b": [{"c": "\\"]]]"}]}') == 3  # brackets in strings do not count
    nested: object = 1
    for _ in range(MAX_JSON_DEPTH - 2):
        nested = [nested]
    _read({**GOOD, "metadata": {"x": nested}})  # object + metadata + 30 lists: exactly the limit
    with pytest.raises(UsageError, match="nested"):
        _read({**GOOD, "metadata": {"x": [nested]}})
    with pytest.raises(UsageError, match="nested"):
        _read(b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(UsageError, match="bytes"):
        _read({**GOOD, "text_body": "x" * 2000}, limit=1000)
    with pytest.raises(UsageError, match="UTF-8"):
        _read(b'{"subject": "\xff"}')
    with pytest.raises(UsageError, match="Infinity"):
        _read(b'{"subject": "s", "to_addresses": [], "metadata": {"x": Infinity}}')
    with pytest.raises(UsageError, match="not one JSON object"):
        _read(b'{"priority": ' + b"9" * 5000 + b"}")
