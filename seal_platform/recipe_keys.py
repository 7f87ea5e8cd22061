"""Where a recipe problem comes from and what was probably meant.

* :func:`close_key`: a misspelt key (``trainng``, ``settings.grpo.lrr``) gets the closest known key of its
  section (difflib), read from the pydantic model that rejected it, never from a second list.
* :class:`RecipeOrigin`: each problem names its source: the command-line override that set the key
  (``override 'training.steps=x'``), else the recipe file and the line of the key (following the recipe's
  ``extends:`` chain to the file that holds it).
* :func:`resolve_recipe_path`: a recipe path, or the name of a shipped recipe (:data:`RECIPES_DIR`).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ConfigError


def close_key(word: str, candidates: Sequence[str]) -> str | None:
    """The candidate ``word`` most likely misspells, if one is close enough."""
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return found[0] if found else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (itself, or inside ``list[...]``/``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def known_keys(model: type[BaseModel], parents: Sequence[Any]) -> list[str]:
    """The keys the section at ``parents`` (a validation error's location without its last part) of
    ``model`` accepts; [] when it is not a model's section (a free-form mapping)."""
    current: type[BaseModel] | None = model
    for part in parents:
        if isinstance(part, int):  # an item of a list of sections
            continue
        if current is None or part not in current.model_fields:
            return []
        current = _model_in(current.model_fields[part].annotation)
    return list(current.model_fields) if current is not None else []


def override_path(text: str) -> list[str]:
    return text.partition("=")[0].strip().split(".")


@dataclass
class RecipeOrigin:
    """The recipe file and the command-line overrides (``key=value``) a config was read from."""

    path: Path
    overrides: list[str] = field(default_factory=list)

    def source_of(self, where: str) -> str:
        """The override that set the key at ``where`` (a dotted path), else ``file:line`` of the key in the
        recipe (or the file alone when the key is not written in it: a missing key, a default)."""
        parts = [p for p in where.split(".") if p] if where and not where.startswith("(") else []
        for text in reversed(self.overrides):  # the last override of a key is the one in effect
            path = override_path(text)
            n = min(len(path), len(parts))
            if n and path[:n] == parts[:n]:
                return f"override {text!r}"
        return self._file_line(parts)

    def annotate(self, issues: list[Any]) -> list[Any]:
        """Set each issue's ``source`` (those that have none yet)."""
        for issue in issues:
            if not getattr(issue, "source", ""):
                issue.source = self.source_of(issue.where)
        return issues

    def _file_line(self, parts: list[str]) -> str:
        for path in _chain(self.path):
            line = _line_of(path, parts) if parts else None
            if line is not None:
                return f"{path}:{line}"
        return str(self.path)


# --- where recipes are ---------------------------------------------------------------------------------

def _recipes_dir() -> Path:
    """The shipped recipes: the ``recipes/`` folder, installed as the data package ``seal_platform_recipes``
    (inside site-packages for a wheel install, the repository folder for an editable one)."""
    import importlib.util

    spec = importlib.util.find_spec("seal_platform_recipes")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parent.parent / "recipes"  # a source tree that was never installed


RECIPES_DIR = _recipes_dir()
# The default run: SEAL on the CPU-sized smarthome environment, where the embedded model visibly learns in a few
# minutes. The BFCL pipeline check on the same model is `seal-platform run seal-embedded`.
DEFAULT_RECIPE = "smarthome-embedded"


def resolve_recipe_path(recipe: str | Path | None) -> Path:
    """A recipe path, or the name of a recipe in the shipped ``recipes/`` folder (with or without .yaml)."""
    if recipe is None:
        recipe = DEFAULT_RECIPE
    path = Path(recipe)
    if path.is_file():
        return path
    for candidate in (RECIPES_DIR / f"{recipe}.yaml", RECIPES_DIR / str(recipe)):
        if candidate.is_file():
            return candidate
    shipped = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))) or "none"
    raise ConfigError(
        f"recipe {str(recipe)!r} not found: give a path to a YAML file or one of the shipped recipes ({shipped})."
    )


def _chain(path: Path) -> list[Path]:
    """The recipe and the recipes it extends, child first."""
    import yaml  # here, not at the top: a command that reads no recipe (verify) starts without it

    out: list[Path] = []
    current: Path | None = path
    while current is not None and current.resolve() not in [p.resolve() for p in out] and len(out) < 20:
        out.append(current)
        try:
            data = yaml.safe_load(current.read_text())
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            break
        parent = data.get("extends") if isinstance(data, dict) else None
        if not isinstance(parent, str):
            break
        sibling = current.parent / parent
        current = sibling if sibling.is_file() else current.parent / f"{parent}.yaml"
        if not current.is_file():
            try:
                current = resolve_recipe_path(parent)
            except ConfigError:
                current = None
    return out


def _line_of(path: Path, parts: list[str]) -> int | None:
    """The 1-based line of the key at ``parts`` in the YAML file (of its deepest written prefix when the
    key itself is missing there, as long as the whole first key is), or None."""
    import yaml

    try:
        node: Any = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return None
    line = None
    for part in parts:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            if hit is None:
                return line
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            return line
    return line
