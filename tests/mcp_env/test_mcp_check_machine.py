"""The mcp plugin's machine check probes the recipe's servers before a run starts: a stdio command this machine
does not have (or cannot execute), a working directory that is not there, a URL that does not parse; then, where
none of those is wrong, it starts each server once to list its tools and checks every tool name the recipe and
the task file use. A failed check stops the run with nothing in the store; check-env's build fails the same way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from seal_platform_plugins.mcp.probe import server_problems
from seal_platform_plugins.mcp.settings import MCPServerSettings

ROOT = Path(__file__).resolve().parents[2]
TASKS = str(ROOT / "examples/mcp-inventory/tasks.jsonl")


def _problems(**server) -> list[str]:
    return server_problems("settings.mcp.servers[0]", MCPServerSettings(name="s", **server))


def test_a_recipe_naming_a_missing_server_binary_stops_before_anything_is_started(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    recipe = tmp_path / "missing-server.yaml"
    recipe.write_text(yaml.safe_dump({
        "extends": "mcp-example", "name": "missing-server",
        "settings": {
            "mcp": {"tasks": TASKS, "servers": [{"name": "inventory", "command": "no-such-mcp-server-9f3a"}]},
            # Without the machine check this run would get as far as grpo's start_run, which fails on this path
            # (quickly, with a failed run left in the store) instead of loading a model.
            "policy": {"model": str(tmp_path / "no-model")},
        },
    }))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(recipe), "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert "nothing was started" in text, text
    assert ("settings.mcp.servers[0] ('inventory'): its command 'no-such-mcp-server-9f3a' is not found on this "
            "machine's PATH, so the server cannot start") in text, text
    store = tmp_path / "runs" / "store.sqlite"
    assert not store.exists() or not RunStore(f"sqlite:///{store}").list_runs()


def test_commands_this_machine_can_start_pass():
    assert _problems(command="python") == []  # the interpreter running seal-platform
    assert _problems(command=sys.executable) == []
    assert _problems(command="sh") == []  # found on PATH


def test_a_command_not_on_the_path_the_server_gets_is_reported(tmp_path):
    said = _problems(command="sh", env={"PATH": str(tmp_path)})  # the server's env sets its own PATH
    assert said == [f"settings.mcp.servers[0] ('s'): its command 'sh' is not found on the PATH the server's env "
                    f"sets, so the server cannot start: install it, or give its absolute path in command ('python' "
                    f"means this interpreter, {sys.executable})."]


def test_a_command_path_that_is_missing_or_not_executable_is_reported(tmp_path):
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")
    assert "is not executable), so the server cannot start" in _problems(command=str(script))[0]
    script.chmod(0o755)
    assert _problems(command=str(script)) == []
    assert _problems(command="./server.sh", cwd=str(tmp_path)) == []  # relative to the server's cwd
    assert f"({str(tmp_path)!r} is a directory)" in _problems(command=str(tmp_path))[0]
    missing = _problems(command="./bin/server", cwd=str(tmp_path))
    assert missing == [f"settings.mcp.servers[0] ('s'): its command './bin/server' does not exist on this machine "
                       f"(looked for {str(tmp_path / 'bin/server')!r}), so the server cannot start: fix the path "
                       "(relative paths are read from the server's cwd, else the current directory)."]


def test_a_missing_working_directory_is_reported(tmp_path):
    said = _problems(command="python", cwd=str(tmp_path / "gone"))
    assert len(said) == 1 and said[0].startswith(f"settings.mcp.servers[0] ('s'): its cwd "
                                                 f"{str(tmp_path / 'gone')!r} is not a directory on this machine")


@pytest.mark.parametrize(("url", "why"), [
    ("http://:8080/mcp", "names no host"),
    ("http://[::1/mcp", "does not parse (Invalid IPv6 URL)"),
    ("http://localhost:99999/mcp", "does not parse (Port out of range 0-65535)"),
    ("http://localhost:port/mcp", "does not parse (Port could not be cast to integer value as 'port')"),
    ("http://local host/mcp", "contains whitespace or control characters"),
])
def test_a_url_that_does_not_parse_is_reported(url, why):
    assert _problems(url=url, per_session_state=True) == [
        f"settings.mcp.servers[0] ('s'): its url {url!r} {why}: give the server's MCP endpoint as "
        "http(s)://host[:port]/path."]


def test_a_url_that_parses_passes_without_contacting_it():
    assert _problems(url="http://127.0.0.1:9/mcp", per_session_state=True) == []  # nothing listens on port 9
    assert _problems(url="https://mcp.example.com/mcp", per_session_state=True) == []


def _recipe(tmp_path, servers, tasks=TASKS, **mcp) -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"extends": "mcp-example", "name": "r", "settings": {
        "mcp": {"tasks": tasks, "servers": servers, **mcp}, "policy": {"model": str(tmp_path / "no-model")}}}))
    return recipe


SERVER = {"name": "inventory", "command": sys.executable, "args": [str(ROOT / "examples/mcp-inventory/server.py")]}


def test_a_server_that_exits_at_once_fails_the_run_check_and_check_env(tmp_path, monkeypatch):
    """/bin/false is an executable this machine has; only starting it shows it is no MCP server (before: both
    passed, and the run failed after its row was made)."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.conformance import check_environment
    from seal_platform.store import RunStore

    recipe = _recipe(tmp_path, [{"name": "broken", "command": "/bin/false"}])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(recipe), "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "nothing was started" in text, text
    assert "The tools of MCP server 'broken' could not be listed" in text, text
    store = tmp_path / "runs" / "store.sqlite"
    assert not store.exists() or not RunStore(f"sqlite:///{store}").list_runs()
    build = next(f for f in check_environment("mcp", recipe=recipe) if f.check == "build")
    assert build.failed and "'broken' could not be listed" in build.message


def test_a_task_naming_a_tool_the_server_lacks_is_found_before_the_run(tmp_path, monkeypatch):
    from seal_platform.conformance import check_environment
    from seal_platform.planning import check_machine, plan_recipe

    tasks = tmp_path / "tasks.jsonl"
    good = ('{"id": "a", "split": "train", "turns": [{"user": "x", "calls": [{"name": "get_item", "arguments": '
            '{"name": "lamp"}}]}]}')
    bad = ('{"id": "b", "split": "eval", "turns": [{"user": "y", "calls": [{"name": "get_item", "arguments": {}}], '
           '"check": [{"name": "nope", "arguments": {}}]}]}')
    tasks.write_text(good + "\n" + bad + "\n")
    recipe = _recipe(tmp_path, [SERVER], tasks=str(tasks), hidden_tools=["reset", "gone"], n_eval=1)
    monkeypatch.chdir(ROOT)
    plan = plan_recipe(recipe)
    with pytest.raises(Exception) as info:
        check_machine(plan)
    text = str(info.value)
    assert "names tool 'nope' 1 time(s) (first: task 'b', turn 0, check)" in text, text
    assert "settings.mcp.hidden_tools names tool 'gone'" in text, text
    build = next(f for f in check_environment("mcp", recipe=recipe) if f.check == "build")
    assert build.failed and "'nope'" in build.message and "KeyError" not in build.message


def test_config_validate_reads_every_line_of_the_task_file(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seal_platform.cli import cli

    monkeypatch.chdir(tmp_path)
    missing = CliRunner().invoke(cli, ["config", "validate", str(_recipe(tmp_path, [SERVER], tasks="nowhere.jsonl"))])
    assert missing.exit_code == 1 and "settings.mcp.tasks" in missing.output and "nowhere.jsonl" in missing.output
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "turns": [{"user": "x"}]}\n{"id": "b", "turns": [{"user": "y", "check": [{"arguments": {}}]}]}\n'
    )
    bad = CliRunner().invoke(cli, ["config", "validate", str(_recipe(tmp_path, [SERVER], tasks=str(tasks)))])
    assert bad.exit_code == 1 and "tasks.jsonl:2: not a valid task" in " ".join(bad.output.split()), bad.output
