"""Secrets in recipes (issue 52, item 2): given through the environment (``${NAME}``), and redacted wherever a
config is shown or written: config.json (mode 0600), the store, ``config show``, ``show --json``, the HTML
report, error messages, resume hints."""

from __future__ import annotations

import json
import stat

import pytest
import yaml
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.recipe_secrets import REDACTED, redact_config, scrub, shown_store_url
from seal_platform.store import RunStore
from tests.core.test_plugin_contracts import _install

# A plugin whose settings carry secrets three ways: marked by its model (SecretStr, json_schema_extra=SECRET),
# and by name (headers, api_token). start_run records what it was given (to see that ${NAME} reached it) and,
# asked to, fails with its token in the message.
VAULT = '''
import json
from pathlib import Path

from pydantic import BaseModel, Field, SecretStr

from seal_platform import hookimpl
from seal_platform.recipe_secrets import SECRET


class Server(BaseModel):
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)


class VaultSettings(BaseModel):
    dsn: str = Field(default="", json_schema_extra=SECRET)
    password: SecretStr = SecretStr("")
    api_token: str = ""
    servers: list[Server] = Field(default_factory=list)
    note: str = ""
    seen: str = ""
    fail: bool = False


@hookimpl
def register_settings():
    return {"vault": VaultSettings}


@hookimpl
def start_run(ctx, resumed):
    s = ctx.settings_for("vault", VaultSettings)
    if s.seen:
        Path(s.seen).write_text(json.dumps({"dsn": s.dsn, "token": s.api_token, "note": s.note,
                                            "auth": [x.headers.get("Authorization") for x in s.servers]}))
    if s.fail:
        raise RuntimeError(f"the server refused the token {s.api_token}")
'''


TOKEN = "tok-3f9a7c1e5b"
LITERAL = "lit-9c8b7a6f5e"


def _vault_recipe(toy_recipe, tmp_path, vault):
    data = yaml.safe_load(toy_recipe.read_text())
    data["plugins"]["allow"] = ["toy", "vault"]
    data["training"]["steps"] = 1
    data["settings"]["vault"] = vault
    path = tmp_path / "vault.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _everything_written(tmp_path):
    """Every byte under the run folders and the store."""
    return b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())


def test_secrets_from_the_environment_reach_the_plugin_and_nothing_shown_or_written_holds_them(
        toy_site, toy_recipe, tmp_path, monkeypatch):
    _install(toy_site, "vault", VAULT, monkeypatch)
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    seen = tmp_path / "seen.json"
    recipe = _vault_recipe(toy_recipe, tmp_path, {
        "api_token": "${VAULT_TOKEN}", "dsn": f"postgresql://seal:{LITERAL}@db/x", "password": LITERAL,
        "servers": [{"url": "http://h", "headers": {"Authorization": "Bearer ${VAULT_TOKEN}", "X-Key": LITERAL}}],
        "note": "cost $${HOME}", "seen": str(seen)})
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(recipe), "--quiet"])
    assert result.exit_code == 0, result.output
    given = json.loads(seen.read_text())
    assert given == {"dsn": f"postgresql://seal:{LITERAL}@db/x", "token": TOKEN, "note": "cost ${HOME}",
                     "auth": [f"Bearer {TOKEN}"]}
    store = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}")
    [run] = store.list_runs()
    vault = run.config["settings"]["vault"]
    assert vault["api_token"] == "${VAULT_TOKEN}"  # the reference, kept
    assert vault["servers"][0]["headers"] == {"Authorization": "Bearer ${VAULT_TOKEN}", "X-Key": REDACTED}
    assert vault["password"] == REDACTED and vault["dsn"] == REDACTED
    config_json = tmp_path / "runs" / run.id / "config.json"
    assert stat.S_IMODE(config_json.stat().st_mode) == 0o600
    assert json.loads(config_json.read_text()) == run.config
    written = _everything_written(tmp_path)
    assert TOKEN.encode() not in written and LITERAL.encode() not in written  # store, config.json, report, log
    assert (tmp_path / "runs" / run.id / "report.html").is_file()
    for cmd in (["show", run.id, "--json"], ["show", run.id], ["config", "show", str(recipe)]):
        shown = runner.invoke(cli, [*cmd, "--store", str(tmp_path / "runs" / "store.sqlite")]
                              if cmd[0] == "show" else cmd)
        assert shown.exit_code == 0, shown.output
        assert TOKEN not in shown.output and LITERAL not in shown.output, (cmd, shown.output)
    assert REDACTED in runner.invoke(cli, ["config", "show", str(recipe)]).output


def test_a_secret_in_an_error_is_not_shown_nor_stored_and_a_resume_asks_for_written_out_secrets(
        toy_site, toy_recipe, tmp_path, monkeypatch):
    _install(toy_site, "vault", VAULT, monkeypatch)
    monkeypatch.setenv("VAULT_TOKEN", TOKEN)
    recipe = _vault_recipe(toy_recipe, tmp_path, {"api_token": "${VAULT_TOKEN}", "fail": True,
                                                  "servers": [{"headers": {"Authorization": LITERAL}}]})
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(recipe), "--quiet"])
    assert result.exit_code == 2 and "the server refused the token" in result.output, result.output
    assert TOKEN not in result.output and "Traceback" not in result.output
    assert TOKEN.encode() not in _everything_written(tmp_path)  # the crash event and its traceback too
    [run] = RunStore(f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}").list_runs()
    store = str(tmp_path / "runs" / "store.sqlite")
    # The header written out in the recipe was not stored: the resume says which and how to give it.
    resumed = runner.invoke(cli, ["run", "--resume", run.id, "--store", store, "--quiet"])
    said = " ".join(resumed.output.split())
    assert resumed.exit_code == 2 and "settings.vault.servers.0.headers.Authorization" in said, said
    assert "${VARIABLE}" in said
    monkeypatch.setenv("VAULT_AUTH", "Bearer abc")
    again = runner.invoke(cli, ["run", "--resume", run.id, "--store", store, "--quiet", "settings.vault.fail=false",
                                "settings.vault.servers.0.headers.Authorization=${VAULT_AUTH}"])
    # fail is no setting a resume may change: refused by name, the secret path is accepted
    assert "settings.vault.fail=false" in again.output and "secrets the store holds redacted" in again.output
    again = runner.invoke(cli, ["run", "--resume", run.id, "--store", store, "--quiet",
                                "settings.vault.servers.0.headers.Authorization=${VAULT_AUTH}"])
    assert "not stored" not in again.output and "the server refused the token" in again.output, again.output


def test_a_missing_variable_is_one_problem_naming_the_setting_and_the_variable(toy_site, toy_recipe, tmp_path,
                                                                              monkeypatch):
    _install(toy_site, "vault", VAULT, monkeypatch)
    monkeypatch.delenv("NO_SUCH_VAR_H7", raising=False)
    recipe = _vault_recipe(
        toy_recipe, tmp_path, {"servers": [{"headers": {"Authorization": "Bearer ${NO_SUCH_VAR_H7}"}}]}
    )
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe)])
    assert result.exit_code == 1
    assert "settings.vault.servers.0.headers.Authorization" in result.output and "NO_SUCH_VAR_H7" in result.output
    assert "Traceback" not in result.output


def test_a_database_url_password_is_hidden_in_hints_errors_and_stored_configs(monkeypatch):
    url = f"postgresql+psycopg://seal:{LITERAL}@db.example:5432/runs"
    assert shown_store_url(url) == "postgresql+psycopg://seal:***@db.example:5432/runs"
    from seal_platform.resume import resume_command

    assert LITERAL not in resume_command("r1", url) and "seal:***@db.example" in resume_command("r1", url)
    assert LITERAL not in scrub(f"could not connect to {url}: refused")
    assert redact_config({"store": url, "settings": {}})["store"] == "postgresql+psycopg://seal:***@db.example:5432/runs"
    # ${NAME} in store: read from the environment when the store is opened, kept as written in the config
    from seal_platform.config import RunConfig

    monkeypatch.setenv("PG_PASS_H7", "pw-from-env")
    config = RunConfig(environment="toy", store="postgresql://seal:${PG_PASS_H7}@db/runs")
    assert config.store_url() == "postgresql://seal:pw-from-env@db/runs"
    assert redact_config(config.model_dump(mode="json"))["store"] == "postgresql://seal:${PG_PASS_H7}@db/runs"


def test_a_store_that_cannot_be_reached_does_not_echo_its_password():
    result = CliRunner().invoke(cli, ["show", "r1", "--store", f"postgresql://seal:{LITERAL}@127.0.0.1:1/x"])
    assert result.exit_code == 2, result.output
    assert LITERAL not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_non_finite_float_settings_are_refused_core_and_plugin(toy_site, toy_recipe, value):
    for key in ("rollout.temperature", "settings.toy.skill_step"):
        result = CliRunner().invoke(cli, ["config", "validate", str(toy_recipe), f"{key}={value}"])
        assert result.exit_code == 1 and key in result.output, result.output
        assert "finite" in result.output or "greater than" in result.output, result.output
