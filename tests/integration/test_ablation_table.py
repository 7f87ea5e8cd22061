"""benchmarks/ablation.py's table: mean over seeds of the final held-out pass rate with t intervals,
the paired difference to vanilla GRPO and the gain over the base model; the learning-curve plot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("ablation_bench", ROOT / "benchmarks" / "ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(recipe, seed, final, wall, before=None):
    evals = {"3": {"average": final, "per_category": {"direct": final + 5, "paraphrase": final - 5}, "n_tasks": 8}}
    if before is not None:
        evals["0"] = {"average": before, "per_category": {"direct": before}, "n_tasks": 8}
    return {"recipe": recipe, "seed": seed, "evaluations": evals, "wall_s": wall}


def test_t_interval_sign_flip_p_and_minimum_detectable_effect():
    ablation = _module()
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    low, high = ablation.t_interval(values)  # mean 30, sd 15.81, t(0.975, 4) = 2.776: half-width 19.63
    assert round(low, 2) == 10.37 and round(high, 2) == 49.63
    assert ablation.t_interval([7.0]) == (7.0, 7.0) and ablation.t_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)
    # 5 seeds all positive: only the all-positive and all-negative flips are as extreme, p = 2/32.
    assert ablation.sign_flip_p([1.0, 2.0, 3.0, 4.0, 5.0]) == 2 / 32
    assert ablation.sign_flip_p([1.0, -1.0]) == 1.0
    # The issue's own case: SEAL - vanilla on 5 seeds with mixed signs is not significant at 0.05.
    assert ablation.sign_flip_p([-2.0, -9.0, -12.0, 1.0, -9.5]) > 0.05
    mde = ablation.min_detectable_effect([1.0, 2.0, 3.0, 4.0, 5.0])  # (2.776 + 0.941) x 1.581 / sqrt(5)
    assert round(mde, 2) == 2.63


def test_table_reports_intervals_paired_differences_and_gains(tmp_path):
    ablation = _module()
    rows = [_row("smarthome-seal", 0, 20.0, 100, before=1.0), _row("smarthome-seal", 1, 30.0, 120),
            _row("smarthome-seal", 2, 40.0, 140), _row("smarthome-vanilla-grpo", 0, 10.0, 90),
            _row("smarthome-vanilla-grpo", 1, 30.0, 90),
            {**_row("smarthome-seal", 0, 12.5, 60), "recipe": ablation.BASE, "seed": None}]
    rows[-1]["evaluations"] = {"0": {"average": 12.5, "per_category": {"direct": 12.5}, "n_tasks": 8}}
    lines = ablation.table(rows, ["smarthome-vanilla-grpo", "smarthome-seal"]).splitlines()
    assert lines[2].startswith("| base model | - | 12.5 [12.5, 12.5] |")
    vanilla = lines[3]
    low, high = ablation.t_interval([10.0, 30.0])
    assert vanilla.startswith(f"| vanilla GRPO | 0,1 | 20.0 [{low:.1f}, {high:.1f}] | 10.0 / 30.0 | - |")
    glow, ghigh = ablation.t_interval([-2.5, 17.5])  # gains 10 - 12.5 and 30 - 12.5
    assert f"| +7.5 [{glow:+.1f}, {ghigh:+.1f}] |" in vanilla
    seal = lines[4]
    low, high = ablation.t_interval([20.0, 30.0, 40.0])
    assert seal.startswith(
        f"| SEAL | 0,1,2 | 30.0 [{low:.1f}, {high:.1f}] | 20.0 / 30.0 / 40.0 |"
    )  # the last evaluation counts
    # Paired with vanilla on the seeds both have (0 and 1): +10 and +0.
    plow, phigh = ablation.t_interval([10.0, 0.0])
    assert f"+5.0 [{plow:+.1f}, {phigh:+.1f}] p=1.000 (n=2)" in seal  # 2 seeds: p is never below 0.5
    assert "direct 35.0, paraphrase 25.0" in seal and "120 s (± 20)" in seal
    out = tmp_path / "curves.png"
    ablation.plot_curves(rows, ["smarthome-vanilla-grpo", "smarthome-seal"], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_category_table_pairs_each_category_with_vanilla_on_the_seeds_both_have():
    ablation = _module()
    rows = [_row("smarthome-vanilla-grpo", 0, 10.0, 1), _row("smarthome-vanilla-grpo", 1, 30.0, 1),
            _row("smarthome-seal", 0, 20.0, 1), _row("smarthome-seal", 1, 20.0, 1), _row("smarthome-seal", 2, 90.0, 1)]
    rows[2]["evaluations"]["3"]["per_category"] = {"direct": 40.0}  # a category missing from a row counts as 0
    lines = ablation.category_table(rows, ["smarthome-vanilla-grpo", "smarthome-seal"]).splitlines()
    assert lines[0] == "| recipe | direct | paraphrase |" and len(lines) == 3  # no row for vanilla itself
    # seed 2 has no vanilla run; direct: 40 - 15 and 25 - 35; paraphrase: 0 - 5 and 15 - 25
    low, high = ablation.t_interval([25.0, -10.0])
    plow, phigh = ablation.t_interval([-5.0, -10.0])
    assert lines[2] == (f"| SEAL (n=2) | +7.5 [{low:+.1f}, {high:+.1f}] p=1.000 | "
                        f"-7.5 [{plow:+.1f}, {phigh:+.1f}] p=0.500 |")


def test_controls_table_pairs_each_label_control_with_seal_by_seed():
    ablation = _module()
    rows = [_row("smarthome-seal", 0, 50.0, 1), _row("smarthome-seal", 1, 60.0, 1),
            _row("smarthome-random-labels", 0, 54.0, 1), _row("smarthome-random-labels", 1, 58.0, 1),
            _row("smarthome-random-labels", 2, 99.0, 1), _row("smarthome-fixed-label", 3, 70.0, 1)]
    recipes = ["smarthome-vanilla-grpo", "smarthome-seal", "smarthome-random-labels", "smarthome-fixed-label"]
    lines = ablation.controls_table(rows, recipes).splitlines()
    # seed 2 has no SEAL run and fixed label shares no seed with SEAL: one row, over seeds 0 and 1 (+4, -2)
    assert lines[0] == "| control - SEAL | average | direct | paraphrase |" and len(lines) == 3
    low, high = ablation.t_interval([4.0, -2.0])
    cell = f"+1.0 [{low:+.1f}, {high:+.1f}] p=1.000"
    assert lines[2] == f"| random labels (control) (n=2) | {cell} | {cell} | {cell} |"
    assert ablation.controls_table(rows[:2], recipes) == ""  # no control: no table


def test_a_claim_is_held_while_its_process_lives_and_taken_over_when_it_is_gone(tmp_path):
    import subprocess
    import sys

    ablation = _module()
    assert ablation._claim(tmp_path, "smarthome-seal", 0)
    assert not ablation._claim(tmp_path, "smarthome-seal", 0)  # held by this (living) process
    claim = tmp_path / "claims" / "smarthome-seal.0"
    host = claim.read_text().split(" ")[0]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claim.write_text(f"{host} {gone.stdout.strip()}")  # an invocation that was killed
    assert ablation._claim(tmp_path, "smarthome-seal", 0)
    assert claim.read_text().endswith(f" {__import__('os').getpid()}")
    claim.write_text(f"another-host {gone.stdout.strip()}")  # another machine's claim: not ours to judge
    assert not ablation._claim(tmp_path, "smarthome-seal", 0)


def test_evidence_table_reads_each_recipes_labels_weights_revisions_and_sampling_from_its_rows():
    spec = importlib.util.spec_from_file_location("ablation_evidence", ROOT / "benchmarks" / "ablation_evidence.py")
    evidence = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(evidence)
    revisions = [{"revision": 0, "changes": []},
                 {"revision": 1, "changes": ["named: +required_markers (invalid_tool_call n=12 ...)",
                                             "named: guidelines invalid_tool_call n=12", "direct: guidelines x"]}]
    seal = [
        {
            **_row("smarthome-seal", seed, 50.0, 10),
            "revisions": revisions,
            "labels": {"smarthome": {"pass": 3, "invalid_tool_call": 1}},
            "label_weights": {"pass": 1.0, "invalid_tool_call": w},
            "dynamic_sampling": {"drawn": d, "kept": 40, "uniform": 10},
            "train_rewards": [0.0] * 5 + [0.5] * 10 + [r] * 5,
        }
        for seed, w, d, r in ((0, 2.0, 100, 0.6), (1, 1.0, 120, 0.8))
    ]
    fixed = {**_row("smarthome-fixed-label", 0, 50.0, 10), "revisions": revisions[:1],
             "labels": {"fixed_label": {"state_mismatch": 8}, "smarthome": {"pass": 2, "argument_mismatch": 6}},
             "label_weights": {"state_mismatch": 1.5}}
    vanilla = {**_row("smarthome-vanilla-grpo", 0, 50.0, 10), "labels": {}, "label_weights": {}}
    lines = evidence.evidence_table([*seal, fixed, vanilla], ["smarthome-vanilla-grpo", "smarthome-seal",
                                                               "smarthome-fixed-label", "smarthome-no-reweighting"],
                                    lambda r: r.removeprefix("smarthome-")).splitlines()
    assert len(lines) == 5  # header, rule, three recipes with rows (no-reweighting has none)
    assert lines[2] == "| vanilla-grpo | 1 | none | none | none | 0.0: none | - | - |"
    assert lines[3] == (
        "| seal | 2 | pass 75, invalid_tool_call 25 | pass 75, invalid_tool_call 25 | "
        "invalid_tool_call 1.50, pass 1.00 | 1.0: guidelines 2.0, +required_markers 1.0 | 110 / 40 / 10 | "
        "0.00 / 0.70 |"
    )
    # a label control: the labels it trained on and, apart, what the environment's diagnoser saw
    assert lines[4].startswith(
        "| fixed-label | 1 | state_mismatch 100 | argument_mismatch 75, pass 25 | state_mismatch 1.50 | 0.0: none |"
    )
