"""Run worker processes that report rows through a queue (not a test module): the weight-sync tests' pairs.

Each target is called as ``target(*args, results)`` in a spawned process and puts ``pickle.dumps(row)`` on
``results`` for every row it reports, ``row[0]`` naming the reporting side and ``row[1]`` the round. Rows travel
as pickled bytes: a tensor put on the queue as such is shared through a file descriptor of the child, which dies
with the child if it exits before the parent reads it (seen as an occasional failure of these tests).
"""

from __future__ import annotations

import pickle
import queue as queue_mod
from collections.abc import Callable, Sequence
from typing import Any

import pytest


def collect_rows(targets: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], rows: int,
                 timeout_s: float, clean_exit: bool = False) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Start ``targets``, read ``rows`` rows, join the processes (killing any left after 60 s); returns
    ``{(side, round): the rest of the row}``. Fails the test when the processes stop answering, and with
    ``clean_exit`` when one of them did not exit with status 0."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, results), daemon=True) for target, args in targets]
    for p in procs:
        p.start()
    found: dict[tuple[str, int], tuple[Any, ...]] = {}
    try:
        for _ in range(rows):
            row = pickle.loads(results.get(timeout=timeout_s))
            found[row[0], row[1]] = tuple(row[2:])
    except queue_mod.Empty:
        pytest.fail(f"worker processes stopped answering (exit codes {[p.exitcode for p in procs]})")
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if clean_exit:
        assert [p.exitcode for p in procs] == [0] * len(procs)
    return found
