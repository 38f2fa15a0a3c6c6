"""Rows that name a provider's own template (``provider_template``, schema 29) through the whole daemon and the fake
provider server on loopback: Postmark gets ``TemplateAlias`` (or ``TemplateId``) and ``TemplateModel`` at
``/email/withTemplate``, batches of them at ``/email/batchWithTemplates`` and never mixed with other rows; SendGrid
gets ``template_id`` and ``dynamic_template_data``; a transport that cannot render (SMTP, Resend) fails the row
without a network call; failover never hands such a row to another transport."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_mailer.store import Store
from tests.integration.conftest import TOKEN, insert
from tests.provider_server import KEY_HEADER, ProviderServer
from tests.smtp_server import SmtpTestServer

pytestmark = pytest.mark.anyio

UNUSED_SMTP = {"host": "127.0.0.1", "port": 25, "tls": "none", "data_timeout_seconds": 2, "send_timeout_seconds": 2}
POSTMARK_PATHS = ("/email", "/email/batch", "/email/withTemplate", "/email/batchWithTemplates")


def api_settings(server: ProviderServer, kind: str, **settings: Any) -> dict[str, Any]:
    return {"kind": kind, "api_key": TOKEN, "base_url": server.base_url, "timeout_seconds": 2,
            "rate_per_second": 1000, "burst": 100, "batch": False, **settings}


async def provider_row(store: Store, key: str, name: str, model: dict[str, Any] | None = None,
                       transport: str | None = None) -> None:
    await store.execute(
        "INSERT INTO email_deliveries (dedupe_key, to_addresses, cc_addresses, provider_template, template_data, "
        "transport, headers) VALUES ($1, ARRAY['Ann <ann@example.com>'], ARRAY['bo@example.com'], $2, $3::jsonb, "
        "$4, $5::jsonb)", key, name, model, transport, {KEY_HEADER: key})


async def test_a_postmark_row_goes_to_with_template_with_its_alias_and_model_and_no_subject_or_body(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    run = await daemon({"postmark": api("postmark")}, {"postmark": api_settings(provider_server, "postmark")},
                       default_transport="postmark", smtp=UNUSED_SMTP)
    await provider_row(run.store, "alias", "welcome-v2", {"name": "Ann", "items": [1, 2]})
    await provider_row(run.store, "id", "4711")
    rows = await run.final("alias", "id")
    assert {r["status"] for r in rows.values()} == {"sent"}, [r["last_error"] for r in rows.values()]
    sent = {r.json()["Metadata"]["dedupe_key"]: r.json() for r in provider_server.sends("/email/withTemplate")}
    assert sent["alias"]["TemplateAlias"] == "welcome-v2"
    assert sent["alias"]["TemplateModel"] == {"name": "Ann", "items": [1, 2]}
    assert sent["id"]["TemplateId"] == 4711 and sent["id"]["TemplateModel"] == {}
    for document in sent.values():
        assert not {"Subject", "TextBody", "HtmlBody"} & document.keys()
        assert (document["From"], document["To"], document["Cc"]) == (
            "App <app@example.com>", "Ann <ann@example.com>", "bo@example.com")
    assert provider_server.sends("/email") == []


async def test_postmark_batches_template_rows_to_batch_with_templates_and_never_mixes_them_with_other_rows(
        api: Any, daemon: Any, store: Store, provider_server: ProviderServer) -> None:
    templated = [f"t{i}" for i in range(4)]
    plain = [f"p{i}" for i in range(3)]
    for key in templated:
        await provider_row(store, key, "receipt", {"n": key}, transport="postmark")
    for key in plain:
        await insert(store, key, transport="postmark", headers={KEY_HEADER: key})
    run = await daemon({"postmark": api("postmark", batch=True)},
                       {"postmark": api_settings(provider_server, "postmark", batch=True)},
                       default_transport="postmark", smtp=UNUSED_SMTP)
    rows = await run.final(*templated, *plain)
    assert {r["status"] for r in rows.values()} == {"sent"}, [r["last_error"] for r in rows.values()]
    with_templates = [r.json()["Messages"] for r in provider_server.sends("/email/batchWithTemplates")]
    assert with_templates and max(map(len, with_templates)) > 1, "template rows went out in batches"
    assert sorted(m["Metadata"]["dedupe_key"] for ms in with_templates for m in ms) == templated
    assert all(m["TemplateAlias"] == "receipt" and "Subject" not in m for ms in with_templates for m in ms)
    others = [m for r in provider_server.sends("/email/batch") for m in r.json()] + [
        r.json() for r in provider_server.sends("/email")]
    assert sorted(m["Metadata"]["dedupe_key"] for m in others) == plain
    assert not any("TemplateAlias" in m for m in others)
    assert provider_server.sends("/email/withTemplate") == []


async def test_a_sendgrid_row_carries_template_id_and_dynamic_template_data_and_no_content(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    run = await daemon({"sendgrid": api("sendgrid")}, {"sendgrid": api_settings(provider_server, "sendgrid")},
                       default_transport="sendgrid", smtp=UNUSED_SMTP)
    await provider_row(run.store, "sg", "d-0123456789abcdef", {"name": "Ann"})
    rows = await run.final("sg")
    assert rows["sg"]["status"] == "sent", rows["sg"]["last_error"]
    [request] = provider_server.sends("/v3/mail/send")
    document = request.json()
    assert document["template_id"] == "d-0123456789abcdef"
    [personalization] = document["personalizations"]
    assert personalization["dynamic_template_data"] == {"name": "Ann"}
    assert personalization["to"] == [{"email": "ann@example.com", "name": "Ann"}]
    assert not {"content", "subject"} & document.keys()


async def test_a_provider_template_row_routed_to_smtp_fails_permanently_without_a_connection(
        running: Any, store: Store, smtp_server: SmtpTestServer) -> None:
    await provider_row(store, "to-smtp", "welcome-v2", {"name": "Ann"})
    rows = await (await running()).final("to-smtp")
    assert rows["to-smtp"]["status"] == "failed"
    assert rows["to-smtp"]["last_error"] == (
        "provider template: transport 'smtp' (smtp) cannot render a provider's template (postmark, sendgrid can)")
    assert smtp_server.connections == 0


async def test_a_provider_template_row_routed_to_resend_fails_permanently_without_a_request(
        api: Any, daemon: Any, provider_server: ProviderServer) -> None:
    run = await daemon({"resend": api("resend")}, {"resend": api_settings(provider_server, "resend")},
                       default_transport="resend", smtp=UNUSED_SMTP)
    await provider_row(run.store, "to-resend", "welcome-v2")
    rows = await run.final("to-resend")
    assert rows["to-resend"]["status"] == "failed"
    assert "transport 'resend' (resend) cannot render" in rows["to-resend"]["last_error"]
    assert provider_server.sends() == []


async def test_failover_moves_a_plain_row_but_a_provider_template_row_waits_for_its_own_transport(
        api: Any, daemon: Any, store: Store, provider_server: ProviderServer) -> None:
    refused = provider_server.add_fault("reply", status=401, paths=POSTMARK_PATHS,
                                        body={"ErrorCode": 10, "Message": "The Server Token you provided was invalid."})
    await insert(store, "plain", transport="postmark", headers={KEY_HEADER: "plain"})
    await provider_row(store, "tmpl", "welcome-v2", {"name": "Ann"}, transport="postmark")
    run = await daemon({"postmark": api("postmark", auth_pause_seconds=0.3), "backup": api("resend", name="backup")},
                       {"postmark": api_settings(provider_server, "postmark", fallback="backup"),
                        "backup": api_settings(provider_server, "resend")},
                       default_transport="postmark", smtp=UNUSED_SMTP)

    async def tmpl_attempts() -> list[str]:
        [row] = await store.status(["tmpl"])
        return [a["transport"] for a in await store.attempts(row["id"])]

    rows = await run.wait_for(lambda rows: rows.get("plain", {}).get("status") == "sent", ["plain", "tmpl"])
    while len(await tmpl_attempts()) < 2:  # its first attempt refused, and at least one more since
        rows = await run.wait_for(lambda rows: True, ["tmpl"])
        assert rows["tmpl"]["status"] in ("pending", "sending"), rows["tmpl"]["last_error"]
    assert set(await tmpl_attempts()) == {"postmark"}, "never carried by the fallback"
    provider_server.clear_faults()
    assert refused.hits >= 1
    rows = await run.final("tmpl")
    assert rows["tmpl"]["status"] == "sent"
    assert set(await tmpl_attempts()) == {"postmark"}
    assert [r.json()["headers"][KEY_HEADER] for r in provider_server.sends("/emails")] == ["plain"]
    assert [r.json()["TemplateAlias"] for r in provider_server.sends("/email/withTemplate") if r.status == 200] == [
        "welcome-v2"]
