"""`seal-platform verify --benchmark bfcl FILE.jsonl`, end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from seal_platform_plugins.bfcl.data import get_task, ground_truth


def _verify(path, cwd):
    return subprocess.run([sys.executable, "-m", "seal_platform", "verify", "--benchmark", "bfcl", str(path)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def test_verify_scores_lines_in_order_and_survives_bad_ones(tmp_path):
    ids = ["multi_turn_base_0", "multi_turn_miss_param_5", "multi_turn_long_context_3"]
    gts = {i: ground_truth(get_task(i)) for i in ids}
    wrong = [list(turn) for turn in gts[ids[0]]]
    first = next(k for k, turn in enumerate(wrong) if turn)
    wrong[first] = []  # a non-empty ground-truth turn with no model call fails
    marker = tmp_path / "pwned"
    attack = [list(turn) for turn in gts[ids[1]]]
    attack[0] = [f"__import__('os').system('touch {marker}')", *attack[0]]
    lines = [
        json.dumps({"task_id": ids[0], "turns": gts[ids[0]]}),
        json.dumps({"task_id": ids[0], "turns": wrong}),
        "{not json",
        json.dumps({"task_id": "no_such_task", "turns": [[]]}),
        json.dumps({"task_id": ids[1], "turns": attack}),
        json.dumps({"task_id": ids[2], "turns": gts[ids[2]]}),
        json.dumps({"task_id": ids[1]}),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    done = _verify(path, tmp_path)
    # Every line is written; three could not be scored, so the status is 1 and stderr counts them.
    assert done.returncode == 1, done.stderr
    assert "3 of 7 line(s) could not be scored" in done.stderr
    out = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert len(out) == len(lines)
    assert out[0] == {"task_id": ids[0], "success": True, "labels": ["pass"] * len(gts[ids[0]])}
    assert out[1]["success"] is False and out[1]["labels"][first] != "pass" and len(out[1]["labels"]) == len(wrong)
    assert set(out[2]) == {"error"} and set(out[3]) == {"error"} and "no_such_task" in out[3]["error"]
    # The injected call is a tool error that runs nothing; as in official BFCL, a failed extra call does not
    # by itself fail a turn whose state and responses match.
    assert out[4]["task_id"] == ids[1] and out[4]["success"] is True
    assert not marker.exists()
    assert out[5] == {"task_id": ids[2], "success": True, "labels": ["pass"] * len(gts[ids[2]])}
    assert set(out[6]) == {"error"}


def test_verify_misuse_is_a_usage_error(tmp_path):
    done = _verify(tmp_path / "missing.jsonl", tmp_path)
    assert done.returncode == 2 and "No such file" in done.stderr
