"""The run lifecycle, written once: what happens around a training run (``run``), the evaluation of a
checkpoint (``eval``) and offline scoring (``verify``).

    with lifecycle(host, ctx, resumed=False, owns_run=True, on_exit=progress.stop) as life:
        environment = life.environment()  # the recipe's environment, built by its plugin's factory
        ...                                # its tasks: a bad split fails here, before the model load
        engine = life.engine()             # the recipe's rollout engine, published as ctx.shared["engine"]
        ...

On entry: the run's heartbeat starts (``owns_run``: the process holds the run's store row), then the plugins'
``start_run`` hooks. On exit, in this order, whatever happened: the heartbeat stops, ``on_exit`` (the
progress display) is called, the plugins' ``end_run`` hooks get the outcome (``completed``, ``interrupted``
for Ctrl-C or SIGTERM, else ``failed``; only when ``start_run`` succeeded), the engine is closed, the
executor is closed, and (``owns_run``) the run's store row gets its final status and error. A crash of a
run it owns is recorded as a ``crash`` event with its traceback (unless another process took the run
over). An ``end_run`` or engine ``close`` that fails never hides the outcome: it is recorded as an
``end_run_failed`` (one per failing plugin, naming it; the other plugins' ``end_run`` still run) /
``engine_close_failed`` event (raised instead when there is no store to record it in and nothing else went
wrong); ``seal-platform run`` names them under the run's summary.

``plugins`` limits the lifecycle hooks to the named plugins (``verify`` involves only the benchmark's own
plugin); None: every enabled plugin.

Ctrl-C is an interruption also where a library did not let the KeyboardInterrupt through as it is: an error
that it caused (one with a KeyboardInterrupt in its ``__cause__`` / ``__context__`` chain, as transformers' lazy
imports raise a ModuleNotFoundError or RuntimeError from it) ends the run ``interrupted``, and is re-raised as a
KeyboardInterrupt (the error as its cause). While :func:`~seal_platform.interrupts.interrupts_noted` is on (the CLI
turns it on for every command), a SIGINT is also noted: an error after one counts as the interruption, and one that a
library swallowed (``Exception ignored in ...``, from a finalizer) stops the run at the next boundary (entering the
lifecycle, building the environment or the engine, each stage call: :mod:`seal_platform.interrupts`).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .errors import PluginError, SealError, Terminated
from .interrupts import as_interruption, raise_if_interrupted
from .recipe_secrets import scrub
from .stages import wrap

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .environment import Environment
    from .plugins import PluginHost
    from .store import Heartbeat

ENGINE = "engine"  # ctx.shared key of the rollout engine, for every hook


class Lifecycle:
    """What a body inside :func:`lifecycle` builds through it (and the lifecycle closes). A factory's error is
    a :class:`PluginError` as a stage's is (:func:`~seal_platform.stages.wrap`): where it was raised, and the
    plugin whose code raised it when that is not the factory's own plugin."""

    def __init__(self, host: PluginHost, ctx: RunContext, heartbeat: Heartbeat | None):
        self.host = host
        self.ctx = ctx
        self.heartbeat = heartbeat

    def engine(self) -> Any:
        """The recipe's rollout engine (``rollout.engine``), also published as ``ctx.shared["engine"]``."""
        name = self.ctx.config.rollout.engine
        if name is None:  # planning refuses such a recipe first; a caller that skipped it learns the same
            raise SealError("rollout.engine is not set: the recipe must name the rollout engine "
                            f"(registered: {', '.join(sorted(self.host.engines())) or 'none'}).")
        owner, spec = self.host.require("engine", name)
        engine = wrap("engine", owner, lambda: spec.factory(self.ctx), self.host)
        self.ctx.shared[ENGINE] = engine  # published first: the lifecycle closes it also when interrupted here
        raise_if_interrupted()  # a model load is where libraries swallow Ctrl-C
        return engine

    def environment(self) -> Environment:
        """The recipe's environment, built by its plugin's factory."""
        owner, spec = self.host.require("environment", self.ctx.config.environment)
        environment = wrap("environment", owner, lambda: spec.factory(self.ctx), self.host)
        raise_if_interrupted()
        return environment


@contextmanager
def lifecycle(
    host: PluginHost,
    ctx: RunContext,
    *,
    resumed: bool,
    owns_run: bool = False,
    plugins: Sequence[str] | None = None,
    on_exit: Callable[[], None] | None = None,
) -> Iterator[Lifecycle]:
    """Start the run's plugins, hand the body a :class:`Lifecycle`, and always end and close what was
    started (see the module docs for the order)."""
    store = ctx.store
    heartbeat = None
    if owns_run and store is not None:
        from .store import Heartbeat  # SQLAlchemy and Alembic: only for a run that has a store row

        heartbeat = Heartbeat(store, ctx.run_id).__enter__()
    status, error, started = "failed", None, False

    def call(hook: str, **kwargs: Any) -> None:
        if plugins is None:
            host.call_each(hook, ctx=ctx, **kwargs)
        else:
            host.call_subset(hook, plugins, ctx=ctx, **kwargs)

    try:
        raise_if_interrupted()  # a Ctrl-C swallowed before the run began (while the plugins were imported)
        call("start_run", resumed=resumed)
        started = True
        yield Lifecycle(host, ctx, heartbeat)
        status = "completed"
    except KeyboardInterrupt as exc:
        status = "interrupted"
        error = exc.how if isinstance(exc, Terminated) else "interrupted by the user (KeyboardInterrupt)"
        raise
    except BaseException as exc:
        stop = as_interruption(exc)
        if stop is not None:  # a Ctrl-C that surfaced as another error
            status = "interrupted"
            how = "interrupted by the user (KeyboardInterrupt)"
            error = f"{stop.how if isinstance(stop, Terminated) else how}; it surfaced as " \
                    f"{type(exc).__name__}: {str(exc)[:300]}"
            raise stop from exc
        error = scrub(f"{type(exc).__name__}: {exc}")  # a secret in it (a URL's password) is not stored
        if owns_run and store is not None and (heartbeat is None or heartbeat.lost_to is None):
            # a process whose run was taken over writes nothing more
            _unrecorded("crash event", lambda: store.add_event(
                ctx.run_id, "crash", error, {"traceback": scrub(traceback.format_exc())}))
        raise
    finally:
        if heartbeat is not None:
            heartbeat.__exit__()
        if on_exit is not None:
            on_exit()
        end_failure: Exception | None = None
        if started:  # every plugin's end_run is called, also after one failed; a failure must not hide the outcome
            for plugin, failure in _end_run(host, ctx, status, plugins):
                if store is None and status == "completed":
                    end_failure = end_failure or failure  # nowhere to record it: raised once everything is closed
                else:
                    _unrecorded(
                        "end_run_failed event",
                        lambda: ctx.event("end_run_failed", str(failure), plugin=plugin),  # noqa: B023 called now
                    )
        _close_engine(ctx)
        ctx.executor.close()
        if owns_run and store is not None:
            # A store that cannot take the final status (a full disk) must not hide the run's own error; after a
            # completed run it is the error (the CLI then says the store could not record the end).
            unrecorded = _unrecorded("final status", lambda: store.finish_run(ctx.run_id, status, error))
            end_failure = end_failure or (unrecorded if status == "completed" else None)
        if end_failure is not None:
            raise end_failure


def _unrecorded(what: str, write: Callable[[], Any]) -> Exception | None:
    """Run a store ``write`` made while a run ends; an error it raises is logged and returned, not raised: the
    run's own outcome (an error on its way out, the engine still to be closed) comes first."""
    try:
        write()
    except Exception as exc:
        log.warning("the run's %s could not be written to the store: %s", what, exc)
        return exc
    return None


def _end_run(
    host: PluginHost, ctx: RunContext, status: str, plugins: Sequence[str] | None
) -> list[tuple[str, Exception]]:
    """Call ``end_run`` on each plugin (``plugins``: the named ones) on its own: (plugin, error) of each that
    failed, the error a :class:`PluginError` naming the plugin (a plugin's own SealError as it is)."""
    failures: list[tuple[str, Exception]] = []

    def failed(plugin: str, exc: Exception) -> None:
        if not isinstance(exc, SealError):
            wrapped = PluginError(f"plugin {plugin!r} failed in 'end_run': {type(exc).__name__}: {exc}")
            wrapped.__cause__, exc = exc, wrapped
        failures.append((plugin, exc))

    host.call_per_plugin("end_run", failed=failed, only=plugins, ctx=ctx, status=status)
    return failures


def _close_engine(ctx: RunContext) -> None:
    """The core built the engine, so the core closes it (after ``end_run``, which may still use it)."""
    engine = ctx.shared.pop(ENGINE, None)
    if engine is None or not hasattr(engine, "close"):
        return
    try:
        engine.close()
    except Exception as exc:  # a failing close must not hide the run's own outcome
        ctx.event("engine_close_failed", f"{type(exc).__name__}: {exc}")
