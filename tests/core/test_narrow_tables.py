"""At 80 columns every identifier a person may copy (run ids, names, statuses, label names, settings keys,
category and metric names) is shown whole: never folded mid-word, never cut with "…" (seal_platform/present/fit.py
picks, per table, the widest layout that keeps them whole). Wider terminals keep the full tables."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from seal_platform.capability import CapabilityState
from seal_platform.cli import cli
from seal_platform.present.progress import RichProgress
from seal_platform.store import EVAL_BY_COMMAND, RunStore
from seal_platform.types import EvalResult, Trajectory

NAMES = ("smarthome-embedded", "kvstore-demo", "smarthome-no-env-adaptation")
STATUSES = ("interrupted", "completed", "failed")
CATEGORIES = ("multi_turn_base", "multi_turn_long_context", "multi_turn_miss_func", "multi_turn_miss_param")
GRPO = {"loss": 0.01234, "grad_norm": 1.2345, "kl": 0.000123, "entropy": 1.2345, "clip_frac": 0.0123,
        "updates": 1.0, "trained_sequences": 12.0, "ds_groups_kept": 6.0, "ds_groups_drawn": 16.0,
        "judge_turns": 16.0, "judge_fallbacks": 3.0, "judge_cut_off": 2.0}
# A step of a run without the GRPO plugin's optimizer: its first metrics are shown by name.
PLAIN = {"infra_masked_fraction": 0.0, "collect_rounds": 1.0, "episodes_per_s": 3.5}
IDS = tuple(f"20260101-00000{i}-abcde{i}" for i in range(3))


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    store = RunStore(url)
    for i, (run_id, name, status) in enumerate(zip(IDS, NAMES, STATUSES)):
        store.create_run(run_id, name=name, recipe="r.yaml", config={"environment": "smarthome"},
                         config_hash=f"{i}abcdef0123456789", seed=0, run_dir=str(tmp_path / run_id), plugins=[])
        for step in range(3):
            trajectories = [Trajectory(task_id=f"t{k}", category=CATEGORIES[k % 4], group=f"g{k // 2}", reward=k % 2)
                            for k in range(8)]
            store.record_step(run_id, step=step, epoch=0, trajectories=trajectories, labels=[], label_weights={},
                              state=CapabilityState(), interface_revision=1, metrics=GRPO if step < 2 else PLAIN,
                              timings={"collect": 12.5, "optimize": 3.25})
        for step in (0, 3):
            rates = {c: 10.0 * (k + i + step) for k, c in enumerate(CATEGORIES)}
            store.add_evaluation(run_id, step, EvalResult(split="test", per_category=rates, n_tasks=40))
        store.finish_run(run_id, status)
    store.close()
    return url


def _invoke(args: list[str], width: int = 80) -> str:
    result = CliRunner().invoke(cli, args, terminal_width=width, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


def _assert_whole(output: str, identifiers: list[str] | tuple[str, ...], width: int = 80) -> None:
    long = [line for line in output.splitlines() if len(line) > width]
    assert not long, "lines over the width:\n" + "\n".join(long) + "\n\n" + output
    assert "…" not in output, output
    missing = [item for item in identifiers if item not in output]
    assert not missing, f"not shown whole: {missing}\n{output}"


@pytest.fixture
def store_url(tmp_path):
    return _store(tmp_path)


def test_runs_shows_ids_names_and_statuses_whole_at_80_columns(store_url):
    out = _invoke(["runs", "--store", store_url])
    # The store's URL (its title) is one line however long, for copying; the rest fits 80 columns.
    assert f"runs in {store_url}\n" in out
    _assert_whole(out.replace(f"runs in {store_url}", "runs in <store>"), [*IDS, *NAMES, *STATUSES])
    wide = _invoke(["runs", "--store", store_url], width=160)  # a wide terminal keeps every column
    assert "config" in wide and "started" in wide and "0abcdef0" in wide
    _assert_whole(wide, [*IDS, *NAMES, *STATUSES], width=160)


def test_show_steps_keeps_headers_and_metric_names_whole_at_80_columns(store_url):
    out = _invoke(["show", IDS[0], "--store", store_url])
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("steps"))
    steps = "\n".join(lines[first:]).split("evaluations", 1)[0]
    _assert_whole(steps, ["trajectories", "kept/drawn", "0.01234", *GRPO.keys() - {"updates", "trained_sequences",
                                                                                    "ds_groups_kept", "ds_groups_drawn",
                                                                                    "judge_turns", "judge_fallbacks",
                                                                                    "judge_cut_off"},
                          "infra_masked_fraction", "3/16 (19%), 2 cut off"])
    assert len(steps.splitlines()) < 25, steps  # not nine lines a step
    wide = _invoke(["show", IDS[0], "--store", store_url], width=200)
    assert "groups kept/drawn" in wide and "judge fallbacks" in wide and "clip_frac 0.0123" in wide


# A run whose plugins, evaluations and `seal-platform eval` results are wider than 80 columns as tables.
LONG_PLUGIN, LONG_VERSION = "seal_platform_bfcl_multi_turn_memory_environment", "12.345.6789.dev20260101+gabcdef01"
HOOKS = ["register_environments", "register_diagnosers", "register_rollout_engines", "evolve_interface",
         "on_step_end", "on_run_start"]
EXTRA_BENCH, SPLIT = "bfcl_multi_turn_extended_memory", "validation_holdout_long_split"


def _wide_run_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'wide.sqlite'}"
    store = RunStore(url)
    plugins = [{"name": LONG_PLUGIN, "version": LONG_VERSION, "status": "loaded", "hooks": HOOKS},
               {"name": "grpo", "version": "0.1.0", "status": "failed", "hooks": []}]
    store.create_run(IDS[0], name=NAMES[0], recipe="recipes/smarthome-embedded.yaml",
                     config={"environment": "smarthome"}, config_hash="0abcdef0123456789", seed=0,
                     run_dir=f"/srv/runs/{IDS[0]}", plugins=plugins)
    for step in range(2):
        trajectories = [Trajectory(task_id=f"t{k}", category=CATEGORIES[k % 4], group=f"g{k // 2}", reward=k % 2)
                        for k in range(8)]
        store.record_step(IDS[0], step=step, epoch=0, trajectories=trajectories, labels=[], label_weights={},
                          state=CapabilityState(), interface_revision=1, metrics=GRPO, timings={"collect": 1.0})
    # The run's own environment evaluated twice (its categories become rows, its steps columns), the extra
    # benchmark twelve times (too many steps for columns: its categories are lettered over a legend).
    for step in range(0, 24, 2):
        rates = {c: 10.0 * (k + step) for k, c in enumerate(CATEGORIES)}
        if step in (0, 2):
            store.add_evaluation(IDS[0], step, EvalResult(split="test", per_category=rates, n_tasks=40))
        store.add_evaluation(IDS[0], step, EvalResult(split=SPLIT, per_category=rates, n_tasks=40),
                             benchmark=EXTRA_BENCH)
    store.add_evaluation(IDS[0], 2, EvalResult(split=SPLIT, per_category={c: 33.3 for c in CATEGORIES}, n_tasks=400),
                         benchmark=EXTRA_BENCH, origin=EVAL_BY_COMMAND)
    store.add_event(IDS[0], "plugins_changed", "the run resumed with other plugins than it ran with: "
                    f"{LONG_PLUGIN} {LONG_VERSION} added, grpo 0.1.0 now failing to load (--allow-plugin-changes)")
    store.finish_run(IDS[0], "failed", error="the optimizer stopped: every advantage of the step was 0 and "
                     "grpo.zero_advantage is 'error'; set it to 'skip' to train on nothing instead")
    store.close()
    return url


def test_show_fits_plugins_evaluations_and_checkpoint_evaluations_in_80_columns(tmp_path):
    url = _wide_run_store(tmp_path)
    out = _invoke(["show", IDS[0], "--store", url])
    _assert_whole(out, [LONG_PLUGIN, LONG_VERSION, *HOOKS, *CATEGORIES, EXTRA_BENCH, f"{EXTRA_BENCH}:{SPLIT}",
                        "33.30", f"/srv/runs/{IDS[0]}", "--allow-plugin-changes", "zero_advantage"])
    # Every evaluation's figures are shown, each category's and the average.
    for step in range(0, 24, 2):
        for k in range(4):
            assert f"{10.0 * (k + step):.2f}" in out, out
    assert re.search(rf"^│ {CATEGORIES[1]} +│ +10\.00 │ +30\.00 │$", out, re.M), out  # categories as rows
    assert re.search(rf"^B +{CATEGORIES[1]}$", out, re.M), out  # ... or lettered, over a legend
    wide = _invoke(["show", IDS[0], "--store", url], width=250)  # a wide terminal keeps the tables as they were
    _assert_whole(wide, [LONG_PLUGIN, LONG_VERSION, *CATEGORIES, f"{EXTRA_BENCH}:{SPLIT}"], width=250)
    header = next(line for line in wide.splitlines() if "after step" in line and CATEGORIES[0] in line)
    assert all(c in header for c in CATEGORIES), wide
    assert any(LONG_PLUGIN in line and LONG_VERSION in line and "loaded" in line for line in wide.splitlines())


def test_labels_of_smarthome_show_label_names_whole_at_80_columns(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    out = _invoke(["labels", "smarthome"])
    _assert_whole(out, ["empty_turn_model_response", "spurious_tool_call", "llm_judge"])


def test_settings_keys_whole_at_80_columns(monkeypatch):
    monkeypatch.delenv("SEAL_PLATFORM_PLUGINS", raising=False)
    out = _invoke(["settings", "kvstore"])
    _assert_whole(out, ["settings.kv_oracle.skill", "settings.kvstore.max_steps_per_turn",
                        "settings.kvstore.evolution.min_prevalence"])
    everything = _invoke(["settings"])
    _assert_whole(everything, ["settings.smarthome.evolution.schema_affordances"])


def test_compare_of_three_runs_keeps_category_names_and_runs_whole_at_80_columns(store_url):
    out = _invoke(["compare", *IDS, "--store", store_url])
    _assert_whole(out, [*CATEGORIES, *IDS, *NAMES, "INTERRUPTED", "FAILED"])
    wide = _invoke(["compare", *IDS, "--store", store_url], width=200)
    assert "multi_turn_long_context" in wide and "smarthome-no-env-adaptation" in wide


def _progress_lines(width: int) -> list[str]:
    out = io.StringIO()
    progress = RichProgress(Console(file=out, force_terminal=True, width=width, color_system=None))
    progress.stage(0, "load model")
    progress.start(300, 0)
    progress.step_done(0, 0.123, {"tokens_per_s": 1234.0, "trained_tokens": 5.0})
    progress.stage(1, "evolve_interface")
    assert progress.bar is not None
    progress.bar.refresh()
    progress.stage(1, "collect")
    progress.episodes(30, 128)
    progress.bar.refresh()
    progress.step_done(299, 0.5, {"updates": 0})
    progress.stop()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    return [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]


def test_the_live_progress_line_is_not_cut_at_80_columns():
    lines = _progress_lines(80)
    text = "\n".join(lines)
    _assert_whole(
        text, ["evolve_interface", "300/300", "30/128", "1234", "tok/s", "collect episodes", "(advantages 0)"]
    )
    final = [line for line in lines if "done" in line or "300/300" in line]
    assert any("eta" in line and re.search(r"\d+:\d\d:\d\d", line) for line in final), text
    assert "━" in "\n".join(_progress_lines(140))  # a wide terminal keeps its bar
