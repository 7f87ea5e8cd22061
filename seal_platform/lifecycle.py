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
``end_run_failed`` / ``engine_close_failed`` event (raised instead when there is no store to record it in
and nothing else went wrong).

``plugins`` limits the lifecycle hooks to the named plugins (``verify`` involves only the benchmark's own
plugin); None: every enabled plugin.
"""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from .errors import Terminated
from .stages import wrap

if TYPE_CHECKING:  # pragma: no cover
    from .context import RunContext
    from .environment import Environment
    from .plugins import PluginHost
    from .store import Heartbeat

ENGINE = "engine"  # ctx.shared key of the rollout engine, for every hook


class Lifecycle:
    """What a body inside :func:`lifecycle` builds through it (and the lifecycle closes)."""

    def __init__(self, host: PluginHost, ctx: RunContext, heartbeat: Heartbeat | None):
        self.host = host
        self.ctx = ctx
        self.heartbeat = heartbeat

    def engine(self) -> Any:
        """The recipe's rollout engine (``rollout.engine``), also published as ``ctx.shared["engine"]``."""
        owner, spec = self.host.require("engine", self.ctx.config.rollout.engine)
        engine = wrap("engine", owner, lambda: spec.factory(self.ctx))
        self.ctx.shared[ENGINE] = engine
        return engine

    def environment(self) -> Environment:
        """The recipe's environment, built by its plugin's factory."""
        owner, spec = self.host.require("environment", self.ctx.config.environment)
        return wrap("environment", owner, lambda: spec.factory(self.ctx))


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
        call("start_run", resumed=resumed)
        started = True
        yield Lifecycle(host, ctx, heartbeat)
        status = "completed"
    except KeyboardInterrupt as exc:
        status = "interrupted"
        error = "stopped by SIGTERM" if isinstance(exc, Terminated) else "interrupted by the user (KeyboardInterrupt)"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        if owns_run and store is not None and (heartbeat is None or heartbeat.lost_to is None):
            # a process whose run was taken over writes nothing more
            store.add_event(ctx.run_id, "crash", error, {"traceback": traceback.format_exc()})
        raise
    finally:
        if heartbeat is not None:
            heartbeat.__exit__()
        if on_exit is not None:
            on_exit()
        end_failure: Exception | None = None
        if started:
            try:
                call("end_run", status=status)
            except Exception as exc:  # must not hide the run's own outcome
                if store is None and status == "completed":
                    end_failure = exc  # nowhere to record it: raised once everything is closed
                else:
                    ctx.event("end_run_failed", f"{type(exc).__name__}: {exc}")
        _close_engine(ctx)
        ctx.executor.close()
        if owns_run and store is not None:
            store.finish_run(ctx.run_id, status, error)
        if end_failure is not None:
            raise end_failure


def _close_engine(ctx: RunContext) -> None:
    """The core built the engine, so the core closes it (after ``end_run``, which may still use it)."""
    engine = ctx.shared.pop(ENGINE, None)
    if engine is None or not hasattr(engine, "close"):
        return
    try:
        engine.close()
    except Exception as exc:  # a failing close must not hide the run's own outcome
        ctx.event("engine_close_failed", f"{type(exc).__name__}: {exc}")
