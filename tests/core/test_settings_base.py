"""One settings base class (issue 51 item 6): ``seal_platform.config.Section`` forbids unknown keys, and every
settings model of the core, the default plugins and the examples derives from it instead of spelling
``extra="forbid"`` itself."""

from __future__ import annotations

import ast
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from seal_platform.config import RunConfig, Section
from seal_platform.plugins import make_plugin_manager

ROOT = Path(__file__).resolve().parents[2]


def test_a_section_refuses_an_unknown_key_and_a_subclass_may_add_to_its_config() -> None:
    class Frozen(Section):
        model_config = ConfigDict(frozen=True)
        steps: int = 1

    with pytest.raises(ValidationError) as info:
        Frozen.model_validate({"step": 2})
    assert info.value.errors()[0]["type"] == "extra_forbidden"
    with pytest.raises(ValidationError):
        Frozen().steps = 3  # type: ignore[misc]
    assert Frozen.model_validate({"steps": 2}).steps == 2


def _nested_models(model: type[BaseModel]) -> typing.Iterator[type[BaseModel]]:
    yield model
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            item = stack.pop()
            if isinstance(item, type) and issubclass(item, BaseModel):
                yield from _nested_models(item)
            stack.extend(typing.get_args(item))


def _in_this_repository(model: type[BaseModel]) -> bool:
    path = getattr(sys.modules.get(model.__module__), "__file__", None)
    return path is not None and Path(path).resolve().is_relative_to(ROOT)


def test_every_settings_model_here_is_a_section() -> None:
    host = make_plugin_manager()
    sections = {"(core)": RunConfig} | {f"settings.{n}": m for n, m in host.settings_models().items()}
    assert {"(core)", "settings.grpo", "settings.engine", "settings.bfcl", "settings.smarthome"} <= set(sections)
    not_sections = sorted(
        f"{where}: {model.__module__}.{model.__qualname__}"
        for where, top in sections.items()
        for model in _nested_models(top)
        if _in_this_repository(model) and not issubclass(model, Section)
    )
    assert not not_sections, "settings models that do not derive from seal_platform.config.Section:\n" + "\n".join(
        not_sections
    )


def _spells_extra_forbid(source: str) -> list[int]:
    """The lines of ``source`` that set ``extra="forbid"`` (as a keyword or a dict key)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "extra":
            value = node.value
        elif isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values)
            value = next((v for k, v in pairs if isinstance(k, ast.Constant) and k.value == "extra"), None)
        else:
            continue
        if isinstance(value, ast.Constant) and value.value == "forbid":
            lines.append(node.lineno if isinstance(node, ast.Dict) else value.lineno)
    return sorted(lines)


def test_only_the_base_class_spells_extra_forbid() -> None:
    out = subprocess.run(
        ["git", "ls-files", "-z", "seal_platform", "seal_platform_libs", "plugins", "examples"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files = [f for f in out.stdout.split("\0") if f.endswith(".py")]
    assert "seal_platform/config.py" in files
    found = [f"{rel}:{line}" for rel in files for line in _spells_extra_forbid((ROOT / rel).read_text())
             if rel != "seal_platform/config.py" and "/tests/" not in rel]
    # A stand-alone server (examples/openenv-thermostat) runs without seal_platform installed: it may not import it.
    found = [f for f in found if not f.startswith("examples/openenv-thermostat/server.py")]
    assert not found, "derive from seal_platform.config.Section instead of setting extra='forbid':\n" + "\n".join(found)


def test_the_scanner_finds_both_spellings() -> None:
    source = 'a = ConfigDict(extra="forbid")\nb = {"extra": "forbid"}\nc = ConfigDict(extra="allow")\n'
    assert _spells_extra_forbid(source) == [1, 2]
