"""What every set of engine replicas shares, whatever carries the calls: routing a conversation to its
group's replica, retrying a dead replica's requests elsewhere, pushing changed weights, and the
``RolloutEngine`` / ``TrainableEngine`` interface over all of it. No Ray, no torch at import.

Two transports subclass :class:`ReplicaClient`: Ray actors (:class:`.replicas.RayEngineClient`, one per
placement-group bundle, possibly on other nodes) and processes on this machine
(:class:`.local.LocalEngineClient`, one per GPU, or per ``engine.replicas``). A subclass says how a call
reaches replica ``i`` (:meth:`ReplicaClient._submit` / :meth:`ReplicaClient._result`), how the router is
asked (:meth:`ReplicaClient._router_call`), which exceptions mean "that replica is gone"
(:meth:`ReplicaClient._infra_errors`) and how a weight push travels through host memory
(:meth:`ReplicaClient._push`: Ray's object store, or one shared-memory file).

Weight pushes with ``grpo.weight_sync: collective`` (a subclass sets :attr:`ReplicaClient._pusher`, a
:class:`.collective.ReplicaPusher`) are this module's for both transports: the changed tensors go from the
trainer's model straight to the live replicas over one sync group (driver rank 0, replicas 1..K), each replica
receiving into its engine between batches (its ``receive_weights`` call); a push that fails (a replica died)
falls back to the host path after a probe, and the next push re-forms the group with the live replicas.
Replicas start without weights (:mod:`.spec`): the first push (policy version 0) brings them. Every push is
cast to the dtype the replicas serve in (:attr:`ReplicaClient.engine_dtype`); a LoRA policy pushes its base
with the adapters merged in.

Routing: a conversation's key is its opening (everything before the first message an engine sampled: the system
prompt, any few-shot examples and the task), which every sample of a GRPO group and every turn of a dialogue
share. The router
(:class:`StickyRouter`) assigns each new key to the live replica with the fewest keys and remembers it, so a
group's prompt prefix is prefilled (and, with vLLM, prefix-cached) on one replica only, and the groups spread
evenly.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

from seal_platform.engine import TrainableEngine
from seal_platform.infra import InfraError
from seal_platform.types import Generation, Message, SamplingParams

from ..lora import is_lora
from .shipping import ChangeTracker

log = logging.getLogger(__name__)

def routing_key(conversation: list[Message]) -> str:
    """Everything before the first message an engine sampled (an assistant message built with
    ``Message.from_generation``: trainable, with its token ids): the prompt a group's samples share, which
    every later turn of their dialogues starts with. Canned assistant messages (few-shot examples in the
    opening) are part of it, so tasks that share a few-shot opening still get keys of their own."""
    opening = []
    for message in conversation:
        if message.role == "assistant" and (message.trainable or message.token_ids is not None):
            break
        opening.append(f"{message.role}\x00{message.content}")
    return hashlib.sha1("\x01".join(opening).encode()).hexdigest()


class StickyRouter:
    """Sticky least-loaded assignment of conversation keys to live replicas (a Ray actor on Ray)."""

    def __init__(self, n: int):
        self.n = n
        self.assigned: dict[str, int] = {}
        self.keys = [0] * n
        self.dead: set[int] = set()

    def route(self, key: str) -> int:
        index = self.assigned.get(key)
        if index is None or index in self.dead:
            live = [i for i in range(self.n) if i not in self.dead]
            if not live:
                return -1
            index = min(live, key=lambda i: (self.keys[i], i))
            self.assigned[key] = index
            self.keys[index] += 1
        return index

    def mark_dead(self, index: int) -> list[int]:
        self.dead.add(index)
        return sorted(self.dead)

    def live(self) -> list[int]:
        return [i for i in range(self.n) if i not in self.dead]

    def assignment(self) -> dict[str, int]:
        return dict(self.assigned)


class ReplicaClient(TrainableEngine):
    """A ``RolloutEngine`` (and ``TrainableEngine``) over K engine replicas. Thread-safe.

    ``replicas`` are the transport's handles (one per replica, index = position); ``whole_state``: every push
    carries every tensor (vLLM's in-place reload processes a layer only once all of its weights have come:
    q/k/v and gate/up are fused into one layer, the final norm goes with the output layer, so a partial push
    would leave the rest of a layer uninitialised), else only the tensors changed since the last push.
    """

    def __init__(self, name: str, replicas: list[Any], prompt_fn: Callable[[list[Message]], list[int]],
                 whole_state: bool, weight_sync: str = "host", bucket_bytes: int = 256 * 2**20):
        self.name = name
        self.replicas = replicas
        self.prompt_fn = prompt_fn
        self.policy_version = 0
        self._tracker: ChangeTracker | None = ChangeTracker()
        self._whole_state = whole_state
        self._lock = threading.Lock()
        self._routes: dict[str, int] = {}
        self.sync_stats: dict[str, float] = {}
        self._asleep = False
        self.engine_dtype: str | None = None  # what the replicas serve in; every push is cast to it (set_engine_dtype)
        self.weight_sync = weight_sync  # grpo.weight_sync: auto, collective (a group with the replicas) or host
        self._pusher: Any = None
        if weight_sync in ("collective", "auto", "device"):  # device: the driver's own pushes as auto's
            from .collective import ReplicaPusher

            self._pusher = ReplicaPusher(bucket_bytes)

    # --- the transport (subclasses) ------------------------------------------------------------------------

    def close(self) -> None:  # pragma: no cover - abstract
        """Stop every replica and release what the client holds."""
        raise NotImplementedError

    def _submit(self, index: int, method: str, *args: Any) -> Any:  # pragma: no cover - abstract
        """Start ``method(*args)`` on replica ``index``; a handle for :meth:`_result`."""
        raise NotImplementedError

    def _result(self, handle: Any, timeout: float | None = None) -> Any:  # pragma: no cover - abstract
        """The value of a call started by :meth:`_submit` (raises what it raised; TimeoutError past ``timeout``)."""
        raise NotImplementedError

    def _future(self, handle: Any) -> Any:
        """A ``concurrent.futures.Future`` of a call started by :meth:`_submit` (local replicas' handles are
        ones; Ray's ``ObjectRef.future()``): callbacks when it ends, e.g. a replica dying during a push."""
        return handle

    def _router_call(self, method: str, *args: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _infra_errors(self) -> tuple[type[BaseException], ...]:  # pragma: no cover - abstract
        """Exceptions meaning the replica is gone (its requests go elsewhere)."""
        raise NotImplementedError

    def _push(self, changed: dict[str, Any], ties: dict[str, str], version: int) -> dict[str, float]:
        """Make every live replica load ``changed`` (``ties``: left-out tied tensor -> the one it is tied to)
        with policy version ``version``; extra timings for :attr:`sync_stats`."""
        raise NotImplementedError  # pragma: no cover - abstract

    def _check_owner(self) -> None:
        """Raise where this copy of the client may not push weights (a pickled copy in an episode actor)."""

    def _sync_address(self) -> str:
        """The address the replicas reach this process at (the sync group's store)."""
        return "127.0.0.1"

    def _collective_on_gpu(self, model: Any) -> bool:
        """Whether a collective push is a GPU one (``auto``: ipc / nccl / gloo from the members' GPUs) rather
        than gloo from the CPU: the model is on a GPU (a subclass adds: and the replicas have GPUs)."""
        return bool(next(model.parameters()).is_cuda)

    # --- routing ---------------------------------------------------------------------------------------

    def _route(self, key: str) -> int:
        with self._lock:
            index = self._routes.get(key)
        if index is None:
            index = self._router_call("route", key)
            if index < 0:
                raise InfraError("no rollout engine replica is alive")
            with self._lock:
                self._routes[key] = index
        return index

    def _lost(self, index: int) -> None:
        self._router_call("mark_dead", index)
        with self._lock:
            self._routes = {k: v for k, v in self._routes.items() if v != index}

    def live(self) -> list[int]:
        return self._router_call("live")

    def assignment(self) -> dict[str, int]:
        """Routing key -> replica index of every conversation opening seen so far."""
        return self._router_call("assignment")

    def probe(self, timeout_s: float = 30.0) -> list[int]:
        """Ask every replica thought alive whether it still is (a replica killed while no request or weight
        push reached it is otherwise found only by the next one); mark the dead ones; the live indices."""
        infra = self._infra_errors()
        handles = [(i, self._submit(i, "ready")) for i in self.live()]
        for index, handle in handles:
            try:
                self._result(handle, timeout=timeout_s)
            except infra:
                self._lost(index)
            except TimeoutError:  # busy (a long generation): alive as far as we know
                pass
        return self.live()

    # --- RolloutEngine -------------------------------------------------------------------------------------

    def generate(self, conversations: list[list[Message]], sampling: SamplingParams) -> list[Generation]:
        """Each conversation on its group's replica; retried elsewhere if that replica dies."""
        prompts = [self.prompt_fn(conv) for conv in conversations]
        keys = [routing_key(conv) for conv in conversations]
        params = [
            sampling.model_copy(update={"seed": sampling.seed + i}) if sampling.seed is not None and len(prompts) > 1
            else sampling
            for i in range(len(prompts))
        ]
        if len(prompts) == 1:
            return [self._one(prompts[0], keys[0], params[0])]
        return self._many(prompts, keys, params)

    def _one(self, prompt: list[int], key: str, sampling: SamplingParams) -> Generation:
        infra = self._infra_errors()
        while True:
            index = self._route(key)
            try:
                return self._result(self._submit(index, "generate_ids", [prompt], sampling))[0]
            except infra:
                self._lost(index)

    def _many(self, prompts: list[list[int]], keys: list[str], params: list[SamplingParams]) -> list[Generation]:
        routed = [(self._route(k), p, k, s) for p, k, s in zip(prompts, keys, params)]
        submitted = [(i, self._submit(i, "generate_ids", [p], s)) for i, p, _, s in routed]
        infra = self._infra_errors()
        out = []
        for (index, handle), (_, prompt, key, sampling) in zip(submitted, routed):
            try:
                out.append(self._result(handle)[0])
            except infra:
                self._lost(index)
                out.append(self._one(prompt, key, sampling))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return len(self.prompt_fn(conversation))

    # --- TrainableEngine -------------------------------------------------------------------------------

    def set_engine_dtype(self, dtypes: list[str]) -> None:
        """The replicas serve in ``dtypes`` (one per replica, from their start-up answers): pushes are cast to
        that dtype where they all agree (a bf16 engine receives bf16: half the bytes of a float32 policy)."""
        self.engine_dtype = dtypes[0] if dtypes and len(set(dtypes)) == 1 else None
        if dtypes and self.engine_dtype is None:
            log.warning("engine replicas serve in different dtypes %s: weight pushes keep the policy's dtype", dtypes)

    def _outgoing(self, model: Any, parameters_only: bool) -> tuple[dict[str, Any], dict[str, str], set[str]]:
        """What a push of ``model`` sends: name -> tensor, the tied names (left out -> kept), and the names
        sent whatever the change tracker says. A LoRA (peft) policy sends its base weights with the adapters
        merged in (W + B A * alpha / r, :func:`..lora.merged_weights`): replicas are plain models of the base,
        and the merged tensors are new every push. ``parameters_only``: parameters (the sync group's), else
        the state dict (buffers too; the host path's)."""
        if is_lora(model):
            from ..lora import merged_weights

            return merged_weights(model)
        if parameters_only:
            from ..weight_sync import sync_tensors

            named, ties = sync_tensors(model, everything=True)
            return named, ties, set()
        state = model.state_dict()
        ties = ChangeTracker.ties(state)
        return {n: t for n, t in state.items() if n not in ties}, ties, set()

    def _changed(self, named: dict[str, Any], always: set[str]) -> dict[str, Any]:
        assert self._tracker is not None
        changed = self._tracker.changed(named, everything=self._whole_state)
        changed.update((n, named[n]) for n in always if n not in changed)
        return changed

    def first_push(self, model: Any) -> Self:
        """Give freshly started replicas their first weights (policy version 0); a push that raises closes the
        replicas before the error goes on. Returns this client, ready."""
        try:
            self.update_weights(model, version=0)
        except BaseException:
            self.close()
            raise
        return self

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """Push the tensors of ``model`` that changed since the last push (vLLM: all; a LoRA policy: its base
        with the adapters merged) to every live replica, cast to the replicas' dtype (:attr:`engine_dtype`):
        over the sync group with ``grpo.weight_sync: collective``, else (or when that push fails) through host
        memory (:meth:`_push`)."""
        self._check_owner()
        version = self.policy_version + 1 if version is None else int(version)
        if self._uses_collective(model) and self._push_collective(model, version):
            return
        assert self._tracker is not None
        started = time.perf_counter()
        named, ties, always = self._outgoing(model, parameters_only=False)
        changed = _cast(self._changed(named, always), self.engine_dtype)
        extra = self._push(changed, ties, version)
        self._tracker.mark(named)
        self.policy_version, self._asleep = version, False
        self.sync_stats = {
            "tensors": float(len(changed)), "params": float(sum(t.numel() for t in changed.values())),
            "bytes": float(sum(t.numel() * t.element_size() for t in changed.values())), **extra,
            "total_s": time.perf_counter() - started,
        }

    def _uses_collective(self, model: Any) -> bool:
        """Whether this push goes over the sync group: ``grpo.weight_sync`` collective, or auto with the model
        on a GPU (from host memory the host path is faster: one shared-memory copy or object-store put that
        every replica reads, against gloo's loopback TCP)."""
        if self._pusher is None:
            return False
        return self.weight_sync == "collective" or self._collective_on_gpu(model)

    def _push_collective(self, model: Any, version: int) -> bool:
        """Push the changed tensors (vLLM: all) straight from ``model`` to the live replicas over the sync
        group (see :mod:`.collective`). False when it failed (e.g. a replica died: marked dead by a probe):
        the caller pushes through host memory instead."""
        named, ties, always = self._outgoing(model, parameters_only=True)
        changed = self._changed(named, always)
        on_gpu = self._collective_on_gpu(model)
        live = self.live()
        if self._pusher.forms_group(live, on_gpu):
            live = self.probe()  # no rendezvous with a replica that died unnoticed
        if not live:
            return False  # the host path raises the InfraError
        try:
            stats = self._pusher.push(self, live, changed, ties, version, on_gpu, cast=self.engine_dtype)
        except Exception:
            log.exception("collective weight push failed; pushing through host memory")
            self.probe()
            return False
        assert self._tracker is not None  # an owner's (it has a pusher)
        self._tracker.mark(named)
        self.policy_version, self._asleep = version, False
        self.sync_stats = {"tensors": float(len(changed)), "params": float(sum(t.numel() for t in changed.values())),
                           "bytes": stats["bytes"], "buckets": stats["buckets"], "put_s": 0.0,
                           "total_s": stats["seconds"]}
        return True

    def sleep(self) -> None:
        """Engines give their accelerator memory back during the update (colocated placement); the next
        ``update_weights`` wakes them: each replica as it receives the push (a vLLM engine asleep at level 2 has
        no weights to wake with before it)."""
        self._broadcast("sleep")
        self._asleep = True

    def wake_up(self) -> None:
        self._broadcast("wake_up")
        self._asleep = False

    def wake_weights(self) -> None:
        """The memory sequence's first wake (:mod:`..memory_phases`): every replica's weight memory, its KV
        cache still asleep, through the push that follows, until :meth:`wake_kv_cache`."""
        self._broadcast("wake_weights")

    def wake_kv_cache(self) -> None:
        """The memory sequence's last step: every replica's KV cache."""
        self._broadcast("wake_kv_cache")

    def _broadcast(self, method: str, *args: Any) -> list[Any]:
        infra = self._infra_errors()
        handles = [(i, self._submit(i, method, *args)) for i in self.live()]
        out = []
        for index, handle in handles:
            try:
                out.append(self._result(handle))
            except infra:
                self._lost(index)
        if not self.live():
            raise InfraError("no rollout engine replica is alive")
        return out

    def stats(self) -> list[dict[str, Any]]:
        return [self._result(self._submit(i, "stats")) for i in self.live()]


def _cast(named: dict[str, Any], dtype: str | None) -> dict[str, Any]:
    """``named`` with its floating-point tensors in ``dtype`` (None: as they are)."""
    if dtype is None:
        return named
    import torch

    target = getattr(torch, dtype)
    return {n: t.detach().to(target) if t.is_floating_point() else t for n, t in named.items()}
