"""The package's floor plan, read from its source: rooms, library edges, cycles, module sizes.

Every module of ``outbox_mailer`` is parsed with :mod:`ast` (nothing is imported) and each of its
imports is checked, function-local and ``TYPE_CHECKING`` ones included: the rules of DESIGN
section 3 and of docs/architecture.md ("Rooms and floors"). A violation names the importing
file, the line and what it imports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import outbox_mailer

PACKAGE = Path(outbox_mailer.__file__).parent
TESTS = Path(__file__).resolve().parents[1]

# Top to bottom: a room may import its own modules and the rooms of the floors below its own,
# never a room of its floor or above. One line per room: what it owns, and why it stands there.
FLOORS: tuple[dict[str, str], ...] = (
    {"__main__": "`python -m outbox_mailer`: runs the CLI"},
    {"cli": "the commands: each builds what it needs (daemon, console, receiver, demo) from the rooms below"},
    {"devtools": "the demo, the SMTP sink and the throwaway cluster: runs a real daemon"},
    {"daemon": "the row's path, claim to recorded outcome: drives the transports, the store and /metrics"},
    {
        "console": "the operator console: pages and actions over the store",
        "receiver": "delivery events taken in (webhooks, ingest-dsn) and written through the store",
        "serving": "HTTP served to the outside (uvicorn), systemd notifications, logging; read the settings",
        "transports": "the edges that send (SMTP, the provider HTTP client), configured by the settings",
        "django": "Django's email backend: messages made Email values and written by the client, nothing else",
    },
    {
        "store": "SQL and asyncpg: decodes rows into the values of the message, events and decide rooms",
        "settings": "every setting, checked at start-up with the message's rules and the provider table",
        "client": "enqueue and status from an application's own connection: the message's rules, no daemon",
    },
    {
        "delivery_events": "after the send, pure: provider events, DSNs, suppression and bounce-tag rules",
        "templating": "stored templates rendered in the Jinja2 sandbox, in a worker process under limits",
    },
    {
        "message": "composition, pure: addresses, header fields, MIME, DKIM, Message-IDs, the staging guard",
        "providers": "the provider API tables, pure: requests built, answers read, the registry of kinds",
        "decide": "outcome -> transition, pure, with `now` passed in",
        "tracing": "an email's trace context: the traceparent's form, and spans through OpenTelemetry if imported",
    },
    {
        "delivery": "the vocabulary every room speaks: Delivery, Outcome and its Cause, Transport",
        "errors": "the one error tree",
        "clock": "the one reader of the clocks",
        "redaction": "secrets kept out of URLs and logs",
        "__init__": "the package face: its version",
    },
)

# Each client library has its homes (DESIGN section 3: I/O sits at the edges): a path ending in
# '/' is a folder of the package.
LIBRARY_HOMES: dict[str, tuple[str, ...]] = {
    "asyncpg": ("store/",),
    "aiosmtplib": ("transports/smtp/",),
    # the provider APIs' client; the receiver's, which fetches Amazon SNS signing certificates,
    # is opened by the `webhooks` command
    "httpx": ("transports/api/http.py", "receiver/server.py", "cli/event_commands.py"),
    "uvicorn": ("serving/http_server.py",),
    "jinja2": ("console/", "templating/"),  # the console's pages; stored templates, in their sandbox
    "django": ("django/",),  # optional (the `django` extra): only the backend's room may need it
    # optional (the `otel` extra): imported only by a process that imported it already (tracing/spans.py)
    "opentelemetry": ("tracing/spans.py",),
}
PURE_CORE = ("decide.py", "delivery.py", "message/", "providers/", "delivery_events/")
NO_IO = ("asyncpg", "aiosmtplib", "httpx", "uvicorn", "starlette", "anyio")

MAX_LINES = 400  # DESIGN section 4: no module over ~400 lines


@dataclass(frozen=True, slots=True)
class Import:
    path: str  # of the importing file, relative to the package
    line: int
    target: str  # a module of the package (dotted, absolute) or a library's top-level name
    name: str  # the statement, as written

    def __str__(self) -> str:
        return f"outbox_mailer/{self.path}:{self.line}: {self.name}"


def module_name(path: Path) -> str:
    parts = ["outbox_mailer", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> list[Import]:
    """Every import statement of the file, anywhere in it, resolved to absolute names."""
    rel = path.relative_to(PACKAGE).as_posix()
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [Import(rel, node.lineno, a.name, f"import {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            written = "." * node.level + (node.module or "")
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append(Import(rel, node.lineno, sub if sub in modules() else target,
                                    f"from {written} import {alias.name}"))
    return found


def all_imports() -> list[Import]:
    return [i for p in modules().values() for i in imports_of(p)]


def internal(target: str) -> bool:
    return target == "outbox_mailer" or target.startswith("outbox_mailer.")


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor_of(room: str) -> int:
    for depth, floor in enumerate(FLOORS):
        if room in floor:
            return depth
    raise AssertionError(f"the room {room!r} is on no floor: add it to FLOORS with its reason")


def under(path: str, homes: tuple[str, ...]) -> bool:
    return any(path.startswith(h) if h.endswith("/") else path == h for h in homes)


def test_every_room_of_the_package_is_on_one_floor() -> None:
    rooms = {room_of(m) for m in modules()}
    listed = [room for floor in FLOORS for room in floor]
    assert len(listed) == len(set(listed)), "a room is listed on two floors"
    assert sorted(rooms) == sorted(listed), "FLOORS must list exactly the package's rooms"


def test_a_room_imports_only_its_own_modules_and_the_floors_below_it() -> None:
    wrong = []
    for imp in all_imports():
        if not internal(imp.target):
            continue
        here, there = room_of(module_name(PACKAGE / imp.path)), room_of(imp.target)
        if here != there and floor_of(there) <= floor_of(here):
            side = "on its own floor" if floor_of(there) == floor_of(here) else "above it"
            wrong.append(f"{imp}: the room {here!r} may not import {there!r}, {side}")
    assert not wrong, "\n".join(wrong)


def test_each_client_library_is_imported_only_at_its_edge() -> None:
    wrong = [f"{imp}: {imp.target.split('.')[0]} belongs to {', '.join(homes)}"
             for imp in all_imports()
             for library, homes in LIBRARY_HOMES.items()
             if imp.target.split(".")[0] == library and not under(imp.path, homes)]
    assert not wrong, "\n".join(wrong)


def test_the_pure_core_imports_no_io_library() -> None:
    wrong = [f"{imp}: the pure core ({', '.join(PURE_CORE)}) does no I/O"
             for imp in all_imports()
             if under(imp.path, PURE_CORE) and imp.target.split(".")[0] in NO_IO]
    assert not wrong, "\n".join(wrong)


def test_no_module_of_the_package_is_in_an_import_cycle() -> None:
    edges: dict[str, list[Import]] = {m: [] for m in modules()}
    for imp in all_imports():
        if imp.target in modules():
            edges[module_name(PACKAGE / imp.path)].append(imp)
    done: set[str] = set()
    path: list[Import] = []
    on_path: dict[str, int] = {}

    def visit(module: str) -> list[Import] | None:
        on_path[module] = len(path)
        for imp in edges[module]:
            if imp.target in on_path:
                return [*path[on_path[imp.target]:], imp]
            if imp.target not in done:
                path.append(imp)
                cycle = visit(imp.target)
                if cycle:
                    return cycle
                path.pop()
        del on_path[module]
        done.add(module)
        return None

    for module in modules():
        if module not in done:
            cycle = visit(module)
            assert cycle is None, "an import cycle:\n" + "\n".join(str(i) for i in cycle)


def test_no_module_of_the_package_is_longer_than_its_limit() -> None:
    lengths = {p.relative_to(PACKAGE).as_posix(): len(p.read_text("utf-8").splitlines())
               for p in modules().values()}
    too_long = {path: n for path, n in lengths.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_no_test_imports_a_private_name_of_the_package() -> None:
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and internal(node.module or "") and node.level == 0:
                wrong += [f"{path.relative_to(TESTS.parent)}:{node.lineno} imports {node.module}.{a.name}"
                          for a in node.names if a.name.startswith("_")]
    assert not wrong, "\n".join(wrong)


def test_the_documented_import_paths_still_lead_to_their_functions() -> None:
    from outbox_mailer.providers import seam, webhook
    from outbox_mailer.transports.seam import batch_idempotency_key
    from outbox_mailer.transports.webhook import verify

    assert batch_idempotency_key is seam.batch_idempotency_key
    assert verify is webhook.verify
