"""The openenv plugin's machine check probes the running server a recipe names (settings.openenv.url) before a
run starts, against real local servers: nothing listening there, a server that never answers, one that answers
too slowly or trickles its answer, a server that does not describe its action as the protocol says, and the
example thermostat server (no problem). Each request waits settings.openenv.probe_timeout_s at most (a host name
that does not resolve in that time included), and the check never raises; a run stops with nothing in the store.
A local server (settings.openenv.server) is not probed, but its command must be one this machine can start."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    assert problem.startswith(f"settings.openenv.url: the OpenEnv server at {url} could not be reached for health "), (
        problem
    )
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


def _refused_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, openenv: dict) -> str:
    """`seal-platform run` of the example recipe with ``openenv`` as its settings.openenv: refused by the machine
    check (exit 2, "nothing was started"), no run stored and no run folder made; its output on one line."""
    from click.testing import CliRunner

    from seal_platform.cli import cli
    from seal_platform.store import RunStore

    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(yaml.safe_dump({"extends": "openenv-example", "name": name, "runs_dir": str(tmp_path / "runs"),
                                      "settings": {"openenv": openenv}}))
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(cli, ["run", str(recipe), "--store", str(store), "--quiet"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, text
    assert "nothing was started" in text, text
    assert not store.exists() or RunStore(f"sqlite:///{store}").list_runs() == []
    assert not Path(tmp_path / "runs").exists() or not any(Path(tmp_path / "runs").iterdir())
    return text


def test_a_run_naming_an_unreachable_server_stops_before_anything_is_stored(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    text = _refused_run(tmp_path, monkeypatch, "down", {"server": None, "url": url})
    assert f"settings.openenv.url: the OpenEnv server at {url} could not be reached for health" in text, text


def _machine(**settings) -> list[str]:
    return check_machine(RunConfig(environment="openenv"), {"openenv": OpenEnvSettings.model_validate(settings)}, None)


def test_a_local_server_command_this_machine_does_not_have_is_reported(tmp_path):
    said = _machine(server={"command": "no-such-openenv-server-7c1e", "args": ["--port", "{port}"]})
    assert said == ["settings.openenv.server: its command 'no-such-openenv-server-7c1e' is not found on this "
                    "machine's PATH, so the server cannot start: install it, or give its absolute path in command "
                    f"('python' means this interpreter, {sys.executable})."]
    assert _machine(server={"command": "sh", "env": {"PATH": str(tmp_path)}})[0].startswith(
        "settings.openenv.server: its command 'sh' is not found on the PATH the server's env sets, ")
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")
    assert _machine(server={"command": str(script)}) == [
        f"settings.openenv.server: its command {str(script)!r} is not an executable file ({str(script)!r} is not "
        "executable), so the server cannot start: name the program to run (or make the file executable: chmod +x)."]
    script.chmod(0o755)
    assert _machine(server={"command": "./server.sh", "cwd": str(tmp_path)}) == []  # relative to its cwd
    assert _machine(server={"command": "sh"}) == [] and _machine(server={"command": sys.executable}) == []
    gone = str(tmp_path / "gone")
    (said,) = _machine(server={"command": "python", "cwd": gone})
    assert said.startswith(f"settings.openenv.server: its cwd {gone!r} is not a directory on this machine "), said
    # another environment's run does not start it, so does not check it
    missing = OpenEnvSettings(server={"command": "no-such-openenv-server-7c1e"})
    assert check_machine(RunConfig(environment="smarthome"), {"openenv": missing}, None) == []


def test_a_run_naming_a_missing_local_server_command_stops_before_anything_is_stored(tmp_path, monkeypatch):
    text = _refused_run(tmp_path, monkeypatch, "missing-server", {"server": {"command": "no-such-openenv-server-7c1e"}})
    assert ("settings.openenv.server: its command 'no-such-openenv-server-7c1e' is not found on this machine's "
            "PATH, so the server cannot start") in text, text


@pytest.fixture
def released() -> Iterator[threading.Event]:
    """Set when the test ends: whatever the test left waiting (a server's handler, a resolver) stops waiting."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def http_server(released) -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], str]]:
    """``http_server(answer)``: the URL of a real HTTP server on 127.0.0.1, in a thread, whose every GET is
    ``answer(handler)``; stopped when the test ends."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with contextlib.suppress(OSError):  # the probe gave up and closed the connection
                    answer(self)

            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    released.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def _send(handler: BaseHTTPRequestHandler, body: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _slow_health(released: threading.Event, seconds: float) -> Callable[[BaseHTTPRequestHandler], None]:
    """An OpenEnv server whose GET /health takes ``seconds`` (its /schema answers at once)."""
    def answer(handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/health":
            released.wait(seconds)
            _send(handler, b'{"status": "healthy"}')
        else:
            _send(handler, b'{"action": {"type": "object", "properties": {"move": {"type": "string"}}}}')
    return answer


def test_a_server_slower_than_the_probe_is_refused_with_the_setting_that_lets_it_through(http_server, released):
    # Health takes 1 s: a probe of 0.5 s refuses it, one of 5 s lets it through (the default, 2 s, is only a
    # number here: seconds shorter, the same three cases).
    url = http_server(_slow_health(released, 1.0))
    start = time.monotonic()
    (problem,) = _problems(url=url, probe_timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + 1
    assert problem.startswith(f"settings.openenv.url: the OpenEnv server at {url} did not answer health within 0.5 s, "
                              "so a run cannot use it: if it is up but slow to answer, raise "
                              "settings.openenv.probe_timeout_s (now 0.5 s); else start the server "), problem
    assert _problems(url=url, probe_timeout_s=5) == []
    # the run's own timeout_s limits the probe too (a run would not wait longer): that is the one to raise then
    (problem,) = _problems(url=url, probe_timeout_s=5, timeout_s=0.5)
    assert "did not answer health within 0.5 s" in problem, problem
    assert "raise settings.openenv.timeout_s (now 0.5 s; the check waits no longer than a run would)" in problem, (
        problem
    )


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan"), "soon"])
def test_the_probe_timeout_is_a_positive_number_of_seconds(value):
    from pydantic import ValidationError

    assert OpenEnvSettings().probe_timeout_s == PROBE_TIMEOUT_S == 2
    with pytest.raises(ValidationError, match="probe_timeout_s"):
        OpenEnvSettings(url="http://127.0.0.1:1", probe_timeout_s=value)


def test_a_server_that_trickles_its_answer_is_cut_off_at_the_probe_timeout(http_server, released):
    """Each read of the answer comes within the request's timeout (a quarter of it), but the whole answer takes
    three times that timeout."""
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "12")
        handler.end_headers()
        for _ in range(12):
            if released.wait(0.25):
                return
            handler.wfile.write(b" ")
            handler.wfile.flush()

    url = http_server(answer)
    start = time.monotonic()
    (problem,) = _problems(url=url, probe_timeout_s=1)
    took = time.monotonic() - start
    assert took < 1 + 1, took
    assert problem.startswith(f"settings.openenv.url: the OpenEnv server at {url} did not answer health within 1 s, "
                              "so a run cannot use it: if it is up but slow to answer, raise "
                              "settings.openenv.probe_timeout_s (now 1 s); "), problem


def test_a_host_whose_name_does_not_resolve_in_time_is_reported_within_the_probe_timeout(monkeypatch, released):
    """A resolver that does not answer (no HTTP timeout covers getaddrinfo): the check still ends in time."""
    real = socket.getaddrinfo

    def hung(host, *args, **kwargs):
        if host == "openenv.invalid":
            released.wait(10)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", hung)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    url = "http://openenv.invalid:8000"
    start = time.monotonic()
    said = check_machine(RunConfig(environment="openenv"), {"openenv": OpenEnvSettings(url=url, probe_timeout_s=1)},
                         None)
    took = time.monotonic() - start
    assert took < 1 + 1, took
    assert said == [f"settings.openenv.url: the host name 'openenv.invalid' of {url} did not resolve within 1 s "
                    "(this machine's name resolver did not answer), so a run cannot use it: check the host name and "
                    "this machine's DNS (or give the server's IP address in the URL); if the resolver is only slow, "
                    "raise settings.openenv.probe_timeout_s (now 1 s); see docs/openenv.md."]


def test_a_local_server_is_started_where_the_check_looked_a_home_relative_cwd_included(tmp_path, monkeypatch):
    """check_machine reads `~` in the server's cwd (and in a command that is a path) as the home folder; the run
    starts the process there too, not in a folder named `~` (subprocess alone would look for one)."""
    from seal_platform_plugins.openenv.client import LocalServer, OpenEnvUnavailable
    from seal_platform_plugins.openenv.settings import OpenEnvServerSettings

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "srv").mkdir()
    script = tmp_path / "bin" / "server"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\npwd > started_in\n")
    script.chmod(0o755)
    asked = {"command": "~/bin/server", "cwd": "~/srv", "startup_timeout_s": 5}
    assert _machine(server=asked) == []
    server = LocalServer(OpenEnvServerSettings(**asked))
    with pytest.raises(OpenEnvUnavailable, match="exited with status 0 before answering GET /health"):
        server.start()  # it writes where it runs and exits: not an OpenEnv server, but it started
    assert (tmp_path / "srv" / "started_in").read_text().strip() == str(tmp_path / "srv")
