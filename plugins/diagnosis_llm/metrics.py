"""The judge's step metrics (written by :meth:`.judge.Judge.step_metrics`) and how they are shown
(``register_metrics``): one group, "LLM judge fallbacks", a column of ``show`` and a section of the report."""

from __future__ import annotations

from collections.abc import Mapping

from seal_platform.registry import MetricSpec

TURNS, FALLBACKS, CUT_OFF, FALLBACK_RATE = "judge_turns", "judge_fallbacks", "judge_cut_off", "judge_fallback_rate"
GROUP = "LLM judge fallbacks"


def fallbacks_text(metrics: Mapping[str, float]) -> str:
    """A step's fallbacks as ``show`` prints them: "3/16 (19%), 2 cut off"."""
    turns, fallbacks = int(metrics.get(TURNS, 0)), int(metrics.get(FALLBACKS, 0))
    if not turns:
        return "0/0"
    cut = int(metrics.get(CUT_OFF, 0))
    return f"{fallbacks}/{turns} ({100 * fallbacks / turns:.0f}%)" + (f", {cut} cut off" if cut else "")


METRIC_SPECS = (
    MetricSpec(TURNS, "failing turns the judge was to label", label="turns", format=".0f", group=GROUP,
               cell=fallbacks_text),
    MetricSpec(FALLBACKS, "of them, turns that kept the heuristic label: the judge's answer was invalid twice, cut "
               "off by its token limit, or not given (request failed, token budget spent)", label="fallbacks",
               format=".0f", group=GROUP),
    MetricSpec(CUT_OFF, "fallbacks whose answer was cut off by the judge's token limit", label="of them cut off",
               format=".0f", group=GROUP,
               note="Answers cut off by the judge's token limit: raise the judge's max_new_tokens "
                    "(settings.diagnosis_llm.max_new_tokens)."),
    MetricSpec(FALLBACK_RATE, "fallbacks / turns", label="fallback rate", percent=True, group=GROUP, plotted=True),
)
