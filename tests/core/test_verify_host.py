"""Which plugins `seal-platform verify --benchmark NAME` loads: the plugin named like the benchmark alone, when it
registers that benchmark and owns every section `--set` names; every plugin otherwise."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner

from seal_platform import plugins as plugins_module
from seal_platform.plugins import make_benchmark_host, make_plugin_manager

# A plugin registering benchmark NAME (scoring {"task_id", "answer"}: success when answer is 42) and a
# settings section of the same name with one key, `target`.
BENCH = """
from pydantic import BaseModel, ConfigDict
from seal_platform.hookspecs import hookimpl
from seal_platform.registry import EnvironmentSpec
from seal_platform.types import Interface


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    target: int = 42


class Env:
    name = "{name}"

    def __init__(self, target):
        self.target = target

    def tasks(self, split):
        return []

    def pristine_interface(self):
        return Interface()

    def verify_record(self, record):
        return {{"task_id": record["task_id"], "success": record["answer"] == self.target, "by": "{module}"}}


@hookimpl
def register_settings():
    return {{"{name}": Settings}}


@hookimpl
def register_environments():
    return [EnvironmentSpec("{name}", lambda ctx: Env(ctx.settings["{name}"].target))]
"""

# A plugin with a settings section `vhother` and nothing else.
OTHER = """
from pydantic import BaseModel
from seal_platform.hookspecs import hookimpl


class Settings(BaseModel):
    level: int = 1


@hookimpl
def register_settings():
    return {"vhother": Settings}
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Install the given plugins (entry-point name -> module source) as the only ones; returns a function."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    monkeypatch.delenv("SEAL_PLATFORM_BLOCK_PLUGINS", raising=False)

    def install(plugins: dict[str, str]) -> list[metadata.EntryPoint]:
        eps = []
        for name, source in plugins.items():
            module = f"vh_plugin_{name.replace('-', '_')}"
            (tmp_path / f"{module}.py").write_text(source)
            sys.modules.pop(module, None)  # imported afresh, and only if loaded
            eps.append(metadata.EntryPoint(name, module, plugins_module.ENTRY_POINT_GROUP))
        monkeypatch.setattr(plugins_module, "_entry_points", lambda: list(eps))
        return eps

    return install


def _verify(tmp_path: Path, benchmark: str, *sets: str):
    from seal_platform import cli as cli_module

    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"task_id": "t1", "answer": 42}) + "\n" + json.dumps({"task_id": "t2", "answer": 7}) + "\n")
    args = ["verify", "--benchmark", benchmark, *[item for kv in sets for item in ("--set", kv)], str(data)]
    return CliRunner().invoke(cli_module.cli, args)


def _statuses(host) -> dict[str, str]:
    return {record.name: record.status for record in host.records}


def test_verify_loads_only_the_plugin_named_like_its_benchmark(installed, tmp_path):
    installed({"vhbench": BENCH.format(name="vhbench", module="vh_plugin_vhbench"), "vhother": OTHER,
               "vhbroken": "raise ImportError('needs libfoo')\n"})
    host = make_benchmark_host("vhbench")
    assert _statuses(host) == {"vhbench": "loaded", "vhother": "not-allowed", "vhbroken": "not-allowed"}
    assert "vh_plugin_vhother" not in sys.modules and "vh_plugin_vhbroken" not in sys.modules

    result = _verify(tmp_path, "vhbench")
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"task_id": "t1", "success": True, "by": "vh_plugin_vhbench"},
        {"task_id": "t2", "success": False, "by": "vh_plugin_vhbench"}]
    assert "vhbroken" not in result.stderr  # a plugin verify does not load is not warned about
    # The benchmark's own settings may be set on that path.
    result = _verify(tmp_path, "vhbench", "vhbench.target=7")
    assert [json.loads(line)["success"] for line in result.stdout.splitlines()] == [False, True]
    assert "vh_plugin_vhother" not in sys.modules


def test_a_section_of_another_plugin_in_set_loads_every_plugin(installed, tmp_path):
    installed({"vhbench": BENCH.format(name="vhbench", module="vh_plugin_vhbench"), "vhother": OTHER})
    assert _statuses(make_benchmark_host("vhbench", ["vhother"])) == {"vhbench": "loaded", "vhother": "loaded"}
    result = _verify(tmp_path, "vhbench", "vhother.level=3")
    assert result.exit_code == 0, result.output
    # ... and its section is validated by its owner, as before.
    result = _verify(tmp_path, "vhbench", "vhother.level=high")
    assert result.exit_code == 2 and "settings.vhother.level" in result.output
    # A section no plugin owns is refused naming the sections of every plugin.
    result = _verify(tmp_path, "vhbench", "nosuch.x=1")
    assert result.exit_code == 2 and "vhbench, vhother" in result.output


def test_a_benchmark_registered_under_another_plugin_name_loads_every_plugin(installed, tmp_path):
    installed({"vhacme": BENCH.format(name="vhacme-bench", module="vh_plugin_vhacme"), "vhother": OTHER,
               "vhbroken": "raise ImportError('needs libfoo')\n"})
    host = make_benchmark_host("vhacme-bench")
    assert _statuses(host) == {"vhacme": "loaded", "vhother": "loaded", "vhbroken": "failed"}
    result = _verify(tmp_path, "vhacme-bench")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["by"] for line in result.stdout.splitlines()] == ["vh_plugin_vhacme"] * 2
    assert "plugin 'vhbroken'" in result.stderr and "needs libfoo" in result.stderr  # warned, as every command does


def test_a_plugin_named_like_the_benchmark_that_does_not_serve_it_loads_every_plugin(installed, tmp_path):
    # The plugin called vhbench fails to import: every plugin is loaded, and the error says why none serves it.
    installed({"vhbench": "raise ImportError('needs libfoo')\n", "vhother": OTHER})
    host = make_benchmark_host("vhbench")
    assert _statuses(host) == {"vhbench": "failed", "vhother": "loaded"}
    result = _verify(tmp_path, "vhbench")
    assert result.exit_code == 2
    assert "no loaded plugin registers benchmark 'vhbench'" in result.output and "needs libfoo" in result.output
    # The plugin called vhbench registers another benchmark: every plugin, and the one that has it serves.
    installed({"vhbench": BENCH.format(name="vhelse", module="vh_plugin_vhbench"),
               "vhreal": BENCH.format(name="vhbench", module="vh_plugin_vhreal")})
    assert _statuses(make_benchmark_host("vhbench")) == {"vhbench": "loaded", "vhreal": "loaded"}
    result = _verify(tmp_path, "vhbench")
    assert [json.loads(line)["by"] for line in result.stdout.splitlines()] == ["vh_plugin_vhreal"] * 2


def test_the_plugins_allowed_and_blocked_by_the_environment_apply(installed, tmp_path, monkeypatch):
    installed({"vhbench": BENCH.format(name="vhbench", module="vh_plugin_vhbench"), "vhother": OTHER})
    monkeypatch.setenv("SEAL_PLATFORM_BLOCK_PLUGINS", "vhbench")
    host = make_benchmark_host("vhbench")
    assert _statuses(host) == {"vhbench": "blocked", "vhother": "loaded"}
    result = _verify(tmp_path, "vhbench")
    assert result.exit_code == 2 and "no loaded plugin registers benchmark 'vhbench'" in result.output
    monkeypatch.delenv("SEAL_PLATFORM_BLOCK_PLUGINS")
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "vhother")
    assert _statuses(make_benchmark_host("vhbench"))["vhbench"] == "not-allowed"


def test_a_second_plugin_registering_the_benchmark_is_not_consulted_by_verify(installed, tmp_path):
    # The documented cost of loading one plugin: the clash that every other command reports is not seen here;
    # the plugin named like the benchmark is its owner.
    installed({"vhbench": BENCH.format(name="vhbench", module="vh_plugin_vhbench"),
               "vhtwin": BENCH.format(name="vhbench", module="vh_plugin_vhtwin")})
    result = _verify(tmp_path, "vhbench")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["by"] for line in result.stdout.splitlines()] == ["vh_plugin_vhbench"] * 2
    full = make_plugin_manager()
    assert "vhbench" in full.clashes("environments")
    # ... which names the other section: every plugin, and the clash is the error.
    result = _verify(tmp_path, "vhbench", "vhother.level=1")
    assert result.exit_code == 2 and "registered by more than one plugin" in result.output
