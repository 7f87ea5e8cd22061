"""The exact token sequence of a multi-turn episode.

A multi-turn episode is trained as one sequence. Its assistant messages must appear as the token ids the
engine sampled (re-tokenising their text can give other ids: "drift"), and every prompt the engine saw must be
a prefix of the final sequence, so that the trainer's log-probs are of the very tokens that were sampled in
the very context they were sampled in. Both engines build their prompts with :func:`prompt_ids` and the
trainer builds its sequence with :func:`encode_episode`; both run the same splicing code below.

Token in, token out
-------------------
The sequence only ever grows: the ids of what is already in it (the first prompt, the sampled messages, the
context between them) are kept as they are, and history is never rendered or tokenised again. Let
``render(msgs, gen)`` be the chat template's text for ``msgs`` (``gen``: with the generation prompt, e.g.
``<|im_start|>assistant\\n``). Call an assistant message *sampled* when it carries ``token_ids``.

1. The first prompt, everything before the first sampled message, is ``render(msgs[:k0], gen=True)``,
   tokenised (``add_special_tokens=False``): loss mask 0. Nothing has been sampled yet, so it is rendered once.
2. Each sampled message's ``token_ids`` are appended verbatim: loss mask 1, engine log-probs aligned.
3. What comes after a sampled message -- the template's closing of that message and the new messages up to
   the next sampled one (tool results, user turns, scripted replies), ending with the generation prompt -- is
   a *delta*, rendered against a fixed dummy conversation that ends with an assistant message
   (:data:`_BASE`: a user turn and a reply whose text is a marker): the delta's text is what follows the
   marker in ``render(_BASE + new, gen=True)``, i.e. what the template puts after an assistant message when
   ``new`` follows it (the fixed-base approach of verl's and SkyRL's multi-turn rollouts). The part of it the
   model already produced (trailing special tokens of the sampled ids, such as the EOS ``<|im_end|>``, when
   the delta starts with their text) is dropped; the rest (``\\n<|im_start|>user...``; or all of
   ``<|im_end|>\\n<|im_start|>user...`` after a length cut or a stop string) is tokenised on its own and
   appended with loss mask 0.

The final sequence of :func:`encode_episode` ends with the last sampled token (what comes after it carries no
loss); :func:`prompt_ids` ends with the delta of the messages after the last sampled one and the generation
prompt for the next assistant message.

Any template whose rendering of an assistant message contains its text verbatim works this way, including
templates that re-render history: Qwen3's drops earlier turns' reasoning (``<think>...</think>``) when a new
user turn comes, but here the sampled ids, reasoning included, stay in the context of every later turn, in the
engine's prompts and in the trained sequence alike (what the engine saw is what is trained).
For templates that only append (ChatML-style, SmolLM2's and Qwen2.5's) the sequence is token for token the
template's rendering of the whole conversation with the sampled ids in place of their messages' text.
:func:`chat_template_problem` says whether a tokenizer's template can be used (before any model loads).

Assistant messages without ``token_ids`` (few-shot examples, a scripted reply) are ordinary context rendered
by the template (in the first prompt, or in a delta). A sampled message is trained on (mask 1) unless its
``trainable`` field was explicitly set to False.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from seal_platform.types import Message

# Episodes build prompts from many threads. Calling a fast tokenizer (``tokenizer(text)``) resets the Rust
# tokenizer's padding and truncation settings -- a mutable borrow -- so two threads calling it at once raise
# "Already borrowed"; :func:`_tokenize` therefore encodes with the Rust tokenizer directly, which only reads
# it, and takes this lock only for slow (Python) tokenizers and tokenizers with padding or truncation set.
_TOKENIZER_LOCK = threading.Lock()


class UnsupportedChatTemplateError(ValueError):
    """The tokenizer's chat template cannot build an episode's token sequence (see :func:`chat_template_problem`)."""


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
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": "q"}, {"role": "tool", "content": "PROBE"}], tokenize=False
            )
        except Exception:  # a template without a tool role: the environment's wrapping is all there is
            text = ""
        _WRAPS_CACHE[key] = (
            isinstance(text, str) and re.search(r"<tool_response>\s*PROBE\s*</tool_response>", text) is not None
        )
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


# The fixed conversation every delta is rendered after: it ends with an assistant message whose text is a marker,
# so that what follows the marker in a rendering is what the template puts after an assistant message's text.
# No system message: templates that take none (Gemma's) accept it; a default system prompt that a template
# adds when there is none comes before the marker and is cut off with the rest.
_MARKER = "seal-platform: the end of an assistant message (token-in-token-out marker)"
_BASE = (Message(role="user", content="seal-platform: a user message"), Message(role="assistant", content=_MARKER))


def _delta(tokenizer: Any, new: Sequence[Message], add_generation_prompt: bool) -> str:
    """The template's text after an assistant message's text when ``new`` follows it (with the generation
    prompt when asked): the closing of that message, then ``new`` as the template renders it there."""
    text = render(tokenizer, [*_BASE, *new], add_generation_prompt)
    at = text.find(_MARKER)
    if at < 0:
        raise UnsupportedChatTemplateError(
            "the chat template does not copy an assistant message's text verbatim into its rendering, so the "
            "context that follows a sampled message cannot be rendered as a delta after the sampled tokens. "
            "Give the model a chat template that writes assistant content as it is (tokenizer_config.json's "
            "chat_template); templates of the ChatML family (SmolLM2, Qwen2.5, Qwen3) do."
        )
    return text[at + len(_MARKER):]


def _unproduced(tokenizer: Any, ids: Sequence[int], delta: str) -> str:
    """``delta`` without the part of it that the sampled ``ids`` already end with: their trailing special
    tokens (the EOS ``<|im_end|>``), when the delta starts with their text."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    n = 0
    while n < len(ids) and ids[len(ids) - 1 - n] in special:
        n += 1
    if n:
        produced = tokenizer.decode(list(ids[len(ids) - n:]), skip_special_tokens=False)
        if delta.startswith(produced):
            return delta[len(produced):]
    return delta


_PROBLEMS: dict[str, str | None] = {}  # by template key: the answer depends on the template and the tokenizer


def _template_key(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "chat_template", "") or "") + f"|{type(tokenizer).__name__}|{len(tokenizer)}"


def chat_template_problem(tokenizer: Any) -> str | None:
    """None when ``tokenizer``'s chat template can build episodes token-in-token-out; else why not, as one
    paragraph for the user. Cheap (a few renderings of a probe conversation, cached per template): a
    configuration check calls it with the model's tokenizer before any model loads.

    Checked: there is a chat template; it renders a system prompt, a user turn and the generation prompt; it
    renders the deltas episodes append after a sampled message (tool results, a user turn, the generation
    prompt) and copies assistant text verbatim. Templates that rewrite earlier turns (Qwen3's) are supported.
    """
    key = _template_key(tokenizer)
    if key not in _PROBLEMS:
        problem: str | None = None
        if not getattr(tokenizer, "chat_template", None):
            problem = ("the tokenizer has no chat template, so a conversation cannot be rendered into a prompt; "
                       "use an instruction-tuned model's folder (tokenizer_config.json's chat_template).")
        else:
            try:
                render(tokenizer, [Message(role="system", content="s"), Message(role="user", content="u")], True)
                _delta(tokenizer, [Message(role="tool", content="t"), Message(role="tool", content="t2")], True)
                _delta(tokenizer, [Message(role="user", content="u")], True)
                _delta(tokenizer, [], True)
            except UnsupportedChatTemplateError as exc:
                problem = str(exc)
            except Exception as exc:  # the template raised (jinja): a message it cannot render
                problem = (f"the chat template cannot render the conversations episodes are made of (a system "
                           f"prompt, user turns, tool results after an assistant message): {exc}")
        _PROBLEMS[key] = problem
    return _PROBLEMS[key]


@dataclass(frozen=True)
class _State:
    """The splice after a sampled message: the sequence so far, which ends with that message's ids."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    engine_logprobs: tuple[float | None, ...]
    spans: tuple[tuple[int, int, int], ...]


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


def _append(out: EpisodeTokens, ids: Sequence[int], mask: int, logprobs: Sequence[float | None] | None = None) -> None:
    out.input_ids.extend(ids)
    out.loss_mask.extend([mask] * len(ids))
    out.engine_logprobs.extend(logprobs if logprobs is not None else [None] * len(ids))


def _context_after(tokenizer: Any, messages: Sequence[Message], last: int | None, end: int, gen: bool) -> str:
    """The context text between sampled message ``last`` (None: none yet) and message ``end``: the first
    prompt, or the delta after ``last``'s sampled ids."""
    if last is None:
        return render(tokenizer, messages[:end], add_generation_prompt=gen)
    return _unproduced(tokenizer, messages[last].token_ids or (), _delta(tokenizer, messages[last + 1:end], gen))


def _splice(tokenizer: Any, messages: Sequence[Message], for_prompt: bool) -> EpisodeTokens:
    out = EpisodeTokens()
    sampled = [i for i, m in enumerate(messages) if _is_sampled(m)]
    last: int | None = None  # the last sampled message in ``out``
    template = _template_key(tokenizer)
    cache = SPLICE_CACHE if SPLICE_CACHE.enabled else None
    prints = _fingerprints(messages) if cache is not None else []
    resumed_key: tuple[str, int] | None = None
    if cache is not None:
        for j in range(len(sampled) - 1, -1, -1):  # the longest prefix already spliced
            state = cache.get((template, prints[sampled[j]]))
            if state is not None:
                out = EpisodeTokens(list(state.input_ids), list(state.loss_mask), list(state.engine_logprobs),
                                    list(state.spans))
                last, resumed_key = sampled[j], (template, prints[sampled[j]])
                sampled = sampled[j + 1:]
                break
    for k in sampled:
        _append(out, _tokenize(tokenizer, _context_after(tokenizer, messages, last, k, gen=True)), 0)
        message = messages[k]
        ids = list(message.token_ids or ())
        logprobs = message.logprobs if message.logprobs is not None and len(message.logprobs) == len(ids) else None
        start = len(out.input_ids)
        _append(out, ids, 1 if _is_trained(message) else 0, logprobs)
        out.spans.append((k, start, len(out.input_ids)))
        last = k
        if cache is not None:
            key = (template, prints[k])
            cache.put(key, _State(tuple(out.input_ids), tuple(out.loss_mask), tuple(out.engine_logprobs),
                                  tuple(out.spans)), replaces=resumed_key)
            resumed_key = key
    if for_prompt or last is None:  # an episode with no sampled message is its whole rendering
        _append(out, _tokenize(tokenizer, _context_after(tokenizer, messages, last, len(messages), gen=for_prompt)), 0)
    return out


def encode_episode(tokenizer: Any, messages: Sequence[Message]) -> EpisodeTokens:
    """The episode's training sequence: the first prompt and the context deltas rendered by the template,
    sampled messages verbatim.

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
