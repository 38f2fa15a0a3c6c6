"""`check`'s explanation of a failed SMTP relay on this machine: which settings to change, and never for a real relay."""

from __future__ import annotations

from outbox_mailer.cli.setup_commands import local_relay_hint
from outbox_mailer.settings.config import Settings


def settings(**smtp: object) -> Settings:
    return Settings(smtp=smtp, transports={"relay": {"kind": "smtp", **smtp}})


def test_a_loopback_relay_that_requires_starttls_is_told_to_set_tls_none_and_its_port() -> None:
    hint = local_relay_hint("smtp", settings(host="127.0.0.1"))
    assert hint == ("127.0.0.1 is this machine: a local relay or sink without TLS needs OUTBOX_MAILER_SMTP__TLS=none "
                    "and OUTBOX_MAILER_SMTP__PORT=<its port> (outbox-mailer sink listens on 2525); tls=starttls "
                    "requires TLS, here on port 587")


def test_a_named_smtp_transport_on_localhost_gets_its_own_setting_names() -> None:
    hint = local_relay_hint("relay", settings(host="localhost", port=2525, tls="implicit"))
    assert hint is not None
    assert "OUTBOX_MAILER_TRANSPORTS__RELAY__TLS=none and OUTBOX_MAILER_TRANSPORTS__RELAY__PORT=2525" in hint


def test_a_loopback_relay_without_tls_and_without_a_port_is_told_the_port_setting() -> None:
    hint = local_relay_hint("smtp", settings(host="::1", tls="none"))
    assert hint == ("::1 is this machine: with tls=none the port defaults to 25; a local relay or sink elsewhere "
                    "needs OUTBOX_MAILER_SMTP__PORT=<its port> (outbox-mailer sink listens on 2525)")


def test_no_explanation_for_a_relay_elsewhere_or_one_already_configured_for_a_local_port() -> None:
    assert local_relay_hint("smtp", settings(host="smtp.example.com")) is None
    assert local_relay_hint("smtp", settings(host="10.0.0.5", port=2525, tls="none")) is None
    assert local_relay_hint("smtp", settings(host="127.0.0.1", port=2525, tls="none")) is None
