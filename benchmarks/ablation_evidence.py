"""The per-label evidence of an ablation results file (``benchmarks/ablation.py`` rows), per recipe.

Each training row keeps what its run's store recorded (``ablation.run_one``): the labels every diagnoser
gave (``labels``: diagnoser -> label -> count over the run's training rollouts), the last A-Patch weight of
each label (``label_weights``), the interface revisions with the diagnosis that drove each change
(``revisions``) and the dynamic-sampling counts (``dynamic_sampling``). This module turns them into one
markdown table, means over the recipe's seeds:

- **labels that drove training**: the share of each label from the diagnoser that A-Patch and the interface
  read (the label controls' ``random_labels`` / ``fixed_label``; the environment's own diagnoser otherwise);
- **what the agent did**: the shares from the environment's own diagnoser, which every labelled run records
  (for the controls beside the labels they trained on), so the recipes' failures can be compared;
- the final A-Patch weights, the number of interface revisions and their most frequent kinds of change, the
  groups drawn / kept / found uniform by dynamic sampling, and the mean training reward (on the interface the
  run trained with) of the first and of the last five steps (``train_rewards``).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter

CONTROL_DIAGNOSERS = ("random_labels", "fixed_label")
# "named: +required_markers (invalid_tool_call n=12 ...)" -> "+required_markers"; "named: guidelines ..." ->
# "guidelines"
_CHANGE = re.compile(r"^[^:]+:\s*([+\-]?[A-Za-z_]+)")


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {label: 100.0 * n / total for label, n in counts.items()} if total else {}


def _mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the dicts (a key missing from one counts as 0 there)."""
    keys = sorted({k for d in dicts for k in d})
    return {k: statistics.fmean(d.get(k, 0.0) for d in dicts) for k in keys} if dicts else {}


def _fmt(values: dict[str, float], digits: int, top: int = 6) -> str:
    ranked = sorted(values.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{k} {v:.{digits}f}" for k, v in ranked) or "-"


def driving_diagnoser(row: dict) -> str | None:
    """The diagnoser whose labels the run trained on (a label control's, else the only/first one)."""
    labels = row.get("labels") or {}
    for name in CONTROL_DIAGNOSERS:
        if name in labels:
            return name
    return next(iter(labels), None)


def change_kinds(row: dict) -> Counter:
    """How often each kind of interface change appears in the run's revisions."""
    kinds: Counter = Counter()
    for revision in row.get("revisions") or []:
        for change in revision.get("changes") or []:
            match = _CHANGE.match(change)
            if match:
                kinds[match.group(1)] += 1
    return kinds


def evidence_table(rows: list[dict], recipes: list[str], label_of=lambda r: r) -> str:
    """Markdown: one line per recipe that has rows, means over its seeds (see the module docstring)."""
    out = ["| recipe | runs | labels that drove training (% of rollouts) | what the agent did: environment "
           "diagnoser's labels (%) | final A-Patch weights | interface revisions: mean, most frequent changes "
           "| groups drawn / kept / uniform per run | training reward, first / last 5 steps |",
           "|---|---|---|---|---|---|---|---|"]
    for recipe in recipes:
        mine = [r for r in rows if r.get("recipe") == recipe]
        if not mine:
            continue
        driving = [_shares(r["labels"][d]) for r in mine if (d := driving_diagnoser(r))]
        own = [_shares(counts) for r in mine for name, counts in (r.get("labels") or {}).items()
               if name not in CONTROL_DIAGNOSERS]
        weights = _mean_dicts([r["label_weights"] for r in mine if r.get("label_weights")])
        revisions = statistics.fmean(max(0, len(r.get("revisions") or []) - 1) for r in mine)
        kinds = sum((change_kinds(r) for r in mine), Counter())
        top = ", ".join(f"{k} {n / len(mine):.1f}" for k, n in kinds.most_common(4)) or "none"
        sampling = [r["dynamic_sampling"] for r in mine if r.get("dynamic_sampling")]
        drawn = (" / ".join(f"{statistics.fmean(s[k] for s in sampling):.0f}" for k in ("drawn", "kept", "uniform"))
                 if sampling else "-")
        rewards = [r["train_rewards"] for r in mine if r.get("train_rewards")]
        reward = (f"{statistics.fmean(statistics.fmean(t[:5]) for t in rewards):.2f} / "
                  f"{statistics.fmean(statistics.fmean(t[-5:]) for t in rewards):.2f}" if rewards else "-")
        out.append(f"| {label_of(recipe)} | {len(mine)} | {_fmt(_mean_dicts(driving), 0) if driving else 'none'} | "
                   f"{_fmt(_mean_dicts(own), 0) if own else 'none'} | {_fmt(weights, 2) if weights else 'none'} | "
                   f"{revisions:.1f}: {top} | {drawn} | {reward} |")
    return "\n".join(out)
