"""Score messages with Debian's SpamAssassin, offline.

    verdicts = score_all({"text": data, "html": other})  # name -> Verdict, 2 at a time
    verdicts["text"].score, verdicts["text"].rules       # -1.0, {"ALL_TRUSTED": -1.0, ...}

``spamassassin -L -t`` (local tests only: no DNS blocklists, no network; ``-t`` appends the
report) with a throwaway ``HOME``, so its user_prefs and Bayes files never land in the user's.
Each run costs 1-2 s of Perl start-up and rule compilation, so :func:`score_all` runs two at a
time (this machine has 2 cores).

The score and the rules that fired come from the report table ("pts rule name description");
they are checked against the ``X-Spam-Status`` header SpamAssassin adds, so a change of the
report's format fails loudly instead of yielding an empty rule list.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tests.postfix import unavailable

SPAMASSASSIN = shutil.which("spamassassin") or "/usr/bin/spamassassin"

_TOTAL = re.compile(r"^Content analysis details:\s+\((-?\d+(?:\.\d+)?) points?", re.MULTILINE)
_RULE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s+([A-Z][A-Z0-9_]+)\s", re.MULTILINE)
_STATUS = re.compile(r"^X-Spam-Status: (?P<value>.*(?:\n[ \t].*)*)", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    score: float
    rules: dict[str, float]  # rule name -> points, as the report lists them

    def describe(self) -> str:
        fired = ", ".join(f"{name} {points:+g}" for name, points in sorted(self.rules.items())) or "none"
        return f"score {self.score:+.1f}: {fired}"


def require_spamassassin() -> None:
    if shutil.which(SPAMASSASSIN) is None:
        unavailable("Debian's spamassassin is not installed (apt-get install spamassassin)")


def parse_report(output: str) -> Verdict:
    """The verdict in ``spamassassin -t``'s output (the message with X-Spam-* headers, then the report)."""
    total = _TOTAL.search(output)
    status = _STATUS.search(output)
    if total is None or status is None:
        raise ValueError(f"no SpamAssassin report in its output:\n{output[-2000:]}")
    table = output[total.end():]
    rules = {name: float(points) for points, name in _RULE.findall(table)}
    value = re.sub(r"\s+", " ", re.sub(r",\s+", ",", status["value"]))  # unfolded
    header_score = float(re.search(r"score=(-?\d+(?:\.\d+)?)", value)[1])  # type: ignore[index]
    tests = re.search(r"tests=(\S*)", value)
    listed = set() if tests is None or tests[1] == "none" else set(tests[1].split(","))
    if listed != set(rules) or abs(header_score - float(total[1])) > 0.05:
        raise ValueError(f"report and X-Spam-Status disagree: {sorted(rules)} / {value}")
    return Verdict(float(total[1]), rules)


def score(message: bytes, *, timeout: float = 60) -> Verdict:
    require_spamassassin()
    with tempfile.TemporaryDirectory(prefix="outbox-mailer-sa-") as home:  # its user_prefs and Bayes files
        out = subprocess.run([SPAMASSASSIN, "-L", "-t"], input=message, capture_output=True, timeout=timeout,
                             env={**os.environ, "HOME": home}, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"spamassassin exited with {out.returncode}: {out.stderr.decode(errors='replace')}")
    return parse_report(out.stdout.decode(errors="replace"))


def score_all(messages: Mapping[str, bytes], *, parallel: int = 2) -> dict[str, Verdict]:
    """Each message's verdict, ``parallel`` SpamAssassin processes at a time."""
    require_spamassassin()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = {name: pool.submit(score, data) for name, data in messages.items()}
        return {name: future.result() for name, future in futures.items()}
