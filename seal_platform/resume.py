"""Whether ``seal-platform run`` starts a new run, resumes one, takes one over or refuses (:func:`plan_start`, the one
place that decides it); where a resumed run starts: the partial checkpoints cleared, the last durable one loaded, later
history dropped (``seal-platform run --resume RUN``, with ``--restart-from-step N`` to train again from step N); the
check that a resume runs with the plugins the run ran with (``--allow-plugin-changes`` to go on without); and
the check that it trains and evaluates on the task data it started with (``--accept-changes`` to go on
without)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .capability import CapabilityState
from .checkpoints import durable_checkpoints, load_plugin_checkpoints, read_core_state, remove_partial_checkpoints
from .context import RunContext
from .errors import SealError, as_sentence
from .plugins import ENV_ALLOW, ENV_BLOCK, PluginHost
from .store import STALE_AFTER_S, RunStore, heartbeat_age, is_stale, owner_alive_here
from .types import Interface, Task


class CheckpointLoadError(SealError):
    """A resumed run's checkpoint could not be loaded (its core file damaged, a plugin's ``load_checkpoint``
    failed). Resuming it again loads the same checkpoint; the message gives the ``--restart-from-step``
    command that trains again from the durable checkpoint before it."""


def resume_command(run_id: str, store_url: str, restart_from: int | None = None) -> str:
    """The command that resumes run ``run_id`` of the store at ``store_url``, from any directory (a password in
    the URL shown as ``***``: give it again, or the whole URL as ``$SEAL_PLATFORM_STORE``)."""
    from .recipe_secrets import shown_store_url

    command = f"seal-platform run --resume {run_id} --store {shlex.quote(shown_store_url(store_url))}"
    return command if restart_from is None else f"{command} --restart-from-step {restart_from}"


# The options of `run` that only a resume takes.
RESUME_OPTIONS = ("--run-dir", "--restart-from-step", "--takeover", "--allow-plugin-changes", "--accept-changes")


@dataclass(frozen=True)
class StartPlan:
    """What ``seal-platform run`` (or a :class:`~seal_platform.loop.Runner`) does with the run store: start a
    new run (``fresh``), resume run ``run_id`` (``resume``), take it over from an owner that is gone
    (``takeover``), or nothing (``refuse``). ``reason``: for ``refuse``, the message; for a ``takeover`` that
    was not asked for (the owner's heartbeat is stale), the line that says so; else ""."""

    action: Literal["fresh", "resume", "takeover", "refuse"]
    run_id: str | None = None
    reason: str = ""


def plan_start(row: Any | None, *, takeover: bool = False, resume_options: Sequence[str] = ()) -> StartPlan:
    """Decide how a run starts. ``row``: the stored run that ``--resume RUN`` names (whole), or None for a new
    run; ``takeover``: ``--takeover`` was given; ``resume_options``: the options of :data:`RESUME_OPTIONS`
    given (a new run refuses them). It reads the run's heartbeat age and, for an owner on this host, whether
    its process is alive; it changes nothing.

    A completed run is not resumed. A ``running`` run whose owner is alive on this host is refused with or
    without ``--takeover`` (both processes would write the run); without ``--takeover`` one whose owner's
    heartbeat is older than :data:`~seal_platform.store.STALE_AFTER_S` is taken over, and one beating is
    refused; with it, taken over. Any other run (interrupted, crashed, failed) is resumed."""
    if row is None:
        if resume_options:
            return StartPlan("refuse", reason=f"{', '.join(RESUME_OPTIONS[:-1])} and {RESUME_OPTIONS[-1]} go with "
                                              "--resume RUN.")
        return StartPlan("fresh")
    if row.status == "completed":
        return StartPlan("refuse", row.id, f"run {row.id} already completed; nothing to resume.")
    if row.status != "running":
        return StartPlan("resume", row.id)
    age = heartbeat_age(row)
    beat = "" if age is None else f", last heartbeat {age:.0f} s ago"
    if _owner_alive_here(row, age):  # with --takeover or not: two processes would write the run
        return StartPlan("refuse", row.id, (
            f"run {row.id} is still running: its owner, pid {row.pid}, is alive on this host ({row.host}{beat}); "
            f"nothing was changed. Stop that process first (Ctrl-C in its terminal, or `kill {row.pid}`: the run "
            f"is then marked interrupted), then resume the run. --takeover is for a run whose owner is gone (its "
            f"machine died, or it was killed on another machine), never for one still running here: both would "
            f"write the run."))
    if takeover:
        return StartPlan("takeover", row.id)
    if is_stale(row):
        return StartPlan("takeover", row.id, f"run {row.id}: its owner (pid {row.pid} on {row.host}) has not written a "
                                             f"heartbeat for {(age or 0) / 60:.0f} min; taking it over.")
    return StartPlan("refuse", row.id, (
        f"run {row.id} is still running (pid {row.pid} on {row.host}{beat}); stop it before resuming, or, if that "
        f"process is gone (its machine died), resume with --takeover (a run whose heartbeat is older than "
        f"{STALE_AFTER_S / 60:.0f} min is taken over without it)."))


def _owner_alive_here(row: Any, age: float | None) -> bool:
    """Whether the ``running`` run's owner process is alive on this host. A live pid that started after the
    run's last heartbeat is another process that reuses the number (after a reboot, say), not the owner."""
    if not owner_alive_here(row):
        return False
    started = _process_age(row.pid)
    return not (age is not None and started is not None and started < age - 2)  # 2 s: the boot time's resolution


def _process_age(pid: int) -> float | None:
    """Seconds since process ``pid`` started (Linux's /proc); None where that cannot be read."""
    import time

    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return time.time() - (boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def check_own_run_dir(store: RunStore, row: Any, run_dir: Path) -> None:
    """SealError unless ``run_dir`` (given with ``--resume RUN --run-dir``) is run ``row``'s folder: it holds a
    config.json that is the config the store holds for the run, its checkpoints do not name another run, and
    it is not the folder (nor carries the id) of another run in the store."""
    from .checkpoints import CORE_CHECKPOINT_FILE, checkpoint_run_id

    if not (run_dir / "config.json").is_file():
        raise SealError(f"--run-dir {run_dir}: no run folder there (no config.json); give the folder that "
                        f"holds the run's checkpoints/ (it was {row.run_dir}).")
    folder = run_dir.resolve()
    refuse = (f"--run-dir {run_dir}: that folder is not run {row.id}'s (whose folder was {row.run_dir}), "
              f"nothing was changed: ")
    for other in store.list_runs():
        if other.id == row.id:
            continue
        if folder.name == other.id or (other.run_dir and Path(other.run_dir).resolve() == folder):
            raise SealError(f"{refuse}it is the folder of run {other.id} ({other.name}, {other.status}, recipe "
                            f"{other.recipe}). Give the folder that holds run {row.id}'s checkpoints/.")
    for core in sorted((run_dir / "checkpoints").glob(f"*/{CORE_CHECKPOINT_FILE}")):
        owner = checkpoint_run_id(core.parent)
        if owner is not None and owner != row.id:
            raise SealError(f"{refuse}its checkpoint {core.parent.name} was written by run {owner}. Give the folder "
                            f"that holds run {row.id}'s checkpoints/.")
    try:
        folder_config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise SealError(f"{refuse}its config.json cannot be read ({exc}).") from exc
    if folder_config != row.config and _config_hash(folder_config) != row.config_hash:
        name = folder_config.get("name") if isinstance(folder_config, dict) else None
        raise SealError(f"{refuse}its config.json (run name {name!r}, config hash "
                        f"{(_config_hash(folder_config) or '?')[:8]}) is not the config the store holds for run "
                        f"{row.id} (run name {row.name!r}, config hash {row.config_hash[:8]}, recipe {row.recipe}). "
                        f"Give the folder that holds run {row.id}'s checkpoints/.")


def _config_hash(data: Any) -> str | None:
    """The config hash of a run folder's config.json, as the store computes it; None where it is no config."""
    from .config import stored_config

    try:
        return str(stored_config(data).config_hash())
    except Exception:  # a config.json that is not a valid config has no hash
        return None


def resume_point(store: RunStore, run_id: str, checkpoint_every: int) -> str:
    """Where a resume of the interrupted run starts, for its message: after its last durable checkpoint, or
    from step 0 when it has none yet (``training.checkpoint_every: 0``, or stopped before the first); "" where
    the store cannot say."""
    try:
        durable = durable_checkpoints(store, run_id)
    except Exception:  # an interrupted command must still print its message
        return ""
    if durable:
        last = durable[-1].step
        return f"run {run_id}: a resume continues after step {last} (its last checkpoint), from step {last + 1}."
    why = " (training.checkpoint_every: 0 writes one only at the end)" if not checkpoint_every else ""
    return f"run {run_id}: no checkpoint yet{why}: a resume starts again from step 0."


def stored_row(store: RunStore, run_id: str) -> Any:
    """The run's row as the store holds it now; None where the store has no row for it or cannot be read."""
    try:
        return store.get_run(run_id)
    except Exception:  # an interrupted or failed command must still print its message
        return None


def failed_run_state(store: RunStore, run_id: str, rerun: str | None = None) -> str:
    """What the store holds about a run that just failed, truthfully: on a full disk or a lost database the
    failure itself may not have been recorded (no row at all, or a row that still says ``running``). A run
    that failed before it trained anything (in its set-up: the environment, its tasks, the engine, a plugin's
    ``start_run``; or before its first step was stored) has nothing to continue: the message says so, and that
    it can be run again as a new run (``rerun``: the command, for a new run) or resumed to reuse its id and
    folder (which starts it from step 0)."""
    from .store import owned_by_this_process

    row = stored_row(store, run_id)
    status = None if row is None else str(row.status)
    resume = resume_command(run_id, str(store.url))
    again = f"after fixing the cause, continue it with `{resume}`."
    if status == "failed" and _trained_nothing(store, run_id):
        new = (
            f"run the recipe again as a new run (this one was `{rerun}`)"
            if rerun
            else "run its recipe again as a new run"
        )
        return (f"The run {run_id} failed before it trained anything and is marked failed with this error: the "
                f"store holds no step and no checkpoint of it, so there is nothing to continue. After fixing the "
                f"cause, {new}, or reuse this run's id and folder with `{resume}`, which starts it from step 0 "
                f"with the recipe and overrides it was started with (a fix in those needs a new run).")
    if status == "failed":
        return f"The run {run_id} is marked failed; {again}"
    if row is not None and status == "running" and not owned_by_this_process(row):
        return (f"The run {run_id} belongs to another process now (pid {row.pid} on {row.host}); this one left "
                "its row as it is.")
    if status is None:
        return (f"Nothing of run {run_id} is in the store (it could not be written, or not read back); after fixing "
                "the cause, start it again.")
    return (f"The store could not record how the run ended (it says {status!r}; a run left 'running' by a process "
            f"that has exited reads as crashed); {again}")


def _trained_nothing(store: RunStore, run_id: str) -> bool:
    """Whether the store holds no step and no checkpoint of the run; False where that cannot be read (the
    message then keeps the plain resume hint)."""
    try:
        return not store.steps(run_id) and not store.checkpoints(run_id)
    except Exception:  # a failed command must still print its message
        return False


def resumed_config(store: RunStore, row: Any, args: Sequence[str], run_dir: Path | None) -> Any:
    """The config a resume runs with: the stored one, with ``args`` (overrides of where it runs only) applied;
    ``--run-dir`` checked to be the run's folder before the store or the folder is changed."""
    from .config import refuse_redacted, resume_overrides, stored_config

    config = stored_config(row.config)
    if args:  # only where it runs (settings.ray.address=..., say) may change
        from .planning import plugin_host_for

        config = resume_overrides(config, list(args), plugin_host_for(config).settings_models())
    refuse_redacted(config, row.id, resume_command(row.id, str(store.url)))
    if run_dir is not None:
        check_own_run_dir(store, row, run_dir)
    return config


def stopped_lines(store: RunStore, run_id: str, how: str, checkpoint_every: int, store_arg: str, *,
                  report: bool) -> list[str]:
    """What ``seal-platform run`` says of a run stopped by Ctrl-C or a signal (``how``): that it completed
    after all (the stop came while its report or summary was written), or how it is marked, where a resume
    starts and the command that resumes it. ``store_arg``: the store as the hint shows it."""
    row = stored_row(store, run_id)
    status = None if row is None else str(row.status)
    if status == "completed":  # the signal came after the run's end: while its report or summary was written
        again = f"write its report with: seal-platform report {run_id} --store {store_arg}" if report else ""
        return [f"the run {run_id} completed ({how} afterwards, before its report and summary were done); "
                f"{again + '; ' if again else ''}details: seal-platform show {run_id} --store {store_arg}"]
    marked = f"the run is marked {status}" if status else "the run's status could not be read"
    point = resume_point(store, run_id, checkpoint_every)  # its own line: the hint's command ends the next one
    return [*([point] if point else []), f"{how}; {marked}; continue with: {resume_command(run_id, str(store.url))}"]


PLUGINS_CHANGED_EVENT = "plugins_changed"  # the event a resume with --allow-plugin-changes records
TASK_DATA_EVENT = "task_data"  # the fingerprints of a run's task data, recorded when it starts (and when accepted)


def task_fingerprint(tasks: Sequence[Task]) -> str:
    """A digest of a list of tasks as the run uses them (ids, categories, splits, payloads, in order): an edited
    task file, a task added, removed or reordered changes it."""
    import hashlib
    import json

    digest = hashlib.sha256()
    for task in tasks:
        digest.update(json.dumps(task.model_dump(mode="json"), sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return f"sha256:{digest.hexdigest()} ({len(tasks)} tasks)"


class TaskDataChangedError(SealError):
    """A resume refused because the environment's task data is not what the run started with."""


def check_task_data(store: RunStore, run_id: str, fingerprints: Mapping[str, str], *, resumed: bool,
                    accept: bool = False) -> list[str]:
    """Record (a new run), or compare with what the run recorded (a resume), the fingerprints of its task data
    (``fingerprints``: ``<environment> train``/``<environment> eval:<split>`` -> :func:`task_fingerprint`).

    A resume whose task data differs (a task file edited between an interrupt and the resume: the run would
    mix old and new prompts) is a :class:`TaskDataChangedError` naming each difference, raised before the
    run's history or checkpoints are touched, unless ``accept`` (``--accept-changes``): then the differences
    and the previous fingerprints are recorded in a ``task_data`` event and the resume goes on. Returns the
    differences. A run that recorded none (started before this check) records them now."""
    recorded = next((e.data.get("fingerprints") for e in reversed(store.events(run_id))
                     if e.kind == TASK_DATA_EVENT and isinstance(e.data.get("fingerprints"), dict)), None)
    if not resumed or recorded is None:
        store.add_event(run_id, TASK_DATA_EVENT, "task data fingerprints", {"fingerprints": dict(fingerprints)})
        return []
    differences = [
        f"{name}: {recorded.get(name) or '(none)'} -> {fingerprints.get(name) or '(none)'}"
        for name in sorted(set(recorded) | set(fingerprints))
        if recorded.get(name) != fingerprints.get(name)
    ]
    if not differences:
        return []
    listed = "; ".join(differences)
    if not accept:
        raise TaskDataChangedError(
            f"run {run_id}: its task data changed since it started ({listed}); resuming would mix the old and the "
            f"new tasks, so nothing was resumed (its history and checkpoints are as they were). Restore the task "
            f"files the run started with, or resume with `{resume_command(run_id, str(store.url))} "
            "--accept-changes` to go on with the data as it is now (the change is recorded in the run's events).")
    store.add_event(run_id, TASK_DATA_EVENT, f"task data changed, accepted (--accept-changes): {listed}",
                    {"fingerprints": dict(fingerprints), "previous": recorded, "differences": differences})
    return differences


def _plugin_key(p: Mapping[str, Any]) -> tuple[str, str | None]:
    return str(p["name"]), p.get("distribution")


def plugin_differences(recorded: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]) -> list[str]:
    """How the plugins ``current`` differs from ``recorded`` (both as ``PluginRecord.to_dict`` writes them:
    name, distribution, version, status, error), one line per difference; [] when they run the same code.

    A plugin is known by its entry-point name and its distribution. Only plugins that take part in a run
    count: those ``loaded`` on at least one side (one failed, blocked or not allowed both times ran neither
    time). A difference is a version changed (``seal-toy 0.3.0 -> 0.4.0 (plugin toy)``), a plugin added
    (``added: ...``) or removed (``removed: ...``), or its status changed (``...: loaded -> failed``); plugins
    of one distribution that changed alike share a line."""
    before = {_plugin_key(p): p for p in reversed(recorded)}  # the first of a (never expected) repeated key
    after = {_plugin_key(p): p for p in reversed(current)}
    groups: dict[tuple[Any, ...], list[str]] = {}
    for key in sorted(set(before) | set(after), key=lambda k: (k[0], k[1] or "")):
        old, new = before.get(key), after.get(key)
        if not any(p is not None and p.get("status", "loaded") == "loaded" for p in (old, new)):
            continue
        dist = key[1]
        if old is None:
            what: tuple[Any, ...] = ("added", dist, new and new.get("version"))
        elif new is None:
            what = ("removed", dist, old.get("version"))
        else:
            old_status, new_status = old.get("status", "loaded"), new.get("status", "loaded")
            if old_status != new_status:
                error = new.get("error") if new_status != "loaded" else None
                what = ("status", dist, old.get("version"), new.get("version"), old_status, new_status, error)
            elif old.get("version") != new.get("version"):
                what = ("version", dist, old.get("version"), new.get("version"))
            else:
                continue
        groups.setdefault(what, []).append(key[0])
    return [_difference_line(what, names) for what, names in groups.items()]


def _difference_line(what: tuple[Any, ...], names: list[str]) -> str:
    kind, dist = what[0], what[1]
    plugins = f"(plugin{'s' if len(names) > 1 else ''} {', '.join(names)})"

    def named(version: str | None) -> str:
        return f"{dist or 'no distribution'} {version or '(no version)'}"

    if kind in ("added", "removed"):
        return f"{kind}: {named(what[2])} {plugins}"
    if kind == "version":
        return f"{dist or 'no distribution'} {what[2] or '(no version)'} -> {what[3] or '(no version)'} {plugins}"
    old_version, new_version, old_status, new_status, error = what[2:]
    version = named(old_version) if old_version == new_version else \
        f"{dist or 'no distribution'} {old_version or '(no version)'} -> {new_version or '(no version)'}"
    return f"{version} {plugins}: {old_status} -> {new_status}{f' ({error})' if error else ''}"


@dataclass
class PluginChanges:
    """What a resume with different plugins found: the run's recorded plugins (``previous``), the ones this
    process loaded (``current``), both as ``PluginRecord.to_dict`` writes them, and the differences."""

    run_id: str
    previous: list[dict[str, Any]]
    current: list[dict[str, Any]]
    differences: list[str]

    def listed(self) -> str:
        return "\n".join(f"  {line}" for line in self.differences)


class PluginChangesError(SealError):
    """A resume refused because the plugins installed now are not those the run ran with."""


def check_resume_plugins(
    store: RunStore, run_id: str, host: PluginHost, *, allow: bool = False
) -> PluginChanges | None:
    """Compare run ``run_id``'s recorded plugins (``store.run_plugins``) with those ``host`` loaded (what the
    resumed run will record). None when they are the same or the run recorded none (a store older than the
    record); with differences, :class:`PluginChangesError` listing them, unless ``allow``
    (``--allow-plugin-changes``): then the changes, for :func:`record_plugin_changes` once the run is claimed.
    It reads only: called before the resume changes anything, so a refusal leaves the run as it was."""
    previous = [{"name": p.name, "distribution": p.distribution, "version": p.version, "status": p.status,
                 "error": p.error, "hooks": list(p.hooks or [])} for p in store.run_plugins(run_id)]
    if not previous:
        return None
    current = [r.to_dict() for r in host.records]
    differences = plugin_differences(previous, current)
    if not differences:
        return None
    changes = PluginChanges(run_id, previous, current, differences)
    if allow:
        return changes
    # A plugin the run ran with that is installed at its recorded version but left out now (blocked or not
    # allowed) wants unblocking, not a reinstall; one whose version differs or that is gone, a reinstall.
    now = {_plugin_key(r.to_dict()): r for r in host.records}
    unblock: dict[str, list[str]] = {}  # what to change -> the plugins it leaves out
    reinstall: set[str] = set()
    for p in previous:
        if p.get("status", "loaded") != "loaded":
            continue
        record = now.get(_plugin_key(p))
        if record is not None and record.status in ("blocked", "not-allowed"):
            unblock.setdefault(_unblocking(record), []).append(str(p["name"]))
        if (
            p.get("distribution")
            and p.get("version")
            and (
                record is None
                or record.version != p["version"]
                or record.status not in ("loaded", "blocked", "not-allowed")
            )
        ):
            reinstall.add(f"{p['distribution']}=={p['version']}")
    added = sorted({str(c["name"]) for c in current if c.get("status") == "loaded"  # new, or failed before
                    and not any(_plugin_key(p) == _plugin_key(c) and p.get("status") == "loaded" for p in previous)})
    fixes = [f"{how} (plugin{'s' if len(names) > 1 else ''} {', '.join(sorted(names))})"
             for how, names in sorted(unblock.items())]
    if reinstall:
        fixes.append(f"reinstall the recorded version(s) (pip install "
                     f"{' '.join(shlex.quote(r) for r in sorted(reinstall))})")
    if added:
        fixes.append(f"leave out the plugin(s) it ran without ({ENV_BLOCK}={','.join(added)})")
    how = " and ".join(fixes) if fixes else "reinstall the plugins the run recorded (seal-platform show " \
        f"{run_id} lists them)"
    raise PluginChangesError(
        f"run {run_id} ran with other plugins than are installed now; resuming it would run its remaining steps "
        f"with different code, so nothing was changed. Differences:\n{changes.listed()}\nTo resume it as it ran, "
        f"{how}, then resume it again; to go on with the plugins as they are now, add --allow-plugin-changes: "
        f"`{resume_command(run_id, str(store.url))} --allow-plugin-changes` (the differences and the previous "
        f"plugin list are recorded in the run's events, kind {PLUGINS_CHANGED_EVENT}).")


def _unblocking(record: Any) -> str:
    """What lets plugin ``record`` (installed, but blocked or not allowed now) load again, naming the variable
    or recipe key that leaves it out (its ``reason``)."""
    reason = record.reason or ""
    if record.status == "blocked":
        return f"take the plugin(s) the run ran with out of {reason or f'plugins.block and {ENV_BLOCK}'}"
    if reason.startswith(ENV_ALLOW):
        return f"add the plugin(s) the run ran with to {ENV_ALLOW} (or unset it)"
    return "add the plugin(s) the run ran with to the recipe's plugins.allow"


def record_plugin_changes(store: RunStore, changes: PluginChanges) -> None:
    """Record an allowed plugin change (``--allow-plugin-changes``) as a ``plugins_changed`` event holding the
    previous plugin list, the new one and the differences: the run's ``run_plugins`` rows hold the new set
    from the resume on, and this event keeps what the earlier steps ran with."""
    store.add_event(changes.run_id, PLUGINS_CHANGED_EVENT,
                    "resumed with other plugins than the run ran with (--allow-plugin-changes): "
                    + "; ".join(changes.differences),
                    {"previous": changes.previous, "current": changes.current, "differences": changes.differences})


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


def restore_run(
    store: RunStore, host: PluginHost, ctx: RunContext, run_dir: Path, restart_from: int | None
) -> Restored:
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
    store.add_event(
        run_id, "resume", f"resumed after step {last.step} from {last.path} ({dropped} later step(s) re-done)"
    )
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
