"""What the console's pages read (GET): the overview, the email list and its bulk confirmation, one
email and its HTML preview, the in-doubt rows, the suppressions."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..store.console import MAX_BULK, BulkAction, EmailFilter
from .auth import Session
from .charts import bar_chart
from .content import composed_headers, html_preview
from .filters import (
    EVENTS,
    STATUSES,
    cursor_text,
    filter_params,
    parse_cursor,
    parse_filter,
    query_string,
)
from .web import Console, Refused, key_url, path_segments, segment_value

PAGE_ROWS = 50
NOTICES = {"retry": "Requeued: it is pending again.", "cancel": "Cancelled.", "resolve": "Resolved."}
LIVE_STATUSES = ("pending", "sending")
BULK_ACTIONS: dict[str, BulkAction] = {"retry": "retry", "cancel": "cancel"}  # what a filter page confirms


async def overview(request: Request, console: Console, session: Session) -> Response:
    census = await console.census.read()
    live = await console.store.live(console.settings.default_transport)
    pauses = await console.store.paused_transports()
    table = {(c["status"], c["transport"]): c["n"] for c in census.counts if c["status"] not in LIVE_STATUSES}
    table.update({(c["status"], c["transport"]): c["n"] for c in live["queue"]})  # waiting rows: live
    transports = sorted({transport for _, transport in table})
    totals = {s: sum(n for (status, _), n in table.items() if status == s) for s in STATUSES}
    rates = census.rates
    sent = rates["sent"] or 0
    return console.page(
        request, "overview.html", session, statuses=STATUSES, transports=transports, table=table, totals=totals,
        oldest=live["oldest_due_seconds"], held=live["held"], pauses=pauses,
        configured=sorted(console.settings.all_transports()), refresh=10, census_at=census.taken_at,
        minutes=bar_chart(census.minutes, bucket_seconds=60, buckets=60),
        hours=bar_chart(census.hours, bucket_seconds=3600, buckets=7 * 24),
        rates={name: (rates[name], (rates[name] / sent) if sent else None)
               for name in ("bounces", "hard_bounces", "complaints")}, sent_week=sent)


async def emails(request: Request, console: Console, session: Session) -> Response:
    params = request.query_params
    f = parse_filter(params)
    bulk = params.get("bulk")
    if bulk:
        return await _confirm_bulk(request, console, session, f, bulk)
    ids = (await console.census.read()).in_doubt_ids if f.status == "in_doubt" else None
    page = await console.store.emails(f, console.settings.default_transport, after=parse_cursor(params.get("after")),
                                      limit=PAGE_ROWS, in_doubt_ids=ids)
    next_url = "/emails?" + query_string(f, after=cursor_text(page.after)) if page.after else None
    return console.page(request, "emails.html", session, rows=page.rows, filter=filter_params(f), statuses=STATUSES,
                        events=EVENTS, next_url=next_url, first_page=not params.get("after"), searched=page.searched,
                        retry_url="/emails?" + query_string(f, bulk="retry"),
                        cancel_url="/emails?" + query_string(f, bulk="cancel"))


async def _confirm_bulk(request: Request, console: Console, session: Session, f: EmailFilter,
                        asked: str) -> Response:
    action = BULK_ACTIONS.get(asked)
    if action is None:
        raise Refused(400, "bulk: retry or cancel")
    if session.role != "operator":
        raise Refused(403, "Only operators may do this.")
    count = await console.store.count_selection(f, console.settings.default_transport, action)
    if count > MAX_BULK:
        raise Refused(400, f"{count} emails match: a bulk action changes at most {MAX_BULK}; narrow the filter.")
    return console.page(request, "confirm.html", session, action=action, count=count, filter=filter_params(f),
                        back="/emails?" + query_string(f))


async def email(request: Request, console: Console, session: Session) -> Response:
    segments = path_segments(request, "/emails/")
    key = segment_value(request, segments)
    if len(segments) == 2 and segments[1] == "html":
        row = await console.store.email(key)
        if row is None or row["html_body"] is None:
            raise Refused(404, "no HTML body")
        return html_preview(row["html_body"], remote=request.query_params.get("remote") == "1")
    if len(segments) != 1 or not key:
        raise Refused(404, "no such page")
    row = await console.store.email(key)
    if row is None:
        raise Refused(404, f"No email has the dedupe key {key!r}.")
    attempts = await console.store.attempts(row["id"])
    events = await console.store.events_of(key)
    actions = await console.store.actions_of(key)
    return console.page(
        request, "email.html", session, row=row, attempts=attempts, events=events, actions=actions,
        headers=composed_headers(row, console.settings), notice=NOTICES.get(request.query_params.get("done", "")),
        remote=request.query_params.get("remote") == "1", url=key_url(key),
        refresh=2 if row["status"] in LIVE_STATUSES else 10)


async def in_doubt(request: Request, console: Console, session: Session) -> Response:
    census = await console.census.read()
    page = await console.store.emails(EmailFilter(status="in_doubt", oldest_first=True),
                                      console.settings.default_transport,
                                      after=parse_cursor(request.query_params.get("after")), limit=PAGE_ROWS,
                                      in_doubt_ids=census.in_doubt_ids)
    next_url = "/in-doubt?after=" + cursor_text(page.after) if page.after else None
    return console.page(request, "in_doubt.html", session, rows=page.rows, next_url=next_url, refresh=10,
                        census_at=census.taken_at)


async def suppressions(request: Request, console: Console, session: Session) -> Response:
    search = request.query_params.get("q", "")
    if len(search) > 320:
        raise Refused(400, "q: at most 320 characters")
    rows = await console.store.search_suppressions(search, 200)
    return console.page(request, "suppressions.html", session, rows=rows, q=search,
                        reasons=("manual", "hard_bounce", "complaint", "unsubscribe"))
