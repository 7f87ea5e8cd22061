"""Qwen3's chat template, which rewrites earlier turns, trained token-in-token-out: the trainer's sequence is the
engine's prompts and sampled tokens, turn by turn.

The template is Qwen3's own (``fixtures/qwen3_chat_template.jinja``, see ``fixtures/README.md`` for where it
comes from), applied to the SmolLM2 tokenizer with Qwen3's extra tokens added (``<think>``, ``</think>``,
``<tool_call>``, ``</tool_call>``, ``<tool_response>``, ``</tool_response>``, not special, as in Qwen3's
tokenizer; ``<|im_start|>`` and ``<|im_end|>`` are SmolLM2's own special tokens and ``<|im_end|>`` is the EOS, as
in Qwen3). No model hub is reachable here; the engine tests use a tiny random Llama over that vocabulary.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from seal_platform.types import Message, SamplingParams
from seal_platform_libs.policy.tokens import (
    SPLICE_CACHE,
    chat_template_problem,
    encode_episode,
    prompt_ids,
    render,
    template_wraps_tool_results,
)

torch = pytest.importorskip("torch")

QWEN3_TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja"
QWEN3_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@pytest.fixture(scope="module")
def qwen3(tokenizer):
    from transformers import AddedToken

    tok = copy.deepcopy(tokenizer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN3_TOKENS])
    tok.chat_template = QWEN3_TEMPLATE.read_text()
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_start|>") in tok.all_special_ids
    return tok


def sampled(tok, text: str, eos: bool = True, ids: list[int] | None = None) -> Message:
    token_ids = list(ids) if ids is not None else tok(text, add_special_tokens=False)["input_ids"]
    if eos:
        token_ids = token_ids + [tok.eos_token_id]
    logprobs = [-1.0 - 0.01 * i for i in range(len(token_ids))]
    return Message(role="assistant", content=text, token_ids=token_ids, logprobs=logprobs, trainable=True)


CALL_LS = '<think>\nI should list the folder.\n</think>\n\n<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
FILES = '{"files": ["a.txt", "b.txt"]}'
ANSWER = "<think>\nTwo files.\n</think>\n\nThere are two files: a.txt and b.txt."
CALL_RM = ('<think>\nOne call per file.\n</think>\n\n<tool_call>\n{"name": "rm", "arguments": {"path": "a.txt"}}\n'
           '</tool_call>\n<tool_call>\n{"name": "rm", "arguments": {"path": "b.txt"}}\n</tool_call>')
CUT = "<think>\nBoth calls"  # cut by max_new_tokens inside its reasoning: no EOS


def episode(tok) -> list[Message]:
    """A multi-turn tool-use episode: reasoning in every sampled turn, tool results (one wrapped by the
    environment, as bfcl's hermes format does; two in a row), a length cut followed by more turns, and a
    sampled message whose ids are not what re-tokenising its text gives."""
    chars = [tok.convert_tokens_to_ids(c) for c in ["Ġ", "b", "y", "e"]]
    assert tok(" bye", add_special_tokens=False)["input_ids"] != chars
    return [
        Message(role="system", content="You are a tool-using agent."),
        Message(role="user", content="List the files in /tmp."),
        sampled(tok, CALL_LS),
        Message(role="tool", content=FILES),
        sampled(tok, ANSWER),
        Message(role="user", content="Delete both."),
        sampled(tok, CALL_RM),
        Message(role="tool", content='<tool_response>\n{"deleted": "a.txt"}\n</tool_response>'),
        Message(role="tool", content='{"deleted": "b.txt"}'),
        sampled(tok, CUT, eos=False),
        Message(role="user", content="Thanks."),
        sampled(tok, " bye", ids=chars),
    ]


def test_the_fixture_is_qwen3s_template_which_rewrites_history(qwen3):
    """The test is meaningful: the template drops earlier reasoning once a new user turn comes, so the prompt
    of an earlier turn is not a prefix of the whole rendering (the old splice refused it), and it wraps tool
    results itself."""
    messages = episode(qwen3)
    whole = render(qwen3, messages, add_generation_prompt=False)
    assert not whole.startswith(render(qwen3, messages[:4], add_generation_prompt=True))
    assert "I should list the folder." not in whole and "One call per file." not in whole
    assert template_wraps_tool_results(qwen3)
    assert chat_template_problem(qwen3) is None


def test_trainer_tokens_are_the_engine_prompts_and_sampled_tokens_turn_by_turn(qwen3):
    messages = episode(qwen3)
    ep = encode_episode(qwen3, messages)
    assert len(ep.input_ids) == len(ep.loss_mask) == len(ep.engine_logprobs)
    assert [k for k, _, _ in ep.spans] == [2, 4, 6, 9, 11]
    for k, start, end in ep.spans:
        prompt = prompt_ids(qwen3, messages[:k])
        assert ep.input_ids[:start] == prompt, f"the engine's prompt for message {k} is not the trainer's prefix"
        assert ep.input_ids[start:end] == messages[k].token_ids
        assert ep.engine_logprobs[start:end] == messages[k].logprobs
    trained = [i for i, m in enumerate(ep.loss_mask) if m]
    assert trained == [i for _, start, end in ep.spans for i in range(start, end)]
    assert ep.input_ids[-1] == messages[-1].token_ids[-1]
    # The first prompt is the template's own tokens.
    first = qwen3.apply_chat_template([m.chat() for m in messages[:2]], add_generation_prompt=True, tokenize=True)
    first = first["input_ids"] if hasattr(first, "keys") else first
    assert ep.input_ids[: ep.spans[0][1]] == list(first)


def test_the_sequence_is_qwen3s_format_with_every_turns_reasoning_kept(qwen3):
    """What the engine saw and the trainer trains on: Qwen3's turn format (tool results as one user turn of
    ``<tool_response>`` blocks, wrapped once; ``<|im_end|>\\n`` closing each turn, the EOS the model produced
    kept as it is, the closing it never produced after a length cut added as context), earlier reasoning kept."""
    messages = episode(qwen3)
    text = qwen3.decode(encode_episode(qwen3, messages).input_ids)

    def turn(role: str, body: str) -> str:
        return f"<|im_start|>{role}\n{body}<|im_end|>\n"

    expected = (
        turn("system", "You are a tool-using agent.") + turn("user", "List the files in /tmp.")
        + turn("assistant", CALL_LS) + turn("user", f"<tool_response>\n{FILES}\n</tool_response>")
        + turn("assistant", ANSWER) + turn("user", "Delete both.")
        + turn("assistant", CALL_RM)
        + turn("user", '<tool_response>\n{"deleted": "a.txt"}\n</tool_response>\n'
                       '<tool_response>\n{"deleted": "b.txt"}\n</tool_response>')
        + turn("assistant", CUT) + turn("user", "Thanks.") + "<|im_start|>assistant\n bye<|im_end|>"
    )
    assert text == expected


def test_prompts_after_a_sampled_message_end_with_qwen3s_generation_prompt(qwen3):
    messages = [*episode(qwen3), Message(role="tool", content="ok")]
    for conversation, after in (
        (messages, "\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        (messages[:5], "\n<|im_start|>assistant\n"),  # no new message: the closing, then the generation prompt
    ):
        ids = prompt_ids(qwen3, conversation)
        end = encode_episode(qwen3, conversation).spans[-1][2]
        assert ids[:end] == encode_episode(qwen3, conversation).input_ids
        assert qwen3.decode(ids[end:]) == after


def test_cached_and_uncached_splices_agree_under_qwen3(qwen3):
    messages = episode(qwen3)
    SPLICE_CACHE.clear()
    for n in range(1, len(messages) + 1):
        cached_prompt, cached = prompt_ids(qwen3, messages[:n]), encode_episode(qwen3, messages[:n])
        SPLICE_CACHE.enabled = False
        try:
            fresh_prompt, fresh = prompt_ids(qwen3, messages[:n]), encode_episode(qwen3, messages[:n])
        finally:
            SPLICE_CACHE.enabled = True
        assert cached_prompt == fresh_prompt
        assert (cached.input_ids, cached.loss_mask, cached.spans) == (fresh.input_ids, fresh.loss_mask, fresh.spans)


# --- an engine producing the episode -------------------------------------------------------------------------


def _recording_hf_engine(model, tok):
    """The hf engine, recording the prompt ids it is given (what it feeds the model)."""
    from seal_platform_libs.policy.engines.hf import HFEngine
    from seal_platform_libs.policy.engines.settings import HFEngineSettings

    class Recording(HFEngine):
        def generate_ids(self, prompts, sampling):
            self.prompts.extend(list(p) for p in prompts)
            return super().generate_ids(prompts, sampling)

    engine = Recording(model, tok, HFEngineSettings(batch_wait_ms=10))
    engine.prompts = []
    return engine


def _assert_engine_episode(model, tok, messages: list[Message], prompts: list[list[int]]) -> None:
    """The episode's trained sequence is the engine's recorded prompts and sampled ids, turn by turn, and the
    trainer's forward pass over it reproduces the engine's log-probs (same tokens, same context)."""
    ep = encode_episode(tok, messages)
    assert len(ep.spans) == len(prompts) > 0
    for (k, start, end), prompt in zip(ep.spans, prompts):
        assert ep.input_ids[:start] == prompt
        assert ep.input_ids[start:end] == messages[k].token_ids and all(ep.loss_mask[start:end])
    with torch.no_grad():
        logits = model(torch.tensor([ep.input_ids])).logits[0].float()
    recomputed = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ep.input_ids[1:])[:, None]).squeeze(-1)
    diffs = [abs(float(recomputed[i - 1]) - ep.engine_logprobs[i]) for i, m in enumerate(ep.loss_mask) if m]
    assert max(diffs) < 1e-3, f"max |trainer - engine| log-prob difference {max(diffs):.2e}"


def test_hf_engine_produces_a_qwen3_tool_episode_the_trainer_reproduces(qwen3):
    from seal_platform_libs.policy.testing import tiny_llama

    model = tiny_llama(qwen3, seed=0)
    engine = _recording_hf_engine(model, qwen3)
    try:
        messages = [Message(role="system", content="You call tools."), Message(role="user", content="Find my files.")]
        for turn in range(4):
            generation = engine.generate([messages], SamplingParams(temperature=1.0, max_new_tokens=10, seed=turn))[0]
            messages.append(Message.from_generation(generation))
            messages.append(Message(role="tool", content=f'{{"result": {turn}}}') if turn % 2 == 0
                            else Message(role="user", content=f"Next {turn}."))
    finally:
        engine.close()
    _assert_engine_episode(model, qwen3, messages, engine.prompts)


def test_hf_engine_plays_smarthome_episodes_under_qwen3(qwen3):
    """The smarthome environment's episodes (worked examples with scripted assistant replies and tool results
    in the first prompt, then user turns) played by the hf engine: trained tokens == engine tokens."""
    from seal_platform_libs.policy.testing import tiny_llama
    from seal_platform_plugins.smarthome.environment import SmartHomeEnvironment
    from seal_platform_plugins.smarthome.episode import run_episodes
    from seal_platform_plugins.smarthome.settings import SmartHomeSettings

    env = SmartHomeEnvironment(SmartHomeSettings(n_train=4, n_eval=2))
    task = env.tasks("train")[0]
    model = tiny_llama(qwen3, seed=1)
    engine = _recording_hf_engine(model, qwen3)
    try:
        (traj,) = run_episodes(engine, [(task, task.id, 0)], env.pristine_interface(),
                               SamplingParams(temperature=1.0, max_new_tokens=8, seed=5), 2, 2)
    finally:
        engine.close()
    assert any(m.role == "assistant" and m.token_ids is None for m in traj.messages)  # a worked example
    assert sum(m.role == "user" for m in traj.messages) >= 3
    _assert_engine_episode(model, qwen3, traj.messages, engine.prompts)
