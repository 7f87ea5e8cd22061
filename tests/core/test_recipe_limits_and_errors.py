"""Recipe limits and unclear errors (issue 52, items 4 and 9): the expanded size of a recipe and the depth of its
``extends`` chain are bounded with one paragraph; non-finite floats are refused; SIGHUP marks a run interrupted;
``compare --json`` escapes C1 and bidi controls."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.store import RunStore


def test_a_big_string_aliased_many_times_is_refused_early_by_its_expanded_size(tmp_path):
    import resource

    bomb = tmp_path / "big-alias.yaml"  # 1 MB written once, 1,000 aliases: 1 GB once loaded (it validated "ok")
    bomb.write_text("environment: toy\nsettings:\n  x:\n    a: &a " + "x" * 2**20 + "\n    b: [" +
                    ", ".join(["*a"] * 1000) + "]\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for cmd in (["config", "validate", str(bomb)], ["run", str(bomb), "--quiet"]):
        result = CliRunner().invoke(cli, cmd)
        said = " ".join(result.output.split())
        assert result.exit_code != 0 and "MiB of text (an alias bomb?)" in said and "Traceback" not in said, said
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024, grown_kib  # never expanded (it took 2.3 GB)


def test_an_extends_chain_of_a_thousand_files_is_one_paragraph_naming_the_chain(tmp_path):
    for i in range(1000):
        (tmp_path / f"r{i}.yaml").write_text(f"extends: r{i + 1}.yaml\n" if i < 999 else "environment: toy\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(tmp_path / "r0.yaml")])
    said = " ".join(result.output.split())
    assert result.exit_code != 0 and "Traceback" not in said and "RecursionError" not in said, said
    assert "`extends` chain is longer than 32 recipes" in said and "r0.yaml -> " in said and "r32.yaml" in said, said
    # A short chain still works.
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nseed: 3\n")
    (tmp_path / "b.yaml").write_text("environment: toy\n")
    from seal_platform.config import load_recipe_data

    assert load_recipe_data(tmp_path / "a.yaml") == {"environment": "toy", "seed": 3}


def test_sighup_stops_a_run_marked_interrupted_and_resumable(toy_site, toy_recipe, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "seal_platform", "run", str(toy_recipe), "training.steps=40",
           "training.checkpoint_every=0", "evaluation.every=0", "settings.toy.optimize_sleep_s=0.3", "--quiet"]
    owner = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        store_file = tmp_path / "runs" / "store.sqlite"
        store = RunStore(f"sqlite:///{store_file}")
        deadline = time.time() + 60
        while time.time() < deadline and not (store_file.exists() and store.list_runs()
                                              and store.steps(store.list_runs()[0].id)):
            time.sleep(0.2)
        owner.send_signal(signal.SIGHUP)  # the terminal or SSH session went away
        out, err = owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    assert owner.returncode == 129, out + err  # 128 + SIGHUP, as a shell reports a hang-up
    assert "stopped by SIGHUP" in err and "continue with: seal-platform run --resume" in err, err
    [run] = store.list_runs()
    assert run.status == "interrupted" and run.error == "stopped by SIGHUP"


def test_compare_json_escapes_c1_and_bidi_controls(toy_site, toy_recipe, tmp_path, monkeypatch):
    from tests.core.test_loop import _runner

    runner, store = _runner(toy_recipe, ["training.steps=1"])
    runner.run()
    [run] = store.list_runs()
    # A category name with a C1 CSI, a bidi override and a line separator (as a plugin or a store could hold).
    from sqlalchemy import update

    from seal_platform.store import models as m

    evil = "cat\x9b2J\u202eevil\u2028x"
    with store.engine.begin() as conn:
        conn.execute(update(m.Evaluation).where(m.Evaluation.run_id == run.id, m.Evaluation.category == "big")
                     .values(category=evil))
    result = CliRunner().invoke(cli, ["compare", run.id, run.id, "--json", "--store", str(store.url)])
    assert result.exit_code == 0, result.output
    assert not any(ch in result.output for ch in "\x9b\u202e\u2028"), repr(result.output)
    assert "\\u009b" in result.output and "\\u202e" in result.output
    assert evil in [row["category"] for row in json.loads(result.output)["rows"]]  # the same data for a JSON reader


def test_non_finite_floats_are_refused_in_a_recipe_file_too(tmp_path):
    recipe = Path(tmp_path / "r.yaml")
    recipe.write_text("environment: toy\nrollout:\n  temperature: .inf\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe)])
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "rollout.temperature: not a finite number (got inf)" in said, said
    assert "r.yaml:3: rollout.temperature" in said, said  # the file and line



# A task-file environment as the mcp and openenv plugins are: its EnvironmentSpec.splits reads the task file
# (the core's toolenv loader) and raises a ConfigError for one that cannot be used.
TASKFILE_ENVIRONMENT = '''
import os

from pydantic import BaseModel

from seal_platform import hookimpl
from seal_platform.errors import ConfigError
from seal_platform.registry import EnvironmentSpec
from seal_platform_libs.toolenv.episodes import load_task_file

import toy_plugin


class Spec(BaseModel):
    id: str
    split: str = "train"
    category: str = "default"


def splits(settings):
    try:
        return {t.split for t in load_task_file(os.environ["H7_TASKS"], Spec, "settings.taskfile.tasks", lambda s: {})}
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@hookimpl
def register_environments():
    return [EnvironmentSpec(
        "taskfile", lambda ctx: toy_plugin.ToyEnvironment(ctx.settings_for("toy", toy_plugin.ToySettings)),
        splits=splits,
    )]


@hookimpl
def collect(ctx, environment, engine, tasks, interface, group_size, step):
    return toy_plugin.plugin.collect(ctx, environment, engine, tasks, interface, group_size, step)


@hookimpl
def evaluate(ctx, environment, engine, tasks, step, interface):
    return toy_plugin.plugin.evaluate(ctx, environment, engine, tasks, step, interface)
'''


def test_a_task_file_with_a_latin1_byte_is_refused_naming_file_and_line_before_a_run_row_exists(
        toy_site, toy_recipe, tmp_path, monkeypatch):
    from tests.core.test_plugin_contracts import _install

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_bytes(b'{"id": "a"}\n{"id": "b", "split": "eval"}\n{"id": "caf\xe9"}\n')
    _install(toy_site, "taskfile", TASKFILE_ENVIRONMENT, monkeypatch)
    monkeypatch.setenv("H7_TASKS", str(tasks))
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "plugins.allow=[toy,taskfile]", "environment=taskfile",
                                      "--quiet"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in said and "UnicodeDecodeError" not in said, said
    assert f"{tasks}:3: not UTF-8 text (byte 0xe9 at column 12 cannot be decoded)" in said, said
    assert "failed listing the splits" not in said  # the user's file, not the plugin's bug
    store = tmp_path / "runs" / "store.sqlite"
    assert not store.exists() or not RunStore(f"sqlite:///{store}").list_runs()  # no run row was made
    tasks.write_bytes(b'{"id": "a"}\n{"id": "b", "split": "eval"}\n')  # fixed, it runs
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "plugins.allow=[toy,taskfile]", "environment=taskfile",
                                      "--quiet", "training.steps=1", "stages.evolve_interface=null"])
    assert result.exit_code == 0 and "not UTF-8" not in result.output, result.output
