"""``seal-platform verify``'s fast path (verification in forked children) gives the worker pool's verdicts
and still holds every transcript to its own time limit."""

from __future__ import annotations

import threading
import time

import pytest

from seal_platform_plugins.bfcl.data import get_task, ground_truth
from seal_platform_plugins.bfcl.executor import ToolExecutor
from seal_platform_plugins.bfcl.fork_verify import can_fork
from seal_platform_plugins.bfcl.verifier import parse_record, verify_records


@pytest.fixture(autouse=True)
def _forking_is_safe():
    """These tests check the forked path, taken only when this process runs no other thread: a test elsewhere
    that leaves one running (a session-wide Ray, a pool) would send them down the worker-pool path instead."""
    assert can_fork(), f"threads left running by an earlier test: {[t.name for t in threading.enumerate()]}"


def test_forked_verification_matches_the_worker_pool_and_survives_a_runaway_call():
    assert can_fork()  # pytest runs tests on the main thread only
    good = "multi_turn_base_15"  # involves MathAPI
    gt = ground_truth(get_task(good))
    runaway = [list(turn) for turn in gt]
    runaway[0] = ["power(base=10, exponent=300000000)", *runaway[0]]  # minutes of big-integer arithmetic
    records = [
        {"task_id": good, "turns": gt},
        {"task_id": good, "turns": runaway},
        {"task_id": "no_such_task", "turns": [[]]},
        {"task_id": "multi_turn_miss_param_5", "turns": ground_truth(get_task("multi_turn_miss_param_5"))},
        {"task_id": good, "turns": [[] for _ in gt]},
    ]
    started = time.monotonic()
    # A transcript takes milliseconds in a forked child: 1.5 s is ample, and the runaway's cost.
    forked = verify_records(records, executor=lambda: None, timeout_s=1.5)
    assert time.monotonic() - started < 30
    assert forked[0] == {"task_id": good, "success": True, "labels": ["pass"] * len(gt)}
    assert forked[1]["task_id"] == good and forked[1]["success"] is False  # timed out: a checker error, said so
    assert forked[1]["checker_error"] == "verification took longer than 1.5 s"
    assert all("checker_error" not in forked[i] for i in (0, 2, 3, 4))
    assert set(forked[2]) == {"error"} and "no_such_task" in forked[2]["error"]
    assert forked[3]["success"] is True and forked[4]["success"] is False
    # The worker pool's stream (used where forking is unsafe) agrees, runaway included.
    items = [(get_task(records[i]["task_id"]), parse_record(records[i])[1]) for i in (0, 1, 3, 4)]
    with ToolExecutor(max_workers=1, episode_timeout_s=3.0) as pool:
        outcomes = pool.verify_many(items, chunk=2)
    assert [o.success for o in outcomes] == [forked[i]["success"] for i in (0, 1, 3, 4)]
    assert outcomes[1].error_message.startswith("verification took longer")


def _score(item):
    import os
    import time

    task, turns = item
    if turns == "hang":
        time.sleep(60)
    if turns == "die":
        os._exit(3)
    if turns == "raise":
        raise ValueError("bad record")
    return {"task": task, "pid": os.getpid()}


def test_slices_are_verified_side_by_side_in_order_and_a_bad_item_costs_only_itself():
    from seal_platform_plugins.bfcl.fork_verify import verify_forked

    kinds = ["ok"] * 12
    kinds[2], kinds[6], kinds[10] = "hang", "die", "raise"
    items = [(i, kind) for i, kind in enumerate(kinds)]
    started = time.monotonic()
    out = verify_forked(items, _score, lambda item, why: {"task": item[0], "failed": why},
                        timeout_s=2.0, lanes=3, min_per_lane=1)
    assert time.monotonic() - started < 20  # the hang cost its own time limit, not the whole minute
    assert [r["task"] for r in out] == list(range(12))  # the items' order
    assert out[2]["failed"].startswith("verification took longer than 2 s")
    assert out[6]["failed"] == "the verification process died"
    assert out[10]["failed"] == "ValueError: bad record"
    ok = [r for r in out if "pid" in r]
    assert len(ok) == 9
    # Three lanes, each in its own child (a new child after a failure): more than one process.
    assert len({r["pid"] for r in ok}) >= 3


def test_items_are_dealt_in_blocks_so_every_lane_gets_a_share_of_each_part():
    from seal_platform_plugins.bfcl.fork_verify import deal

    lanes = deal(3200, 2)
    assert sorted(i for lane in lanes for i in lane) == list(range(3200))  # each item exactly once
    assert all(lane == sorted(lane) for lane in lanes)
    # The last quarter (say, the long-context tasks of a file sorted by category) is split evenly.
    assert [sum(i >= 2400 for i in lane) for lane in lanes] == [400, 400]
    assert deal(5, 4) == [[0, 4], [1], [2], [3]] and deal(0, 2) == []


def test_a_runaway_call_costs_its_transcript_seconds_per_call_not_the_whole_limit():
    """`square_root(precision=2e7)` runs for minutes: with call_timeout_s each transcript's limit is a few
    call limits, so the line fails after seconds (a checker error in its result) and the next lines go on."""
    good = "multi_turn_base_15"
    gt = ground_truth(get_task(good))
    runaway = [list(turn) for turn in gt]
    runaway[0] = ["square_root(number=2, precision=20000000)", *runaway[0]]
    records = [{"task_id": good, "turns": runaway}, {"task_id": good, "turns": gt}]
    started = time.monotonic()
    out = verify_records(records, executor=lambda: None, timeout_s=600.0, call_timeout_s=0.1)
    assert time.monotonic() - started < 60
    assert out[0]["success"] is False and out[1]["success"] is True


def test_children_start_with_the_tasks_looked_up_once_in_the_parent(tmp_path):
    """What each child would otherwise do again for itself (read the tasks, import their backends) is done
    once, before forking: every lookup happens in this process, one per task, whatever the number of lanes;
    a bad record's lookup fails here and its child still answers for it in its place."""
    import os
    import sys

    from seal_platform_plugins.bfcl.backend import BACKEND_MODULES

    seen = tmp_path / "lookups"

    def lookup(task_id):
        with open(seen, "a") as fh:
            fh.write(f"{os.getpid()} {task_id}\n")
        return get_task(task_id)

    ids = ["multi_turn_base_15", "multi_turn_miss_param_5", "multi_turn_long_context_3"]
    records = [{"task_id": ids[i % 3], "turns": ground_truth(get_task(ids[i % 3]))} for i in range(150)]
    records.insert(70, {"task_id": "no_such_task", "turns": [[]]})
    out = verify_records(records, executor=lambda: None, task_lookup=lookup)
    assert [r["success"] for i, r in enumerate(out) if i != 70] == [True] * 150
    assert set(out[70]) == {"error"} and "no_such_task" in out[70]["error"]
    lines = seen.read_text().split("\n")[:-1]
    # The parent's four lookups (the bad id included); its child looks the bad id up once more, to report it.
    parent = [line for line in lines if line.startswith(f"{os.getpid()} ")]
    assert sorted(line.split()[1] for line in parent) == sorted([*ids, "no_such_task"])
    assert [line.split()[1] for line in lines if line not in parent] == ["no_such_task"]
    involved = {name for task_id in ids for name in get_task(task_id).payload["involved_classes"]}
    assert all(BACKEND_MODULES[name] in sys.modules for name in involved)


def _children(pid: int) -> set[int]:
    """Process ids whose parent is ``pid`` (Linux /proc)."""
    from pathlib import Path

    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pids: set[int]) -> set[int]:
    import os

    alive = set()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.add(pid)
    return alive


def test_a_stopped_or_killed_verify_command_takes_its_forked_lanes_with_it(tmp_path):
    """Only the command holds its lanes to their time limits, so when it stops they must stop too: on SIGTERM
    (timeout, CI, a scheduler) it kills them and exits 143; killed outright, the kernel kills them
    (PR_SET_PDEATHSIG). Before, a lane went on computing a runaway call, re-parented, after the command was gone."""
    import json
    import signal
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/proc").is_dir():
        import pytest

        pytest.skip("needs Linux /proc")
    task = "multi_turn_base_15"
    runaway = [["power(base=10, exponent=300000000)"]] + [[] for _ in ground_truth(get_task(task))[1:]]
    data = tmp_path / "slow.jsonl"
    data.write_text("".join(json.dumps({"task_id": task, "turns": runaway}) + "\n" for _ in range(4)))
    command = [sys.executable, "-m", "seal_platform", "verify", "--benchmark", "bfcl", str(data)]
    for how in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        lanes: set[int] = set()
        while not lanes and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            lanes = _children(proc.pid)
        assert lanes, "the command never forked a lane"
        time.sleep(0.5)  # well inside the runaway call
        proc.send_signal(how)
        _, err = proc.communicate(timeout=30)
        if how == signal.SIGTERM:
            assert proc.returncode == 143 and "stopped by SIGTERM" in err and "Traceback" not in err
        gone_by = time.monotonic() + 10
        while _alive(lanes) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not _alive(lanes), f"lanes still running after {how.name}"


def test_the_worker_pool_path_says_which_transcripts_it_could_not_finish():
    """Where forking is unsafe (another thread is alive), verify_records streams through the worker pool; a
    transcript that overruns its limit there is reported as on the forked path: failed, ``checker_error``
    saying why, and only that transcript."""
    import threading

    good = "multi_turn_base_15"
    gt = ground_truth(get_task(good))
    runaway = [list(turn) for turn in gt]
    runaway[0] = ["power(base=10, exponent=300000000)", *runaway[0]]
    records = [{"task_id": good, "turns": gt}, {"task_id": good, "turns": runaway}]
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not can_fork()
        with ToolExecutor(max_workers=1, episode_timeout_s=3.0) as pool:
            out = verify_records(records, executor=lambda: pool, timeout_s=3.0)
    finally:
        release.set()
        other.join()
    assert out[0] == {"task_id": good, "success": True, "labels": ["pass"] * len(gt)}
    assert out[1]["success"] is False and out[1]["checker_error"] == "verification took longer than 3 s"


def test_records_are_grouped_by_task_in_order_capped_and_bad_records_alone():
    from seal_platform_plugins.bfcl.verifier import task_groups

    records = [{"task_id": "a"}, {"task_id": "b"}, "not a record", {"task_id": "a"}, {"task_id": 3},
               {"task_id": "a"}, {"task_id": "b"}, {"task_id": "a"}]
    assert task_groups(records, size=2) == [[0, 3], [1, 6], [2], [4], [5, 7]]
    groups = task_groups(records)
    assert sorted(i for group in groups for i in group) == list(range(len(records)))
    assert groups == [[0, 3, 5, 7], [1, 6], [2], [4]]


def test_identical_and_bad_records_of_one_task_each_get_their_own_line():
    """A group's identical transcripts are verified once and each gets the verdict; a bad record among them
    gets its error in its place; every line equals what the record gets verified alone."""
    good = "multi_turn_base_15"
    gt = ground_truth(get_task(good))
    empty = [[] for _ in gt]
    records = [{"task_id": good, "turns": gt}] * 70 + [
        {"task_id": good, "turns": "bad"},
        {"task_id": good, "turns": empty},
    ]
    out = verify_records(records, executor=lambda: None)
    alone = [verify_records([record], executor=lambda: None)[0] for record in records[-3:]]
    assert out[:70] == [alone[0]] * 70 and out[0]["success"] is True
    assert out[70:] == alone[1:] and "error" in out[70] and out[71]["success"] is False


def test_one_runaway_call_costs_its_line_the_per_call_limit_as_in_training(monkeypatch):
    """Issue 52: one `verify` line could still take 40 s (four call limits for a one-call line, more for longer
    ones): the line's whole limit was spent on one runaway call. Each call is now held to call_timeout_s from the
    call before it, as training's worker pool holds it, and the line says which limit it ran into."""
    from seal_platform_plugins.bfcl import fork_verify

    # The first call's window (5 s by default), within which the quick calls before the runaway one all end, is
    # where the lane is first looked at: 1 s, so that the line fails about one call limit past its last call.
    monkeypatch.setattr(fork_verify, "FIRST_CALL_S", 1.0)
    good = "multi_turn_base_15"
    gt = ground_truth(get_task(good))
    runaway = [list(turn) for turn in gt]
    runaway[-1] = [*runaway[-1], "power(base=10, exponent=300000000)"]  # after every other call: minutes
    calls = sum(len(turn) for turn in runaway)
    whole_line = 1.0 * (2 * calls + 2)  # the line's own limit, which the runaway call used to take whole
    assert whole_line >= 12
    started = time.monotonic()
    [out] = verify_records([{"task_id": good, "turns": runaway}], executor=lambda: None, timeout_s=600.0,
                           call_timeout_s=1.0)
    took = time.monotonic() - started
    assert out["success"] is False
    assert out["checker_error"] == "a tool call took longer than 1 s (the per-call time limit, as in training)"
    assert took < whole_line - 4, took  # about one call limit past the last call, not the line's limit


def test_the_per_call_limit_leaves_long_lines_of_quick_calls_alone(monkeypatch):
    from seal_platform_plugins.bfcl import fork_verify
    from seal_platform_plugins.bfcl.fork_verify import verify_forked

    # The first call's window (5 s by default) shortened, so that lines longer than it take seconds, not ten.
    monkeypatch.setattr(fork_verify, "FIRST_CALL_S", 1.0)

    def slow_item(item):  # many quick calls, together longer than one call's limit and the first call's window
        from seal_platform_plugins.bfcl import backend

        for _ in range(int(fork_verify.FIRST_CALL_S / 0.2) + 5):
            time.sleep(0.2)
            backend.CALL_DONE()
        if item == 1:
            time.sleep(60)  # then one call that overruns
        return {"item": item}

    started = time.monotonic()
    out = verify_forked([0, 1], slow_item, lambda item, why: {"failed": why}, timeout_s=120.0, lanes=1,
                        min_per_lane=1, call_timeout_s=0.5)
    assert out == [{"item": 0}, {"failed": "a tool call took longer than 0.5 s (the per-call time limit, as in "
                                           "training)"}]
    assert time.monotonic() - started < 30
