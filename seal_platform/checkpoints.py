"""Checkpoints: written atomically, recorded in the store only once durable, and read back on resume.

A checkpoint is the folder ``RUN_DIR/checkpoints/step-NNNNNN``. Every plugin that implements
``save_checkpoint`` writes its own files into a temporary folder; the core then writes its own state
(:data:`CORE_CHECKPOINT_FILE`: the step, the interface revision and the capability state) last, syncs every file
and folder to disk and renames the temporary folder into place. Only then is the checkpoint added to the run
store, so a crash at any moment leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .capability import CapabilityState
from .context import RunContext
from .plugins import PluginHost
from .store import RunStore

CORE_CHECKPOINT_FILE = "core.json"


@dataclass
class CoreState:
    """What the core itself keeps in a checkpoint."""

    step: int
    interface_revision: int
    state: CapabilityState


def write_checkpoint(host: PluginHost, ctx: RunContext, core: CoreState) -> Path:
    """Write the checkpoint after step ``core.step`` (plugins' files, then the core's), make it durable,
    and only then record it in the store. Returns its folder."""
    root = ctx.run_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    step = core.step
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{uuid.uuid4().hex[:6]}"
    tmp.mkdir()
    try:
        metas = host.hook.save_checkpoint(ctx=ctx, directory=tmp, step=step)
        data = {
            "step": step,
            "interface_revision": core.interface_revision,
            "state": core.state.model_dump(mode="json"),
        }
        (tmp / CORE_CHECKPOINT_FILE).write_text(json.dumps(data))
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if ctx.store is not None:
        ctx.store.add_checkpoint(ctx.run_id, step, str(final), {"plugins": [m for m in metas if m]})
    return final


def durable_checkpoints(store: RunStore, run_id: str) -> list[Any]:
    """Checkpoints whose files are complete (the core's file is written last, before the rename)."""
    return [c for c in store.checkpoints(run_id) if (Path(c.path) / CORE_CHECKPOINT_FILE).is_file()]


def remove_partial_checkpoints(root: Path, recorded: list[Any]) -> list[Path]:
    """Delete what a kill during a checkpoint write left under ``root``: ``.tmp-step-*`` directories and
    ``step-*`` directories the store never recorded (renamed into place, then killed before the row)."""
    if not root.is_dir():
        return []
    known = {Path(c.path).name for c in recorded}
    removed = []
    for path in sorted(root.iterdir()):
        partial = path.name.startswith(".tmp-step-") or (path.name.startswith("step-") and path.name not in known)
        if partial and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def read_core_state(directory: Path) -> CoreState:
    """The core's part of the checkpoint in ``directory``."""
    core = json.loads((Path(directory) / CORE_CHECKPOINT_FILE).read_text())
    return CoreState(core["step"], core["interface_revision"], CapabilityState.model_validate(core["state"]))


def load_plugin_checkpoints(host: PluginHost, ctx: RunContext, directory: Path, step: int) -> None:
    """Every plugin that implements ``load_checkpoint`` restores its part of the checkpoint in ``directory``."""
    host.hook.load_checkpoint(ctx=ctx, directory=Path(directory), step=step)


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())
    for directory in [path, *(p for p in path.rglob("*") if p.is_dir())]:
        _fsync_dir(directory)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
