"""``seal-platform run --resume`` runs with the plugins the run ran with: a resume whose plugins differ from
the run's recorded ones (a version changed, a plugin added, removed or its load status changed) is refused
before anything is changed, listing each difference; ``--allow-plugin-changes`` goes on and records the
previous plugin list in a ``plugins_changed`` event. A run that recorded no plugins resumes as before. A resume
started from Python (``Runner(resume_run_id=...)``, as the ablation harness starts one) is checked alike.

The runs are real CLI runs of the toy plugin (installed as ``seal-toy`` 0.3.0); an older or different
plugin set is simulated by editing the run's recorded ``run_plugins`` rows in the store."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import delete, update

from seal_platform.cli import cli
from seal_platform.config import stored_config
from seal_platform.loop import Runner
from seal_platform.planning import plan_config
from seal_platform.resume import PLUGINS_CHANGED_EVENT, PluginChangesError, plugin_differences
from seal_platform.store import RunStore
from seal_platform.store import models as m


def _interrupted(runner: CliRunner, toy_recipe: Path, tmp_path: Path) -> str:
    """A CLI run of 4 steps (a checkpoint after step 1) interrupted in step 3; its id."""
    flag = tmp_path / "interrupt"
    flag.touch()
    result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=4", "training.checkpoint_every=2",
                                 "evaluation.every=0", f"settings.toy.interrupt_file={flag}",
                                 "settings.toy.interrupt_step=3", "--quiet"])
    assert result.exit_code == 130, result.output
    return result.output.split("--resume ", 1)[1].split()[0]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"


def _resume(runner: CliRunner, run_id: str, url: str, *extra: str):
    return runner.invoke(cli, ["run", "--resume", run_id, "--store", url, "--quiet", *extra])


def _plugins(store: RunStore, run_id: str) -> list[tuple]:
    return [(p.name, p.distribution, p.version, p.status) for p in store.run_plugins(run_id)]


def _toy_row(store: RunStore, run_id: str, **values) -> None:
    """Change the run's recorded row of the toy plugin (as an older install would have recorded it)."""
    with store.session() as s:
        s.execute(update(m.RunPlugin).where(m.RunPlugin.run_id == run_id, m.RunPlugin.name == "toy").values(**values))


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.log"}


def _snapshot(store: RunStore, run_id: str):
    """Everything a refused resume must leave as it was: the run row, its history, its recorded plugins,
    its events and its folder."""
    run = store.get_run(run_id)
    return ((run.status, run.pid, run.host, run.heartbeat_at, run.run_dir, run.error),
            [(c.step, c.path) for c in store.checkpoints(run_id)], [s.step for s in store.steps(run_id)],
            [(e.kind, e.message) for e in store.events(run_id)], _plugins(store, run_id),
            _tree(Path(run.run_dir)))


def test_a_resume_with_the_same_plugins_goes_on(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    store = RunStore(_url(tmp_path))
    recorded = _plugins(store, run_id)
    assert ("toy", "seal-toy", "0.3.0", "loaded") in recorded
    result = _resume(runner, run_id, _url(tmp_path))
    assert result.exit_code == 0, result.output
    assert store.get_run(run_id).status == "completed"
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3]
    assert PLUGINS_CHANGED_EVENT not in [e.kind for e in store.events(run_id)]
    assert _plugins(store, run_id) == recorded


def test_a_changed_plugin_version_is_refused_before_anything_is_changed(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    _toy_row(store, run_id, version="0.2.0")  # the run ran with seal-toy 0.2.0; 0.3.0 is installed now
    before = _snapshot(store, run_id)
    assert before[0][0] == "interrupted" and before[1] == [(1, before[1][0][1])] and before[2] == [0, 1, 2]

    result = _resume(runner, run_id, url)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line.strip() for line in result.output.splitlines()]
    assert "seal-toy 0.2.0 -> 0.3.0 (plugin toy)" in lines, result.output  # the difference on its own line
    text = " ".join(result.output.split())
    assert "nothing was changed" in text and "pip install seal-toy==0.2.0" in text, text
    assert f"seal-platform run --resume {run_id} --store {url} --allow-plugin-changes" in text, text
    assert _snapshot(store, run_id) == before

    # With the run's folder moved and given as --run-dir: refused before the store is pointed at it.
    moved = tmp_path / "moved" / "run"
    shutil.copytree(before[0][4], moved)
    result = _resume(runner, run_id, url, "--run-dir", str(moved))
    assert result.exit_code == 2 and "seal-toy 0.2.0 -> 0.3.0 (plugin toy)" in result.output, result.output
    assert "its folder is now" not in result.output
    assert _snapshot(store, run_id) == before


def test_each_kind_of_difference_is_listed_on_its_own_line(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    original = _plugins(store, run_id)

    def refused() -> list[str]:
        """The refusal's lines (the differences' between "Differences:" and "To resume it")."""
        before = _snapshot(store, run_id)
        result = _resume(runner, run_id, url)
        assert result.exit_code == 2, result.output
        assert _snapshot(store, run_id) == before
        lines = [line.strip() for line in result.output.splitlines()]
        assert lines[0].endswith("Differences:") and lines[-1].startswith("To resume it"), lines
        return lines

    # The toy plugin failed to load when the run ran (so it ran without it), and loads now.
    _toy_row(store, run_id, status="failed", error="ImportError: no module named toy_plugin")
    lines = refused()
    assert "seal-toy 0.3.0 (plugin toy): failed -> loaded" in lines, lines
    assert len(lines) == 3 and "SEAL_PLATFORM_BLOCK_PLUGINS=toy" in lines[-1], lines
    # A plugin loaded then is gone now, and the toy plugin was not installed then.
    with store.session() as s:
        s.execute(delete(m.RunPlugin).where(m.RunPlugin.run_id == run_id, m.RunPlugin.name == "toy"))
        s.add(m.RunPlugin(run_id=run_id, name="gone", distribution="seal-gone", version="1.2.0", status="loaded",
                          hooks=["diagnose"], error=None))
    lines = refused()
    assert "added: seal-toy 0.3.0 (plugin toy)" in lines and "removed: seal-gone 1.2.0 (plugin gone)" in lines, lines
    # Plugins that took part neither then nor now (not allowed by the recipe: the shipped ones here) are no
    # difference, whatever their versions.
    assert len(lines) == 4, lines
    assert len(original) > 1 and all(status == "not-allowed" for name, _, _, status in original if name != "toy")


def test_allow_plugin_changes_goes_on_and_records_the_previous_plugins(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    _toy_row(store, run_id, version="0.2.0")
    previous = _plugins(store, run_id)

    result = _resume(runner, run_id, url, "--allow-plugin-changes")
    assert result.exit_code == 0, result.output
    assert "resumes with other plugins than it ran with" in result.output, result.output
    assert "seal-toy 0.2.0 -> 0.3.0 (plugin toy)" in [line.strip() for line in result.output.splitlines()]
    assert store.get_run(run_id).status == "completed"
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3]
    [event] = [e for e in store.events(run_id) if e.kind == PLUGINS_CHANGED_EVENT]
    assert "seal-toy 0.2.0 -> 0.3.0 (plugin toy)" in event.message
    assert event.data["differences"] == ["seal-toy 0.2.0 -> 0.3.0 (plugin toy)"]
    assert [(p["name"], p["distribution"], p["version"], p["status"]) for p in event.data["previous"]] == previous
    # The recorded plugins are the ones the resumed steps ran with.
    assert ("toy", "seal-toy", "0.3.0", "loaded") in _plugins(store, run_id)
    # Recorded before the resume's own events (the plugins were changed before anything was resumed).
    kinds = [e.kind for e in store.events(run_id)]
    assert kinds.index(PLUGINS_CHANGED_EVENT) < max(i for i, k in enumerate(kinds) if k == "resume")


def _python_resume(run_id: str, url: str, **options) -> Runner:
    """A resume started from Python, as the ablation harness starts one: ``Runner(resume_run_id=...)``, with
    the run's stored config, no CLI in between."""
    store = RunStore(url)
    row = store.get_run(run_id)
    plan = plan_config(stored_config(row.config), row.recipe)
    assert plan.host is not None
    return Runner(plan, plan.host, store, recipe=row.recipe, resume_run_id=run_id, **options)


def test_a_resume_from_python_is_checked_as_one_from_the_cli(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    _toy_row(store, run_id, version="0.2.0")
    before = _snapshot(store, run_id)
    from_cli = _resume(runner, run_id, url)
    assert from_cli.exit_code == 2, from_cli.output

    with pytest.raises(PluginChangesError) as refused:
        _python_resume(run_id, url)
    said = str(refused.value)
    assert "  seal-toy 0.2.0 -> 0.3.0 (plugin toy)" in said.splitlines(), said
    assert " ".join(from_cli.output.split()) == " ".join(f"Error: {said}".split())  # the CLI's message
    assert _snapshot(store, run_id) == before

    # Allowed: it goes on, and records the previous plugins as the CLI's --allow-plugin-changes does.
    previous = _plugins(store, run_id)
    resumed = _python_resume(run_id, url, allow_plugin_changes=True)
    assert resumed.plugin_changes is not None
    assert resumed.plugin_changes.differences == ["seal-toy 0.2.0 -> 0.3.0 (plugin toy)"]
    assert resumed.run().status == "completed"
    assert [s.step for s in store.steps(run_id)] == [0, 1, 2, 3]
    [event] = [e for e in store.events(run_id) if e.kind == PLUGINS_CHANGED_EVENT]
    assert event.data["differences"] == ["seal-toy 0.2.0 -> 0.3.0 (plugin toy)"]
    assert [(p["name"], p["distribution"], p["version"], p["status"]) for p in event.data["previous"]] == previous
    assert ("toy", "seal-toy", "0.3.0", "loaded") in _plugins(store, run_id)


def test_a_run_that_recorded_no_plugins_resumes_as_before(toy_site, toy_recipe, tmp_path):
    runner = CliRunner()
    run_id = _interrupted(runner, toy_recipe, tmp_path)
    url = _url(tmp_path)
    store = RunStore(url)
    with store.session() as s:  # as a run created without a plugin record
        s.execute(delete(m.RunPlugin).where(m.RunPlugin.run_id == run_id))
    result = _resume(runner, run_id, url)
    assert result.exit_code == 0, result.output
    assert store.get_run(run_id).status == "completed"
    assert PLUGINS_CHANGED_EVENT not in [e.kind for e in store.events(run_id)]
    assert ("toy", "seal-toy", "0.3.0", "loaded") in _plugins(store, run_id)


def test_allow_plugin_changes_goes_with_resume(toy_site, toy_recipe):
    result = CliRunner().invoke(cli, ["run", str(toy_recipe), "--allow-plugin-changes", "--quiet"])
    assert result.exit_code == 2 and "go with --resume RUN" in result.output, result.output


def test_plugins_of_one_distribution_that_changed_alike_share_a_line():
    def p(name, version, status="loaded", dist="seal-platform"):
        return {"name": name, "distribution": dist, "version": version, "status": status, "error": None}

    before = [
        p("bfcl", "0.1.0"),
        p("grpo", "0.1.0"),
        p("ray_backend", "0.1.0", "blocked"),
        p("x", "1.0", "failed", "x"),
    ]
    after = [p("bfcl", "0.2.0"), p("grpo", "0.2.0"), p("ray_backend", "0.2.0", "blocked"), p("x", "2.0", "failed", "x")]
    assert plugin_differences(before, after) == ["seal-platform 0.1.0 -> 0.2.0 (plugins bfcl, grpo)"]
    assert plugin_differences(before, before) == []
    after[1] = {**after[1], "status": "failed", "error": "ImportError: torch"}
    assert plugin_differences(before, after) == ["seal-platform 0.1.0 -> 0.2.0 (plugin bfcl)",
                                                 "seal-platform 0.1.0 -> 0.2.0 (plugin grpo): loaded -> failed "
                                                 "(ImportError: torch)"]
