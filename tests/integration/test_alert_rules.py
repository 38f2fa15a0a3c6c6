"""monitoring/: the alerting rules pass ``promtool check rules`` and their unit tests (``promtool test
rules``), every alert has a case that fires and one that stays silent, the dashboard's queries parse,
and the rules and the dashboard name only metrics, labels and label values that a real daemon and a
real webhook receiver export (both started here, on loopback, against the test PostgreSQL).

Without promtool the promtool tests skip, except under CI (``CI`` set), where they fail: Debian's
``prometheus`` package carries it (``apt-get install prometheus``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from outbox_mailer.receiver.server import Receiver, build_app
from outbox_mailer.serving.http_server import serve_http
from outbox_mailer.settings.config import Settings
from outbox_mailer.store import EventStore
from tests.in_process_daemon import settings_for
from tests.integration.conftest import insert, metered_daemon
from tests.smtp_server import SmtpTestServer, free_port
from tests.sql_store import SqlStore

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
RULES = MONITORING / "outbox-mailer.rules.yml"
RULE_TESTS = MONITORING / "outbox-mailer.rules.test.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"

# Series and labels that Prometheus itself makes, not the code: a target's `up`, and the target
# labels it adds to every scraped series.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"job", "instance"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT)


# ---- reading the files -----------------------------------------------------------------

def _strip_comment(line: str) -> str:
    """A line without its trailing ``#`` comment (PromQL's and YAML's), strings kept intact."""
    return STRING_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0)[0] != "#" else "", line)


def rule_expressions(text: str) -> list[str]:
    """Every ``expr:`` of a rules file, in order.

    No YAML library is a dependency of the project, so this reads the forms a rules file uses: a
    plain or quoted scalar (possibly continued on more indented lines) or a block scalar (``|``,
    ``>``, with ``-``/``+``). The test that calls it checks its count against promtool's and
    re-parses what it read with promtool, so a form it misreads fails there, not silently here.
    """
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        m = re.match(r"^(\s*(?:-\s+)?)expr:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        column, value = len(m.group(1)), m.group(2).strip()
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > column):
            body.append(lines[i])
            i += 1
        if re.fullmatch(r"[|>][+-]?", value):
            found.append("\n".join(_strip_comment(line) for line in body).strip())
            continue
        joined = " ".join([value, *(line.strip() for line in body)]).strip()
        if joined.startswith("'"):
            found.append(joined[1:-1].replace("''", "'"))
        elif joined.startswith('"'):
            found.append(json.loads(joined))
        else:
            found.append(re.sub(r"\s+#.*$", "", joined))
    return found


@dataclass(frozen=True)
class Query:
    where: str  # for messages: the panel or variable it comes from
    expr: str  # PromQL with Grafana's variables as written
    label: str | None = None  # label_values(expr, label): a label the expression's metrics must carry


def dashboard_queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every panel target's expression and every templating variable's query."""
    found = []

    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    for panel in walk(dashboard["panels"]):
        for target in panel.get("targets", []):
            found.append(Query(f"panel {panel['title']!r} target {target['refId']}", target["expr"]))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*", query)
        assert m, f"variable {variable['name']}: only label_values(expr, label) is understood, got {query!r}"
        found.append(Query(f"variable {variable['name']}", m.group(1), m.group(2)))
    return found


def concrete(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, so that promtool can parse it."""
    expr = re.sub(r"\$\{?__(rate_interval|interval|range)\}?", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", "x", expr)


# ---- naming: which metrics, labels and values an expression uses ------------------------

STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`'
STRING_OR_COMMENT = re.compile(rf"{STRING}|#[^\n]*")
SELECTOR = re.compile(rf"(?<![\w:])([a-zA-Z_:][\w:]*)?\s*\{{((?:[^{{}}\"'`]|{STRING})*)\}}")
MATCHER = re.compile(rf"\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*({STRING})\s*,?")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
            "offset", "inf", "nan"}


@dataclass(frozen=True)
class Selector:
    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, operator, value)


@dataclass
class Usage:
    selectors: list[Selector] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)  # labels in by/without/on/ignoring/group_*


def _unquote(literal: str) -> str:
    inner = literal[1:-1]
    if literal[0] == "`":
        return inner
    if literal[0] == "'":
        inner = inner.replace("\\'", "'")
    return json.loads('"' + inner.replace('\\"', '"').replace('"', '\\"') + '"')


def usage(expr: str) -> Usage:
    """The metric selectors and grouping labels of a PromQL expression (Grafana's $variables allowed)."""
    used = Usage()
    text = STRING_OR_COMMENT.sub(lambda m: m.group(0) if m.group(0)[0] != "#" else " ", expr)

    def selector(m: re.Match[str]) -> str:
        name, body = m.group(1), m.group(2)
        matchers, pos = [], 0
        while pos < len(body.strip()):
            mm = MATCHER.match(body, pos)
            if mm is None:
                raise ValueError(f"cannot read the label matchers {body!r} in {expr!r}")
            matchers.append((mm.group(1), mm.group(2), _unquote(mm.group(3))))
            pos = mm.end()
        keyword = name is not None and name.lower() in KEYWORDS
        metrics = [v for label, op, v in matchers if label == "__name__" and op == "="]
        if name is not None and not keyword:
            metrics.append(name)
        if not metrics:
            raise ValueError(f"a selector without a metric name in {expr!r}")
        for metric in metrics:
            used.selectors.append(Selector(metric, tuple(x for x in matchers if x[0] != "__name__")))
        return f" {name} " if keyword else " "

    text = SELECTOR.sub(selector, text)
    text = re.sub(STRING, " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    for m in GROUPING.finditer(text):
        used.grouping |= {label.strip() for label in m.group(2).split(",") if label.strip()}
    text = GROUPING.sub(" ", text)  # "max by (job) (x)": max stays a function call
    for m in IDENTIFIER.finditer(text):
        if m.group(1).lower() not in KEYWORDS:
            used.selectors.append(Selector(m.group(1), ()))
    return used


# ---- what the code exports ---------------------------------------------------------------

SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("", "_count", "_sum", "_created"), "gauge": ("",), "info": ("_info",)}


@dataclass
class Exported:
    """Series names to their label names and the values seen for each."""

    series: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    def add_page(self, page: str) -> None:
        for family in text_string_to_metric_families(page):
            if not family.samples:  # a labelled metric no code path has used yet: its names, no labels
                for suffix in SUFFIXES.get(family.type, ("",)):
                    self.series.setdefault(family.name + suffix, {})
            for sample in family.samples:
                labels = self.series.setdefault(sample.name, {})
                for label, value in sample.labels.items():
                    labels.setdefault(label, set()).add(value)

    def all_labels(self) -> set[str]:
        return {label for labels in self.series.values() for label in labels} | TARGET_LABELS


def problems(queries: list[Query], exported: Exported) -> list[str]:
    """What the queries name that the code does not export; empty when everything checks out."""
    found, all_labels = [], exported.all_labels()
    for query in queries:
        used = usage(query.expr)
        for s in used.selectors:
            if s.metric in PROMETHEUS_SERIES:
                known: dict[str, set[str]] | None = {label: set() for label in TARGET_LABELS}
            else:
                known = exported.series.get(s.metric)
            if known is None:
                found.append(f"{query.where}: {s.metric} is not exported")
                continue
            labels = {*((query.label,) if query.label else ()), *(label for label, _, _ in s.matchers)}
            for label in sorted(labels - TARGET_LABELS - set(known)):
                found.append(f"{query.where}: {s.metric} has no label {label}"
                             + ("" if known else " (no sample of it was seen)"))
            for label, op, value in s.matchers:
                if label in TARGET_LABELS or label not in known or "$" in value:
                    continue
                if op == "=":
                    wanted = [value]
                elif op == "=~" and re.fullmatch(r"[\w.-]+(\|[\w.-]+)*", value):
                    wanted = value.split("|")  # an alternation of literal values: each must exist
                else:
                    continue
                for v in wanted:
                    if v not in known[label]:
                        found.append(f"{query.where}: {s.metric}{{{label}={v!r}}} is never exported "
                                     f"(seen: {sorted(known[label])})")
        for label in sorted(used.grouping - all_labels):
            found.append(f"{query.where}: no exported metric has the label {label}")
    return found


def rules_queries() -> list[Query]:
    return [Query(f"rule expr #{i + 1}", e) for i, e in enumerate(rule_expressions(RULES.read_text()))]


# ---- promtool ------------------------------------------------------------------------------

def test_promtool_checks_the_rules_and_reads_what_this_test_reads() -> None:
    done = run_promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    counted = re.search(r"SUCCESS: (\d+) rules found", done.stdout)
    assert counted, done.stdout
    exprs = rule_expressions(RULES.read_text())
    assert len(exprs) == int(counted.group(1)), "the expression reader missed or invented a rule"
    assert len(re.findall(r"^\s*-\s+alert:", RULES.read_text(), re.MULTILINE)) == len(exprs)
    # What this test read, written back as recording rules (JSON is YAML), parses the same way.
    assert _promtool_parses(exprs, "reread") == []


def _promtool_parses(exprs: list[str], prefix: str) -> list[str]:
    """promtool's complaints about these expressions, written as recording rules (JSON is YAML)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "exprs.rules.yml"
        path.write_text(json.dumps({"groups": [{"name": prefix, "rules": [
            {"record": f"{prefix}:expr_{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
        done = run_promtool("check", "rules", path)
        return [] if done.returncode == 0 else [done.stdout + done.stderr]


def test_every_alert_has_a_runbook_annotation() -> None:
    text = RULES.read_text()
    blocks = re.split(r"^\s*-\s+alert:", text, flags=re.MULTILINE)[1:]
    assert blocks
    for block in blocks:
        name = block.split()[0]
        assert re.search(r"^\s+runbook:", block, re.MULTILINE), f"{name} has no runbook annotation"
        assert re.search(r"^\s+severity:\s+(warning|critical)\s*$", block, re.MULTILINE), f"{name} has no severity"


def test_promtool_unit_tests_pass() -> None:
    done = run_promtool("test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_firing_and_silent() -> None:
    alerts = re.findall(r"^\s*-\s+alert:\s*(\S+)", RULES.read_text(), re.MULTILINE)
    cases = re.findall(r"alertname:\s*(\S+)\s*\n\s*exp_alerts:(.*)", RULE_TESTS.read_text())
    fires = {name for name, rest in cases if rest.strip() != "[]"}
    silent = {name for name, rest in cases if rest.strip() == "[]"}
    assert sorted(set(alerts) - fires) == [], "alerts with no case where they fire"
    assert sorted(set(alerts) - silent) == [], "alerts with no case where they stay silent"
    assert sorted({name for name, _ in cases} - set(alerts)) == [], "cases for alerts that do not exist"


def test_promtool_fails_a_broken_unit_test(tmp_path: Path) -> None:
    """The unit tests can fail: a rule that never fires breaks its firing case (only its cases are run)."""
    rules = RULES.read_text().replace("expr: max by (job) (outbox_mailer_oldest_due_age_seconds) > 300\n",
                                      "expr: max by (job) (outbox_mailer_oldest_due_age_seconds) > 300000\n")
    assert rules != RULES.read_text()
    head, *groups = re.split(r"\n(?=  # )", RULE_TESTS.read_text())
    lagging = [g for g in groups if "alertname: OutboxMailerQueueLagging" in g]
    assert head.rstrip().endswith("tests:") and lagging
    (tmp_path / RULES.name).write_text(rules)
    (tmp_path / RULE_TESTS.name).write_text("\n".join([head, *lagging]))
    assert run_promtool("test", "rules", tmp_path / RULE_TESTS.name).returncode != 0
    (tmp_path / RULES.name).write_text(RULES.read_text())
    done = run_promtool("test", "rules", tmp_path / RULE_TESTS.name)
    assert done.returncode == 0, "the same cases pass with the real rule: " + done.stdout + done.stderr


def test_the_dashboard_is_importable_and_its_queries_parse() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids, queries = [], dashboard_queries(dashboard)
    for panel in dashboard["panels"]:
        ids.append(panel["id"])
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert len(queries) > 20
    assert _promtool_parses([concrete(q.expr) for q in queries], "dashboard") == []


# ---- the names: against a real daemon and a real receiver ---------------------------------

RESEND_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _svix(body: bytes, msg_id: str, secret: str = RESEND_SECRET) -> dict[str, str]:
    stamp = str(int(time.time()))
    key = base64.b64decode(secret.removeprefix("whsec_"))
    sig = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + body, hashlib.sha256).digest()).decode()
    return {"svix-id": msg_id, "svix-timestamp": stamp, "svix-signature": f"v1,{sig}",
            "content-type": "application/json"}


async def _daemon_page(db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> str:
    """/metrics of a daemon that sent a row, failed one for a suppressed recipient, and took limit grants."""
    smtp = {"host": smtp_server.host, "port": smtp_server.port, "tls": "none", "connect_timeout_seconds": 2,
            "command_timeout_seconds": 2, "data_timeout_seconds": 2, "rate_per_second": 100, "daily_limit": 1000}
    settings = settings_for(db_url, smtp_server, metrics_address=f"127.0.0.1:{free_port()}", smtp=smtp)
    await store.execute("INSERT INTO email_suppressions (address, reason, source) "
                        "VALUES ('gone@example.com', 'manual', 'operator')")
    await insert(store, "alerts-sent")
    await insert(store, "alerts-suppressed", to_addresses=["gone@example.com"])
    async with metered_daemon(settings) as started, httpx.AsyncClient(timeout=5) as client:
        with anyio.fail_after(20):
            while True:  # every scrape-time family present, both rows counted
                page = (await client.get(f"{started.base}/metrics")).text
                if all(n in page for n in ('outbox_mailer_transport_rate_per_second{',
                                           'outbox_mailer_transport_daily_used{',
                                           'outbox_mailer_emails_suppressed_total{',
                                           'outbox_mailer_emails_sent_total{transport="smtp"} 1.0',
                                           'outbox_mailer_rows{status="in_doubt"}')):
                    return page
                await anyio.sleep(0.1)


async def _receiver_page(db_url: str) -> str:
    """/metrics of the webhook receiver after a bounce, a complaint and a forged request."""
    settings = Settings(database_url=db_url, webhooks={"resend": {"secret": RESEND_SECRET}})
    events = await EventStore.open(db_url)
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            app = build_app(Receiver(settings.webhooks, events, automatic_suppression=True, http=http))
            async with serve_http(app, f"127.0.0.1:{free_port()}", setting="test") as (host, port):
                base = f"http://{host}:{port}"
                for n, kind in enumerate(("email.bounced", "email.complained")):
                    body = json.dumps({"type": kind, "created_at": "2026-12-01T12:00:00.000Z",
                                       "data": {"email_id": f"re_alerts_{n}", "to": ["a@example.com"],
                                                "created_at": "2026-12-01T12:00:00.000Z",
                                                "bounce": {"type": "Permanent", "message": "no such user"}}}).encode()
                    r = await http.post(f"{base}/webhooks/resend", content=body, headers=_svix(body, f"msg_{n}"))
                    assert r.status_code == 200, r.text
                forged = b'{"type": "email.delivered"}'
                headers = _svix(forged, "msg_f", secret="whsec_" + base64.b64encode(b"x" * 24).decode())
                assert (await http.post(f"{base}/webhooks/resend", content=forged, headers=headers)).status_code == 401
                return (await http.get(f"{base}/metrics")).text
    finally:
        await events.close()


@pytest.fixture
async def exported(db_url: str, store: SqlStore, smtp_server: SmtpTestServer) -> Exported:
    names = Exported()
    names.add_page(await _daemon_page(db_url, store, smtp_server))
    names.add_page(await _receiver_page(db_url))
    return names


@pytest.mark.anyio
async def test_rules_and_dashboard_name_only_what_the_code_exports(exported: Exported) -> None:
    assert "outbox_mailer_emails_sent_total" in exported.series  # the pages were really read
    assert "outbox_mailer_webhook_events_total" in exported.series
    dashboard = dashboard_queries(json.loads(DASHBOARD.read_text()))
    assert problems(rules_queries(), exported) + problems(dashboard, exported) == []
    used = {s.metric for q in [*rules_queries(), *dashboard] for s in usage(q.expr).selectors}
    assert len(used) > 15, used


# ---- the check itself can fail ------------------------------------------------------------

KNOWN_PAGE = """\
# TYPE outbox_mailer_emails_sent_total counter
outbox_mailer_emails_sent_total{transport="smtp"} 3.0
# TYPE outbox_mailer_rows gauge
outbox_mailer_rows{status="pending"} 1.0
outbox_mailer_rows{status="in_doubt"} 0.0
# TYPE outbox_mailer_transport_paused gauge
outbox_mailer_transport_paused{transport="smtp"} 0.0
# HELP outbox_mailer_webhook_unavailable_requests_total Requests answered 503
# TYPE outbox_mailer_webhook_unavailable_requests_total counter
"""


def known() -> Exported:
    names = Exported()
    names.add_page(KNOWN_PAGE)
    return names


@pytest.mark.parametrize(("expr", "metrics", "grouping"), [
    ("rate(outbox_mailer_emails_sent_total[5m])", {"outbox_mailer_emails_sent_total"}, set()),
    (('sum by (job, transport) (rate(a_total{x="}{", y=~"$job"}[$__rate_interval])) / on (job) group_left b'
      ' > 0.05 and c offset 5m or {__name__="d"} unless bool_thing'), {"a_total", "b", "c", "d", "bool_thing"},
     {"job", "transport"}),
    ("histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m]))) # a comment naming not_a_metric",
     {"x_bucket"}, {"le"}),
    ('absent(up{job="outbox-mailer"} == 1) and time() - m > 1e3 and nan_metric > Inf', {"up", "m", "nan_metric"},
     set()),
])
def test_the_extractor_finds_every_metric(expr: str, metrics: set[str], grouping: set[str]) -> None:
    used = usage(expr)
    assert {s.metric for s in used.selectors} == metrics
    assert used.grouping == grouping


@pytest.mark.parametrize(("expr", "problem"), [
    ("rate(outbox_mailer_emails_bounced_total[5m]) > 0", "outbox_mailer_emails_bounced_total is not exported"),
    ("outbox_mailer_emails_sent > 0", "outbox_mailer_emails_sent is not exported"),  # the family, not the series
    ('outbox_mailer_transport_paused{provider="x"} == 1', "outbox_mailer_transport_paused has no label provider"),
    ('outbox_mailer_rows{status="indoubt"} > 0', "outbox_mailer_rows{status='indoubt'} is never exported"),
    ('outbox_mailer_rows{status=~"pending|sendng"} > 0', "outbox_mailer_rows{status='sendng'} is never exported"),
    ("sum by (provider) (outbox_mailer_rows)", "no exported metric has the label provider"),
    ('increase(outbox_mailer_webhook_unavailable_requests_total{kind="x"}[5m])',
     "outbox_mailer_webhook_unavailable_requests_total has no label kind (no sample of it was seen)"),
])
def test_the_check_refuses_what_is_not_exported(expr: str, problem: str) -> None:
    found = problems([Query("q", expr)], known())
    assert len(found) == 1 and found[0].startswith(f"q: {problem}"), found


def test_the_check_accepts_what_is_exported() -> None:
    good = ['max by (job) (outbox_mailer_rows{status="in_doubt", job=~"$job"}) > 0',
            "up == 0 and on (job, instance) outbox_mailer_emails_sent_total",
            "increase(outbox_mailer_webhook_unavailable_requests_total[5m])"]
    assert problems([Query("q", e) for e in good], known()) == []
    assert problems([Query("v", "outbox_mailer_emails_sent_total", label="transport")], known()) == []
    assert problems([Query("v", "outbox_mailer_rows", label="transport")], known()) == [
        "v: outbox_mailer_rows has no label transport"]


def test_a_rules_file_naming_a_missing_metric_is_caught() -> None:
    """The same path as the real check, from the file's text: a rule that names a metric the code lacks fails."""
    bad = RULES.read_text().replace("outbox_mailer_oldest_due_age_seconds", "outbox_mailer_oldest_due_age", 1)
    assert bad != RULES.read_text()
    queries = [Query(f"rule expr #{i + 1}", e) for i, e in enumerate(rule_expressions(bad))]
    names = known()
    for q in rules_queries():  # everything the real file names is "exported" here, so only the edit shows
        for s in usage(q.expr).selectors:
            for label, _, value in s.matchers:
                names.series.setdefault(s.metric, {}).setdefault(label, set()).update(value.split("|"))
            names.series.setdefault(s.metric, {})
        for label in usage(q.expr).grouping:
            names.series.setdefault("grouping_labels", {}).setdefault(label, set())
    assert problems(rules_queries(), names) == []
    found = problems(queries, names)
    assert len(found) == 1 and "outbox_mailer_oldest_due_age is not exported" in found[0], found
