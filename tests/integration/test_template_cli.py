"""``outbox-mailer template`` as a subprocess against a real PostgreSQL: add (versions, a compile error named
with its line and column), list, show and render (through the daemon's worker and limits); and ``enqueue
--template``, a row that names one instead of giving its own subject and body."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest


def outbox_mailer(db_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUTBOX_MAILER_DATABASE_URL": db_url, "OUTBOX_MAILER_TEMPLATES__RENDER_TIMEOUT_SECONDS": "1"}
    return subprocess.run([sys.executable, "-m", "outbox_mailer", *args], capture_output=True,
                          text=True, env=env, input=stdin, timeout=60)


def cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return outbox_mailer(db_url, "template", *args)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "v1.txt").write_text("Hello {{ name }}, v1\n")
    (tmp_path / "v2.html").write_text("<p>Hello {{ name }}, v2</p>\n")
    (tmp_path / "pt.txt").write_text("Olá {{ name }}\n")
    (tmp_path / "broken.txt").write_text("line one\nHello {% if name %}{{ name }\n")
    (tmp_path / "slow.txt").write_text("{% for i in range(100000) %}{% for j in range(100000) %}"
                                       "{% endfor %}{% endfor %}")
    return tmp_path


def test_add_list_show_and_render_a_template_with_versions_and_locales(db_url: str, files: Path) -> None:
    added = cli(db_url, "add", "welcome", "--subject", "Hi {{ name }}", "--text", str(files / "v1.txt"),
                "--by", "ops")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "added welcome locale en version 1"
    again = cli(db_url, "add", "welcome", "--subject", "Hi {{ name }}", "--html", str(files / "v2.html"), "--json")
    assert json.loads(again.stdout)["version"] == 2
    assert cli(db_url, "add", "welcome", "--locale", "pt", "--subject", "Oi", "--text", str(files / "pt.txt")
               ).returncode == 0
    listed = [json.loads(line) for line in cli(db_url, "list", "--json").stdout.splitlines()]
    assert [(r["name"], r["locale"], r["latest_version"], r["is_default"]) for r in listed] == [
        ("welcome", "en", 2, True), ("welcome", "pt", 1, False)]
    shown = json.loads(cli(db_url, "show", "welcome", "--version", "1", "--json").stdout)
    assert shown["text"] == "Hello {{ name }}, v1\n" and shown["html"] is None
    rendered = json.loads(cli(db_url, "render", "welcome", "--locale", "pt-BR", "--data", '{"name": "<b>Ana</b>"}',
                              "--json").stdout)
    assert (rendered["locale"], rendered["subject"], rendered["text"]) == ("pt", "Oi", "Olá <b>Ana</b>\n")
    latest = json.loads(cli(db_url, "render", "welcome", "--data", '{"name": "<b>Ana</b>"}', "--json").stdout)
    assert latest["html"] == "<p>Hello &lt;b&gt;Ana&lt;/b&gt;, v2</p>\n"


def test_a_template_that_does_not_compile_is_refused_at_add_with_its_line_and_column(
        db_url: str, files: Path) -> None:
    refused = cli(db_url, "add", "broken", "--subject", "Hi", "--text", str(files / "broken.txt"))
    assert refused.returncode == 2
    assert "template broken does not compile: text: line 2, column" in refused.stderr
    assert cli(db_url, "list").returncode == 1  # nothing was added


def test_render_refuses_an_undefined_variable_a_slow_template_and_an_unknown_name(db_url: str, files: Path) -> None:
    assert cli(db_url, "add", "slow", "--subject", "{{ subject_line }}", "--text", str(files / "slow.txt")
               ).returncode == 0
    undefined = cli(db_url, "render", "slow", "--data", "{}")
    assert undefined.returncode == 2 and "'subject_line' is undefined" in undefined.stderr
    slow = cli(db_url, "render", "slow", "--data", '{"subject_line": "x"}')
    assert slow.returncode == 2 and "render exceeded 1 s" in slow.stderr
    unknown = cli(db_url, "render", "nope", "--data", "{}")
    assert unknown.returncode == 1 and 'no template named "nope"' in unknown.stderr


def rows(db_url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT dedupe_key, template, template_data, locale, template_version, subject, text_body"
                            " FROM email_deliveries ORDER BY id").fetchall()


def test_enqueue_with_a_template_inserts_a_row_naming_it_with_its_data_and_the_resolved_version(
        db_url: str, files: Path) -> None:
    assert cli(db_url, "add", "welcome", "--subject", "Hi {{ name }}", "--text", str(files / "v1.txt")).returncode == 0
    assert cli(db_url, "add", "welcome", "--locale", "pt", "--subject", "Oi", "--text", str(files / "pt.txt")
               ).returncode == 0
    named = outbox_mailer(db_url, "enqueue", "--key", "w-1", "--to", "ana@example.com", "--template", "welcome",
                          "--data", '{"name": "Ana", "items": [1, 2]}', "--locale", "pt-BR", "--json")
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["created"] is True
    bare = outbox_mailer(db_url, "enqueue", "--key", "w-2", "--to", "bo@example.com", "--template", "welcome")
    assert bare.returncode == 0, bare.stderr
    piped = outbox_mailer(db_url, "enqueue", "--stdin", stdin=json.dumps(
        {"dedupe_key": "w-3", "to_addresses": ["cy@example.com"], "template": "welcome",
         "template_data": {"name": "Cy"}, "locale": "pt"}))
    assert piped.returncode == 0, piped.stderr
    assert rows(db_url) == [("w-1", "welcome", {"name": "Ana", "items": [1, 2]}, "pt", 1, None, None),
                            ("w-2", "welcome", {}, "en", 1, None, None),
                            ("w-3", "welcome", {"name": "Cy"}, "pt", 1, None, None)]


@pytest.mark.parametrize(("args", "message"), [
    (["--template", "welcome", "--subject", "Hi", "--text", "body"],
     "--template or --subject, --text and --html, not both"),
    (["--template", "welcome", "--html", "<p>body</p>"], "--template or --subject, --text and --html, not both"),
    ([], "enqueue needs --subject and --text or --html, or --template"),
    (["--subject", "Hi", "--text", "body", "--data", "{}"], "--data and --locale need --template"),
    (["--subject", "Hi", "--text", "body", "--locale", "pt"], "--data and --locale need --template"),
    (["--template", "welcome", "--data", "[1, 2]"], "--data must hold one JSON object, not a list"),
    (["--template", "welcome", "--data", '"Ana"'], "--data must hold one JSON object, not a string"),
    (["--template", "welcome", "--data", "{name: 1}"], "--data is not one JSON object: Expecting property name"),
    (["--template", "welcome", "--data", '{"n": NaN}'], "--data holds NaN"),
    (["--template", "welcom"], 'the database refused the email: email_deliveries.template: no template named "welcom"'),
])
def test_enqueue_refuses_a_template_with_own_content_neither_data_not_an_object_and_an_unknown_name(
        db_url: str, files: Path, args: list[str], message: str) -> None:
    assert cli(db_url, "add", "welcome", "--subject", "Hi {{ name }}", "--text", str(files / "v1.txt")).returncode == 0
    refused = outbox_mailer(db_url, "enqueue", "--to", "ana@example.com", *args)
    assert refused.returncode == 2, refused.stdout
    assert message in refused.stderr
    assert rows(db_url) == []
