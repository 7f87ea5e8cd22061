"""`seal-platform verify`'s whole-command speed-ups change nothing it prints: the command's output is, byte for
byte, what the plain in-process verifier gives record by record; hostile lines still get their own error or
failure; the verify path leaves the run store (SQLAlchemy, Alembic) unimported, and the whole command also what
only other commands use (yaml, the presentation modules); a built-in command skips
plugin-command discovery while everything else still gets the plugins' commands; forked verifier children
run with the interpreter's own garbage-collector settings (no tuning)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from official_cases import agreement_cases

from seal_platform_plugins.bfcl.diagnoser import label_turns
from seal_platform_plugins.bfcl.fork_verify import verify_forked
from seal_platform_plugins.bfcl.verifier import verify_record


def _command(args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "seal_platform", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def test_command_output_is_byte_identical_to_the_plain_verifier(all_tasks, tmp_path):
    sample = all_tasks[::16]  # every category, 50 tasks
    cases = agreement_cases([task.payload for task in sample], 3, 20260323)
    lines = [json.dumps({"task_id": entry["id"], "turns": turns}) for entry, turns, _ in cases]
    bad = {7: "{not json", 40: json.dumps({"task_id": "no_such_task", "turns": [[]]}), 90: "[1, 2]",
           120: json.dumps({"task_id": sample[0].id})}
    for position, line in sorted(bad.items()):
        lines.insert(position, line)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = _command(["verify", "--benchmark", "bfcl", str(path)], tmp_path)
    assert done.returncode == 1, done.stderr  # the bad lines: exit 1, every line written all the same
    assert f"verify: {len(bad)} of {len(lines)} line(s) could not be scored" in done.stderr

    def plain(number: int, line: str) -> str:
        try:
            record = json.loads(line)
        except ValueError:
            return "error"
        if not isinstance(record, dict):
            return "error"
        try:
            result = verify_record(record, label_turns=lambda task, outcome: label_turns(outcome.turns))
        except ValueError:
            return "error"
        return json.dumps(result)

    got = done.stdout.splitlines()
    assert len(got) == len(lines) > 200
    for number, (line, out) in enumerate(zip(lines, got), start=1):
        expected = plain(number, line)
        if expected == "error":
            assert set(json.loads(out)) == {"error"} and json.loads(out)["error"].startswith(f"line {number}:")
        else:
            assert out == expected, number
    assert done.stdout.endswith("\n") and not done.stdout.endswith("\n\n")


def test_hostile_lines_still_get_their_own_verdict_or_error(task_by_id, tmp_path):
    task = task_by_id["multi_turn_base_15"]  # involves MathAPI
    gt = [list(turn) for turn in task.payload["ground_truth"]]
    marker = tmp_path / "pwned"
    runaway = [list(turn) for turn in gt]
    runaway[0] = ["power(base=10, exponent=300000000)", *runaway[0]]  # minutes of big-integer arithmetic
    injected = [list(turn) for turn in gt]
    injected[0] = [f"__import__('os').system('touch {marker}')", *injected[0]]
    block = [
        json.dumps({"task_id": task.id, "turns": gt}),
        "[" * 5000 + "]" * 5000,
        json.dumps({"task_id": task.id, "turns": injected}),
        json.dumps({"task_id": task.id, "turns": gt}),
    ]
    lines = block * 50  # 200 lines: the forked fast path, two lanes
    lines.insert(101, json.dumps({"task_id": task.id, "turns": runaway}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = _command(["verify", "--benchmark", "bfcl", "--set", "bfcl.call_timeout_s=0.5", str(path)], tmp_path)
    assert done.returncode == 1, done.stderr  # the nested lines could not be scored
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(out) == len(lines)
    slow = out.pop(101)
    assert slow["task_id"] == task.id and slow["success"] is False  # cut off by its own time limit
    for number, (first, nested, attack, last) in enumerate(zip(out[0::4], out[1::4], out[2::4], out[3::4])):
        assert first == last == {"task_id": task.id, "success": True, "labels": ["pass"] * len(gt)}
        line = 4 * number + 2 + (4 * number + 1 >= 101)  # its line number in the file (after the runaway line)
        assert set(nested) == {"error"} and nested["error"].startswith(f"line {line}:"), nested
        assert attack["task_id"] == task.id and attack["success"] is True  # a tool error that ran nothing
    assert not marker.exists()


def test_verify_path_leaves_the_run_store_unimported(tmp_path):
    program = (
        "import json, sys\n"
        "from seal_platform.verify import verify_lines\n"
        "line = json.dumps({'task_id': 'multi_turn_base_0', 'turns': [[]]})\n"
        "out = list(verify_lines('bfcl', [line], []))\n"
        "print(json.dumps([json.loads(out[0])['success'], "
        "[m for m in ('seal_platform.store', 'sqlalchemy', 'alembic') if m in sys.modules]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, []]


def test_the_verify_command_starts_without_the_store_or_what_other_commands_use(task_by_id, tmp_path):
    # The whole command, started as the console script starts it: besides the store, none of the heavy
    # libraries and none of what only other commands import (tests/core/test_cli_startup.py: the same for
    # the toy benchmark, --help and plugins --json).
    task = task_by_id["multi_turn_base_0"]
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"task_id": task.id, "turns": task.payload["ground_truth"]}) + "\n")
    program = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "sys.argv[0] = 'seal-platform'\n"
        "from seal_platform.__main__ import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program, "verify", "--benchmark", "bfcl", str(path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["success"] is True
    modules = json.loads(done.stderr.splitlines()[-1])
    unwanted = ("seal_platform.store", "sqlalchemy", "alembic", "torch", "transformers", "vllm", "ray", "yaml",
                "seal_platform.present")
    assert [m for m in modules if any(m == u or m.startswith(u + ".") for u in unwanted)] == []


def test_plugin_commands_still_come_with_everything_but_a_builtin_command(tmp_path):
    helped = _command(["--help"], tmp_path, timeout=300)
    assert helped.returncode == 0, helped.stderr
    assert "plan" in helped.stdout.split() and "verify" in helped.stdout.split()  # grpo's command, and ours
    plugin_help = _command(["plan", "--help"], tmp_path, timeout=300)
    assert plugin_help.returncode == 0, plugin_help.stderr
    misspelt = _command(["verfy"], tmp_path, timeout=300)
    assert misspelt.returncode == 2 and "No such command" in misspelt.stderr


def _collector(item):
    return {"threshold": gc.get_threshold()[0], "item": item}


def test_forked_children_keep_the_interpreter_s_collector_settings():
    before = gc.get_threshold()
    out = verify_forked(list(range(8)), _collector, lambda item, why: {"failed": why}, timeout_s=30.0, lanes=2,
                        min_per_lane=1)
    assert [o["item"] for o in out] == list(range(8))
    assert all(o["threshold"] == before[0] for o in out)  # no interpreter tuning in the children
    assert gc.get_threshold() == before
