"""`seal-platform verify`, run as the console script, ends without the interpreter's teardown once its output is
written (seal_platform/quick_exit.py): its output complete, its status kept, the exit handlers run; and only
there: with another thread running, for a command that does not ask, or inside a longer-lived process, the
usual exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from seal_platform import quick_exit

# Started as the console script starts (seal_platform.__main__), with an exit handler and an object whose
# __del__ runs only when the interpreter tears this module down; argv[1] "thread" first starts a thread
# that is still running when the command ends.
_PROGRAM = """
import atexit, os, sys, threading, time


class Teardown:
    def __del__(self, write=os.write):  # os itself may be gone from this module's globals by then
        write(2, b"torn down\\n")


keep = Teardown()
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
atexit.register(lambda: print("the last line, from an exit handler"))  # stdout: a pipe, so block-buffered
if sys.argv[1] == "thread":
    sys.argv.pop(1)
    threading.Thread(target=lambda: (time.sleep(1.5), print("thread done", file=sys.stderr))).start()
sys.argv[0] = "seal-platform"
from seal_platform.__main__ import main
main()
"""


def _run(args: list[str], tmp_path: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout to a pipe: block-buffered
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", _PROGRAM, *args], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)


def _lines(tmp_path: Path, *records: dict) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return str(path)


def test_verify_ends_without_teardown_with_its_output_status_and_exit_handlers(tmp_path, toy_site):
    data = _lines(tmp_path, *({"task_id": f"t{i}", "answer": 42 if i % 2 else 7} for i in range(500)))
    done = _run(["verify", "--benchmark", "toy", data], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    *lines, last = done.stdout.splitlines()
    assert [json.loads(line)["success"] for line in lines] == [i % 2 == 1 for i in range(500)]
    assert last == "the last line, from an exit handler"  # written after the first flush, flushed too
    assert "exit handler ran" in done.stderr and "torn down" not in done.stderr

    # A line that cannot be scored: every line is still written, status 1 and the note on stderr.
    data = _lines(tmp_path, {"task_id": "a", "answer": 42}, {"answer": 1})
    done = _run(["verify", "--benchmark", "toy", data], tmp_path, toy_site)
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 3 and "error" in json.loads(done.stdout.splitlines()[1])
    assert "1 of 2 line(s) could not be scored" in done.stderr
    assert "exit handler ran" in done.stderr and "torn down" not in done.stderr


def test_the_usual_exit_where_a_thread_runs_or_nothing_asked_for_a_quick_one(tmp_path, toy_site):
    data = _lines(tmp_path, {"task_id": "a", "answer": 42})
    done = _run(["thread", "verify", "--benchmark", "toy", data], tmp_path, toy_site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0]) == {"task_id": "a", "success": True}
    # The interpreter waited for the thread, then tore the module down.
    assert done.stderr.index("thread done") < done.stderr.index("exit handler ran") < done.stderr.index("torn down")

    done = _run(["--version"], tmp_path, toy_site)
    assert done.returncode == 0 and "torn down" in done.stderr and "exit handler ran" in done.stderr

    done = _run(["verify", "--benchmark", "nothing", data], tmp_path, toy_site)  # cannot run: status 2
    assert done.returncode == 2 and "torn down" in done.stderr


def test_inside_a_longer_lived_process_verify_only_sets_the_flag(tmp_path, toy_site, monkeypatch):
    from seal_platform.cli import cli

    monkeypatch.setattr(quick_exit, "_requested", False)
    data = _lines(tmp_path, {"task_id": "a", "answer": 42})
    result = CliRunner().invoke(cli, ["verify", "--benchmark", "toy", data])
    assert result.exit_code == 0 and json.loads(result.stdout) == {"task_id": "a", "success": True}
    assert quick_exit.requested()  # and this process is still here
