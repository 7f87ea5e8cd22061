"""Checkpoints: written atomically, recorded in the store only once durable, and read back on resume.

A checkpoint is the folder ``RUN_DIR/checkpoints/step-NNNNNN``. Every plugin that implements
``save_checkpoint`` writes its own files into a temporary folder; the core then writes its own state
(:data:`CORE_CHECKPOINT_FILE`: the run's id, the step, the interface revision and the capability state) last, syncs
every file and folder to disk and renames the temporary folder into place. Only then is the checkpoint added to the run
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
from .errors import SealError, disk_full
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
        metas = host.call_each("save_checkpoint", ctx=ctx, directory=tmp, step=step)
        data = {
            "run_id": ctx.run_id,  # which run the folder belongs to (``--resume --run-dir`` checks it)
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
    except OSError as exc:  # the core's own files: disk full, permissions, a vanished folder
        full = disk_full(tmp, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        raise SealError(f"writing the checkpoint after step {step} into {root} failed: {full or exc.strerror or exc} "
                        f"({exc.filename or root}); nothing of it was kept, the earlier checkpoints are intact: free "
                        "space or fix the folder's permissions, then resume the run.") from exc
    except Exception as exc:
        # A plugin's files: torch.save on a full disk loses the errno ("unexpected pos"). Measured before the
        # partial folder is removed, which frees what it took.
        full = disk_full(tmp, exc)
        shutil.rmtree(tmp, ignore_errors=True)
        if full is None:
            raise
        raise SealError(f"writing the checkpoint after step {step} into {root} failed: {full} ({exc}); nothing of "
                        "it was kept, the earlier checkpoints are intact: free space, then resume the run.") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if ctx.store is not None:
        ctx.store.add_checkpoint(ctx.run_id, step, str(final), {"plugins": [m for m in metas if m]})
    return final


def rotate_checkpoints(store: RunStore, run_id: str, keep_last: int | None, best_by: str | None,
                       benchmark: str) -> list[int]:
    """Delete the checkpoints ``training.keep_checkpoints`` / ``keep_best_by`` no longer keep; returns their steps.

    Called right after a checkpoint became durable and was recorded, so the newest checkpoint always
    survives. Kept: the last ``keep_last`` durable checkpoints, and the best one: the checkpoint after step
    ``s`` is what the evaluation at ``s + 1`` measured, and the one whose ``best_by`` pass rate (a category,
    or ``average``, the mean over categories) on ``benchmark`` was highest is kept (the earliest of equals).
    Each is removed from the store first, then from disk: a kill in between leaves an unrecorded folder, which
    the next resume treats as any folder the store does not know."""
    if keep_last is None:
        return []
    durable = durable_checkpoints(store, run_id)
    keep = {c.step for c in durable[-keep_last:]}
    if best_by is not None:
        scores: dict[int, dict[str, float]] = {}
        for row in store.evaluations(run_id):
            if row.benchmark in ("", benchmark):
                scores.setdefault(row.step, {})[row.category] = row.pass_rate
        best: tuple[float, int] | None = None
        for ckpt in durable:
            rates = scores.get(ckpt.step + 1)
            if not rates:
                continue
            value = sum(rates.values()) / len(rates) if best_by == "average" else rates.get(best_by)
            if value is not None and (best is None or value > best[0]):
                best = (value, ckpt.step)
        if best is not None:
            keep.add(best[1])
    removed = []
    for ckpt in durable:
        if ckpt.step in keep:
            continue
        store.remove_checkpoint(run_id, ckpt.step)
        shutil.rmtree(ckpt.path, ignore_errors=True)
        removed.append(ckpt.step)
    return removed


def durable_checkpoints(store: RunStore, run_id: str) -> list[Any]:
    """Checkpoints whose files are complete (the core's file is written last, before the rename)."""
    return [c for c in store.checkpoints(run_id) if (Path(c.path) / CORE_CHECKPOINT_FILE).is_file()]


def remove_partial_checkpoints(root: Path, recorded: list[Any]) -> tuple[list[Path], list[Path]]:
    """Clear what a kill during a checkpoint write left under ``root``; returns (removed, quarantined).

    Removed: ``.tmp-step-*`` directories and ``step-*`` directories the store never recorded that are provably
    partial (no core file, which is written last). A complete ``step-*`` directory the store does not know (a
    store restored from an older backup than the run folder, a kill between the rename and the row) is not
    deleted: it is renamed to ``.orphan-step-*`` and left for the user."""
    if not root.is_dir():
        return [], []
    known = {Path(c.path).name for c in recorded}
    removed, quarantined = [], []
    for path in sorted(root.iterdir()):
        if not path.is_dir():
            continue
        unknown_step = path.name.startswith("step-") and path.name not in known
        if path.name.startswith(".tmp-step-") or (unknown_step and not (path / CORE_CHECKPOINT_FILE).is_file()):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        elif unknown_step:
            target = root / f".orphan-{path.name}-{uuid.uuid4().hex[:6]}"
            os.replace(path, target)
            quarantined.append(target)
    return removed, quarantined


def read_core_state(directory: Path) -> CoreState:
    """The core's part of the checkpoint in ``directory``; a SealError naming the file where it cannot be read
    or is damaged (empty, not JSON, keys missing)."""
    path = Path(directory) / CORE_CHECKPOINT_FILE
    try:
        core = json.loads(path.read_text())
        return CoreState(int(core["step"]), int(core["interface_revision"]),
                         CapabilityState.model_validate(core["state"]))
    except OSError as exc:
        raise SealError(f"the checkpoint's core file {path} cannot be read: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and pydantic's ValidationError too
        what = "empty" if isinstance(exc, json.JSONDecodeError) and not exc.doc.strip() else \
            f"damaged ({type(exc).__name__}: {exc})"
        raise SealError(f"the checkpoint's core file {path} is {what}") from exc


def checkpoint_run_id(directory: Path) -> str | None:
    """The id of the run that wrote the checkpoint in ``directory``, where its core file records it (older
    checkpoints do not); None where it does not or cannot be read."""
    try:
        value = json.loads((Path(directory) / CORE_CHECKPOINT_FILE).read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def load_plugin_checkpoints(host: PluginHost, ctx: RunContext, directory: Path, step: int) -> None:
    """Every plugin that implements ``load_checkpoint`` restores its part of the checkpoint in ``directory``."""
    host.call_each("load_checkpoint", ctx=ctx, directory=Path(directory), step=step)


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
