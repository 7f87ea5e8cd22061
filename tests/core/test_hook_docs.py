"""The hook reference in docs/ is the hook specs, rendered: adding, renaming or changing a hook without
regenerating it (and documenting it in hookspecs.py) fails here."""

from __future__ import annotations

import inspect
from pathlib import Path

from seal_platform import hookdocs, hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_docs_hooks_md_is_the_rendered_hook_specs():
    written = (DOCS / "hooks.md").read_text()
    assert written == hookdocs.render(), (
        "docs/hooks.md is out of date with seal_platform/hookspecs.py; regenerate it with "
        "`python -m seal_platform.hookdocs > docs/hooks.md`"
    )


def test_every_hook_is_in_the_reference_with_every_argument_and_who_it_is_called_on():
    text = (DOCS / "hooks.md").read_text()
    for kind, name, f in hookdocs.specs():
        assert kind in ("setup", "lifecycle", "tracking", "stage"), (name, kind)
        assert name in hookspecs.CALLED_ON, f"say in hookspecs.CALLED_ON which plugins {name!r} is called on"
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        for param in inspect.signature(f).parameters:
            assert f"- `{param}`:" in section, (name, param)
    assert set(hookspecs.CALLED_ON) == {name for _, name, _ in hookdocs.specs()}



def test_the_docs_the_code_cites_exist():
    for page in ("hooks.md", "seal-method.md", "write-an-environment-plugin.md", "write-a-diagnoser.md", "labels.md"):
        assert (DOCS / page).is_file(), page


def test_the_environment_walkthrough_shows_the_tested_example_code():
    """Every line of the walk-through's Python snippets is in examples/seal-kvstore (whose tests run)."""
    import re

    package = "\n".join(p.read_text() for p in (DOCS.parent / "examples" / "seal-kvstore").rglob("*.py"))
    code = {" ".join(line.split()) for line in package.splitlines()}
    doc = (DOCS / "write-an-environment-plugin.md").read_text()
    for block in re.findall(r"```python\n(.*?)```", doc, flags=re.S):
        for line in block.splitlines():
            line = " ".join(line.split("  #")[0].split())
            if line and "..." not in line:
                assert line in code or any(line in c for c in code), line
