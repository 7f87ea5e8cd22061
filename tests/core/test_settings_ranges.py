"""Every integer setting has a range (issue 23, item 5): a recipe cannot ask for 10^12 workers or a seed
past 2**32 and fail deep inside a library; `config validate` and `run` both refuse it with the key and
the bound."""

from __future__ import annotations

import sys
import typing
from pathlib import Path

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from seal_platform.config import RunConfig
from seal_platform.plugins import make_plugin_manager


def _int_fields(model: type[BaseModel], prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) or (field.annotation,)
        for arg in args:  # nested sections, optional sections, lists of sections
            for inner in (typing.get_args(arg) or (arg,)):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    yield from _int_fields(inner, f"{prefix}{name}.")
        if int in args and bool not in args:
            yield f"{prefix}{name}", field


ROOT = Path(__file__).resolve().parents[2]


def _in_this_repository(model: type[BaseModel]) -> bool:
    """The model is defined in this repository (the core, its default plugins, its examples): the rule is
    ours to keep; a third-party plugin installed beside them is not held to it here."""
    module = sys.modules.get(model.__module__)
    path = getattr(module, "__file__", None)
    return path is not None and Path(path).resolve().is_relative_to(ROOT)


def _models() -> dict[str, type[BaseModel]]:
    host = make_plugin_manager()
    models: dict[str, type[BaseModel]] = {"(core)": RunConfig}
    models.update({f"settings.{name}": model for name, model in host.settings_models().items()
                   if _in_this_repository(model)})
    return models


def test_every_integer_setting_of_the_core_and_of_this_repositorys_plugins_has_both_bounds():
    models = _models()
    assert {"(core)", "settings.grpo", "settings.smarthome", "settings.bfcl", "settings.engine"} <= set(models)
    unbounded, seen = [], 0
    for section, model in models.items():
        for key, field in _int_fields(model):
            seen += 1
            low = any(isinstance(m, (Ge, Gt)) for m in field.metadata)
            high = any(isinstance(m, (Le, Lt)) for m in field.metadata)
            if not (low and high):
                unbounded.append(f"{section} {key} (lower {low}, upper {high})")
    assert seen > 50  # the walk reaches nested sections
    assert not unbounded, "integer settings without a range:\n" + "\n".join(unbounded)


def test_out_of_range_integers_are_one_paragraph_naming_key_and_bound(tmp_path):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    runner = CliRunner()
    overrides = ["training.group_size=99999999", "settings.grpo.micro_batch_size=100000", "settings.smarthome.seed=-1"]
    for cmd in (["config", "validate", "smarthome-embedded", *overrides],
                ["run", "smarthome-embedded", *overrides, "--quiet", "--store", f"sqlite:///{tmp_path / 's.sqlite'}"]):
        result = runner.invoke(cli, cmd)
        text = " ".join(result.output.split())
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        assert "training.group_size" in text and "1024" in text
        assert "settings.grpo.micro_batch_size" in text and "4096" in text
        assert "settings.smarthome.seed" in text and "greater than or equal to 0" in text
    assert not (tmp_path / "s.sqlite").exists()  # refused before a store was created
