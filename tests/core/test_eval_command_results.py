"""`seal-platform eval` results live beside the run's own evaluations, never in place of them: a resume keeps
them, the run's curves and numbers leave them out, checkpoint rotation does not rank by them, and `show`, the
report and `runs --json` list them on their own."""

from __future__ import annotations

import contextlib
import json

from alembic import command
from click.testing import CliRunner

from seal_platform.checkpoints import rotate_checkpoints
from seal_platform.cli import cli
from seal_platform.loop import evaluate_checkpoint
from seal_platform.planning import plan_recipe
from seal_platform.present.digest import load_digest
from seal_platform.store import EVAL_BY_COMMAND, RunStore
from seal_platform.store.safety import alembic_config
from seal_platform.types import EvalResult

from .test_loop import _runner
from .test_resume_reliability import interrupted_then_resumed


def _rows(store, run_id, origin):
    return sorted((e.step, e.split, e.category, e.pass_rate) for e in store.evaluations(run_id, origin=origin))


def test_an_eval_of_the_resumed_checkpoint_survives_the_resume_and_stays_out_of_the_runs_numbers(
        toy_site, toy_recipe, tmp_path):
    # Checkpoint after step 1, evaluations at 0 and 2, interrupted in step 3. `seal-platform eval` then
    # measures that checkpoint on another split and size: stored at step 2, as the run's own evaluation of it.
    flag = tmp_path / "interrupt"
    flag.touch()
    overrides = ["training.steps=5", "training.checkpoint_every=2", "evaluation.every=2",
                 "settings.toy.interrupt_step=3", f"settings.toy.interrupt_file={flag}"]
    runner, store = _runner(toy_recipe, overrides)
    with contextlib.suppress(KeyboardInterrupt):
        runner.run()
    run_id = runner.run_id
    own_before = _rows(store, run_id, "run")
    assert sorted({row[0] for row in own_before}) == [0, 2]

    plan = plan_recipe(toy_recipe, [*overrides, "evaluation.split=test", "evaluation.max_tasks=2"])
    done, result = evaluate_checkpoint(store, plan.host, plan, run_id)
    assert done == 2 and result.split == "test"
    by_command = _rows(store, run_id, EVAL_BY_COMMAND)
    assert {(row[0], row[1]) for row in by_command} == {(2, "test")}
    assert _rows(store, run_id, "run") == own_before  # the run's own evaluation at 2 is untouched

    digest = load_digest(store, run_id)
    [entry] = digest.checkpoint_evaluations
    assert (entry.after_steps, entry.eval_set, entry.n_tasks) == (2, "toy:test", 2)
    assert entry.per_category == {cat: rate for _, _, cat, rate in by_command}
    assert set(digest.evaluations) == {"toy:eval"}  # the command's split is not one of the run's curves

    resumed, store = _runner(toy_recipe, overrides, resume=run_id)
    resumed.run()
    assert store.get_run(run_id).status == "completed"
    assert _rows(store, run_id, EVAL_BY_COMMAND) == by_command  # the resume kept the checkpoint, and its eval
    assert sorted({row[0] for row in _rows(store, run_id, "run")}) == [0, 2, 4, 5]


def test_a_restart_before_the_evaluated_checkpoint_drops_its_eval_with_it(toy_site, toy_recipe, tmp_path):
    run_id, store, _ = interrupted_then_resumed(
        toy_recipe, tmp_path, ["training.steps=5", "training.checkpoint_every=2", "settings.toy.interrupt_step=4"])
    plan = plan_recipe(toy_recipe, ["training.steps=5", "evaluation.max_tasks=2"])
    evaluate_checkpoint(store, plan.host, plan, run_id, step=3)  # stored at step 4
    evaluate_checkpoint(store, plan.host, plan, run_id, step=1)  # stored at step 2
    store.discard_after(run_id, 1)  # what --restart-from-step 2 does: the checkpoint after step 3 goes
    assert {row[0] for row in _rows(store, run_id, EVAL_BY_COMMAND)} == {2}


def test_rotation_keeps_the_best_checkpoint_by_the_runs_own_evaluations_only(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="r", recipe="", config={"environment": "env"}, config_hash="h", seed=0,
                     run_dir=str(tmp_path), plugins=[])
    for step in (0, 1, 2):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        (folder / "core.json").write_text("{}")
        store.add_checkpoint("r", step, str(folder), {})
    # The run's own evaluations: the checkpoint after step 0 is the best (80 against 20 and 10).
    for done, rate in ((1, 80.0), (2, 20.0), (3, 10.0)):
        store.add_evaluation("r", done, EvalResult(split="eval", per_category={"a": rate}, n_tasks=5), benchmark="env")
    # A `seal-platform eval` of the checkpoint after step 1, on a two-task split, scored 100.
    store.add_evaluation("r", 2, EvalResult(split="eval", per_category={"a": 100.0}, n_tasks=2), benchmark="env",
                         origin=EVAL_BY_COMMAND)
    removed = rotate_checkpoints(store, "r", 1, "average", "env")
    assert removed == [1] and [c.step for c in store.checkpoints("r")] == [0, 2]


def test_show_report_and_runs_json_list_the_command_apart(toy_site, toy_recipe, tmp_path):
    cli_runner = CliRunner()
    result = cli_runner.invoke(cli, ["run", str(toy_recipe), "training.steps=2", "--quiet"])
    assert result.exit_code == 0, result.output
    run_id = result.output.split("run ", 1)[1].split()[0]
    store_url = f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"
    evaluated = cli_runner.invoke(cli, ["eval", run_id, "--store", store_url, "--split", "test", "--max-tasks", "3"])
    assert evaluated.exit_code == 0, evaluated.output
    [row] = json.loads(cli_runner.invoke(cli, ["runs", "--store", store_url, "--json"]).output)
    [entry] = row["checkpoint_evaluations"]
    # The checkpoint `show` lists as step 1 holds 2 steps: numbered as `eval` prints it and as the run's
    # own evaluation of it is ("after step 2").
    assert entry["after_steps"] == 2 and entry["eval_set"] == "toy:test" and entry["n_tasks"] == 3
    assert set(row["evaluations"]) == {"toy:eval"}
    shown = cli_runner.invoke(cli, ["show", run_id, "--store", store_url], terminal_width=200)
    assert shown.exit_code == 0 and "checkpoints evaluated by `seal-platform eval`" in shown.output
    assert "toy:test" in shown.output
    out = tmp_path / "report.html"
    reported = cli_runner.invoke(cli, ["report", run_id, "--store", store_url, "--out", str(out)])
    assert reported.exit_code == 0, reported.output
    assert "Checkpoints evaluated afterwards" in out.read_text() and "toy:test" in out.read_text()


def test_upgrading_a_0005_store_finds_the_commands_rows_from_its_events(tmp_path):
    store = RunStore(f"sqlite:///{tmp_path / 'store.sqlite'}")
    store.create_run("r", name="r", recipe="", config={"environment": "env"}, config_hash="h", seed=0,
                     run_dir=str(tmp_path), plugins=[])
    # Before 0006 the run wrote its own rows under its environment's name (0004 on) and the command wrote
    # its rows with no benchmark, then an "evaluation" event.
    store.add_evaluation("r", 2, EvalResult(split="eval", per_category={"a": 50.0, "b": 40.0}, n_tasks=4),
                         benchmark="env")
    store.add_evaluation("r", 2, EvalResult(split="test", per_category={"a": 0.0, "b": 10.0}, n_tasks=2))
    store.add_event("r", "evaluation", "checkpoint after step 1 evaluated on test: 5.00")
    # An evaluation stored long before an event that names it is not the command's.
    store.add_evaluation("r", 4, EvalResult(split="eval", per_category={"a": 70.0}, n_tasks=4))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE evaluations SET created_at = '2026-01-01 00:00:00' WHERE step = 4")
        command.downgrade(alembic_config(conn), "0005")
        columns = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(evaluations)")]
    assert "origin" not in columns
    store.add_event("r", "evaluation", "checkpoint after step 3 evaluated on eval: 70.00")
    upgraded = RunStore(store.url)
    assert upgraded.schema_revision() == RunStore.head_revision()
    assert _rows(upgraded, "r", EVAL_BY_COMMAND) == [(2, "test", "a", 0.0), (2, "test", "b", 10.0)]
    assert _rows(upgraded, "r", "run") == [(2, "eval", "a", 50.0), (2, "eval", "b", 40.0), (4, "eval", "a", 70.0)]
