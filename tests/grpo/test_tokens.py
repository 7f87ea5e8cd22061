"""The exact multi-turn token splicing: prompts are prefixes of the trained sequence, sampled ids verbatim."""

from __future__ import annotations

import copy

import pytest

from seal_platform.types import Message
from seal_platform_libs.policy.tokens import (
    UnsupportedChatTemplateError,
    chat_template_problem,
    encode_episode,
    prompt_ids,
    render,
    template_wraps_tool_results,
)


def sampled(tokenizer, text: str, eos: bool = True, ids: list[int] | None = None, **kw) -> Message:
    token_ids = list(ids) if ids is not None else tokenizer(text, add_special_tokens=False)["input_ids"]
    if eos:
        token_ids = token_ids + [tokenizer.eos_token_id]
    logprobs = [-0.5 - 0.01 * i for i in range(len(token_ids))]
    return Message(role="assistant", content=text, token_ids=token_ids, logprobs=logprobs, trainable=True, **kw)


def dialogue(tokenizer) -> list[Message]:
    return [
        Message(role="system", content="You are a tool-using agent."),
        Message(role="user", content="List the files in /tmp."),
        sampled(tokenizer, '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'),
        Message(role="tool", content='{"files": ["a.txt", "b.txt"]}'),
        sampled(tokenizer, "There are two files: a.txt and b.txt."),
        Message(role="user", content="Delete a.txt"),
        sampled(tokenizer, "Done.", eos=False),  # cut by max_new_tokens: no EOS
    ]


def test_every_prompt_is_a_prefix_and_sampled_ids_are_verbatim(tokenizer):
    messages = dialogue(tokenizer)
    episode = encode_episode(tokenizer, messages)
    assert len(episode.input_ids) == len(episode.loss_mask) == len(episode.engine_logprobs)
    assert [k for k, _, _ in episode.spans] == [2, 4, 6]
    for k, start, end in episode.spans:
        prompt = prompt_ids(tokenizer, messages[:k])
        assert episode.input_ids[: len(prompt)] == prompt, f"prompt of message {k} is not a prefix"
        assert start == len(prompt)
        assert episode.input_ids[start:end] == messages[k].token_ids
        assert episode.engine_logprobs[start:end] == messages[k].logprobs
    masked = [i for i, m in enumerate(episode.loss_mask) if m]
    expected = [i for _, start, end in episode.spans for i in range(start, end)]
    assert masked == expected
    assert all(episode.engine_logprobs[i] is None for i in range(len(episode)) if not episode.loss_mask[i])
    assert episode.input_ids[-1] == messages[-1].token_ids[-1]  # ends with the last sampled token


def test_sequence_text_is_the_chat_template_rendering(tokenizer):
    messages = dialogue(tokenizer)
    episode = encode_episode(tokenizer, messages)
    decoded = tokenizer.decode(episode.input_ids)
    assert decoded == render(tokenizer, messages, add_generation_prompt=False).removesuffix("<|im_end|>\n")
    # Without any sampled message, the prompt is exactly what the template tokenises to.
    plain = [Message(role="system", content="sys"), Message(role="user", content="hi")]
    reference = tokenizer.apply_chat_template([m.chat() for m in plain], add_generation_prompt=True, tokenize=True)
    reference = reference["input_ids"] if hasattr(reference, "keys") else reference
    assert prompt_ids(tokenizer, plain) == list(reference)


def test_no_retokenisation_drift(tokenizer):
    # " hello" spelled one character per token: re-tokenising the text would merge them.
    chars = [tokenizer.convert_tokens_to_ids(c) for c in ["Ġ", "h", "e", "l", "l", "o"]]
    assert tokenizer(" hello", add_special_tokens=False)["input_ids"] != chars
    messages = [Message(role="user", content="say hello"), sampled(tokenizer, " hello", ids=chars)]
    messages.append(Message(role="user", content="again"))
    episode = encode_episode(tokenizer, messages)
    _, start, end = episode.spans[0]
    assert episode.input_ids[start:end] == chars + [tokenizer.eos_token_id]
    assert prompt_ids(tokenizer, messages)[start:end] == chars + [tokenizer.eos_token_id]


def test_closing_after_a_length_cut_is_context(tokenizer):
    messages = [Message(role="user", content="count"), sampled(tokenizer, "1 2 3", eos=False)]
    messages.append(Message(role="user", content="go on"))
    ids = prompt_ids(tokenizer, messages)
    _, _, end = encode_episode(tokenizer, messages).spans[0]
    # The template's <|im_end|> that the model never produced follows the sampled tokens as context.
    assert ids[end] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.decode(ids[end:]).startswith("<|im_end|>\n<|im_start|>user\ngo on")


def test_explicitly_untrainable_message_is_masked(tokenizer):
    messages = dialogue(tokenizer)
    messages[4] = messages[4].model_copy(update={"trainable": False})
    episode = encode_episode(tokenizer, messages)
    (_, s2, e2), (_, s4, e4) = episode.spans[0], episode.spans[1]
    assert all(episode.loss_mask[s2:e2]) and not any(episode.loss_mask[s4:e4])
    # A sampled message built without touching ``trainable`` is trained on.
    bare = Message(role="assistant", content="ok", token_ids=[19, 2])
    assert encode_episode(tokenizer, [Message(role="user", content="x"), bare]).n_generated == 2


def test_unsampled_assistant_messages_are_template_context(tokenizer):
    messages = [
        Message(role="user", content="example"),
        Message(role="assistant", content="scripted answer"),
        Message(role="user", content="now you"),
        sampled(tokenizer, "ok"),
    ]
    episode = encode_episode(tokenizer, messages)
    assert episode.n_generated == len(messages[-1].token_ids)
    assert "scripted answer<|im_end|>" in tokenizer.decode(episode.input_ids)


def test_template_that_rewrites_history_is_spliced_without_re_rendering_it(tokenizer):
    rewriting = copy.deepcopy(tokenizer)
    # Announces the number of messages up front, so every new message changes the beginning of the text.
    rewriting.chat_template = (
        "{{ messages|length }} messages\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert chat_template_problem(rewriting) is None
    messages = [Message(role="user", content="a"), sampled(tokenizer, "b"), Message(role="user", content="c"),
                sampled(tokenizer, "d")]
    episode = encode_episode(rewriting, messages)
    for k, start, end in episode.spans:
        prompt = prompt_ids(rewriting, messages[:k])
        assert episode.input_ids[:start] == prompt and episode.input_ids[start:end] == messages[k].token_ids
    # The header is the first prompt's ("1 messages"); later turns are appended, never re-rendered.
    text = rewriting.decode(episode.input_ids)
    assert text == ("1 messages\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n"
                    "<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\nd<|im_end|>")


def test_template_that_does_not_copy_assistant_text_is_refused_with_a_reason(tokenizer):
    shouting = copy.deepcopy(tokenizer)
    shouting.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | upper }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    assert "does not copy an assistant message's text verbatim" in chat_template_problem(shouting)
    messages = [Message(role="user", content="a"), sampled(tokenizer, "b"), Message(role="user", content="c")]
    with pytest.raises(UnsupportedChatTemplateError, match="verbatim"):
        prompt_ids(shouting, messages)
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    assert "no chat template" in chat_template_problem(bare)
    assert chat_template_problem(tokenizer) is None


# A template that wraps tool messages itself, as Qwen2.5's does (its tool branch, simplified).
WRAPPING = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n"
    "</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tool_results_are_wrapped_once_whoever_wraps_them(tokenizer):
    """bfcl's hermes format wraps each result in <tool_response> for templates without tool support; a
    template that wraps tool messages itself (Qwen2.5) gets the bare result: never two wrappers."""
    result = '<tool_response>\n{"files": ["a.txt"]}\n</tool_response>'
    messages = [Message(role="user", content="ls"), sampled(tokenizer, "<tool_call>{}</tool_call>"),
                Message(role="tool", content=result), sampled(tokenizer, "One file.")]
    assert not template_wraps_tool_results(tokenizer)  # SmolLM2: plain ChatML
    plain = render(tokenizer, messages, add_generation_prompt=False)
    assert plain.count("<tool_response>") == 1 and result in plain
    wrapping = copy.deepcopy(tokenizer)
    wrapping.chat_template = WRAPPING
    assert template_wraps_tool_results(wrapping)
    text = render(wrapping, messages, add_generation_prompt=False)
    assert text.count("<tool_response>") == 1 and '<tool_response>\n{"files": ["a.txt"]}\n</tool_response>' in text
    # Unwrapped results and text that merely contains the tags are left as they are.
    bare = [*messages[:2], Message(role="tool", content="ok"), messages[3]]
    assert render(wrapping, bare, add_generation_prompt=False).count("<tool_response>") == 1
    # The engine's prompts and the trainer's sequence agree under the wrapping template too.
    episode = encode_episode(wrapping, messages)
    prompt = prompt_ids(wrapping, messages[:3])
    assert episode.input_ids[: len(prompt)] == prompt


def test_cached_splicing_equals_a_full_render_for_growing_and_branching_episodes(tokenizer):
    """Prompts of a growing episode resume from the cached splice of its prefix: every result must equal the
    uncached splice (a full render), also when two episodes share a prefix and then differ."""
    from seal_platform_libs.policy.tokens import SPLICE_CACHE

    def fresh(fn, msgs):
        SPLICE_CACHE.enabled = False
        try:
            return fn(tokenizer, msgs)
        finally:
            SPLICE_CACHE.enabled = True

    SPLICE_CACHE.clear()
    base = dialogue(tokenizer)
    other = [*base[:4], Message(role="tool", content='{"files": []}'), sampled(tokenizer, "No files.")]
    for msgs in (base, other):
        for n in range(1, len(msgs) + 1):
            assert prompt_ids(tokenizer, msgs[:n]) == fresh(prompt_ids, msgs[:n])
            cached, full = encode_episode(tokenizer, msgs[:n]), fresh(encode_episode, msgs[:n])
            assert (cached.input_ids, cached.loss_mask, cached.engine_logprobs, cached.spans) == \
                   (full.input_ids, full.loss_mask, full.engine_logprobs, full.spans)
    # A later edit of an earlier message is a different prefix: no stale state is reused.
    edited = [base[0], Message(role="user", content="List the files in /var."), *base[2:]]
    assert prompt_ids(tokenizer, edited) == fresh(prompt_ids, edited)


def test_tokenizing_from_many_threads_takes_no_lock_and_equals_the_tokenizer_call(tokenizer):
    """Episode threads tokenize at once: the fast path reads the Rust tokenizer only (no global lock, no
    "Already borrowed"), and gives exactly what ``tokenizer(text, add_special_tokens=False)`` gives."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from seal_platform_libs.policy import tokens

    texts = [f"<|im_start|>user\nturn {i}: set_light(room='kitchen', level={i}) é ✓ {'x' * (i % 50)}<|im_end|>\n"
             for i in range(400)]
    expected = [list(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert getattr(tokenizer, "is_fast", False)
    held = threading.Event()

    def holder() -> None:  # the global lock is held the whole time: a locked path would block
        with tokens._TOKENIZER_LOCK:
            held.set()
            done.wait(60)

    done = threading.Event()
    blocker = threading.Thread(target=holder)
    blocker.start()
    held.wait(10)
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda t: tokens._tokenize(tokenizer, t), texts, timeout=60))
    finally:
        done.set()
        blocker.join()
    assert got == expected
