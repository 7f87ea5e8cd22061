"""smarthome declares its splits (train, eval): `seal-platform run` refuses an evaluation split it does not have
with the recipe's problems, before the run's row is written, the model is loaded or anything is stored."""

from __future__ import annotations

from click.testing import CliRunner

from seal_platform.cli import cli


def test_run_refuses_a_split_smarthome_lacks_before_any_row_is_written(tmp_path):
    store = tmp_path / "store.sqlite"
    runner = CliRunner()
    result = runner.invoke(cli, ["run", "smarthome-embedded", "evaluation.split=bogus", f"runs_dir={tmp_path / 'runs'}",
                                 "--store", str(store), "--quiet"])
    assert result.exit_code == 2, result.output
    assert ("evaluation.split: environment 'smarthome' has no split 'bogus'; its splits: eval, train (set "
            "evaluation.split to one of them)") in " ".join(result.output.split()), result.output
    assert not store.exists() and not (tmp_path / "runs").exists()
    listed = runner.invoke(cli, ["runs", "--store", str(store)])
    assert listed.exit_code != 0 and "no run store" in listed.output, listed.output
