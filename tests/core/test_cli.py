"""The command line, as a user sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli

from .conftest import damaged_store_files, make_dist

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner():
    return CliRunner()


def test_help_lists_the_commands(runner):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "plugins", "config", "runs", "show", "report", "verify"):
        assert f"  {command}" in result.output


def test_plugins_lists_name_version_hooks_and_status(runner, toy_site, tmp_path, monkeypatch):
    make_dist(tmp_path / "site", "seal-broken", "0.0.1", {"broken": "broken_mod"},
              {"broken_mod.py": "raise RuntimeError('boom at import')\n"})
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "toy,broken")
    result = runner.invoke(cli, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["toy"]["version"] == "0.3.0" and rows["toy"]["status"] == "loaded"
    assert "collect" in rows["toy"]["hooks"] and "environment:toy" in rows["toy"]["provides"]
    assert rows["broken"]["status"] == "failed" and "boom at import" in rows["broken"]["error"]
    table = runner.invoke(cli, ["plugins"], terminal_width=200)
    assert "toy" in table.output and "0.3.0" in table.output and "failed" in table.output


def test_config_validate_reports_all_problems_and_exits_1(runner, tmp_path, toy_site):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"environment": "toy", "plugins": {"allow": ["toy"]}, "seed": "x",
                                   "training": {"group_size": -2}, "colour": "red"}))
    result = runner.invoke(cli, ["config", "validate", str(bad)])
    assert result.exit_code == 1
    # The core's three, and (checked with the bad keys left out) the default engine no loaded plugin has.
    assert "4 problem(s)" in result.output and "rollout.engine:" in result.output
    assert (
        "seed:" in result.output and "training.group_size:" in result.output and "colour: unknown key" in result.output
    )
    assert "Traceback" not in result.output


def test_config_validate_accepts_a_good_recipe(runner, toy_recipe, toy_site):
    result = runner.invoke(cli, ["config", "validate", str(toy_recipe), "training.steps=1"])
    assert result.exit_code == 0, result.output
    assert "ok (config hash" in result.output


def test_run_runs_show_and_report(runner, toy_recipe, toy_site, tmp_path, monkeypatch):
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=4", "--quiet"], terminal_width=200)
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    assert "average" in result.output and "step 4" in result.output

    listed = runner.invoke(cli, ["runs", "--store", store], terminal_width=200)
    assert listed.exit_code == 0 and run_id in listed.output and "completed" in listed.output

    shown = runner.invoke(cli, ["show", run_id[:12], "--store", store], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "interface revisions" in shown.output and "revision 1 (parent 0" in shown.output
    assert "driven by: wrong_sum" in shown.output and "evaluations" in shown.output

    reported = runner.invoke(cli, ["report", run_id, "--store", store, "--out", str(tmp_path / "rep")])
    assert reported.exit_code == 0, reported.output
    page = (tmp_path / "rep" / "report.html").read_text()
    # One self-contained page: plots embedded as PNG data, no external resources.
    assert page.count("data:image/png;base64,") >= 4 and "src=\"http" not in page and "<link" not in page
    for section in ("pass rate per category", "Turn labels over steps", "A-Patch label weights",
                    "Interface revisions", "Stage timings", "wrong_sum"):
        assert section in page
    # The run itself wrote its report at the end, next to its log.
    run_dir = tmp_path / "runs" / run_id
    assert (run_dir / "report.html").is_file() and (run_dir / "run.log").is_file()
    assert "report: " in result.output and "time per stage" in result.output

    as_json = runner.invoke(cli, ["runs", "--store", store, "--json"])
    assert [r["id"] for r in json.loads(as_json.output)] == [run_id]
    # --store also takes the SQLite file's path, relative or absolute, as the help says.
    monkeypatch.chdir(tmp_path)
    for path in (str(tmp_path / "runs" / "store.sqlite"), "runs/store.sqlite"):
        by_path = runner.invoke(cli, ["runs", "--store", path, "--json"])
        assert by_path.exit_code == 0 and by_path.output == as_json.output, by_path.output
    digest = json.loads(runner.invoke(cli, ["show", run_id, "--store", store, "--json"]).output)
    assert digest["id"] == run_id and len(digest["steps"]) == 4
    assert digest["revisions"][1]["driven_by"] == ["wrong_sum"]


def test_user_mistakes_give_one_paragraph_not_a_traceback(runner, tmp_path, toy_site):
    (tmp_path / "runs").mkdir()
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    from seal_platform.store import RunStore

    RunStore(store)
    result = runner.invoke(cli, ["show", "nope", "--store", store])
    assert result.exit_code == 2
    assert "Error: no run 'nope'" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["run", "no-such-recipe"])
    assert result.exit_code == 2 and "not found" in result.output
    result = runner.invoke(cli, ["runs", "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}"])
    assert result.exit_code == 2 and "no run store" in result.output


def test_verify_keeps_order_and_reports_bad_lines(runner, tmp_path, toy_site, monkeypatch):
    monkeypatch.setenv("SEAL_PLATFORM_PLUGINS", "toy")
    data = tmp_path / "in.jsonl"
    data.write_text('{"task_id": "a", "answer": 42}\nnot json\n{"task_id": "b"}\n[1]\n{"task_id": "c", "answer": 1}\n')
    result = runner.invoke(cli, ["verify", "--benchmark", "toy", str(data)])
    # Every line is written; exit 1 says that some could not be scored, and stderr how many.
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == 'verify: 3 of 5 line(s) could not be scored (each has {"error": ...} in its place)'
    lines = [json.loads(l) for l in result.stdout.strip().splitlines()]
    assert lines[0] == {"task_id": "a", "success": True}
    assert "line 2: not valid JSON" in lines[1]["error"]
    assert "need task_id and answer" in lines[2]["error"]
    assert "JSON object" in lines[3]["error"]
    assert lines[4] == {"task_id": "c", "success": False}
    result = runner.invoke(cli, ["verify", "--benchmark", "nothing", str(data)])
    assert result.exit_code == 2 and "no loaded plugin registers benchmark 'nothing'" in result.output
    # A --set that makes a section something other than a mapping: the recipe checks' message, no traceback.
    for bad in ("toy=1", "toy=null", "toy=[1]"):
        result = runner.invoke(cli, ["verify", "--benchmark", "toy", "--set", bad, str(data)])
        assert result.exit_code == 2 and "settings.toy: Input should be a valid dictionary" in result.output, bad
    # Its keys are under settings: the example says so (it said training.steps=2, which --set then refuses).
    result = runner.invoke(cli, ["verify", "--benchmark", "toy", "--set", "foo", str(data)])
    assert result.exit_code == 2 and "e.g. toy.KEY=VALUE" in result.output and "training" not in result.output


def _pip_install_example(target: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(REPO / "examples" / "seal-repetition-diagnoser")],
        check=True, capture_output=True, text=True,
    )


def test_third_party_plugin_is_listed_and_called_after_pip_install(tmp_path, toy_site, toy_recipe):
    target = tmp_path / "installed"
    _pip_install_example(target)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(toy_site)])}
    env.pop("SEAL_PLATFORM_PLUGINS", None)
    listed = subprocess.run([sys.executable, "-m", "seal_platform", "plugins", "--json"], env=env,
                            capture_output=True, text=True, check=True)
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["repetition"]["distribution"] == "seal-repetition-diagnoser"
    assert rows["repetition"]["version"] == "0.1.0" and rows["repetition"]["status"] == "loaded"
    assert rows["repetition"]["hooks"] == ["diagnose", "register_diagnosers"]

    done = subprocess.run(
        [sys.executable, "-m", "seal_platform", "run", str(toy_recipe), "--quiet", "training.steps=1",
         "plugins.allow=[toy, repetition]", "diagnosis.diagnosers=[toy, repetition]"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    from seal_platform.store import RunStore

    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    (run,) = store.list_runs()
    sources = {row.source for row in store.labels(run.id)}
    assert sources == {"toy", "repetition"}
    assert "repetition" in {p.name for p in store.run_plugins(run.id)}


def test_resume_and_eval_open_an_existing_store_only_and_never_change_another_applications_database(runner, tmp_path):
    import sqlite3

    foreign = tmp_path / "customers.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'ada')")
    before = foreign.read_bytes()
    typo = tmp_path / "typo.sqlite"
    for cmd in (["run", "--resume", "X"], ["eval", "X"]):
        for store in (str(foreign), f"sqlite:///{foreign}"):  # a path, as every command takes it, and a URL
            result = runner.invoke(cli, [*cmd, "--store", store])
            assert result.exit_code == 2, (cmd, result.output)
            assert f"{foreign} is not a seal-platform run store (its tables: customers); nothing was changed" in \
                result.output and "Traceback" not in result.output, (cmd, result.output)
        assert foreign.read_bytes() == before, cmd  # no seal-platform tables added, not switched to WAL
        with sqlite3.connect(foreign) as conn:
            assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["customers"]
        result = runner.invoke(cli, [*cmd, "--store", str(typo)])  # a mistyped path is not created
        assert result.exit_code == 2 and f"no run store at {typo}" in result.output, (cmd, result.output)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["customers.sqlite"], cmd


def test_a_damaged_store_directory_or_missing_driver_is_one_line_with_exit_2(runner, tmp_path):
    import importlib.util

    commands = (["runs"], ["show", "x"], ["report", "x"], ["compare", "x", "y"], ["transcripts", "x"],
                ["upgrade-store"], ["eval", "x"], ["run", "--resume", "x"])
    for path in damaged_store_files(tmp_path):
        before = path.read_bytes()
        for cmd in commands:
            result = runner.invoke(cli, [*cmd, "--store", str(path)])
            assert result.exit_code == 2, (path, cmd, result.output)
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"Error: run store {path} is not a usable SQLite "
                                                           "database"), (path, cmd, result.output)
        assert path.read_bytes() == before
    result = runner.invoke(cli, ["upgrade-store", "--store", str(tmp_path)])
    assert result.exit_code == 2 and result.output.startswith(f"Error: run store {tmp_path} is a directory"), \
        result.output
    if importlib.util.find_spec("pg8000") is None:
        result = runner.invoke(cli, ["runs", "--store", "postgresql+pg8000://x@127.0.0.1:1/x"])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "(pg8000) is not installed: install it (pip install pg8000)" in result.output, result.output


def test_a_database_error_inside_a_command_is_one_paragraph_naming_the_store_and_a_bug_is_not(runner, tmp_path):
    import sqlite3

    from sqlalchemy.exc import DatabaseError, ProgrammingError

    from seal_platform.cli import SealGroup, open_store
    from seal_platform.errors import SealError
    from seal_platform.store import RunStore

    path = tmp_path / "store.sqlite"
    RunStore(f"sqlite:///{path}").close()
    group = SealGroup()

    @group.command()
    def damaged() -> None:
        open_store(f"sqlite:///{path}")
        raise DatabaseError("SELECT 1", {}, sqlite3.DatabaseError("database disk image is malformed"))

    @group.command()
    def bug() -> None:
        raise ProgrammingError("SELECT nonsense", {}, sqlite3.ProgrammingError("no such column"))

    @group.command()
    def brackets() -> None:
        raise SealError("set bfcl.categories=[multi_turn_base] or pip install 'psycopg[binary]'")

    result = runner.invoke(group, ["damaged"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.startswith(f"Error: run store {path} is not a usable SQLite database (database disk image "
                                    "is malformed)"), result.output
    assert isinstance(runner.invoke(group, ["bug"]).exception, ProgrammingError)  # a bug keeps its traceback
    result = runner.invoke(group, ["brackets"])  # text, not rich markup
    assert result.exit_code == 2 and "[multi_turn_base]" in result.output and "psycopg[binary]" in result.output


def test_eval_a_checkpoint(runner, toy_recipe, toy_site, tmp_path):
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=2", "--quiet"])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    evaluated = runner.invoke(cli, ["eval", run_id, "--store", store, "--split", "test", "--max-tasks", "4"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "checkpoint after 2 step(s), split" in evaluated.output and "average" in evaluated.output
    # Like `run`: library logs go to the run's log, and a captured (non-terminal) output gets no progress bars.
    assert "library logs: " in evaluated.output and "run.log" in evaluated.output
    assert "eta" not in evaluated.output and "episodes" not in evaluated.output
    from seal_platform.store import RunStore

    rows = RunStore(store).evaluations(run_id)
    assert {(r.step, r.split) for r in rows} >= {(2, "eval")}
    missing = runner.invoke(cli, ["eval", run_id, "--store", store, "--step", "99"])
    assert missing.exit_code == 2 and "no durable checkpoint at step 99" in missing.output
    assert "it has: step 1 (after 2 step(s))" in " ".join(missing.output.split())  # what --step can name
    # A split the environment lacks is refused before the engine (the model load) is built.
    plugin = sys.modules["toy_plugin"].plugin
    built = plugin.engines_built
    bad = runner.invoke(cli, ["eval", run_id, "--store", store, "--split", "nope"])
    assert bad.exit_code != 0 and "unknown split 'nope'" in bad.output, bad.output
    assert plugin.engines_built == built


def test_compare_lists_runs_side_by_side_and_fits_80_columns(runner, toy_recipe, toy_site, tmp_path):
    ids = []
    for steps in (1, 3):
        result = runner.invoke(cli, ["run", str(toy_recipe), f"training.steps={steps}", "--quiet"], terminal_width=80)
        assert result.exit_code == 0, result.output
        table_lines = [line for line in result.output.splitlines() if "/" not in line]  # paths may be longer
        assert max(len(line) for line in table_lines) <= 80, result.output
        ids.append(result.output.split("run ", 1)[1].split()[0])
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    data = json.loads(runner.invoke(cli, ["compare", *ids, "--store", store, "--json"]).output)
    assert [r["id"] for r in data["runs"]] == ids and [r["steps"] for r in data["runs"]] == [1, 3]
    rows = {(r["eval_set"], r["category"]): r["values"] for r in data["rows"]}
    averages = [key for key in rows if key[1] == "average"]
    assert averages and all(len(v) == 2 and None not in v for v in rows.values())
    from seal_platform.present.digest import load_digest
    from seal_platform.store import RunStore

    for i, run_id in enumerate(ids):  # each column is that run's final evaluation
        final = load_digest(RunStore(store), run_id).final_scores()
        for (eval_set, cat), values in rows.items():
            assert values[i] == pytest.approx(final[eval_set][cat])
    page = tmp_path / "cmp.html"
    shown = runner.invoke(cli, ["compare", *ids, "--store", store, "--html", str(page)], terminal_width=80)
    assert shown.exit_code == 0 and "average" in shown.output
    # The line naming the page may be longer (a path is one word; pytest-xdist's tmp paths are 10 characters longer).
    assert max(len(line) for line in shown.output.splitlines() if str(page) not in line) <= 80, shown.output
    assert str(page) in shown.output.replace("\n", "")
    assert "data:image/png;base64," in page.read_text()


def test_library_output_goes_to_the_run_log_not_the_terminal(tmp_path):
    """Descriptor-level redirection catches logging, warnings and native writes to fd 2 alike."""
    script = f"""
import logging, os, sys, warnings
from pathlib import Path
from seal_platform.runlog import quiet_terminal
with quiet_terminal(Path({str(tmp_path / 'run.log')!r})) as terminal:
    logging.getLogger("vllm").info("engine INFO line")
    warnings.warn("a library warning")
    os.write(2, b"native stderr line\\n")
    print("stdout from a library")
    terminal.write("progress line\\n")
print("after the run")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["progress line", "after the run"]
    assert done.stderr == ""
    log = (tmp_path / "run.log").read_text()
    for text in ("engine INFO line", "a library warning", "native stderr line", "stdout from a library"):
        assert text in log


def test_sigterm_stops_a_run_as_interrupted_with_exit_143_and_it_resumes(toy_site, toy_recipe, tmp_path):
    """What schedulers send: the run stops at once, marked interrupted (not crashed), and resumes."""
    import os
    import signal
    import subprocess
    import time

    from seal_platform.store import RunStore

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "seal_platform", "run", str(toy_recipe), "training.steps=8",
           "settings.toy.optimize_sleep_s=0.4", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    deadline = time.time() + 60
    while time.time() < deadline and not ((tmp_path / "runs" / "store.sqlite").exists() and store.list_runs()
                                          and store.steps(store.list_runs()[0].id)):  # a step is done
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, out + err
    (run,) = store.list_runs()
    assert "stopped by SIGTERM" in err and f"seal-platform run --resume {run.id}" in err
    assert store.get_run(run.id).status == "interrupted"
    done = subprocess.run([sys.executable, "-m", "seal_platform", "run", "--resume", run.id, "--store", store.url,
                           "--quiet"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert store.get_run(run.id).status == "completed"
    # The resumed run says so, and from which step.
    assert f"resuming run {run.id}" in done.stdout, done.stdout
    assert "resumed: " in done.stdout and "step 1" in done.stdout, done.stdout


def test_resume_with_an_empty_or_ambiguous_id_is_an_error_listing_the_runs(runner, toy_recipe, toy_site, tmp_path):
    first = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "--quiet"])
    assert first.exit_code == 0, first.output
    run_id = first.output.split("run ", 1)[1].split()[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    for bad in ("", "  "):
        result = runner.invoke(cli, ["run", str(toy_recipe), "--resume", bad, "--store", store, "--quiet"])
        assert result.exit_code != 0 and "empty run id" in result.output and run_id in result.output
    from seal_platform.store import RunStore

    assert [r.id for r in RunStore(store).list_runs()] == [run_id]  # nothing was resumed or started
    second = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "--quiet"])
    other = second.output.split("run ", 1)[1].split()[0]
    common = next(i for i, (a, b) in enumerate(zip(run_id, other)) if a != b)
    result = runner.invoke(cli, ["run", "--resume", run_id[:common], "--store", store, "--quiet"])
    assert result.exit_code != 0 and "ambiguous" in result.output and run_id in result.output and other in result.output


@pytest.mark.parametrize("hook", ["start_run", "save_checkpoint"])
def test_a_plugin_raising_in_a_lifecycle_hook_is_one_paragraph_naming_it_and_the_run_resumes(
        runner, toy_recipe, toy_site, tmp_path, hook):
    result = runner.invoke(cli, ["run", str(toy_recipe), f"settings.toy.fail_in={hook}", "--quiet"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"plugin 'toy' failed in '{hook}'" in text and "Traceback" not in result.output
    assert "seal-platform run --resume" in text
    from seal_platform.store import RunStore

    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    (run,) = store.list_runs()
    assert run.status == "failed"
    assert not any(p.name.startswith(".tmp-step") for p in (Path(run.run_dir) / "checkpoints").glob("*")) \
        if (Path(run.run_dir) / "checkpoints").exists() else True


def test_transcripts_show_every_turn_with_its_verdict_and_labels_as_the_store_holds_them(runner, toy_recipe, toy_site,
                                                                                        tmp_path):
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=2", "--quiet"])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store_url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    from seal_platform.store import RunStore

    store = RunStore(store_url)
    (traj,) = [t for t in store.trajectories(run_id, step=1, phase="train")][:1]
    shown_json = runner.invoke(cli, ["transcripts", run_id, "--store", store_url, "--step", "1",
                                     "--task", traj.task_id, "--json", "--limit", "50"])
    assert shown_json.exit_code == 0, shown_json.output
    data = json.loads(shown_json.output)
    episode = next(e for e in data if e["trajectory_id"] == traj.id)
    assert episode["step"] == 1 and episode["reward"] == traj.reward and episode["task_id"] == traj.task_id
    assert episode["system"] == traj.messages[0].content
    (turn,) = episode["turns"]
    assert [m["content"] for m in turn["messages"]] == [m.content for m in traj.messages[1:]]
    assert turn["verdict"]["passed"] == traj.turn_verdicts[0].passed
    rows = [r for r in store.labels(run_id, step=1) if r.trajectory_id == traj.id]
    assert sorted(lab["label"] for lab in turn["labels"]) == sorted(r.label for r in rows) and rows
    weights = {w.label: w.weight for w in store.label_weights(run_id) if w.step == 1}
    assert all(lab["weight_after_step"] == weights.get(lab["label"]) for lab in turn["labels"])
    # Filters: failed episodes only, by label, evaluation episodes; and the terminal view.
    failed = json.loads(runner.invoke(cli, ["transcripts", run_id, "--store", store_url, "--failed", "--json",
                                            "--limit", "100"]).output)
    assert failed and all(e["reward"] < 0.5 for e in failed)
    wrong = json.loads(runner.invoke(cli, ["transcripts", run_id, "--store", store_url, "--label", "wrong_sum",
                                           "--json", "--limit", "100"]).output)
    assert all(any(lab["label"] == "wrong_sum" for t in e["turns"] for lab in t["labels"]) for e in wrong)
    evals = json.loads(runner.invoke(cli, ["transcripts", run_id, "--store", store_url, "--eval", "--json"]).output)
    assert evals and all(e["phase"] == "eval" for e in evals)
    shown = runner.invoke(cli, ["transcripts", run_id, "--store", store_url, "--step", "1", "--task", traj.task_id],
                          terminal_width=120).output
    assert f"task {traj.task_id}" in shown and "turn 0" in shown and "label [toy]" in shown


def test_settings_lists_every_plugin_key_from_its_model_and_config_show_fills_plugin_sections(
    runner, toy_recipe, toy_site
):
    data = json.loads(runner.invoke(cli, ["settings", "toy", "--json"]).output)
    from toy_plugin import ToySettings

    keys = {row["key"]: row for row in data}
    assert set(keys) == {f"settings.toy.{name}" for name in ToySettings.model_fields}
    assert keys["settings.toy.n_tasks"]["default"] == "12" and keys["settings.toy.n_tasks"]["plugin"] == "toy"
    unknown = runner.invoke(cli, ["settings", "no-such-plugin"])
    assert unknown.exit_code != 0 and "no loaded plugin or settings section named 'no-such-plugin'" in unknown.output
    shown = runner.invoke(cli, ["config", "show", str(toy_recipe)]).output
    import yaml

    resolved = yaml.safe_load(shown)
    assert resolved["settings"]["toy"]["start_skill"] == ToySettings().start_skill  # a default, not in the recipe
    assert resolved["settings"]["toy"]["n_tasks"] == 10  # the recipe's value


def test_runs_are_named_by_id_unique_prefix_suffix_or_name(runner, toy_recipe, toy_site, tmp_path):
    first = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "name=alpha", "--quiet"])
    second = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "name=beta", "--quiet"])
    ids = [r.output.split("run ", 1)[1].split()[0] for r in (first, second)]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    for ref in (ids[0], ids[0][-6:], "alpha"):
        data = json.loads(runner.invoke(cli, ["show", ref, "--store", store, "--json"]).output)
        assert data["id"] == ids[0], ref
    both = runner.invoke(cli, ["compare", "alpha", ids[1][-6:], "--store", store, "--json"])
    assert [r["id"] for r in json.loads(both.output)["runs"]] == ids
    third = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=1", "name=alpha", "--quiet"])
    assert third.exit_code == 0
    ambiguous = runner.invoke(cli, ["show", "alpha", "--store", store])
    assert ambiguous.exit_code != 0 and "ambiguous" in ambiguous.output and ids[0] in ambiguous.output


def test_show_names_why_a_step_did_not_update_instead_of_printing_zeros():
    from seal_platform.present.reporting import step_update_text

    updated = {"updates": 1.0, "loss": 0.25, "grad_norm": 1.5, "kl": 0.0, "entropy": 0.7, "clip_frac": 0.1, "lr": 1e-5}
    assert step_update_text(updated) == "loss 0.25, grad_norm 1.5, kl 0, entropy 0.7, clip_frac 0.1"
    assert step_update_text({"updates": 0.0, "ds_groups_kept": 0.0, "entropy": 0.0}) == \
        "skipped (no group with mixed outcomes was drawn)"
    assert step_update_text({"updates": 0.0, "skipped_sequences": 8.0, "trained_sequences": 0.0}) == \
        "skipped (every advantage was 0)"
    assert "entropy" not in step_update_text({"updates": 0.0, "entropy": 0.0})


def test_compare_marks_unfinished_runs_and_says_after_which_step_each_column_was_taken(runner, toy_recipe, toy_site,
                                                                                      tmp_path):
    done = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=3", "--quiet"])
    crashed = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=3", "settings.toy.fail_in=optimize",
                                  "evaluation.before_training=true", "--quiet"])
    assert done.exit_code == 0 and crashed.exit_code != 0
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    from seal_platform.store import RunStore

    ids = [r.id for r in sorted(RunStore(store).list_runs(), key=lambda r: r.started_at)]
    data = json.loads(runner.invoke(cli, ["compare", *ids, "--store", store, "--json"]).output)
    assert [r["status"] for r in data["runs"]] == ["completed", "failed"]
    assert data["runs"][0]["final_steps"]["toy:eval"] == 3 and data["runs"][1]["final_steps"]["toy:eval"] == 0
    shown = runner.invoke(cli, ["compare", *ids, "--store", store], terminal_width=120).output
    assert "(FAILED)" in shown and "after step (differs!)" in shown


def test_show_of_a_long_run_lists_its_first_and_last_steps_and_checkpoints(runner, toy_recipe, toy_site, tmp_path):
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=40", "training.checkpoint_every=2",
                                 "evaluation.every=0", "--quiet", "--no-report"])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    shown = runner.invoke(cli, ["show", run_id, "--store", store], terminal_width=200).output
    assert "10 steps between step 9 and step 20 not shown (--all-steps shows them" in " ".join(shown.split())
    def step_rows(text):
        steps_part = text.split("steps", 1)[1].split("after step", 1)[0]  # the steps table, not the evaluations
        cells = [line.strip("│ ").split("│")[0].strip() for line in steps_part.splitlines()]
        return {cell for cell in cells if cell.isdigit()}

    assert {"0", "9", "20", "39"} <= step_rows(shown) and not {"10", "19"} & step_rows(shown), shown
    assert "checkpoints (20): step 1, step 3, step 5, ... (11 more), step 29," in shown, shown
    everything = runner.invoke(cli, ["show", run_id, "--store", store, "--all-steps"], terminal_width=200).output
    assert "not shown" not in everything and step_rows(everything) == {str(n) for n in range(40)}
