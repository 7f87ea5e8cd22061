"""Two runs' transcripts of the same tasks side by side (`seal-platform transcripts RUN_A --against RUN_B`),
read back from short toy runs: one that always answers wrong, one that always answers right."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from seal_platform.cli import cli
from seal_platform.store import RunStore


@pytest.fixture
def two_runs(toy_recipe, toy_site, tmp_path):
    runner = CliRunner()
    ids = []
    for name, skill in (("wrong", 0.0), ("right", 1.0)):
        result = runner.invoke(cli, ["run", str(toy_recipe), "training.steps=2", f"name={name}", "--quiet",
                                     f"settings.toy.start_skill={skill}", "settings.toy.skill_step=0"])
        assert result.exit_code == 0, result.output
        ids.append(result.output.split("run ", 1)[1].split()[0])
    return ids, f"sqlite:///{tmp_path / 'runs' / 'store.sqlite'}"


def test_evaluations_side_by_side_pair_the_same_tasks_with_outcomes_and_differences(two_runs, tmp_path):
    (wrong, right), store_url = two_runs
    runner = CliRunner()
    out = runner.invoke(cli, ["transcripts", "wrong", "--against", right[-6:], "--eval", "--json", "--limit", "50",
                              "--store", store_url])
    assert out.exit_code == 0, out.output
    pairs = json.loads(out.output)
    store = RunStore(store_url)
    try:
        last = max(e.step for e in store.evaluations(wrong))
        tasks = {t.task_id: t for t in store.trajectories(wrong, step=last, phase="eval")}
        theirs = {t.task_id: t for t in store.trajectories(right, step=last, phase="eval")}
    finally:
        store.close()
    # Every task both evaluated, once, each side that run's last evaluation as the store holds it.
    assert sorted(p["task_id"] for p in pairs) == sorted(set(tasks) & set(theirs)) and len(pairs) == 6
    for pair in pairs:
        a, b = pair["a"], pair["b"]
        assert (a["run_id"], b["run_id"], a["step"], b["step"], a["phase"]) == (wrong, right, last, last, "eval")
        assert (
            a["reward"] == tasks[pair["task_id"]].reward == 0.0 and b["reward"] == theirs[pair["task_id"]].reward == 1.0
        )
        assert a["turns"][0]["messages"][-1]["content"] == tasks[pair["task_id"]].messages[-1].content
        assert pair["outcome_differs"] is True and pair["differing_turns"] == [0]
    # The same as a page: both transcripts of each task in one row per turn, the differing turn shaded.
    page = tmp_path / "pairs.html"
    assert (
        runner.invoke(
            cli,
            [
                "transcripts",
                wrong,
                "--against",
                right,
                "--eval",
                "--json",
                "--limit",
                "50",
                "--html",
                str(page),
                "--store",
                store_url,
            ],
        ).exit_code
        == 0
    )
    text = page.read_text()
    assert text.count('<table class="pair">') == 6 and text.count('<tr class="differs">') == 6
    one = text.split("<h2>task eval-1 (small) (outcomes differ)</h2>", 1)[1].split("</table>", 1)[0]
    assert f"<pre>{tasks['eval-1'].messages[-1].content}</pre>" in one and "reward 0 (failed)" in one
    assert f"<pre>{theirs['eval-1'].messages[-1].content}</pre>" in one and "reward 1 (passed)" in one
    # The plain view (not a terminal): both sides of each turn, their outcomes, the differing turn marked.
    plain = runner.invoke(cli, ["transcripts", wrong, "--against", right, "--eval", "--task", "eval-1",
                                "--store", store_url]).output
    assert plain.startswith("=== task eval-1 (small)  [outcomes differ]")
    assert "A: A wrong" in plain and "reward 0 (failed)" in plain and "failed turns: 0" in plain
    assert "B: B right" in plain and "reward 1 (passed)" in plain and "failed turns: none" in plain
    assert "--- turn 0 (differs)" in plain and "A | turn 0 FAILED" in plain and "B | turn 0 passed" in plain
    assert f"A |   assistant, 1 sampled tokens: {tasks['eval-1'].messages[-1].content}" in plain
    assert f"B |   assistant, 1 sampled tokens: {theirs['eval-1'].messages[-1].content}" in plain


def test_one_run_before_and_after_training_and_training_rollouts_with_labels(two_runs):
    (wrong, right), store_url = two_runs
    runner = CliRunner()
    # Before (step 0) and after (step 2) of one run that never learns: same answers, nothing differs.
    same = json.loads(runner.invoke(cli, ["transcripts", wrong, "--against", wrong, "--eval", "--step", "0",
                                          "--against-step", "2", "--json", "--store", store_url]).output)
    assert same and all(p["a"]["step"] == 0 and p["b"]["step"] == 2 for p in same)
    assert all(not p["outcome_differs"] and p["differing_turns"] == [] for p in same)
    assert (
        json.loads(
            runner.invoke(
                cli,
                [
                    "transcripts",
                    wrong,
                    "--against",
                    wrong,
                    "--eval",
                    "--step",
                    "0",
                    "--against-step",
                    "2",
                    "--differ",
                    "--json",
                    "--store",
                    store_url,
                ],
            ).output
        )
        == []
    )
    plain = runner.invoke(cli, ["transcripts", wrong, "--against", wrong, "--eval", "--step", "0", "--against-step",
                                "2", "--limit", "1", "--plain", "--store", store_url]).output
    assert "--- turn 0 (same)" in plain
    # The README's form, without --against-step: a run against itself goes up to its last evaluation (step 2).
    short = json.loads(runner.invoke(cli, ["transcripts", wrong, "--against", wrong, "--eval", "--step", "0", "--json",
                                           "--store", store_url]).output)
    assert short and all(p["a"]["step"] == 0 and p["b"]["step"] == 2 for p in short)
    # A run against itself at one step by default would pair every episode with itself: refused, saying what to
    # give (asked for in so many words, --step N --against-step N, it is shown).
    for args in (["--eval", "--step", "2"], ["--eval"], ["--step", "1"]):
        itself = runner.invoke(cli, ["transcripts", wrong, "--against", wrong, *args, "--store", store_url])
        assert itself.exit_code == 2 and "against itself" in itself.output and "--against-step" in itself.output
    # Training rollouts (same seed: same tasks at each step) pair by step, task and sample, with labels.
    train = json.loads(runner.invoke(cli, ["transcripts", wrong, "--against", right, "--step", "1", "--json",
                                           "--limit", "100", "--store", store_url]).output)
    assert len(train) == 4 * 2  # tasks_per_step x group_size
    assert all((p["a"]["sample"], p["a"]["task_id"]) == (p["b"]["sample"], p["b"]["task_id"]) for p in train)
    assert all(lab["label"] == "wrong_sum" for p in train for lab in p["a"]["turns"][0]["labels"])
    shown = runner.invoke(cli, ["transcripts", wrong, "--against", right, "--step", "1", "--limit", "1", "--plain",
                                "--store", store_url]).output
    assert "labels: wrong_sum@0" in shown and "label [toy] wrong_sum" in shown
    # Misuse is one clear message.
    bad = runner.invoke(cli, ["transcripts", wrong, "--differ", "--store", store_url])
    assert bad.exit_code == 2 and "--against-step, --differ and --html go with --against RUN_B" in bad.output


def test_a_filter_that_matches_nothing_says_what_the_run_has(two_runs):
    (wrong, _), store = two_runs
    labels = sorted({row.label for row in RunStore(store).labels(wrong)})
    assert labels
    typo = labels[0][:-1]
    runner = CliRunner()
    result = runner.invoke(cli, ["transcripts", wrong, "--store", store, "--label", typo])
    text = " ".join(result.output.split())
    assert result.exit_code == 0 and "no episode matches" in text, text
    assert f"did you mean {labels[0]!r}?" in text and "has training episodes at step(s) 0, 1" in text, text
    result = runner.invoke(cli, ["transcripts", wrong, "--store", store, "--eval", "--step", "1"])
    text = " ".join(result.output.split())
    assert "evaluation episodes at step(s) 0, 2" in text and "not at step 1" in text, text
