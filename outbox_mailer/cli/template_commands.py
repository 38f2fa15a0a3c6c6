"""Stored templates (docs/templates.md): ``template add NAME [--locale L] --subject S [--text FILE] [--html FILE]
[--by WHO]``, ``template list [--json]``, ``template show NAME [--locale L] [--version N] [--json]`` and
``template render NAME --data JSON [--locale L] [--version N] [--json]``.

``add`` compiles every part first and refuses one that does not compile (exit 2) with its part, line and
column; the version it adds is the next of that name and locale. ``show`` and ``render`` pick a version as a
row's INSERT would (the locale chain, the latest version unless one is given; none: exit 1). ``render`` runs
through the daemon's own worker process and limits and prints the subject and bodies as they would be sent.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import TemplateError
from ..settings.config import Settings
from ..store.templates import TemplateStore
from ..templating.render import TemplateVersion
from ..templating.sandbox import compile_problem
from ..templating.worker import render_isolated
from .database import run_with_store
from .input import UsageError, json_object
from .output import EXIT_NOTHING, EXIT_OK, emit
from .pause_commands import cli_actor

DEFAULT_LOCALE = "en"


def _source(path: str | None, option: str) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option} {path}: {exc}") from exc


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    text, html = _source(args.text, "--text"), _source(args.html, "--html")
    if text is None and html is None:
        raise UsageError("give --text FILE, --html FILE or both")
    for part, source, escaped in (("subject", args.subject, False), ("text", text, False), ("html", html, True)):
        problem = None if source is None else compile_problem(source, part, html=escaped)
        if problem is not None:
            raise TemplateError(f"template {args.name} does not compile: {problem}")
    created_by = args.by or cli_actor()

    async def go(store: TemplateStore) -> int:
        await store.require_schema()
        row = await store.add_template(args.name, args.locale, args.subject, text, html, created_by)
        if args.json:
            emit(row)
        else:
            print(f"added {row['name']} locale {row['locale']} version {row['version']}")
        return EXIT_OK

    return run_with_store(settings, go, TemplateStore)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: TemplateStore) -> int:
        await store.require_schema()
        rows = await store.templates()
        for row in rows:
            if args.json:
                emit(row)
            else:
                default = " (default)" if row["is_default"] else ""
                print(f"{row['name']:32} {row['locale'] + default:16} v{row['latest_version']:<4} "
                      f"{row['versions']:>3} versions  {row['created_at'].isoformat(timespec='seconds')} "
                      f"{row['created_by']}")
        return EXIT_OK if rows else EXIT_NOTHING

    return run_with_store(settings, go, TemplateStore)


async def _version(store: TemplateStore, args: argparse.Namespace) -> TemplateVersion:
    await store.require_schema()
    return await store.template(args.name, args.locale, args.version)


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    async def go(store: TemplateStore) -> int:
        version = await _version(store, args)
        fields = {"name": version.name, "locale": version.locale, "version": version.version,
                  "subject": version.subject, "text": version.text_body, "html": version.html_body}
        if args.json:
            emit(fields)
        else:
            _print_parts(f"{version.describe()}", version.subject, version.text_body, version.html_body)
        return EXIT_OK

    return run_with_store(settings, go, TemplateStore)


def cmd_render(args: argparse.Namespace, settings: Settings) -> int:
    data = json_object("--data", args.data)
    limits = settings.render_limits()

    async def go(store: TemplateStore) -> int:
        version = await _version(store, args)
        parts = await render_isolated(version, data, limits)
        if args.json:
            emit({"name": version.name, "locale": version.locale, "version": version.version,
                  "subject": parts.subject, "text": parts.text_body, "html": parts.html_body})
        else:
            _print_parts(version.describe(), parts.subject, parts.text_body, parts.html_body)
        return EXIT_OK

    return run_with_store(settings, go, TemplateStore)


def _print_parts(title: str, subject: str, text: str | None, html: str | None) -> None:
    print(f"# {title}")
    print(f"Subject: {subject}")
    for name, body in (("text", text), ("html", html)):
        if body is not None:
            print(f"--- {name} ---")
            print(body)


def register(sub: Any) -> None:
    """Add ``template`` and its subcommands."""
    group = sub.add_parser("template", help="stored templates: add a version, list, show, render")
    commands = group.add_subparsers(dest="template_command", required=True, metavar="SUBCOMMAND")

    p = commands.add_parser("add", help="add a version of a template (the next of its name and locale)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--locale", default=DEFAULT_LOCALE, help=f"its locale, like pt-BR (default {DEFAULT_LOCALE})")
    p.add_argument("--subject", required=True, help="the Subject, itself a template")
    p.add_argument("--text", metavar="FILE", help="the text body's template (UTF-8)")
    p.add_argument("--html", metavar="FILE", help="the HTML body's template (UTF-8; the data is escaped)")
    p.add_argument("--by", help="who adds it (default: cli:<OS user>)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_add)

    p = commands.add_parser("list", help="every template and locale, with its latest version")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    for name, func, help_text in (("show", cmd_show, "a version's sources"),
                                  ("render", cmd_render, "a version rendered with data, as it would be sent")):
        p = commands.add_parser(name, help=help_text)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--locale", help="as a row's locale: exact, then its language, then the default")
        p.add_argument("--version", type=int, help="that version (default: the latest)")
        if name == "render":
            p.add_argument("--data", required=True, metavar="JSON", help="the row's template_data, a JSON object")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)


__all__ = ["register"]
