"""Summarise a py-spy ``--format raw`` (collapsed stacks) profile.

Usage: python bench/hotspots.py PROFILE.raw [--top 25] [--filter outbox_mailer]

Prints, for functions whose file path contains the filter, the share of samples
in which they are on the stack (inclusive) and on top of it (self), plus the
library functions with the most self time overall.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+?)(?::(?P<line>\d+))?\)$")


def load(path: str) -> tuple[list[tuple[list[str], int]], int]:
    stacks = []
    total = 0
    with open(path) as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            n = int(count)
            stacks.append((stack.split(";"), n))
            total += n
    return stacks, total


def name(frame: str) -> tuple[str, str]:
    m = FRAME.match(frame)
    if not m:
        return frame, ""
    file = m.group("file")
    short = file.split("site-packages/")[-1].split("/work/main/")[-1].split("/lib/python3.11/")[-1]
    return f"{m.group('func')} ({short})", file


# Where a sample's time goes: walking from the innermost frame outwards, the first frame that
# belongs to one of these (event-loop plumbing and the CLI entry point are skipped over).
CATEGORIES = (
    ("start-up (imports)", ("<frozen importlib",)),
    ("logging (one line per state change)", ("(logging/",)),
    ("address validation (email_validator, addresses.py)", ("email_validator/", "outbox_mailer/message/addresses.py")),
    ("SMTP client (aiosmtplib, incl. its socket I/O)", ("aiosmtplib/",)),
    ("PostgreSQL client (asyncpg, incl. its socket I/O)", ("asyncpg/",)),
    ("composition (compose.py, mime.py)", ("outbox_mailer/message/compose.py", "outbox_mailer/message/mime.py")),
    ("daemon, gate, recorder, decide, store, transports (own code)", ("outbox_mailer/",)),
)
PLUMBING = ("outbox_mailer/cli/", "outbox_mailer/__main__.py")


def category(frames: list[str]) -> str:
    if "select (selectors.py" in frames[-1]:
        return "waiting (event loop idle in select)"
    for frame in reversed(frames):
        if any(p in frame for p in PLUMBING):
            continue
        for label, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return label
    return "event loop and anyio (scheduling, cancel scopes)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--filter", default="outbox_mailer/")
    args = ap.parse_args()
    stacks, total = load(args.profile)
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    own_any: Counter[str] = Counter()
    idle = 0
    for frames, n in stacks:
        seen = set()
        for frame in frames:
            label, file = name(frame)
            if args.filter in file and label not in seen:
                inclusive[label] += n
                seen.add(label)
        top_label, _top_file = name(frames[-1])
        own_any[top_label] += n
        if "select (selectors.py)" in top_label or ("_run_once" in top_label and "select" in frames[-1]):
            idle += n
        # self time attributed to the innermost frame of our own code
        for frame in reversed(frames):
            label, file = name(frame)
            if args.filter in file:
                own[label] += n
                break
    print(f"samples: {total}  (event loop waiting in select: {100 * idle / max(total, 1):.1f}%)")
    cats: Counter[str] = Counter()
    for frames, n in stacks:
        cats[category(frames)] += n
    busy = total - cats.get("waiting (event loop idle in select)", 0)
    print("\n-- where the time goes (each sample counted once): % of all samples, % of busy samples --")
    for label, n in cats.most_common():
        share = "" if label.startswith("waiting") else f"{100 * n / max(busy, 1):6.1f}%"
        print(f"{100 * n / total:6.1f}%  {share:>7}  {label}")
    print(f"\n-- {args.filter} functions, inclusive (on the stack) --")
    for label, n in inclusive.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {label}")
    print(f"\n-- {args.filter} functions, innermost own frame (own code + the library calls it makes) --")
    for label, n in own.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {label}")
    print("\n-- leaf functions overall (self time) --")
    for label, n in own_any.most_common(args.top):
        print(f"{100 * n / total:6.1f}%  {label}")


if __name__ == "__main__":
    main()
