"""Where episodes run: an executor abstraction between environment workers and the rollout engine.

Environment plugins submit one function per episode; each episode talks to the shared rollout engine, which
batches concurrent requests. Keeping episodes and the engine apart is what lets a Ray executor (episodes as
actors, the engine as another) replace the local one without touching either plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs independent units of work (episodes) and returns their results in input order."""

    def map(
        self, fn: Callable[[T], R], items: Iterable[T], *, on_infra_failure: Callable[[T, str], R] | None = None
    ) -> list[R]:
        """``fn(item)`` for every item, results in input order.

        ``on_infra_failure(item, reason)``, when given, stands in for a unit lost to the infrastructure (its
        worker or node died, it ran past the executor's time limit, or it raised
        :class:`seal_platform.infra.InfraError`); without it such a loss raises. Any other exception of ``fn``
        propagates after the other units have finished.
        """
        ...

    def close(self) -> None:
        ...


class LocalExecutor:
    """Threads in this process. Episodes are I/O-bound on the engine and the tool workers, so threads are
    enough; an exception in one episode propagates to the caller after the others have finished.

    ``on_progress(done, total)``, if set, is called as units finish (the CLI's progress bar uses it)."""

    def __init__(self, max_workers: int = 8, on_progress: Callable[[int, int], None] | None = None):
        self.max_workers = max(1, max_workers)
        self.on_progress = on_progress
        self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="episode")

    def map(
        self, fn: Callable[[T], R], items: Iterable[T], *, on_infra_failure: Callable[[T, str], R] | None = None
    ) -> list[R]:
        items = list(items)
        futures = [self._pool.submit(fn, item) for item in items]
        if self.on_progress is not None:
            total = len(futures)
            self.on_progress(0, total)
            for done, _ in enumerate(as_completed(futures), start=1):
                self.on_progress(done, total)
        from .infra import InfraError

        results: list[R] = []
        for item, future in zip(items, futures):
            error = future.exception()
            if isinstance(error, InfraError) and on_infra_failure is not None:
                results.append(on_infra_failure(item, f"{type(error).__name__}: {error}"))
            elif error is not None:
                raise error
            else:
                results.append(future.result())
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
