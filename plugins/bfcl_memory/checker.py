"""BFCL's answer check for agentic categories (memory, web search), reimplemented so that scoring needs no
bfcl_eval import: one of the accepted answers must appear, as whole words, in the agent's last message
that is not a tool call, ignoring case and the characters ``, . / - _ * ^ ( )`` (single quotes are read
as double quotes). A test checks agreement with ``bfcl_eval``'s ``agentic_checker``."""

from __future__ import annotations

import re

_STRIP = re.compile(r"[\,\.\/\-\_\*\^\(\)]")


def standardize(text: str) -> str:
    return _STRIP.sub("", text).lower().replace("'", '"')


def answer_found(response: str, accepted: list[str]) -> bool:
    """Whether one of ``accepted`` is in ``response`` (BFCL's agentic check)."""
    text = standardize(response if isinstance(response, str) else str(response))
    return any(re.search(rf"\b{re.escape(standardize(a))}\b", text) for a in accepted)
