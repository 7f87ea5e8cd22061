from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent


# A plugin whose registration hook raises (it also implements a stage, so a recipe can depend on it): the
# plugin tests and the plugin-contract tests install it under their own names.
RAISING_REGISTRATION = """
from seal_platform.hookspecs import hookimpl


@hookimpl
def register_environments():
    raise RuntimeError("boom in register_environments")


@hookimpl
def optimize(ctx, engine, trajectories, weights, step):
    return None
"""


# A diagnoser plugin, `multi` (one diagnoser, "multi", declaring the label "ok"), whose ``diagnose`` runs RESULT
# (a statement) with ``label(t, turn=0, source="multi", trajectory_id=None)`` at hand: a TurnLabel of LABEL
# for trajectory ``t``. The plugin-contract and data-check tests install it (:func:`diagnoser_source`).
DIAGNOSER = """
from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec
from seal_platform.types import TurnLabel


@hookimpl
def register_diagnosers():
    return [DiagnoserSpec("multi", "labels every turn", ("ok",))]


@hookimpl
def diagnose(ctx, trajectories):
    def label(t, turn=0, source="multi", trajectory_id=None):
        return TurnLabel(trajectory_id=trajectory_id or t.id, turn=turn, label=LABEL, source=source)
    RESULT
"""


def diagnoser_source(result: str = "return [label(t) for t in trajectories]", label: str = "ok") -> str:
    """The source of the :data:`DIAGNOSER` plugin, its ``diagnose`` running ``result``, its labels ``label``."""
    return DIAGNOSER.replace("LABEL", repr(label)).replace("RESULT", result)


def damaged_store_files(tmp_path: Path) -> tuple[Path, Path]:
    """A real run store with three runs, cut to half its size and to its first 23 bytes (copies interrupted
    early): the store tests and the CLI tests both read them."""
    import sqlite3

    from seal_platform.store import RunStore

    good = tmp_path / "good.sqlite"
    store = RunStore(f"sqlite:///{good}")
    for i in range(3):
        store.create_run(f"2026010{i}-000000-abcde{i}", name="n", recipe="", config={}, config_hash="h", seed=0,
                         run_dir=str(tmp_path), plugins=[])
    store.close()
    with sqlite3.connect(good) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = good.read_bytes()
    (tmp_path / "half.sqlite").write_bytes(data[: len(data) // 2])
    (tmp_path / "trunc.sqlite").write_bytes(data[:23])
    return tmp_path / "half.sqlite", tmp_path / "trunc.sqlite"


def make_dist(
    root: Path, name: str, version: str, entry_points: dict[str, str], modules: dict[str, str] | None = None
) -> Path:
    """Write an installed-looking distribution (dist-info with entry points) plus its modules into ``root``,
    the way pip would lay it out in site-packages, so importlib.metadata finds it on sys.path."""
    root.mkdir(parents=True, exist_ok=True)
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[seal_platform]\n{lines}\n")
    for filename, source in (modules or {}).items():
        (root / filename).write_text(textwrap.dedent(source))
    importlib.invalidate_caches()
    return root


@pytest.fixture
def toy_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site directory with the toy plugin installed as distribution `seal-toy` 0.3.0."""
    site = make_dist(tmp_path / "site", "seal-toy", "0.3.0", {"toy": "toy_plugin:plugin"})
    (site / "toy_plugin.py").write_text((HERE / "toy_plugin.py").read_text())
    monkeypatch.syspath_prepend(str(site))
    # A fresh module (and so a fresh plugin object with an empty call log) for every test.
    sys.modules.pop("toy_plugin", None)
    return site


@pytest.fixture
def toy_recipe(tmp_path: Path) -> Path:
    recipe = {
        "name": "toy",
        "seed": 7,
        "environment": "toy",
        "runs_dir": str(tmp_path / "runs"),
        "plugins": {"allow": ["toy"]},
        "training": {"steps": 3, "tasks_per_step": 4, "group_size": 2, "checkpoint_every": 2},
        "rollout": {"engine": "toy-engine", "workers": 3},
        "evaluation": {"every": 2, "max_tasks": 6},
        "stages": {"evolve_interface": "toy", "reweight": "toy", "optimize": "toy"},
        "settings": {"toy": {"n_tasks": 10}},
    }
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path
