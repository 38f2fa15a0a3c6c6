"""The console's signing key: forms signed by one process are accepted by another with the same key, and
a key being rotated out is still accepted while the new one signs."""

from __future__ import annotations

from outbox_mailer.console.auth import FORM_SECONDS, Signer

OLD, NEW = "o" * 32, "n" * 32


def test_a_form_signed_with_the_shared_key_is_valid_on_another_process_until_it_expires() -> None:
    token = Signer.from_setting(OLD).form_token("nonce", now=1000)
    other = Signer.from_setting(OLD)
    assert other.form_token_valid("nonce", token, now=1000 + FORM_SECONDS)
    assert not other.form_token_valid("nonce", token, now=1001 + FORM_SECONDS)  # expired
    assert not other.form_token_valid("another nonce", token, now=1000)  # bound to its cookie
    assert not Signer.from_setting(None).form_token_valid("nonce", token, now=1000)  # another key


def test_while_rotating_the_first_key_signs_and_each_key_is_accepted() -> None:
    rotating = Signer.from_setting(f"{NEW} {OLD}")
    old_token = Signer.from_setting(OLD).form_token("n", now=0)
    assert rotating.form_token_valid("n", old_token, now=0)
    assert Signer.from_setting(NEW).form_token_valid("n", rotating.form_token("n", now=0), now=0)
    assert not Signer.from_setting(OLD).form_token_valid("n", rotating.form_token("n", now=0), now=0)
