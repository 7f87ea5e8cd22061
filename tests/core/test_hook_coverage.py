"""Every hook spec has at least one test that exercises it: a test (or a test plugin) implements it, or a
test calls it. A new hook without a test fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from seal_platform import hookspecs

REPO = Path(__file__).resolve().parents[2]


def _spec_names() -> list[str]:
    return sorted(name for name, f in vars(hookspecs).items()
                  if inspect.isfunction(f) and hasattr(f, f"{hookspecs.PROJECT}_spec"))


def _test_sources() -> str:
    files = [*REPO.glob("tests/**/*.py"), *REPO.glob("examples/*/tests/*.py")]
    return "\n".join(p.read_text() for p in files if p.name != Path(__file__).name)


def test_every_hook_spec_is_exercised_by_a_test():
    sources = _test_sources()
    untested = [
        name for name in _spec_names()
        # implemented by a test plugin, or called by a test (through pluggy or on a plugin module)
        if not re.search(rf"def {name}\(|\.{name}\(|\b{name}_with\(", sources)
    ]
    assert not untested, f"hook specs no test exercises: {untested}"


def test_the_specs_are_the_documented_set():
    assert {"register_commands", "track", "collect", "evaluate"} <= set(_spec_names())
