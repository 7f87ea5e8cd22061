"""The ``ray`` executor: environment episodes in Ray actors.

``ray.episode_actors`` actors (each reserving ``ray.episode_cpus``) run up to ``rollout.workers`` episodes at
once between them, a few per actor on threads (episodes mostly wait on the engine and the tool workers).
Each ``map`` ships the episode function once through the object store; the actors cache it. Units are handed
out as slots free up, so a slow actor does not hold back the others.

Failures: an actor that dies (killed, out of memory, its node lost) is restarted by Ray; the episodes it was
running are lost to the infrastructure and come back as ``on_infra_failure(item, reason)``. So does an episode
past ``rollout.episode_timeout_s`` (its thread cannot be killed and finishes in the background; the executor
stops waiting for it) and one that raised :class:`seal_platform.infra.InfraError`. Tool execution keeps its
isolation and limits: each actor runs the environment's own tool workers (BFCL's sandboxed processes).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any

import ray

from seal_platform.infra import InfraError

from . import cluster


class Lost:
    """What an episode actor returns for a unit it gave up on (its time limit)."""

    def __init__(self, reason: str):
        self.reason = reason


class EpisodeActor:
    """Runs episode functions; several at a time (max_concurrency), each optionally under a time limit."""

    def __init__(self, slots: int):
        self._fns: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, slots), thread_name_prefix="episode")

    def pid(self) -> int:
        return os.getpid()

    def _fn(self, box: list[Any]) -> Callable[[Any], Any]:
        key = box[0].hex()
        with self._lock:
            if key not in self._fns:
                self._fns = {key: ray.get(box[0])}  # only the current map's function is kept
            return self._fns[key]

    def run(self, box: list[Any], item: Any, timeout_s: float | None) -> Any:
        fn = self._fn(box)
        if timeout_s is None:
            return fn(item)
        future = self._pool.submit(fn, item)
        try:
            return future.result(timeout=timeout_s)
        except FuturesTimeout:
            return Lost(f"episode past its time limit of {timeout_s:g} s")


# The Ray actor class, made by calling ray.remote (a class decorator's result is invisible to mypy).
RemoteEpisodeActor = ray.remote(max_restarts=-1, max_task_retries=0)(EpisodeActor)


class RayExecutor:
    """Implements :class:`seal_platform.executor.Executor` on Ray actors; Ray starts on the first ``map``."""

    def __init__(self, config: Any, workers: int = 8, episode_timeout_s: float | None = None,
                 on_progress: Callable[[int, int], None] | None = None):
        self.config = config
        self.workers = max(1, workers)
        self.episode_timeout_s = episode_timeout_s
        self.on_progress = on_progress
        self.actors: list[Any] = []
        self._connected = False
        n = max(1, min(config.episode_actors, self.workers))
        self.slots = math.ceil(self.workers / n)
        self._n_actors = n

    def _ensure(self) -> None:
        if self.actors:
            return
        cluster.acquire(self.config)
        self._connected = True
        options = dict(num_cpus=self.config.episode_cpus, max_concurrency=self.slots + 2)
        self.actors = [RemoteEpisodeActor.options(**options).remote(self.slots) for _ in range(self._n_actors)]

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *,
            on_infra_failure: Callable[[Any, str], Any] | None = None) -> list[Any]:
        items = list(items)
        if not items:
            return []
        self._ensure()
        infra = cluster.infra_errors()
        box = [ray.put(fn)]
        results: list[Any] = [None] * len(items)
        errors: list[BaseException] = []
        pending = collections.deque(range(len(items)))
        inflight: dict[Any, tuple[int, int]] = {}
        load = [0] * len(self.actors)
        done = 0
        if self.on_progress:
            self.on_progress(0, len(items))
        while pending or inflight:
            for a, actor in enumerate(self.actors):
                while pending and load[a] < self.slots:
                    i = pending.popleft()
                    inflight[actor.run.remote(box, items[i], self.episode_timeout_s)] = (i, a)
                    load[a] += 1
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                i, a = inflight.pop(ref)
                load[a] -= 1
                try:
                    value = ray.get(ref)
                except InfraError as exc:  # raised inside the episode (Ray re-raises it as its cause's type)
                    value = Lost(f"InfraError: {_cause(exc)}")
                except infra as exc:
                    value = Lost(f"{type(exc).__name__}: {_first_line(exc)}")
                except Exception as exc:
                    errors.append(exc)
                    continue
                if isinstance(value, Lost):
                    if on_infra_failure is None:
                        errors.append(InfraError(value.reason))
                    else:
                        results[i] = on_infra_failure(items[i], value.reason)
                else:
                    results[i] = value
                done += 1
                if self.on_progress:
                    self.on_progress(done, len(items))
        if errors:
            raise errors[0]
        return results

    def actor_pids(self) -> list[int]:
        """The process ids of the episode actors (for operators and tests)."""
        self._ensure()
        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        actors, self.actors = self.actors, []
        for actor in actors:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(actor, no_restart=True)
        if self._connected:
            self._connected = False
            cluster.release()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    return _first_line(cause) if cause is not None else _first_line(exc)
