"""What both engines share: prompt building, a request queue served by one worker thread, result assembly.

Episodes call :meth:`QueuedEngine.generate` from many threads at once. Each call turns its conversations into
prompt token ids (with :func:`~seal_platform_libs.policy.tokens.prompt_ids`) and queues one request per
conversation; a single worker thread owns the model and serves the queue, so the model is never entered from
two threads, and requests that arrive together (a group's G rollouts, the next turns of several dialogues)
are generated together. Subclasses implement :meth:`QueuedEngine._serve`.

New weights are loaded on the worker thread too, between batches. A load that raises (a weight push given up
halfway: a member of its sync group died) may leave the model part old, part new; from then on requests are
held, not served, until a complete load lands (e.g. the host-path fallback of that push), and are then
generated with its weights and stamped with its version; a request held longer than :attr:`QueuedEngine.hold_s`
fails with :class:`WeightsIncomplete`, and so does every later one until a complete load.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from seal_platform.engine import TrainableEngine
from seal_platform.types import Generation, Message, SamplingParams

from ..tokens import prompt_ids

log = logging.getLogger(__name__)

PROMPT_TOO_LONG = "prompt_too_long"

# How long requests wait for a complete load of the weights after one stopped halfway (a given-up push is
# followed at once by its fallback; this bounds a fallback that never comes).
WEIGHTS_HOLD_S = 120.0


@dataclass
class Request:
    """One prompt to continue, and where its result goes."""

    prompt: list[int]
    sampling: SamplingParams
    future: Future = field(default_factory=Future)
    # Tokens this request may generate: min(max_new_tokens, context left after the prompt).
    budget: int = 0


class EngineClosed(RuntimeError):
    """generate() was called on an engine after close()."""


class WeightsIncomplete(RuntimeError):
    """The engine's weights are a mix of two versions (a load stopped halfway) and no complete load followed
    within the engine's ``hold_s``: it serves nothing until one does."""


class QueuedEngine(TrainableEngine):
    """Base of the rollout engines: thread-safe ``generate`` over a single worker thread. A
    :class:`~seal_platform.engine.TrainableEngine` (its subclasses define ``update_weights``)."""

    name = "base"
    model: Any = None  # the torch model it generates with (the hf engine's; None: the back end holds its own)

    def __init__(self, tokenizer: Any, max_model_len: int):
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._queue: queue.Queue[Request | Callable[[], None] | None] = queue.Queue()
        self._closed = False
        self._worker = threading.Thread(target=self._run_worker, name=f"{self.name}-engine", daemon=True)
        self.stats = {"requests": 0, "generated_tokens": 0, "prompt_tokens": 0, "batches": 0}
        # The adapter version generating now (LoRA policies); stamped on every Generation. Changed only on the
        # worker thread between batches, so a generation carries the version that produced it.
        self.adapter_version: str | None = None
        self._started = False
        # The version of the weights generations are sampled with (the trainer's optimizer-update count at
        # its last push); changed only on the worker thread, between batches, so every Generation carries
        # the version it was sampled with.
        self.policy_version = 0
        # Since when the weights are part loaded (a load raised; None: whole), and the requests held meanwhile.
        self.hold_s = WEIGHTS_HOLD_S
        self._torn_since: float | None = None
        self._held: list[Request] = []

    def _start(self) -> None:
        if not self._started:
            self._started = True
            self._worker.start()

    def shares_model(self, model: Any) -> bool:
        return self.model is not None and self.model is model

    @property
    def dtype(self) -> str | None:
        """The dtype the engine generates in, as vLLM names it (``bfloat16``, ``float32``); None: not known."""
        return None

    def load_weights(self, named: dict[str, Any], version: int | None = None) -> None:
        """Load some named tensors (checkpoint-format names; a subset is fine) into the engine: the engines
        that live in a replica process (hf, vllm) do."""
        raise NotImplementedError(f"the {self.name} engine does not load weights by name")

    # --- the RolloutEngine interface ----------------------------------------------------------------

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        """Continue each conversation with one assistant message (thread-safe; blocks until all are done).

        Each :class:`Generation` has the sampled ``token_ids`` (including the EOS token when the model ended
        the message), the text they decode to (special tokens removed), ``logprobs`` of those tokens and
        ``finish_reason``: ``"stop"`` (EOS or a stop string; the stop string is kept in text and tokens),
        ``"length"`` (``max_new_tokens`` or the context length reached) or ``"prompt_too_long"`` (the prompt
        alone fills the context: nothing was generated).

        ``logprobs`` are raw: log-softmax of the model's logits at temperature 1, before temperature, top-p or
        any other processing, i.e. ``log p_theta(token | prefix)``, exactly what a trainer's forward pass over
        :func:`~seal_platform_libs.policy.tokens.encode_episode` recomputes.
        """
        return self.generate_ids([prompt_ids(self.tokenizer, conv) for conv in conversations], sampling)

    def count_tokens(self, conversation: list[Message]) -> int:
        """Prompt length of ``conversation`` in tokens, exactly as ``generate`` builds it."""
        return len(prompt_ids(self.tokenizer, conversation))

    def close(self) -> None:
        """Stop the worker (requests still queued fail with :class:`EngineClosed`) and release the model."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            self._queue.put(None)
            self._worker.join(timeout=60)
        self._release()

    # --- token-level interface (what a remote wrapper, e.g. a Ray actor, would expose) ------------------

    def generate_ids(self, prompts: Sequence[list[int]], sampling: SamplingParams) -> list[Generation]:
        """Like :meth:`generate`, for prompts already given as token ids.

        With ``sampling.seed`` set, prompt ``i`` of the call is sampled with seed ``seed + i``, so the samples
        of one call differ from each other and the call is reproducible.
        """
        if sampling.seed is not None and len(prompts) > 1:
            futures = [
                self.submit(p, sampling.model_copy(update={"seed": sampling.seed + i})) for i, p in enumerate(prompts)
            ]
        else:
            futures = [self.submit(p, sampling) for p in prompts]
        return [f.result() for f in futures]

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future:
        """Queue one prompt; the future resolves to its :class:`Generation`."""
        if self._closed:
            raise EngineClosed(f"the {self.name} engine is closed")
        request = Request(prompt=list(prompt), sampling=sampling)
        request.budget = min(sampling.max_new_tokens, self.max_model_len - len(prompt))
        if request.budget <= 0:
            request.future.set_result(
                Generation(text="", token_ids=[], logprobs=[], prompt_tokens=len(prompt), finish_reason=PROMPT_TOO_LONG)
            )
            return request.future
        self._start()
        self._queue.put(request)
        return request.future

    def call_in_worker(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the worker thread between batches (e.g. a weight update) and return its result."""
        if self._closed:
            raise EngineClosed(f"the {self.name} engine is closed")
        done: Future = Future()

        def task() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:  # handed to the caller
                done.set_exception(exc)

        self._start()
        self._queue.put(task)
        return done.result()

    # --- weights (on the worker thread) --------------------------------------------------------------

    @contextlib.contextmanager
    def loading(self) -> Iterator[None]:
        """Around a load of new weights into the model: if it raises, the model may hold part of them, and
        requests are held from then on until a complete load (:meth:`weights_complete`)."""
        try:
            yield
        except BaseException:
            if self._torn_since is None:
                self._torn_since = time.monotonic()
                log.warning("%s engine: a weight load stopped halfway; requests wait (up to %.0f s) for a "
                            "complete one", self.name, self.hold_s)
            raise

    def weights_complete(self, version: int | None = None) -> None:
        """New weights are wholly loaded: they are policy version ``version`` (default: the current one plus
        1), stamped on every later Generation; requests held since a load stopped halfway are served."""
        self.policy_version = self.policy_version + 1 if version is None else int(version)
        self._torn_since = None

    # --- worker ---------------------------------------------------------------------------------------

    def _run_worker(self) -> None:
        try:
            self._serve()
        except BaseException as exc:  # the worker must not die silently: fail whatever waits
            log.exception("%s engine worker crashed", self.name)
            self._fail_pending(exc)

    def _fail_pending(self, exc: BaseException) -> None:
        self._fail_held(exc)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Request) and not item.future.done():
                item.future.set_exception(exc)

    def _take(self, block: bool, timeout: float | None = None) -> Request | Callable[[], None] | None | bool:
        """The next queue item; False when none arrived (non-blocking or timed out). While the weights are part
        loaded a request is held instead (False); once they are whole, the held requests come first."""
        if self._held and self._torn_since is None:
            return self._held.pop(0)
        if block and self._held and self._torn_since is not None:  # wake up when the hold runs out
            left = max(0.0, self._torn_since + self.hold_s - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        try:
            item: Request | Callable[[], None] | None | bool = self._queue.get(block=block, timeout=timeout)
        except queue.Empty:
            item = False
        if item is None:
            self._fail_held(EngineClosed(f"the {self.name} engine is closed"))
        elif isinstance(item, Request) and self._torn_since is not None:
            self._held.append(item)
            item = False
        if self._held and self._torn_since is not None and time.monotonic() >= self._torn_since + self.hold_s:
            self._fail_held(WeightsIncomplete(
                f"the {self.name} engine's weights are part loaded (a weight load stopped halfway "
                f"{time.monotonic() - self._torn_since:.0f} s ago) and no complete load followed within "
                f"{self.hold_s:g} s: it serves no request until one does"))
        return item

    def _fail_held(self, exc: BaseException) -> None:
        held, self._held = self._held, []
        for request in held:
            if not request.future.done():
                request.future.set_exception(exc)

    def _collect_batch(self, max_batch: int, wait_s: float) -> tuple[list[Request], bool]:
        """Block for one request, then gather more for up to ``wait_s``. Returns (batch, stop)."""
        batch: list[Request] = []
        while not batch:
            item = self._take(block=True)
            if item is None:
                return batch, True
            if isinstance(item, Request):
                batch.append(item)
            elif callable(item):
                item()
        deadline = time.monotonic() + wait_s
        while len(batch) < max_batch:
            left = deadline - time.monotonic()
            item = self._take(block=left > 0, timeout=left if left > 0 else None)
            if item is False:
                break
            if item is None:
                self._queue.put(None)  # stop after this batch
                break
            if isinstance(item, Request):
                batch.append(item)
            elif callable(item):
                item()
                if self._torn_since is not None:  # a load stopped halfway: the batch waits for a complete one
                    self._held[:0], batch = batch, []
        return batch, False

    def _serve(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _release(self) -> None:
        """Free the model (subclasses)."""

    # --- helpers for subclasses ---------------------------------------------------------------------

    def _finish(self, request: Request, token_ids: list[int], logprobs: list[float], finish_reason: str) -> None:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        self.stats["requests"] += 1
        self.stats["generated_tokens"] += len(token_ids)
        self.stats["prompt_tokens"] += len(request.prompt)
        if not request.future.done():
            request.future.set_result(
                Generation(
                    text=text,
                    token_ids=[int(t) for t in token_ids],
                    logprobs=[float(x) for x in logprobs],
                    prompt_tokens=len(request.prompt),
                    finish_reason=finish_reason,
                    policy_version=self.policy_version,
                    adapter=self.adapter_version,
                )
            )


def sampling_key(sampling: SamplingParams) -> str:
    """Requests with equal keys can share one batched ``generate`` call.

    The seed is not part of the key (a group's samples must batch together): a batch's random stream is
    seeded with its first request's seed, reproducible as long as the same requests batch together.
    """
    return sampling.model_dump_json(exclude={"max_new_tokens", "seed"})
