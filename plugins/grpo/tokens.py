"""The exact token sequence of a multi-turn episode.

A multi-turn episode is trained as one sequence. Its assistant messages must appear as the token ids the
engine sampled (re-tokenising their text can give other ids: "drift"), and every prompt the engine saw must be
a prefix of the final sequence, so that the trainer's log-probs are of the very tokens that were sampled in
the very context they were sampled in. Both engines build their prompts with :func:`prompt_ids` and the
trainer builds its sequence with :func:`encode_episode`; both run the same splicing code below.

Splicing rule
-------------
Chat templates render a whole conversation; we need it piece by piece. Let ``render(msgs, gen)`` be the
template's text for ``msgs`` (``gen``: with the generation prompt, e.g. ``<|im_start|>assistant\\n``). Call an
assistant message *sampled* when it carries ``token_ids``. Walking through the sampled messages ``k`` in order:

1. ``prompt_k = render(msgs[:k], gen=True)``. The text not yet covered, ``prompt_k[len(covered):]``, is
   tokenised (``add_special_tokens=False``) and appended with loss mask 0. (For the first sampled message
   ``covered`` is empty, so this is the whole first prompt.)
2. The sampled ``token_ids`` of message ``k`` are appended verbatim: loss mask 1, engine log-probs aligned.
3. ``full_k = render(msgs[:k+1], gen=False)``. The template's closing of message ``k`` is what follows its
   content in ``full_k[len(prompt_k):]`` (for ChatML: ``<|im_end|>\\n``). The part of it the model already
   produced (trailing special tokens such as the EOS ``<|im_end|>``) is dropped; the rest (``\\n``; or all of
   ``<|im_end|>\\n`` after a length cut or a stop string) is *pending*: it is prepended to the next text
   segment, so it is context (mask 0) and tokenised together with what follows it. ``covered = full_k``.

The final sequence of :func:`encode_episode` ends with the last sampled token (what comes after it carries no
loss); :func:`prompt_ids` ends with the generation prompt for the next assistant message. The rule needs the
template to be *append-only*: the rendering of a conversation's prefix is a prefix of the rendering of the
whole conversation (true of ChatML templates such as SmolLM2's and Qwen2.5's). A template that rewrites
earlier turns (e.g. drops earlier reasoning) raises :class:`TemplateNotIncrementalError` rather than training
on a sequence the engine never saw.

Assistant messages without ``token_ids`` (few-shot examples, a scripted reply) are ordinary context rendered
by the template. A sampled message is trained on (mask 1) unless its ``trainable`` field was explicitly set to
False.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

from seal_platform.types import Message


# Episodes build prompts from many threads. Calling a fast tokenizer (``tokenizer(text)``) resets the Rust
# tokenizer's padding and truncation settings -- a mutable borrow -- so two threads calling it at once raise
# "Already borrowed"; :func:`_tokenize` therefore encodes with the Rust tokenizer directly, which only reads
# it, and takes this lock only for slow (Python) tokenizers and tokenizers with padding or truncation set.
_TOKENIZER_LOCK = threading.Lock()


class TemplateNotIncrementalError(ValueError):
    """The chat template re-renders earlier turns, so an episode cannot be one exact token sequence."""


@dataclass
class EpisodeTokens:
    """One episode as the trainer sees it.

    ``input_ids`` is the whole sequence; ``loss_mask[i]`` is 1 where ``input_ids[i]`` was sampled by the model
    (and is trained on); ``engine_logprobs[i]`` is the engine's log-prob of that token (None for context tokens
    and for sampled tokens whose message carried no log-probs). ``spans`` holds, per sampled message,
    ``(message_index, start, end)``: its tokens are ``input_ids[start:end]``.
    """

    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    engine_logprobs: list[float | None] = field(default_factory=list)
    spans: list[tuple[int, int, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def n_generated(self) -> int:
        return sum(self.loss_mask)


_WRAPPED = re.compile(r"\A<tool_response>\n(.*)\n</tool_response>\Z", re.S)
_WRAPS_CACHE: dict[str, bool] = {}  # by template text: the answer depends on nothing else


def template_wraps_tool_results(tokenizer: Any) -> bool:
    """Does the model's chat template put ``tool`` messages in ``<tool_response>`` tags itself (Qwen2.5's,
    Qwen3's), or render them as they are (plain ChatML, SmolLM2's)? Decided once per template by rendering a
    probe."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    key = template
    if key not in _WRAPS_CACHE:
        try:
            text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}, {"role": "tool", "content": "PROBE"}],
                                                 tokenize=False)
        except Exception:  # a template without a tool role: the environment's wrapping is all there is
            text = ""
        _WRAPS_CACHE[key] = isinstance(text, str) and re.search(r"<tool_response>\s*PROBE\s*</tool_response>", text) is not None
    return _WRAPS_CACHE[key]


def _single_wrapped(tokenizer: Any, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as the template takes them, tool results wrapped once: an environment's
    ``<tool_response>`` wrapper (bfcl's hermes format adds one for templates without tool support) is dropped
    when the template adds its own."""
    chats = [m.chat() for m in messages]
    if any(m.role == "tool" for m in messages) and template_wraps_tool_results(tokenizer):
        for chat in chats:
            if chat.get("role") == "tool" and isinstance(chat.get("content"), str):
                match = _WRAPPED.match(chat["content"])
                if match:
                    chat["content"] = match.group(1)
    return chats


def render(tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    """The chat template's text for ``messages`` (tool results wrapped once, see :func:`_single_wrapped`)."""
    if not messages and not add_generation_prompt:
        return ""
    text = tokenizer.apply_chat_template(
        _single_wrapped(tokenizer, messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    if not isinstance(text, str):  # some tokenizers return a list when given a batch-like input
        raise TypeError(f"chat template returned {type(text).__name__}, expected text")
    return text


def _tokenize(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is not None and backend.padding is None and backend.truncation is None:
        return list(backend.encode(text, add_special_tokens=False).ids)  # no lock: a read of the tokenizer
    with _TOKENIZER_LOCK:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _is_sampled(message: Message) -> bool:
    return message.role == "assistant" and message.token_ids is not None


def _is_trained(message: Message) -> bool:
    # ``trainable`` defaults to False, so only an explicit False opts a sampled message out of the loss.
    return message.trainable or "trainable" not in message.model_fields_set


def _after(text: str, covered: str, where: str) -> str:
    if not text.startswith(covered):
        raise TemplateNotIncrementalError(
            f"the chat template is not append-only ({where}): rendering a longer conversation changed the text "
            "of its earlier turns, so the prompts the engine saw would not be a prefix of the trained sequence. "
            "Supported: chat templates that only append (ChatML-style, as SmolLM2's and Qwen2.5's). Qwen3 and "
            "Qwen3.5 templates drop earlier turns' reasoning and are refused; give such a model an append-only "
            "template (tokenizer_config.json's chat_template) to train it."
        )
    return text[len(covered):]


def _pending_closing(tokenizer: Any, message: Message, prompt: str, full: str) -> str:
    """The template text after message's content that its sampled tokens did not produce."""
    part = _after(full, prompt, "closing an assistant message")
    ids = list(message.token_ids or ())
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    closing = None
    for candidate in (message.content, message.content.strip(), decoded, decoded.strip()):
        if not candidate:
            continue
        pos = 0 if part.startswith(candidate) else part.find(candidate)
        if pos >= 0:
            closing = part[pos + len(candidate):]
            break
    if closing is None:
        if message.content.strip() or decoded.strip():
            raise TemplateNotIncrementalError(
                "the chat template does not copy assistant content verbatim, so the end of a sampled message "
                "cannot be located in its rendering."
            )
        closing = part  # empty content: everything the template wrote for the message is its closing
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    n = 0
    while n < len(ids) and ids[len(ids) - 1 - n] in special:
        n += 1
    if n:
        produced = tokenizer.decode(ids[len(ids) - n:], skip_special_tokens=False)
        if closing.startswith(produced):
            closing = closing[len(produced):]
    return closing


@dataclass(frozen=True)
class _State:
    """The splice after a sampled message: the sequence so far, the text it covers, the pending closing."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    engine_logprobs: tuple[float | None, ...]
    spans: tuple[tuple[int, int, int], ...]
    covered: str
    pending: str


class _SpliceCache:
    """Splice states by conversation prefix, so that an episode's next prompt renders and tokenizes only what
    its last turns appended (linear work per episode instead of quadratic). Keyed by the template and a chained
    fingerprint of the messages up to and including a sampled one; only an episode's latest state is kept (the
    previous one is dropped when it is extended), at most ``size`` states in all (least recently used go)."""

    def __init__(self, size: int = 2048):
        self.size = size
        self.enabled = True
        self._states: OrderedDict[tuple[str, int], _State] = OrderedDict()
        self._lock = threading.Lock()  # guards the dict only; nothing is rendered or tokenized under it

    def get(self, key: tuple[str, int]) -> _State | None:
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
            return state

    def put(self, key: tuple[str, int], state: _State, replaces: tuple[str, int] | None) -> None:
        with self._lock:
            if replaces is not None:
                self._states.pop(replaces, None)
            self._states[key] = state
            while len(self._states) > self.size:
                self._states.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()


SPLICE_CACHE = _SpliceCache()


def _fingerprints(messages: Sequence[Message]) -> list[int]:
    """A chained hash per message: equal for two conversations exactly when their prefixes are (up to hash
    collisions, which a 64-bit hash of every field makes negligible)."""
    out, h = [], 0
    for m in messages:
        ids = tuple(m.token_ids) if m.token_ids is not None else None
        lps = tuple(m.logprobs) if m.logprobs is not None else None
        h = hash((h, m.role, m.content, ids, lps, _is_trained(m)))
        out.append(h)
    return out


def _splice(tokenizer: Any, messages: Sequence[Message], for_prompt: bool) -> EpisodeTokens:
    out = EpisodeTokens()
    covered = ""
    pending = ""
    sampled = [i for i, m in enumerate(messages) if _is_sampled(m)]
    any_sampled = bool(sampled)
    template = str(getattr(tokenizer, "chat_template", "") or "") + f"|{type(tokenizer).__name__}|{len(tokenizer)}"
    cache = SPLICE_CACHE if SPLICE_CACHE.enabled else None
    prints = _fingerprints(messages) if cache is not None else []
    resumed_key: tuple[str, int] | None = None
    if cache is not None:
        for j in range(len(sampled) - 1, -1, -1):  # the longest prefix already spliced
            state = cache.get((template, prints[sampled[j]]))
            if state is not None:
                out = EpisodeTokens(list(state.input_ids), list(state.loss_mask), list(state.engine_logprobs),
                                    list(state.spans))
                covered, pending = state.covered, state.pending
                resumed_key = (template, prints[sampled[j]])
                sampled = sampled[j + 1:]
                break
    for k in sampled:
        prompt = render(tokenizer, messages[:k], add_generation_prompt=True)
        context = _tokenize(tokenizer, pending + _after(prompt, covered, f"before message {k}"))
        out.input_ids.extend(context)
        out.loss_mask.extend([0] * len(context))
        out.engine_logprobs.extend([None] * len(context))
        message = messages[k]
        ids = list(message.token_ids or ())
        logprobs: list[float | None]
        if message.logprobs is not None and len(message.logprobs) == len(ids):
            logprobs = list(message.logprobs)
        else:
            logprobs = [None] * len(ids)
        start = len(out.input_ids)
        out.input_ids.extend(ids)
        out.loss_mask.extend([1 if _is_trained(message) else 0] * len(ids))
        out.engine_logprobs.extend(logprobs)
        out.spans.append((k, start, len(out.input_ids)))
        full = render(tokenizer, messages[: k + 1], add_generation_prompt=False)
        pending = _pending_closing(tokenizer, message, prompt, full)
        covered = full
        if cache is not None:
            key = (template, prints[k])
            cache.put(key, _State(tuple(out.input_ids), tuple(out.loss_mask), tuple(out.engine_logprobs),
                                  tuple(out.spans), covered, pending), replaces=resumed_key)
            resumed_key = key
    if for_prompt:
        tail = pending + _after(render(tokenizer, messages, add_generation_prompt=True), covered, "at the end")
    elif not any_sampled:
        tail = render(tokenizer, messages, add_generation_prompt=False)
    else:
        tail = ""
    context = _tokenize(tokenizer, tail)
    out.input_ids.extend(context)
    out.loss_mask.extend([0] * len(context))
    out.engine_logprobs.extend([None] * len(context))
    return out


def encode_episode(tokenizer: Any, messages: Sequence[Message]) -> EpisodeTokens:
    """The episode's training sequence: context rendered by the template, sampled messages verbatim.

    Ends with the last sampled token (context after it carries no loss). An episode with no sampled message
    is its whole rendering with an all-zero mask.
    """
    return _splice(tokenizer, messages, for_prompt=False)


def prompt_ids(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """The prompt for the next assistant message of ``messages``: what the engines feed the model.

    Built by the same splicing as :func:`encode_episode`, so ``prompt_ids(tok, msgs[:k])`` is a prefix of
    ``encode_episode(tok, msgs).input_ids`` for every sampled message ``k``.
    """
    return _splice(tokenizer, messages, for_prompt=True).input_ids
