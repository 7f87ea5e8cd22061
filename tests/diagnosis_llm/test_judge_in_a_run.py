"""The judge inside real runs of the loop (the core's toy environment), against an OpenAI-compatible server
on loopback: labels stored with confidences next to the heuristic's, the cache shared by identical turns and
kept across an interrupted and resumed run, and the agreement report over the stored run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from openai_server import OpenAIServer, Response

from seal_platform.loop import Runner
from seal_platform.planning import load_recipe, prepare
from seal_platform.plugins import make_plugin_manager
from seal_platform.store import RunStore
from seal_platform_plugins.diagnosis_llm import plugin as judge_plugin
from seal_platform_plugins.diagnosis_llm.agreement import confusion

pytest.importorskip("openai")

TOY = Path(__file__).resolve().parents[1] / "core" / "toy_plugin.py"


def toy_module():
    spec = importlib.util.spec_from_file_location("judge_run_toy_plugin", TOY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe(tmp_path: Path, base_url: str, flag: Path) -> Path:
    data = {
        "name": "toy-judge",
        "seed": 3,
        "environment": "toy",
        "runs_dir": str(tmp_path / "runs"),
        "training": {"steps": 3, "tasks_per_step": 2, "group_size": 3, "checkpoint_every": 1},
        "rollout": {"engine": "toy-engine", "workers": 2},
        "evaluation": {"every": 0, "before_training": False},
        "diagnosis": {"diagnosers": ["toy", "llm_judge"], "primary": "toy"},
        "stages": {"evolve_interface": "toy", "reweight": "toy", "optimize": "toy"},
        "settings": {
            "toy": {
                "n_tasks": 4,
                "start_skill": 0.3,
                "skill_step": 0.0,
                "interrupt_file": str(flag),
                "interrupt_step": 1,
            },
            "diagnosis_llm": {
                "backend": "openai",
                "mode": "refine",
                "openai": {"base_url": base_url, "model": "judge", "api_key_env": None},
            },
        },
    }
    path = tmp_path / "toy-judge.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def runner(path: Path, resume: str | None = None) -> Runner:
    config, issues, source = load_recipe(str(path), [])
    assert not issues
    host = make_plugin_manager(entry_points=[], extra=[("toy", toy_module().plugin), ("diagnosis_llm", judge_plugin)])
    return Runner(prepare(config, host, str(source)), host, RunStore(config.store_url()), resume_run_id=resume)


def test_a_judged_run_interrupted_and_resumed(tmp_path):
    prompts: list[str] = []

    def respond(body, n):
        prompts.append(json.dumps(body["messages"]))
        return Response(
            json.dumps({"label": "response_mismatch", "rationale": "the sum is off by one", "confidence": 0.75})
        )

    flag = tmp_path / "interrupt"
    flag.touch()
    with OpenAIServer(respond) as server:
        path = recipe(tmp_path, server.base_url, flag)
        first = runner(path)
        with pytest.raises(KeyboardInterrupt):  # killed in step 1's optimize, after step 0's checkpoint
            first.run()
        asked_before_resume = len(server.requests)
        summary = runner(path, resume=first.run_id).run()
    assert summary.status == "completed" and summary.steps_done == 3
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    rows = store.labels(first.run_id)
    toy_wrong = {(r.trajectory_id, r.turn) for r in rows if r.source == "toy" and r.label == "wrong_sum"}
    judged = [r for r in rows if r.source == "llm_judge"]
    # Every turn the heuristic marked wrong has a judge label (with its confidence); passes are not judged.
    assert toy_wrong and {(r.trajectory_id, r.turn) for r in judged} == toy_wrong
    assert all(r.label == "response_mismatch" and r.confidence == 0.75 for r in judged)
    # Identical turns (same task, same wrong answer) and the steps re-done after the resume were answered
    # from the cache: the server saw each distinct prompt once.
    assert len(prompts) == len(set(prompts)) and 0 < asked_before_resume <= len(prompts) < len(judged)
    events = [e.kind for e in store.events(first.run_id)]
    assert "resume" in events and "diagnosis_llm.judged" in events and "diagnosis_llm.fallback" not in events
    result = confusion(first.run_id, rows, "llm_judge", "toy")
    assert [(c.heuristic, c.judge, c.count, c.mean_confidence) for c in result.cells] == [
        ("wrong_sum", "response_mismatch", len(judged), 0.75)]


def test_the_fallback_rate_per_step_is_stored_and_shown(tmp_path):
    """Every other distinct turn gets an answer cut off by the token limit (twice: the retry too): those
    turns fall back to the heuristic label. Each step's judge metrics match the labels the store holds, and
    `show` and the report show them."""
    import io

    from rich.console import Console

    from seal_platform.present.digest import load_digest
    from seal_platform.present.html_report import run_report_html
    from seal_platform.present.reporting import show_run

    decisions: dict[str, bool] = {}

    def respond(body, n):
        key = json.dumps(body["messages"][:2])
        cut = decisions.setdefault(key, len(decisions) % 2 == 0)
        text = json.dumps({"label": "response_mismatch", "rationale": "the sum is off by one", "confidence": 0.75})
        return Response(text[:30] if cut else text)

    with OpenAIServer(respond) as server:
        path = recipe(tmp_path, server.base_url, tmp_path / "no-interrupt")
        run = runner(path)
        assert run.run().status == "completed"
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    rows = [r for r in store.labels(run.run_id) if r.source == "llm_judge"]
    steps = store.steps(run.run_id)
    assert True in decisions.values() and False in decisions.values()
    for s in steps:
        mine = [r for r in rows if r.step == s.step]
        fallbacks = [r for r in mine if r.confidence is None]
        assert s.metrics["judge_turns"] == len(mine)
        assert s.metrics["judge_fallbacks"] == len(fallbacks) == s.metrics["judge_cut_off"]
        if mine:
            assert s.metrics["judge_fallback_rate"] == len(fallbacks) / len(mine)
        assert all("cut off" in r.rationale for r in fallbacks)
    assert sum(s.metrics["judge_fallbacks"] for s in steps) > 0 and any(r.confidence == 0.75 for r in rows)
    busy = next(s for s in steps if s.metrics["judge_fallbacks"])
    n, f = int(busy.metrics["judge_turns"]), int(busy.metrics["judge_fallbacks"])
    out = io.StringIO()
    show_run(store, run.run_id, Console(file=out, width=250))
    shown = out.getvalue()
    assert "judge fallbacks" in shown and f"{f}/{n} ({100 * f / n:.0f}%), {f} cut off" in shown
    page = run_report_html(load_digest(store, run.run_id))
    section = page.split("<h2>LLM judge fallbacks per step</h2>", 1)[1].split("<h2>", 1)[0]
    assert f"<tr><td>{busy.step}</td><td>{n}</td><td>{f}</td><td>{f}</td><td>{100 * f / n:.0f}%</td></tr>" in section
    assert "settings.diagnosis_llm.max_new_tokens" in section
