"""The openenv plugin's machine check probes the running server a recipe names (settings.openenv.url) before a
run starts, against real local servers: nothing listening there, a server that never answers, a server that does
not describe its action as the protocol says, and the example thermostat server (no problem). Each request waits
a few seconds at most, and the check never raises; a run stops with nothing in the store."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from seal_platform.config import RunConfig
from seal_platform_plugins.openenv.client import free_port
from seal_platform_plugins.openenv.plugin import check_machine
from seal_platform_plugins.openenv.probe import PROBE_TIMEOUT_S, url_problems
from seal_platform_plugins.openenv.settings import OpenEnvSettings


def _problems(**settings) -> list[str]:
    return url_problems(OpenEnvSettings.model_validate(settings))


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) but never answers: a hung server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_url_nothing_listens_on_is_one_paragraph_naming_it():
    url = f"http://127.0.0.1:{free_port()}"
    (problem,) = _problems(url=url)
    assert problem.startswith(f"settings.openenv.url: the OpenEnv server at {url} could not be reached for health "), problem
    assert "start the server" in problem and "settings.openenv.server" in problem and "\n" not in problem


def test_a_server_that_never_answers_is_reported_within_the_probe_timeout(silent_url):
    start = time.monotonic()
    (problem,) = _problems(url=silent_url, timeout_s=30)  # the run's own timeout is not the probe's
    took = time.monotonic() - start
    assert took < PROBE_TIMEOUT_S + 2, took
    assert f"the OpenEnv server at {silent_url} did not answer health within {PROBE_TIMEOUT_S:g} s" in problem, problem


def test_a_server_that_does_not_describe_its_action_as_the_protocol_says_is_reported(bad_server):
    url = bad_server("badschema")
    (problem,) = _problems(url=url)
    assert problem.startswith(f"settings.openenv.url: The action schema from GET {url}/schema is malformed "), problem
    # with the action schema in the recipe, the server's /schema is not needed
    assert _problems(url=url, action_schema={"type": "object", "properties": {"move": {"type": "string"}}}) == []


def test_a_url_that_cannot_be_used_at_all_is_a_problem_not_an_exception():
    (problem,) = _problems(url="http://bad host:80")
    assert problem.startswith("settings.openenv.url: "), problem


def test_the_example_server_passes_and_a_local_server_or_another_environment_is_not_probed(thermostat_url):
    assert _problems(url=thermostat_url) == []
    assert _problems(url=thermostat_url + "/") == []
    unreachable = OpenEnvSettings(url=f"http://127.0.0.1:{free_port()}")
    assert check_machine(RunConfig(environment="smarthome"), {"openenv": unreachable}, None) == []
    assert len(check_machine(RunConfig(environment="openenv"), {"openenv": unreachable}, None)) == 1
    local = OpenEnvSettings(server={"command": "python", "args": ["-c", "pass"]})
    assert check_machine(RunConfig(environment="openenv"), {"openenv": local}, None) == []


def test_a_run_naming_an_unreachable_server_stops_before_anything_is_stored(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    url = f"http://127.0.0.1:{free_port()}"
    recipe = tmp_path / "down.yaml"
    recipe.write_text(yaml.safe_dump({"extends": "openenv-example", "name": "down", "runs_dir": str(tmp_path / "runs"),
                                      "settings": {"openenv": {"server": None, "url": url}}}))
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(cli, ["run", str(recipe), "--store", str(store), "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert "nothing was started" in text, text
    assert f"settings.openenv.url: the OpenEnv server at {url} could not be reached for health" in text, text
    assert not store.exists() or RunStore(f"sqlite:///{store}").list_runs() == []
    assert not Path(tmp_path / "runs").exists() or not any(Path(tmp_path / "runs").iterdir())
