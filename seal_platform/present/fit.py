"""Tables that keep what a person may copy whole on a narrow terminal.

A table whose columns do not fit the terminal gets its cells folded mid-word or cut with "…" by rich; an
identifier shown that way (a run id, a label, a settings key) can be neither read nor copied. A command
therefore offers its output in several layouts, widest first (today's table, then one with secondary columns
dropped or moved below, then a vertical "key: value" form), and :func:`fitting` picks the first one that,
drawn at the console's width, shows every identifier (and every word of its headers and short cells)
unbroken on one line and cuts nothing.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable

from rich.console import Console, RenderableType

CUT = "…"


def rendered_text(console: Console, renderable: RenderableType) -> str:
    """``renderable`` drawn at the console's width, as plain text (lines joined by newlines)."""
    lines = console.render_lines(renderable, console.options, pad=False)
    return "\n".join("".join(segment.text for segment in line).rstrip() for line in lines)


def shows_whole(console: Console, renderable: RenderableType, whole: Iterable[str]) -> bool:
    """Whether ``renderable``, drawn at the console's width, cuts nothing and shows every string of ``whole``
    unbroken (on one line)."""
    text = rendered_text(console, renderable)
    return CUT not in text and all(item in text for item in whole)


def wrapped(text: str, width: int, indent: str = "", hanging: str = "") -> str:
    """``text`` as lines of at most ``width`` characters, broken at spaces only: the first line starts with
    ``indent``, the others with ``hanging``. A word longer than a line (a path, an id) stays whole on a line of
    its own, for copying, rather than being folded or cut. A line break of ``text`` is kept (its next line
    starts with ``hanging`` too)."""
    out: list[str] = []
    for i, line in enumerate(text.split("\n")):
        first = indent if i == 0 else hanging
        out.append(textwrap.fill(line, max(width, len(hanging) + 1), initial_indent=first, subsequent_indent=hanging,
                                 break_long_words=False, break_on_hyphens=False) or first.rstrip())
    return "\n".join(out)


def words(*texts: str) -> list[str]:
    """The words (split at white space) of ``texts``: what a table may wrap between but never fold inside."""
    return [word for text in texts for word in text.split()]


# A layout: built only when tried, it returns the renderable and the strings it must show unbroken (its
# identifiers, and the words of its headers and short cells; free text may wrap, and fold a word longer
# than its column).
Layout = Callable[[], tuple[RenderableType, Iterable[str]]]


def fitting(console: Console, *layouts: Layout) -> RenderableType:
    """The first of ``layouts`` that shows its strings unbroken at the console's width (:func:`shows_whole`);
    the last one when none does (it should be the vertical form, which fits anything)."""
    renderable: RenderableType = ""
    for i, build in enumerate(layouts):
        renderable, whole = build()
        if i == len(layouts) - 1 or shows_whole(console, renderable, {item for item in whole if item}):
            break
    return renderable
