"""The plugin module named by the entry point: thin hook implementations."""

from seal_platform import hookimpl
from seal_platform.registry import DiagnoserSpec

from .repetition import label_repetitions


@hookimpl
def register_diagnosers():
    return [DiagnoserSpec(
        "repetition", "flags turns where the agent repeats an earlier message", ("repetition", "no_repetition"),
        meanings={"repetition": "an assistant message in the turn repeats an earlier one verbatim",
                  "no_repetition": "no assistant message in the turn repeats an earlier one"},
    )]


@hookimpl
def diagnose(trajectories):
    return [label for trajectory in trajectories for label in label_repetitions(trajectory)]
