"""The side-by-side benchmark's project half: the default run's tasks, prompts and check, for another trainer.

Runs in THIS project's virtualenv (TRL's venv reaches it through :func:`serve`, a JSON-lines subprocess), so
the other trainer is scored by the very code that scores a seal-platform run:

* :func:`load_setup`: the recipe's smarthome environment (its seeded train / held-out split), its prompt
  settings and the model's chat template;
* :func:`prompt_text`: a task's prompt on the pristine interface (revision 0), rendered with the model's chat
  template exactly as the project's engines are fed it;
* :func:`score`: a completion's reward by the project's own episode code (``run_episodes``: parse, execute,
  verify) on a replay engine that answers with the completion; the completion is cut after its first
  ``</tool_call>``, where the project's engines stop generating;
* :func:`rescore_stored`: every stored trajectory of a run re-scored from its task id and its completion
  alone, against the reward the run stored -- the agreement check.

Only single-generation episodes are scored this way (one user turn, one attempt: the default run's settings).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seal_platform.types import Generation, Interface, Message, SamplingParams, Task, Trajectory

DEFAULT_RECIPE = "smarthome-embedded"
TOOL_CALL_STOP = "</tool_call>"


@dataclass
class Setup:
    """What a trainer needs to see the default run's tasks as the project does."""

    recipe: str
    settings: Any  # SmartHomeSettings
    tasks: dict[str, Task] = field(default_factory=dict)  # id -> task, both splits
    train_ids: list[str] = field(default_factory=list)
    eval_ids: list[str] = field(default_factory=list)
    config: Any = None  # RunConfig

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(f"task {task_id!r} is not one of {self.recipe}'s smarthome tasks") from None


def load_setup(recipe: str = DEFAULT_RECIPE, overrides: Sequence[str] = ()) -> Setup:
    """The recipe's smarthome tasks and settings (``overrides``: ``key=value`` as for ``seal-platform run``)."""
    from seal_platform.errors import ConfigError
    from seal_platform.planning import load_recipe
    from seal_platform_plugins.smarthome.environment import SmartHomeEnvironment
    from seal_platform_plugins.smarthome.settings import SmartHomeSettings

    config, issues, path = load_recipe(recipe, overrides)
    if config is None:
        raise ConfigError(f"recipe {recipe}: " + "; ".join(str(i) for i in issues))
    if config.environment != "smarthome":
        raise ConfigError(f"recipe {recipe} runs environment {config.environment!r}; this benchmark is smarthome's")
    settings = SmartHomeSettings.model_validate(config.settings.get("smarthome", {}))
    if settings.max_turns != 1 or settings.attempts_per_turn != 1:
        raise ConfigError("the side-by-side benchmark scores one generation per episode: it needs "
                          "settings.smarthome.max_turns: 1 and attempts_per_turn: 1 (the default run's)")
    env = SmartHomeEnvironment(settings)
    setup = Setup(recipe=recipe, settings=settings, config=config)
    for split, ids in (("train", setup.train_ids), ("eval", setup.eval_ids)):
        for task in env.tasks(split):
            setup.tasks[task.id] = task
            ids.append(task.id)
    return setup


def prompt_messages(setup: Setup, task: Task) -> list[Message]:
    """The task's episode start on the pristine interface: system prompt, worked examples, the user turn."""
    from seal_platform_plugins.smarthome.episode import build_prompt

    s = setup.settings
    messages = build_prompt(task, Interface(revision=0), s.worked_examples, s.example_results)
    return [*messages, Message(role="user", content=task.payload["turns"][0]["user"])]


def prompt_text(setup: Setup, task: Task, tokenizer: Any) -> str:
    """The prompt as the project's engines feed it: the chat template's text up to the assistant's turn."""
    from seal_platform_libs.policy.tokens import prompt_ids

    return tokenizer.decode(prompt_ids(tokenizer, prompt_messages(setup, task)))


def cut_at_stop(completion: str) -> str:
    """The completion up to and including its first ``</tool_call>``: where the project's engines stop."""
    end = completion.find(TOOL_CALL_STOP)
    return completion if end < 0 else completion[: end + len(TOOL_CALL_STOP)]


class _Replay:
    """A rollout engine that answers each prompt with a given text (the completion being scored)."""

    def __init__(self, texts: Sequence[str]):
        self._texts = list(texts)

    def generate(self, prompts: Sequence[Any], sampling: Any) -> list[Generation]:
        if len(prompts) != len(self._texts):
            raise RuntimeError(f"replay engine asked for {len(prompts)} generations, holds {len(self._texts)}")
        out = [Generation(text=t, token_ids=[], logprobs=[]) for t in self._texts]
        self._texts = []
        return out


def score_many(setup: Setup, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """Rewards of ``(task_id, completion)`` pairs by the project's episode code (module docs)."""
    from seal_platform_plugins.smarthome.episode import run_episodes

    if not pairs:
        return []
    s = setup.settings
    episodes = [(setup.task(task_id), f"score-{i}", 0) for i, (task_id, _) in enumerate(pairs)]
    engine = _Replay([cut_at_stop(text) for _, text in pairs])
    trajs = run_episodes(engine, episodes, Interface(revision=0), SamplingParams(), 1, s.worked_examples,  # type: ignore[arg-type]
                         s.example_results)
    return [t.reward for t in trajs]


def score(setup: Setup, task_id: str, completion: str) -> float:
    return score_many(setup, [(task_id, completion)])[0]


def completion_of(traj: Trajectory) -> str | None:
    """The text the policy generated in a single-generation episode (its first assistant message after the
    prompt's worked examples), or None when it generated none (a prompt over the context, say)."""
    user_turns = [i for i, m in enumerate(traj.messages) if m.role == "user"]
    if not user_turns:
        return None
    after = traj.messages[user_turns[-1] + 1:]
    return next((m.content for m in after if m.role == "assistant" and isinstance(m.content, str)), None)


@dataclass
class Agreement:
    checked: int = 0
    agreed: int = 0
    passed: int = 0  # of the checked, how many the run stored as reward 1
    skipped: int = 0  # no completion to re-score (or an infrastructure failure)
    disagreements: list[str] = field(default_factory=list)

    def line(self) -> str:
        share = 100.0 * self.agreed / self.checked if self.checked else 0.0
        return (f"agreement: {self.agreed} of {self.checked} stored trajectories re-scored alike ({share:.1f}%; "
                f"{self.passed} stored as passed, {self.skipped} without a completion skipped)")


def rescore(setup: Setup, trajectories: Iterable[Trajectory],
            score_fn: Callable[[Setup, Sequence[tuple[str, str]]], list[float]] | None = None) -> Agreement:
    """Re-score ``trajectories`` from task id + completion alone (by ``score_fn``, default :func:`score_many`;
    run.py passes the TRL side's reward path) and compare with their stored rewards."""
    result = Agreement()
    pairs, stored, ids = [], [], []
    for traj in trajectories:
        text = completion_of(traj)
        if text is None or traj.infra_failure:
            result.skipped += 1
            continue
        pairs.append((traj.task_id, text))
        stored.append(traj.reward)
        ids.append(traj.id)
    for traj_id, was, now in zip(ids, stored, (score_fn or score_many)(setup, pairs)):
        result.checked += 1
        result.passed += was == 1.0
        if was == now:
            result.agreed += 1
        else:
            result.disagreements.append(f"{traj_id}: stored {was}, re-scored {now}")
    return result


def rescore_stored(setup: Setup, store_url: str, run_id: str) -> Agreement:
    """:func:`rescore` on every trajectory (training and evaluation) a run stored."""
    from seal_platform.config import as_store_url
    from seal_platform.store import RunStore

    store = RunStore(as_store_url(store_url), read_only=True, migrate=False, create=False)
    return rescore(setup, store.trajectories(run_id))


def serve(setup: Setup, stdin: Any = sys.stdin, stdout: Any = sys.stdout) -> None:
    """The scorer for a trainer in another venv: each input line ``{"pairs": [[task_id, completion], ...]}``
    is answered by one line ``{"rewards": [...]}`` (or ``{"error": "..."}``); ``{"prompts": "train"|"eval"}``
    is answered with the split's ``[[task_id, category], ...]``."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if "prompts" in request:
                ids = setup.train_ids if request["prompts"] == "train" else setup.eval_ids
                reply: dict[str, Any] = {"tasks": [[i, setup.tasks[i].category] for i in ids]}
            else:
                reply = {"rewards": score_many(setup, [(str(a), str(b)) for a, b in request["pairs"]])}
        except Exception as exc:  # a bad request is answered, never fatal to the trainer's scorer
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


def write_dataset(setup: Setup, model_dir: str | Path, path: Path) -> int:
    """The training split's prompts as JSON lines ``{"task_id", "category", "prompt"}`` for the other trainer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    with path.open("w") as f:
        for task_id in setup.train_ids:
            task = setup.tasks[task_id]
            f.write(json.dumps({"task_id": task_id, "category": task.category,
                                "prompt": prompt_text(setup, task, tokenizer)}) + "\n")
    return len(setup.train_ids)


if __name__ == "__main__":  # python scoring.py serve [RECIPE [key=value ...]]
    if len(sys.argv) < 2 or sys.argv[1] != "serve":
        sys.exit("usage: python scoring.py serve [RECIPE [key=value ...]]")
    serve(load_setup(sys.argv[2] if len(sys.argv) > 2 else DEFAULT_RECIPE, sys.argv[3:]))
