"""Every relative link in the README, docs/ and bench/README.md resolves.

A link resolves when its target file (or directory) exists relative to the page that holds it
and, when it carries a ``#fragment``, when the target page has a heading whose GitHub slug is that
fragment. GitHub's slug: the heading's text without inline markup, lower-cased, every character
that is not a letter, a digit, a space, ``-`` or ``_`` dropped, spaces turned into ``-``; a
repeated slug gets ``-1``, ``-2``... Links inside code (fenced blocks, inline backticks) are not
links and are ignored, as are absolute URLs (``https:``, ``mailto:``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with inline code removed, numbered from 1."""
    lines: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1) == fence:
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        lines.append((number, _INLINE_CODE.sub("", line)))
    return lines


def github_slug(heading: str) -> str:
    text = re.sub(r"`([^`]*)`", r"\1", heading)  # inline code keeps its text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found: set[str] = set()
    fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1) == fence:
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        found.update(_EXPLICIT_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[tuple[int, str]]:
    links: list[tuple[int, str]] = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        targets = _INLINE_LINK.findall(line)
        definition = _REFERENCE_DEF.match(line)
        if definition:
            targets.append(definition.group(1))
        links.extend((number, target) for target in targets if target and not _SCHEME.match(target))
    return links


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    problems: list[str] = []
    where = page.relative_to(root)
    for number, target in relative_links(page):
        path_part, _, fragment = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            problems.append(f"{where}:{number}: {target}: no such file")
            continue
        if fragment and resolved.is_file() and resolved.suffix == ".md":
            if fragment.lower() not in anchors(resolved):
                problems.append(f"{where}:{number}: {target}: no heading #{fragment} in {resolved.relative_to(root)}")
        elif fragment and not (resolved.is_file() and resolved.suffix == ".md"):
            problems.append(f"{where}:{number}: {target}: a fragment on a page that is not Markdown")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading(page: Path) -> None:
    assert page.exists(), f"{page} is missing"
    assert broken_links(page) == []


def test_the_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_the_docs_link_checker_sees_links_and_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    other = tmp_path / "other.md"
    other.write_text("# Other page\n\n## Guarantees, and the `in_doubt` window\n\n## Guarantees, and the `in_doubt` window\n")
    page.write_text(
        "# Page\n"
        "[ok](other.md) [ok](other.md#guarantees-and-the-in_doubt-window) "
        "[ok](other.md#guarantees-and-the-in_doubt-window-1) [ok](#page) [web](https://example.com/x.md)\n"
        "[missing](nowhere.md) [bad anchor](other.md#no-such-heading) `[code](ignored.md)`\n"
        "```\n[in a fence](ignored-too.md)\n```\n"
    )
    assert anchors(other) == {"other-page", "guarantees-and-the-in_doubt-window", "guarantees-and-the-in_doubt-window-1"}
    problems = [p.split(": ", 1)[1] for p in broken_links(page, root=tmp_path)]
    assert problems == ["nowhere.md: no such file", "other.md#no-such-heading: no heading #no-such-heading in other.md"]

