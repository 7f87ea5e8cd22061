"""The tool executor: worker processes, official result strings, limits, isolation, concurrency."""

from __future__ import annotations

import os
import threading
import time

import pytest

from seal_platform_libs.toolenv.calls import parse_call
from seal_platform_plugins.bfcl import backend as _backend
from seal_platform_plugins.bfcl.executor import ExecutorError, ToolExecutor
from seal_platform_plugins.bfcl.trace import ERROR_PREFIX

MATH_TASK = "multi_turn_base_15"


def test_backend_table_matches_bfcl_eval():
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING, STATELESS_CLASSES

    for name, module in _backend.BACKEND_MODULES.items():
        assert CLASS_FILE_PATH_MAPPING[name] == module
    assert set(STATELESS_CLASSES) == set(_backend.STATELESS_CLASSES)


def _official_results(task, calls, long_context=False):
    """The official executor's result strings for ``calls`` on fresh instances (unique name, cleaned up)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    name = f"exectest{time.monotonic_ns()}"
    try:
        results, _ = multi_turn_utils.execute_multi_turn_func_call(
            calls, task.payload["initial_config"], task.payload["involved_classes"], name, task.id,
            long_context=long_context,
        )
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(name)]:
            del vars(multi_turn_utils)[key]
    return results


def test_session_results_are_the_official_strings(executor, task_by_id):
    for task_id in ["multi_turn_base_0", "multi_turn_base_14", MATH_TASK, "multi_turn_miss_param_7"]:
        task = task_by_id[task_id]
        texts = [c for turn in task.payload["ground_truth"] for c in turn]
        texts += ["cd(folder='no_such_dir')", "ls(a='yes')", "tail(file_name=3)", "cd(folder='a', bogus=1)"]
        # Structured calls carry keyword arguments only (positional ones are a call-syntax feature).
        calls = [parse_call(t) for t in texts if parse_call(t).ok and not parse_call(t).args]
        expected = _official_results(task, [c.render() for c in calls])
        with executor.open_session(task) as session:
            got = [session.call(c.name, c.kwargs, None).observation for c in calls]
        assert got == [e if len(e) <= 2000 else g for e, g in zip(expected, got)]
        assert any(g.startswith(ERROR_PREFIX) for g in got)


def test_long_context_results_with_reused_encodings_are_the_official_strings(task_by_id):
    """Long-context get_stock_info puts the module's two 2,000-float moving-average lists into every result;
    the backend encodes those once and reuses the text (backend._dumps). The result strings must still be
    exactly the official ones -- and json.dumps' own when the constant was changed in place or a key is not
    a string."""
    import json

    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context

    from seal_platform_plugins.bfcl.backend import Backend, stringify

    task = next(t for t in task_by_id.values()
                if t.category == "multi_turn_long_context" and "TradingBot" in t.payload["involved_classes"])
    symbols = list(task.payload["initial_config"].get("TradingBot", {}).get("stocks") or ["AAPL"])[:2]
    texts = [f"get_stock_info(symbol='{symbol}')" for symbol in symbols] + ["get_stock_info(symbol='NOPE')"]
    expected = _official_results(task, texts, long_context=True)
    backend = Backend.for_payload(task.payload)
    got = [backend.execute(parse_call(text))[0] for text in texts]
    assert got == expected
    assert len(got[0]) > 30_000 and "MA(5)" in got[0]

    stock = {"price": 1.5, "MA(5)": long_context.MA_5_EXTENSION, "MA(20)": long_context.MA_20_EXTENSION}
    assert stringify(stock) == json.dumps(stock)
    long_context.MA_5_EXTENSION.append(7)  # changed in place: the saved encoding no longer applies
    try:
        assert stringify(stock) == json.dumps(stock) and stringify(stock).endswith(
            "7], \"MA(20)\": " + json.dumps(long_context.MA_20_EXTENSION) + "}"
        )
    finally:
        long_context.MA_5_EXTENSION.pop()
    odd_keys = {1: long_context.MA_5_EXTENSION, True: "x", "k": long_context.MA_20_EXTENSION}  # noqa: F601 (as json sees it)
    assert stringify(odd_keys) == json.dumps(odd_keys)


def test_tools_run_in_another_process_and_results_are_clipped(task_by_id):
    task = task_by_id["multi_turn_long_context_0"]
    with ToolExecutor(max_workers=1, max_result_chars=100) as ex:
        with ex.open_session(task) as session:
            assert session.call("cd", {"folder": "document"}, None).ok
            result = session.call("ls", {"a": True}, None)  # the long-context listing is thousands of chars
            assert result.ok and "output clipped" in result.result and len(result.result) < 200
        pids = ex.worker_pids()
        assert pids and os.getpid() not in pids


def test_allowed_tools_and_argument_names(executor, task_by_id):
    with executor.open_session(task_by_id["multi_turn_base_0"]) as session:
        refused = session.call("ls", {}, {"cd", "pwd"})
        assert refused.rejected and "not available" in refused.error
        assert session.call("cd", {"path": "x"}, None).error == (
            ERROR_PREFIX + "GorillaFileSystem.cd() got an unexpected keyword argument 'path'"
        )
        missing = session.call("cd", {}, None)
        assert missing.error.startswith(ERROR_PREFIX) and "missing 1 required positional argument" in missing.error
        assert session.call("nope", {}, None).error == ERROR_PREFIX + "name 'nope' is not defined"
        assert session.call("cd", {"folder": object()}, None).rejected  # not JSON: refused here
        backend_error = session.call("cd", {"folder": "no_such_dir"}, None)
        assert backend_error.ok and '"error"' in backend_error.result


def test_sessions_are_private_and_fresh(executor, task_by_id):
    task = task_by_id["multi_turn_base_0"]
    first = executor.open_session(task)
    second = executor.open_session(task)
    assert first.call("mkdir", {"dir_name": "only_in_first"}, None).ok
    assert "only_in_first" in first.call("ls", {}, None).result
    assert "only_in_first" not in second.call("ls", {}, None).result
    first.close()
    third = executor.open_session(task)
    assert "only_in_first" not in third.call("ls", {}, None).result
    second.close()
    third.close()
    closed = third.call("ls", {}, None)
    assert not closed.ok and "closed" in closed.error


def test_concurrent_sessions_from_threads(task_by_id):
    tasks = [task_by_id[f"multi_turn_base_{i}"] for i in (0, 1, 2, 3, 5, 8)]
    expected = {}
    for task in tasks:
        calls = [parse_call(c) for turn in task.payload["ground_truth"] for c in turn]
        expected[task.id] = [c for c in calls if not c.args]
    outputs: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def run(task):
        try:
            with executor.open_session(task) as session:
                outputs[task.id] = [session.call(c.name, c.kwargs, None).observation for c in expected[task.id]]
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    with ToolExecutor(max_workers=2) as executor:
        threads = [threading.Thread(target=run, args=(task,)) for task in tasks * 3]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors
        for task in tasks:  # same as one session alone
            with executor.open_session(task) as session:
                alone = [session.call(c.name, c.kwargs, None).observation for c in expected[task.id]]
            assert outputs[task.id] == alone


def test_a_runaway_call_is_stopped_and_nothing_else_is_lost(task_by_id):
    math_task = task_by_id[MATH_TASK]
    files = task_by_id["multi_turn_base_0"]
    with ToolExecutor(max_workers=1, call_timeout_s=1.0, episode_timeout_s=30.0) as ex:
        other = ex.open_session(files)
        assert other.call("mkdir", {"dir_name": "keep_me"}, None).ok
        session = ex.open_session(math_task)
        assert session.call("add", {"a": 1, "b": 2}, None).ok
        pid = ex.worker_pids()[0]
        started = time.monotonic()
        slow = session.call("power", {"base": 7, "exponent": 10**12}, None)
        assert time.monotonic() - started < 10
        assert slow.timed_out and "longer than 1 s" in slow.error
        # The worker was replaced; both sessions carry on with their state rebuilt.
        assert "keep_me" in other.call("ls", {}, None).result
        assert ex.worker_pids() and ex.worker_pids()[0] != pid
        assert session.call("add", {"a": 2, "b": 3}, None).result == '{"result": 5}'


def test_episode_time_limit(task_by_id):
    with (
        ToolExecutor(max_workers=1, call_timeout_s=0.5, episode_timeout_s=0.8) as ex,
        ex.open_session(task_by_id[MATH_TASK]) as session,
    ):
        assert session.call("power", {"base": 7, "exponent": 10**12}, None).timed_out
        second = session.call("power", {"base": 7, "exponent": 10**12}, None)
        assert second.timed_out and second.elapsed_s <= 0.31
        used_up = session.call("add", {"a": 1, "b": 1}, None)
        assert used_up.timed_out and "used up" in used_up.error


def test_verification_in_a_worker_times_out_cleanly(task_by_id):
    task = task_by_id[MATH_TASK]
    turns = [[parse_call(c) for c in turn] for turn in task.payload["ground_truth"]]
    with ToolExecutor(max_workers=1, call_timeout_s=1.0, episode_timeout_s=1.0) as ex:
        assert ex.verify(task, turns).success
        turns[0] = turns[0] + [parse_call("power(base=7, exponent=1000000000000)")]
        outcome = ex.verify(task, turns)
        assert not outcome.success and outcome.error_type == "multi_turn:checker_error"
        assert "longer than" in outcome.error_message
        assert all(t.checks["checker_error"] for t in outcome.turns)
        turns[0].pop()
        assert ex.verify(task, turns).success


def test_closed_executor_refuses_work(task_by_id):
    ex = ToolExecutor(max_workers=1)
    ex.close()
    ex.close()
    with pytest.raises(ExecutorError):
        ex.open_session(task_by_id["multi_turn_base_0"])


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        ToolExecutor(max_workers=0)
    with pytest.raises(ValueError):
        ToolExecutor(call_timeout_s=0)


def test_callable_names_are_the_official_ones():
    # The official executor maps exactly the public bound methods of each instance; so must we.
    import inspect

    for name in _backend.BACKEND_MODULES:
        cls = _backend.backend_class(name)
        official = {m for m, _ in inspect.getmembers(cls(), predicate=inspect.ismethod) if not m.startswith("_")}
        assert {m for m, _, _ in _backend._public_methods(cls)} == official, name


def test_a_plain_script_without_a_main_guard_is_not_rerun_by_the_tool_workers(tmp_path):
    """Tool workers start from a fork server, which re-imports the main script unless it is hidden: a script
    calling the platform at top level would start again in every worker."""
    import subprocess
    import sys

    script = tmp_path / "plain.py"
    script.write_text(
        'print("TOP-LEVEL", flush=True)\n'
        "from seal_platform_plugins.bfcl.data import get_task\n"
        "from seal_platform_plugins.bfcl.executor import ToolExecutor\n"
        "with ToolExecutor(max_workers=2) as ex:\n"
        '    with ex.open_session(get_task("multi_turn_base_15")) as session:\n'
        '        print("RESULT", session.call("add", {"a": 1, "b": 2}, None).result, flush=True)\n'
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("TOP-LEVEL") == 1 and 'RESULT {"result": 3}' in done.stdout
