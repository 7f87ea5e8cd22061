"""The myenv environment plugin: tasks, the pristine interface, episodes and their verifier, a scripted engine,
and the hooks that register them. One module, to be copied and grown (README.md).

The environment: each task asks the agent to greet a person; the agent has one tool, ``greet(name)``, called as
``<tool_call>{"name": "greet", "arguments": {"name": "..."}}</tool_call>``. An episode passes (reward 1) when
the agent's one call is ``greet`` with the task's person. Requests come in two categories (evaluation is scored
per category): ``direct`` ones name the tool, ``indirect`` ones do not.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field

from seal_platform import hookimpl
from seal_platform.config import Section
from seal_platform.registry import EngineSpec, EnvironmentSpec
from seal_platform.types import Generation, Interface, Message, SamplingParams, Task, ToolCall, Trajectory, TurnVerdict
from seal_platform_libs.toolenv.episodes import TOOL_CALL_STOP, Episode, evaluation_episodes, training_episodes
from seal_platform_libs.toolenv.jsoncalls import parse_calls

NAME = "myenv"  # the environment's name (`environment:` in a recipe) and its settings section
PEOPLE = ["Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Frances", "John", "Margaret", "Ken"]
REQUESTS = {"direct": "Use greet to greet {person}.", "indirect": "Please say hello to {person} for me."}
SYSTEM = ('You have one tool, greet(name), which greets a person. Call it as '
          '<tool_call>{"name": "greet", "arguments": {"name": "..."}}</tool_call>.')


class MyEnvSettings(Section):
    """The recipe section ``settings.myenv``. Every field has a default (a recipe may leave the section out);
    ``Section`` (the core's settings base) reports a misspelt key."""

    n_train: int = Field(default=64, ge=1, le=100_000, description="Training tasks.")
    n_eval: int = Field(default=16, ge=1, le=100_000, description="Held-out tasks.")
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="Seeds the task generator.")
    max_new_tokens: int = Field(default=48, ge=1, le=4096, description="Cap on tokens per generation.")


class MyEnvironment:
    """What the core needs of an environment: ``name``, ``tasks(split)``, ``pristine_interface()``; ``play``
    is this plugin's own (the hooks below call it)."""

    name = NAME

    def __init__(self, settings: MyEnvSettings):
        self.settings = settings

    def tasks(self, split: str) -> list[Task]:
        if split not in ("train", "eval"):
            raise ValueError(f"unknown split {split!r}: {NAME} has 'train' and 'eval'")
        rng = random.Random(f"{self.settings.seed}:{split}")  # the same tasks in every run of a recipe
        count = self.settings.n_train if split == "train" else self.settings.n_eval
        tasks = []
        for i in range(count):
            category, person = list(REQUESTS)[i % len(REQUESTS)], rng.choice(PEOPLE)
            tasks.append(Task(id=f"{split}-{i}", category=category, split=split,
                              payload={"request": REQUESTS[category].format(person=person), "person": person}))
        return tasks

    def pristine_interface(self) -> Interface:
        """Revision 0: what evaluation always uses (interface evolution, if you add it, changes training only)."""
        return Interface(revision=0, system_text=SYSTEM)

    def play(self, episode: Episode, engine: Any, interface: Interface, sampling: SamplingParams) -> Trajectory:
        """One episode: the agent answers the request once; its call (if any) runs and is verified."""
        task, group, sample = episode
        messages = [Message(role="system", content=interface.system_text),
                    Message(role="user", content=task.payload["request"])]
        trajectory = Trajectory(task_id=task.id, category=task.category, group=group, sample=sample,
                                interface_revision=interface.revision)  # `id`: leave the default (unique)
        generation = engine.generate([messages], sampling)[0]
        messages.append(Message.from_generation(generation))  # keeps the token ids and log-probs trained on
        calls, error = parse_calls(generation.text, max_calls=1)  # model text is parsed as JSON, never evaluated
        call = calls[0] if calls else None
        if call is not None:
            known = call["name"] == "greet"
            result = f"Hello, {call['arguments'].get('name')}!" if known else f"Error: unknown tool {call['name']!r}."
            trajectory.tool_calls.append(ToolCall(turn=0, name=call["name"], arguments=call["arguments"],
                                                  result=result if known else None,
                                                  rejected=None if known else result))
            messages.append(Message(role="tool", content=result))
        elif error is not None:
            trajectory.tool_calls.append(ToolCall(turn=0, name="?", rejected=error))
            messages.append(Message(role="tool", content=error))
        passed = call == {"name": "greet", "arguments": {"name": task.payload["person"]}}
        trajectory.turn_verdicts = [TurnVerdict(turn=0, passed=passed, checks={"call": call, "error": error})]
        trajectory.reward = float(passed)
        trajectory.finish = "context_limit" if generation.finish_reason == "prompt_too_long" else "completed"
        trajectory.messages = messages
        return trajectory


class ScriptedEngine:
    """A rollout engine without a model, to try the plugin in tests and demo runs: it calls greet when the
    request names the tool, and answers in words otherwise (so ``direct`` passes, ``indirect`` fails)."""

    name = "myenv-scripted"

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        out = []
        for conversation in conversations:
            request = conversation[-1].content
            if "greet" in request:
                person = request.rstrip(".").split()[-1]
                text = f'<tool_call>{{"name": "greet", "arguments": {{"name": "{person}"}}}}</tool_call>'
            else:
                text = "Hello!"
            out.append(Generation(text=text, token_ids=[1] * len(text.split()), logprobs=[-0.5] * len(text.split())))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return sum(len(m.content.split()) for m in conversation)

    def close(self) -> None:
        pass


def _own(sampling: SamplingParams, environment: MyEnvironment) -> SamplingParams:
    """The core's sampling (the recipe's for collect, greedy for evaluate) plus what is this environment's own:
    the stop string of its call format and its cap on new tokens."""
    cap = min(sampling.max_new_tokens, environment.settings.max_new_tokens)
    return sampling.model_copy(update={"stop": [TOOL_CALL_STOP], "max_new_tokens": cap})


# --- hooks (seal_platform.hookspecs; docs/hooks.md) ------------------------------------------------------


@hookimpl
def register_settings() -> dict[str, type]:
    return {NAME: MyEnvSettings}


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [EnvironmentSpec(NAME, lambda ctx: MyEnvironment(ctx.settings_for(NAME, MyEnvSettings)),
                            "greet a person with the greet tool (made from examples/plugin-template)",
                            splits=("train", "eval"))]  # a recipe asking for another split is refused at once


@hookimpl
def register_rollout_engines() -> list[EngineSpec]:
    return [EngineSpec(ScriptedEngine.name, lambda ctx: ScriptedEngine(), "scripted replies for myenv (no model)")]


@hookimpl
def collect(ctx: Any, environment: MyEnvironment, engine: Any, tasks: list[Task], interface: Interface,
            group_size: int, step: int, sampling: SamplingParams) -> list[Trajectory]:
    """``group_size`` rollouts of each task, one group per task; the episodes go to the run's executor."""
    own = _own(sampling, environment)
    return ctx.executor.map(lambda episode: environment.play(episode, engine, interface, own),
                            training_episodes(tasks, group_size, step))


@hookimpl
def evaluate(ctx: Any, environment: MyEnvironment, engine: Any, tasks: list[Task], step: int,
             sampling: SamplingParams) -> list[Trajectory]:
    """One verified episode per task on the pristine interface; the core scores them per category."""
    own, pristine = _own(sampling, environment), environment.pristine_interface()
    return ctx.executor.map(lambda episode: environment.play(episode, engine, pristine, own),
                            evaluation_episodes(tasks, step))
