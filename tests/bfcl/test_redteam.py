"""Red team: hostile calls are tool errors that run nothing, create no file and no process, and change no
later verdict -- through the episode path (structured calls in a worker) and the verifier path (call strings,
in-process and in a worker)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from seal_platform_libs.toolenv.calls import parse_call
from seal_platform_plugins.bfcl.trace import ERROR_PREFIX
from seal_platform_plugins.bfcl.verifier import verify

TASK = "multi_turn_base_0"


def _attack_strings(sentinel: Path) -> list[str]:
    f = str(sentinel)
    return [
        f"__import__('os').system('touch {f}')",
        f"exec(\"open('{f}', 'w')\")",
        f"eval(\"open('{f}', 'w')\")",
        f"open('{f}', 'w')",
        f"compile('open(\"{f}\", \"w\")', 'x', 'exec')",
        "globals()",
        "locals()",
        "vars()",
        f"getattr(__builtins__, 'open')('{f}', 'w')",
        f"cd(folder=__import__('os').system('touch {f}'))",
        f"cd(folder=open('{f}', 'w'))",
        f"ls.__globals__['subprocess'].run(['touch', '{f}'])",
        f"cd.__self__.__class__.__init__.__globals__['subprocess'].Popen(['touch', '{f}'])",
        "cd.__class__",
        "__class__()",
        "_load_scenario(scenario={}, long_context=True)",
        "__init__()",
        "cd(**{'folder': 'document'})",
        "cd(*['document'])",
        f"cd(folder=(lambda: open('{f}', 'w'))())",
        f"cd(folder=[open('{f}', 'w') for _ in range(1)])",
        "cd(folder='x' * 10**9)",
        "cd(folder=[0] * 10**9)",
        "cd(folder=" + "[" * 200 + "]" * 200 + ")",
        "cd(folder='" + "x" * 100_000 + "')",
        "cd(folder='document'); __import__('os')",
        f"cd(folder='document') or open('{f}', 'w')",
        f"[cd(folder='document'), open('{f}', 'w')]",
        "cd(folder='document', **{'__class__': 1})",
        "kill(pid=1)",
        "exit()",
        "run(command='touch')",
        f"subprocess.run(['touch', '{f}'])",
        "breakpoint()",
        "help()",
        "print('hi')",
    ]


def _attack_structured(sentinel: Path) -> list[tuple[str, object]]:
    f = str(sentinel)
    return [
        ("__import__", {"name": "os"}),
        ("eval", {"source": f"open('{f}', 'w')"}),
        ("exec", {"source": f"open('{f}', 'w')"}),
        ("open", {"file": f, "mode": "w"}),
        ("globals", {}),
        ("getattr", {"o": "x", "name": "__class__"}),
        ("__class__", {}),
        ("_load_scenario", {"scenario": {}}),
        ("cd.__globals__", {}),
        ("ls.__self__", {}),
        ("cd", {"folder": "document", "__class__": 1}),
        ("cd", {"folder='x'); open('" + f + "', 'w'); cd(folder": "document"}),
        ("cd", {"**kwargs": {"folder": "x"}}),
        ("cd", {"self": "x"}),
        ("cd", {"folder": "x" * 300_000}),
        ("cd", {"folder": f"__import__('os').system('touch {f}')"}),  # only a (strange) folder name
        ("touch", {"file_name": "../../../../../../" + f}),  # a path inside the simulated file system only
        ("kill", {}),
        ("run", {}),
    ]


def _children(pids: list[int]) -> set[int]:
    """Processes whose parent is one of ``pids`` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in pids:
            found.add(int(entry.name))
    return found


@pytest.fixture
def sentinel(tmp_path):
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "an attack created a file"


def test_verifier_refuses_every_attack_in_process(task_by_id, sentinel):
    task = task_by_id[TASK]
    baseline = [verify(task, task.payload["ground_truth"]).success]
    attacks = _attack_strings(sentinel)
    for text in attacks:
        turns = [list(turn) for turn in task.payload["ground_truth"]]
        turns[0] = [text] + turns[0]
        outcome = verify(task, turns)
        checks = outcome.turns[0].checks
        assert 0 in checks["rejected_calls"] or 0 in checks["model_error_calls"], text
        assert checks["model_results"][0].startswith(ERROR_PREFIX), text
        assert not sentinel.exists(), text
    # Nothing leaked: the ground truth still passes, and a refused call changes no state.
    assert verify(task, task.payload["ground_truth"]).success == baseline[0] is True
    with_attack = [list(turn) for turn in task.payload["ground_truth"]]
    with_attack[0] = attacks[:5] + with_attack[0]
    assert verify(task, with_attack).success


def test_parse_never_yields_a_callable_attack():
    for text in _attack_strings(Path("/tmp/never")):
        call = parse_call(text)
        if call.ok:  # only plain names with literals, e.g. kill(pid=1), print('hi'), _load_scenario(...);
            # which of those names are tools is decided at execution (private and builtin names never are)
            assert call.name.isidentifier() and not call.name.startswith("__")
            assert all(
                isinstance(v, (str, int, float, bool, type(None), list, dict, tuple)) for v in call.kwargs.values()
            )


def test_episode_path_refuses_every_attack(executor, task_by_id, sentinel):
    task = task_by_id[TASK]
    with executor.open_session(task) as session:
        before = session.call("ls", {"a": True}, None).result
        workers = executor.worker_pids()
        children_before = _children(workers)
        for name, arguments in _attack_structured(sentinel):
            result = session.call(name, arguments, None)
            if (
                name in ("cd", "touch")
                and arguments
                and not any(k in ("__class__", "self") or not k.isidentifier() for k in arguments)
            ):
                # Plain data in a real tool's argument: runs inside the simulated file system, nothing else.
                assert result.error is None or result.error.startswith(ERROR_PREFIX)
                continue
            assert result.error and result.error.startswith(ERROR_PREFIX), (name, arguments, result)
            assert result.rejected, (name, arguments)
        assert not sentinel.exists()
        assert _children(workers) == children_before
        assert executor.worker_pids() == workers  # no attack crashed or replaced a worker
        # The session's state moved only by the legal touch(); a fresh session is untouched.
        with executor.open_session(task) as fresh:
            assert fresh.call("ls", {"a": True}, None).result == before


def test_verifier_in_worker_refuses_every_attack(executor, task_by_id, sentinel):
    task = task_by_id[TASK]
    turns = [list(turn) for turn in task.payload["ground_truth"]]
    assert executor.verify(task, [[parse_call(c) for c in t] for t in turns]).success
    workers = executor.worker_pids()
    children = _children(workers)
    attacked = [[parse_call(c) for c in _attack_strings(sentinel)] + [parse_call(c) for c in turns[0]]]
    attacked += [[parse_call(c) for c in t] for t in turns[1:]]
    outcome = executor.verify(task, attacked)
    assert outcome.success  # refused calls change nothing; the GT calls after them still do the job
    assert all(
        r.startswith(ERROR_PREFIX) for r in outcome.turns[0].checks["model_results"][: len(_attack_strings(sentinel))]
    )
    assert _children(workers) == children
    assert executor.verify(task, [[parse_call(c) for c in t] for t in turns]).success


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memory cap uses RLIMIT_AS")
def test_workers_run_under_a_memory_cap(task_by_id):
    from seal_platform_plugins.bfcl.executor import ToolExecutor

    with ToolExecutor(max_workers=1, memory_limit_mb=1500) as ex, ex.open_session(task_by_id[TASK]) as session:
        assert session.call("pwd", {}, None).ok
        (pid,) = ex.worker_pids()
        limits = Path(f"/proc/{pid}/limits").read_text()
        line = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert str(1500 * 1024 * 1024) in line
    assert os.getpid() not in [pid]
