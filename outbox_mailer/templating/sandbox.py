"""The Jinja2 environment templates render in, and the compile check that names a line and a column.

:class:`TemplateSandbox` is Jinja2's immutable sandbox (no attribute starting with ``_``, no method that
changes a list or a dict, no ``str.format`` escape) with:

* ``StrictUndefined``: a variable the data does not give is an error naming it, never an empty string;
* autoescaping for the HTML body only (``html=True``): the data's ``<script>`` arrives as ``&lt;script&gt;``;
* ``*`` and ``**`` intercepted (:meth:`TemplateSandbox.call_binop`): a repetition longer than the output cap,
  and an integer product or power beyond :data:`MAX_INTEGER_BITS`, are refused before they are computed
  (``'x' * 500000000`` would allocate 500 MB in a second);
* one global, the sandbox's bounded ``range`` (at most 100,000 items): no ``cycler``, ``joiner``,
  ``namespace``, ``lipsum`` or ``dict``; the data is the only other name a template can read;
* no ``random`` filter: every render of a version with the same data is the same bytes.

Loops over the data and nested ranges stay unbounded in time: the worker process's time limit stops them
(worker.py).
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

__all__ = ["MAX_INTEGER_BITS", "TemplateSandbox", "compile_problem"]

MAX_INTEGER_BITS = 64 * 1024  # an integer result of * or ** larger than this (about 19,700 digits) is refused
_SEQUENCES = (str, bytes, list, tuple)
_QUOTED = re.compile(r"'([^']+)'")


class TemplateSandbox(ImmutableSandboxedEnvironment):
    """The environment of one part (the subject, the text or the HTML body); ``max_bytes`` caps a repetition."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, *, html: bool = False, max_bytes: int = 10 * 1024 * 1024) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=html, keep_trailing_newline=True)
        self.max_bytes = max_bytes
        self.globals.clear()
        self.globals["range"] = safe_range
        del self.filters["random"]  # every render of a version is the same bytes (a retry, a rescued batch)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, _SEQUENCES) and isinstance(times, int) and len(seq) * times > self.max_bytes:
                    raise SecurityError(f"a repetition of {len(seq) * times} items is over the output cap "
                                        f"of {self.max_bytes} bytes")
            if _integers(left, right) and left.bit_length() + right.bit_length() > MAX_INTEGER_BITS:
                raise SecurityError(f"an integer product over {MAX_INTEGER_BITS} bits")
        elif (operator == "**" and _integers(left, right) and right > 0 and abs(left) > 1
              and left.bit_length() * right > MAX_INTEGER_BITS):
            raise SecurityError(f"an integer power over {MAX_INTEGER_BITS} bits")
        return super().call_binop(context, operator, left, right)


def _integers(left: object, right: object) -> bool:
    return type(left) is int and type(right) is int


def compile_problem(source: str, part: str, *, html: bool = False) -> str | None:
    """Why ``source`` does not compile, as ``part: line L, column C: message``; None when it does."""
    try:
        TemplateSandbox(html=html).from_string(source)
    except TemplateSyntaxError as exc:
        line = exc.lineno or 1
        return f"{part}: line {line}, column {_column(source, line, exc.message or '')}: {exc.message}"
    return None


def _column(source: str, line: int, message: str) -> int:
    """Where on ``line`` the error is (1-based): the token the message quotes, else the tag or expression
    that opens last before the lexer stopped, else the line's first tag or expression."""
    tokens: list[tuple[int, int, str]] = []  # (line, column, value) of each token the lexer read
    row, col = 1, 1
    try:
        for _lineno, _kind, value in TemplateSandbox().lex(source):
            tokens.append((row, col, value))
            newlines = value.count("\n")
            row, col = (row + newlines, len(value) - value.rfind("\n")) if newlines else (row, col + len(value))
    except TemplateSyntaxError:
        if row == line:
            return col
    on_line = [t for t in tokens if t[0] == line]
    quoted = _QUOTED.findall(message)
    for _row, column, value in reversed(on_line):
        if value.strip() and value.strip() in quoted:
            return column
    opening = [column for _row, column, value in on_line if value in ("{{", "{%", "{%-", "{{-")]
    if opening:
        return opening[-1] if row == line else opening[0]
    text = source.splitlines()[line - 1] if line <= len(source.splitlines()) else ""
    return len(text) - len(text.lstrip()) + 1
