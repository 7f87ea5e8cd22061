"""Where a resumed run starts: the partial checkpoints cleared, the last durable one loaded, later history
dropped (``seal-platform run --resume RUN``, with ``--restart-from-step N`` to train again from step N)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .capability import CapabilityState
from .checkpoints import durable_checkpoints, load_plugin_checkpoints, read_core_state, remove_partial_checkpoints
from .context import RunContext
from .errors import SealError, as_sentence
from .plugins import PluginHost
from .store import RunStore
from .types import Interface


class CheckpointLoadError(SealError):
    """A resumed run's checkpoint could not be loaded (its core file damaged, a plugin's ``load_checkpoint``
    failed). Resuming it again loads the same checkpoint; the message gives the ``--restart-from-step``
    command that trains again from the durable checkpoint before it."""


def resume_command(run_id: str, store_url: str, restart_from: int | None = None) -> str:
    """The command that resumes run ``run_id`` of the store at ``store_url``, from any directory."""
    command = f"seal-platform run --resume {run_id} --store {shlex.quote(store_url)}"
    return command if restart_from is None else f"{command} --restart-from-step {restart_from}"


@dataclass
class Restored:
    """The step a resumed run starts at, with the capability state and interface of its checkpoint (None:
    none to restore; the interface is None too when the run was killed before its pristine one was stored)."""

    start_step: int
    state: CapabilityState | None
    interface: Interface | None


def check_restart_point(store: RunStore, run_id: str, n: int, durable: list[Any] | None = None) -> None:
    """SealError when ``--restart-from-step N`` cannot be honoured (N > 0 needs the durable checkpoint after
    step N - 1). The run checks it before it loads or writes anything, so a wrong N changes nothing.
    ``durable``: the run's durable checkpoints, where the caller has them already."""
    durable = durable_checkpoints(store, run_id) if durable is None else durable
    if n > 0 and not any(c.step == n - 1 for c in durable):
        have = ", ".join(str(c.step) for c in durable) or "none"
        raise SealError(f"--restart-from-step {n}: run {run_id} has no durable checkpoint after step {n - 1} "
                        f"(durable checkpoints after steps: {have}); nothing was changed.")


def _restart_point(store: RunStore, run_id: str, durable: list[Any], n: int) -> list[Any]:
    """The durable checkpoints a ``--restart-from-step N`` resume keeps: those up to step N - 1."""
    check_restart_point(store, run_id, n, durable)
    store.add_event(run_id, "resume", f"restart from step {n} asked for (--restart-from-step {n})")
    return [c for c in durable if c.step <= n - 1]


def restore_run(store: RunStore, host: PluginHost, ctx: RunContext, run_dir: Path, restart_from: int | None) -> Restored:
    """Clear partial checkpoints, load the last durable one into the plugins (``load_checkpoint``) and drop the
    store's history after it; the events say what was done."""
    run_id = ctx.run_id
    recorded = store.checkpoints(run_id)
    removed, quarantined = remove_partial_checkpoints(run_dir / "checkpoints", recorded)
    if removed:
        store.add_event(run_id, "resume", f"removed {len(removed)} partial checkpoint director"
                        f"{'y' if len(removed) == 1 else 'ies'}: {', '.join(p.name for p in removed)}")
    if quarantined:
        store.add_event(run_id, "resume", f"kept aside {len(quarantined)} complete checkpoint(s) the "
                        f"store does not know: {', '.join(str(p) for p in quarantined)}")
    durable = durable_checkpoints(store, run_id)
    if restart_from is not None:
        durable = _restart_point(store, run_id, durable, restart_from)
    elif recorded and not durable:
        steps = store.steps(run_id)
        raise SealError(
            f"run {run_id}: the store records {len(recorded)} checkpoint(s) (last: step {recorded[-1].step} "
            f"at {recorded[-1].path}) but none of them is on disk there (a moved runs directory? an unmounted "
            f"volume?), and it holds {len(steps)} step(s) of history; nothing was changed. Point the resume at "
            f"the run's folder with --run-dir PATH, or, to throw history away, say from which step to train "
            f"again with --restart-from-step N (0: from the start; N > 0 needs the checkpoint after step N - 1)."
        )
    if not durable:
        dropped = store.discard_after(run_id, -1)
        why = "restart from step 0 as asked" if restart_from == 0 else "no checkpoint"
        store.add_event(run_id, "resume", f"{why}: restarting from step 0 ({dropped} step(s) discarded)")
        stored = any(r.revision == 0 for r in store.interfaces(run_id))
        return Restored(0, None, store.interface(run_id, 0) if stored else None)
    last = durable[-1]
    # Read and loaded before the history after it is dropped: a checkpoint that cannot be loaded changes nothing.
    try:
        core = read_core_state(Path(last.path))
        interface = store.interface(run_id, core.interface_revision)
        load_plugin_checkpoints(host, ctx, Path(last.path), last.step)
    except CheckpointLoadError:
        raise
    except SealError as exc:
        raise _load_failed(store, run_id, last, durable[:-1], exc) from exc
    dropped = store.discard_after(run_id, last.step)
    store.add_event(run_id, "resume", f"resumed after step {last.step} from {last.path} ({dropped} later step(s) re-done)")
    return Restored(last.step + 1, core.state, interface)


def _load_failed(store: RunStore, run_id: str, last: Any, earlier: list[Any], exc: SealError) -> CheckpointLoadError:
    """The error for the checkpoint ``last`` that could not be loaded, with the ``--restart-from-step`` that
    trains again from the durable checkpoint before it (``earlier[-1]``) or from the start."""
    detail = as_sentence(str(exc))
    restart = earlier[-1].step + 1 if earlier else 0
    command = resume_command(run_id, str(store.url), restart)
    where = (f"from the durable checkpoint before it (the one after step {earlier[-1].step}), discarding the "
             f"history from step {restart} on" if earlier else
             "from the start (there is no durable checkpoint before it), discarding the run's history")
    return CheckpointLoadError(
        f"run {run_id}: the checkpoint after step {last.step} ({last.path}) could not be loaded: {detail} "
        f"A plain resume loads it again; unless it can be repaired, train again {where}: `{command}`.")
