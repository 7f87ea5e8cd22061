"""The docs hold together: every relative link in README.md and docs/**/*.md points to a file that exists
(and, for a link into a Markdown page, to a heading it has), and every page under docs/ is listed in an
index: docs/README.md for the guides, docs/history/README.md for the dated measurement notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images in ``text``, outside code blocks and code spans."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = _CODE.sub(lambda m: m.group(0)[1:-1], heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    out = []
    for target in links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: {dest.name} has no heading #{anchor}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page), f"{page.relative_to(ROOT)}: broken links: {broken_links(page)}"


def test_the_checker_finds_a_broken_link_and_a_missing_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## A section\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md) [ok](a.md#a-section) [site](https://example.org/x.md) `[code](x.md)`\n"
                    "```\n[fenced](missing.md)\n```\n[gone](missing.md) [no](a.md#nowhere) [self](#title)\n")
    assert broken_links(page) == ["missing.md: no such file", "a.md#nowhere: a.md has no heading #nowhere",
                                  "#title: b.md has no heading #title"]


def _linked_from(index: Path) -> set[Path]:
    return {(index.parent / t.partition("#")[0]).resolve() for t in links(index.read_text()) if ":" not in t}


def test_every_doc_is_in_an_index():
    guides = _linked_from(DOCS / "README.md")
    history = _linked_from(DOCS / "history" / "README.md")
    missing = [str(p.relative_to(ROOT)) for p in sorted(DOCS.glob("*.md"))
               if p.name != "README.md" and p.resolve() not in guides]
    missing += [str(p.relative_to(ROOT)) for p in sorted((DOCS / "history").glob("*.md"))
                if p.name != "README.md" and p.resolve() not in history]
    assert not missing, f"pages no index lists: {missing} (docs/README.md, docs/history/README.md)"
    assert (DOCS / "README.md").resolve() in _linked_from(ROOT / "README.md")
