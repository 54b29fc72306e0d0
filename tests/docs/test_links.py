"""Every relative link in README.md and docs/*.md names a file that exists and, when it has a
`#fragment`, a heading of the target page with that anchor (GitHub's rule: lower case,
punctuation dropped, spaces to hyphens, `-1`, `-2` … for repeats). Links inside code spans and
fenced blocks are text, not links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).*?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, …


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with code spans blanked."""
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((no, CODE_SPAN.sub("", line)))
    return out


def _slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _no, line in _prose(page.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        slug = _slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[tuple[int, str]]:
    return [(no, m.group(1)) for no, line in _prose(page.read_text(encoding="utf-8"))
            for m in LINK.finditer(line) if not EXTERNAL.match(m.group(1))]


def test_the_slug_rule_matches_githubs():
    assert _slug("What ldssan does when …") == "what-ldssan-does-when-"
    assert _slug("3. `ldssan rows`: from an output row") == "3-ldssan-rows-from-an-output-row"
    assert _slug("Hand-written waits against the IR's intent (LDS051)") == \
        "hand-written-waits-against-the-irs-intent-lds051"


def test_the_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n[ok](p.md#top) [bad](p.md#nowhere) `[code](x.md)`\n```\n[fenced](y.md)\n```\n")
    assert links(page) == [(3, "p.md#top"), (3, "p.md#nowhere")]
    assert anchors(page) == {"top"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for no, target in links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{no}: {target}"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{where}: no heading with anchor #{fragment}")
    assert not broken, "\n".join(broken)
