"""A failure in a set-up step that is not a stage (listing the tasks, building the environment or the engine) is
said as what it is, not as "the 'tasks' stage"; the stage hooks keep their wording."""

from __future__ import annotations

import pytest

from seal_platform.errors import PluginError
from seal_platform.loop import Runner
from seal_platform.planning import plan_recipe
from seal_platform.stages import stage_failure, wrap
from seal_platform.store import RunStore


def _no_such_split() -> list:
    raise ValueError("unknown split 'bogus'")


def test_listing_the_tasks_is_not_called_a_stage(toy_site, toy_recipe):
    plan = plan_recipe(toy_recipe, ["evaluation.split=bogus", "training.steps=1"])
    store = RunStore(plan.config.store_url())
    runner = Runner(plan, plan.host, store, recipe=plan.source)
    with pytest.raises(PluginError) as raised:
        runner.run()
    said = str(raised.value)
    assert said.startswith(
        "listing the tasks of split 'bogus' failed in plugin 'toy': ValueError: unknown split 'bogus'"
    ), said
    assert "stage" not in said, said
    assert said in store.get_run(runner.run_id).error  # the run keeps the same words


def test_the_split_is_named_when_the_caller_gives_it():
    with pytest.raises(PluginError) as raised:
        wrap("tasks", "library", _no_such_split, split="bogus")
    assert str(raised.value).startswith("listing the tasks of split 'bogus' failed in plugin 'library': "
                                        "ValueError: unknown split 'bogus' (at "), str(raised.value)


@pytest.mark.parametrize(("step", "said"), [
    ("environment", "setting up the environment failed in plugin 'p': ValueError: x"),
    ("engine", "building the rollout engine failed in plugin 'p': ValueError: x"),
    ("collect", "the 'collect' stage failed in plugin 'p': ValueError: x"),
    ("evaluate", "the 'evaluate' stage failed in plugin 'p': ValueError: x"),
])
def test_each_step_is_said_as_what_it_is_and_stages_keep_their_wording(step, said):
    assert stage_failure(step, "p", ValueError("x")) == said
