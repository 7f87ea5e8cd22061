"""User-facing input errors: one paragraph naming the file and the fix, never a traceback; `config validate`
reports every problem at once."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from seal_platform.cli import cli


def test_config_validate_reports_top_level_and_plugin_settings_together(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"environment": "bfcl", "rollout": {"engine": "hf"}, "bogus_top": 1,
                                      "settings": {"grpo": {"lr": "fast", "bogus": 2}}}))
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe)])
    assert result.exit_code == 1, result.output
    out = result.output
    assert "bogus_top: unknown key" in out
    assert "settings.grpo.lr:" in out and "'fast'" in out
    assert "settings.grpo.bogus: unknown key" in out
    assert "3 problem(s)" in out and "Traceback" not in out


def test_a_recipe_that_is_not_utf8(tmp_path):
    recipe = tmp_path / "latin1.yaml"
    recipe.write_bytes("name: café\nenvironment: bfcl\n".encode("latin-1"))
    for args in (["config", "validate", str(recipe)], ["run", str(recipe)], ["config", "show", str(recipe)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert "latin1.yaml: not UTF-8" in result.output and "save the recipe as UTF-8" in result.output
        assert "Traceback" not in result.output


def test_a_recipe_that_is_not_yaml_or_has_wrong_types(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(broken)])
    assert result.exit_code == 2 and "broken.yaml:2:1" in result.output and "not valid YAML" in result.output
    typed = tmp_path / "typed.yaml"
    typed.write_text("environment: bfcl\ntraining: 3\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(typed)])
    assert result.exit_code == 1 and "training:" in result.output and "Traceback" not in result.output


def test_verify_input_with_bad_lines_scores_the_rest(tmp_path):
    transcripts = tmp_path / "t.jsonl"
    transcripts.write_bytes(b"\n".join([
        b'{"task_id": "multi_turn_base_0", "turns": [["cd(folder=\'\xff\')"]]}',  # not UTF-8
        b"[" * 3000 + b"]" * 3000,  # nested too deeply
        b"not json",
        b'{"task_id": "multi_turn_base_0", "turns": []}',
        b'{"task_id": "multi_turn_base_0", "turns": ' + b"9" * 5000 + b"}",  # more digits than Python converts
    ]) + b"\n")
    result = CliRunner().invoke(cli, ["verify", "--benchmark", "bfcl", str(transcripts)])
    assert result.exit_code == 1, result.output  # some lines could not be scored: all are written all the same
    import json

    records = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(records) == 5
    assert "line 5: not valid JSON" in records[4]["error"] and "sys." not in records[4]["error"]
    assert "line 1: not UTF-8" in records[0]["error"]
    assert records[1]["error"].startswith("line 2:") and records[2]["error"].startswith("line 3:")
    assert records[3]["task_id"] == "multi_turn_base_0" and records[3]["success"] is False


def test_validate_and_run_suggest_keys_and_blame_overrides_not_the_file(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("environment: bfcl\ntraining:\n  stpes: 2\nrollout:\n  engine: hf\n")
    result = CliRunner().invoke(cli, ["config", "validate", str(recipe), "trainng.steps=2", "settings.grpo.lrr=1"])
    assert result.exit_code == 1, result.output
    out = result.output
    assert f"{recipe} with its command-line overrides: 3 problem(s):" in out
    assert f"{recipe}:3: training.stpes: unknown key (did you mean 'training.steps'?)" in out
    assert "override 'trainng.steps=2': trainng: unknown key (did you mean 'training'?)" in out
    assert "override 'settings.grpo.lrr=1': settings.grpo.lrr: unknown key (did you mean 'settings.grpo.lr'?)" in out
    run = CliRunner().invoke(cli, ["run", str(recipe), "trainng.steps=2"])
    assert run.exit_code == 2 and "Traceback" not in run.output
    assert f"problem(s) in the recipe {recipe} and its command-line overrides" in " ".join(run.output.split())
    assert "override 'trainng.steps=2': trainng: unknown key (did you mean 'training'?)" in " ".join(run.output.split())


def test_config_show_refuses_what_a_run_would_refuse_and_eval_refuses_a_task_count_below_one():
    runner = CliRunner()
    # config show prints the resolved recipe; a recipe a run refuses has none (it printed it, exit 0).
    for override in ("settings.bfcl.categories=[nope]", "environment=nope"):
        result = runner.invoke(cli, ["config", "show", "seal-embedded", override])
        assert result.exit_code == 2 and "problem(s)" in result.output and "Traceback" not in result.output, override
    shown = runner.invoke(cli, ["config", "show", "seal-embedded"])
    assert shown.exit_code == 0 and yaml.safe_load(shown.output)["settings"]["bfcl"]["categories"]
    # eval --max-tasks 0 meant "all tasks" and -1 a pydantic traceback: both are refused by the option.
    for count in ("0", "-1"):
        result = runner.invoke(cli, ["eval", "any-run", "--max-tasks", count])
        assert result.exit_code == 2 and "--max-tasks" in result.output and "x>=1" in result.output


def test_an_in_memory_store_url_for_a_read_command_says_what_to_give():
    result = CliRunner().invoke(cli, ["runs", "--store", "sqlite://"])
    assert result.exit_code == 2 and "in-memory database holds no runs" in result.output
    assert "open it normally" not in result.output  # advice a read command cannot follow
