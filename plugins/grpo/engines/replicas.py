"""Rollout-engine replicas as Ray actors, a router that keeps a group on one replica, and weight sync.

:func:`start_replicas` places K :class:`EngineReplica` actors in one placement group (one bundle each:
``grpo.placement.engine_cpus`` / ``engine_gpus``), each building its engine with a picklable ``builder`` the engine's
plugin supplies (grpo builds its ``hf`` or ``vllm`` engine from the policy's config and weights, shipped once
through the object store). The returned :class:`RayEngineClient` satisfies the core's ``RolloutEngine``; it
pickles (actor handles and a tokenizer-bound prompt function), so episodes running in Ray actors use it too.

Routing: a conversation's key is its opening (everything up to the first user message: the system prompt and
the task), which every sample of a GRPO group and every turn of a dialogue share. A small router actor assigns
each new key to the live replica with the fewest keys and remembers it, so a group's prompt prefix is
prefilled (and, with vLLM, prefix-cached) on one replica only, and the groups spread evenly.

Weight sync (``update_weights``): the tensors that changed since the last push (torch's in-place version
counters tell; a full fine-tune changes all, a frozen part is never re-sent) are put into the object store
once and every live replica loads them, between its batches, with the new policy version; every Generation
carries the version it was sampled with. On one node the object store is shared memory; across nodes each
replica pulls one copy. With ``grpo.weight_sync: collective`` (the default) the same tensors go instead from
the driver's model straight to the replicas over a torch.distributed group (driver rank 0, replicas 1..K;
NCCL when model and replicas are on GPUs, else gloo) in size-bounded buckets (:mod:`..weight_sync`), each
replica receiving into its engine between batches; a failed collective push falls back to the object store.

Failures: a replica that dies (killed, its node lost) is marked dead at the router and its requests are
retried on another replica (same prompt, same seed); with none left, ``generate`` raises
:class:`seal_platform.infra.InfraError`, which executors turn into an infrastructure-failure trajectory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
import threading
from typing import Any, Callable

import ray

from seal_platform.infra import InfraError
from seal_platform.types import Generation, Message, SamplingParams

from .. import on_ray
from .shipping import ChangeTracker, pack, unpack, with_ties

log = logging.getLogger(__name__)

# --- actors ------------------------------------------------------------------------------------------------


@ray.remote(max_restarts=0)
class EngineReplica:
    """One engine replica: any engine with ``generate_ids``, ``load_weights`` and ``close``."""

    def __init__(self, builder: Callable[[], Any], index: int):
        self.index = index
        self.engine = builder()

    def ready(self) -> dict[str, Any]:
        return {"index": self.index, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "max_model_len": int(getattr(self.engine, "max_model_len", 0) or 0)}

    def generate_ids(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        return self.engine.generate_ids(prompts, sampling)

    def load_weights(self, box: list[Any], version: int | None) -> int:
        packed, ties = ray.get(box[0])
        self.engine.load_weights(with_ties(unpack(packed), ties), version)
        return int(getattr(self.engine, "policy_version", version or 0))

    def receive_weights(self, address: str, port: int, rank: int, world_size: int, backend: str) -> int:
        """Receive one collective push into the engine (joining the client's group when it changed)."""
        if not hasattr(self, "_receiver"):
            from .collective import ReplicaReceiver

            self._receiver = ReplicaReceiver()
        return self._receiver.receive(self.engine, address, port, rank, world_size, backend)

    def sleep(self) -> None:
        if callable(getattr(self.engine, "sleep", None)):
            self.engine.sleep()

    def wake_up(self) -> None:
        if callable(getattr(self.engine, "wake_up", None)):
            self.engine.wake_up()

    def stats(self) -> dict[str, Any]:
        return dict(getattr(self.engine, "stats", {}))

    def close(self) -> None:
        self.engine.close()


@ray.remote(max_restarts=-1)
class Router:
    """Sticky least-loaded assignment of conversation keys to live replicas."""

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


# --- the client ----------------------------------------------------------------------------------------------


def _is_lora(model: Any) -> bool:
    from ..lora import is_lora

    return is_lora(model)


def routing_key(conversation: list[Message]) -> str:
    """Everything up to and including the first user message (a group's and a dialogue's shared opening)."""
    opening = []
    for message in conversation:
        opening.append(f"{message.role}\x00{message.content}")
        if message.role == "user":
            break
    return hashlib.sha1("\x01".join(opening).encode()).hexdigest()


class RayEngineClient:
    """A ``RolloutEngine`` (and ``TrainableEngine``) over K replica actors. Thread-safe; picklable."""

    def __init__(self, kind: str, replicas: list[Any], router: Any, prompt_fn: Callable[[list[Message]], list[int]],
                 config: Any, group: Any = None, weight_sync: str = "host", bucket_bytes: int = 256 * 2**20):
        self.name = f"{kind}x{len(replicas)}@ray"
        self.replicas = replicas
        self.router = router
        self.prompt_fn = prompt_fn
        self.config = config
        self.policy_version = 0
        self._group = group
        self._owner = True  # the driver's copy owns the actors (closes them, tracks weight changes)
        self._tracker = ChangeTracker()
        # vLLM's in-place reload processes a layer once all of its weights have come (q/k/v and gate/up are
        # fused into one layer, the final norm goes with the output layer): a partial push would leave the
        # rest of a layer uninitialised, so its replicas get every tensor each time (each storage once).
        self._whole_state = kind == "vllm"
        self._lock = threading.Lock()
        self._routes: dict[str, int] = {}
        self.sync_stats: dict[str, float] = {}
        self._asleep = False
        self.weight_sync = weight_sync  # grpo.weight_sync: collective (a group with the replicas) or host
        self._pusher: Any = None
        if weight_sync == "collective":
            from .collective import ReplicaPusher

            self._pusher = ReplicaPusher(bucket_bytes)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_owner=False, _tracker=None, _lock=None, _routes={}, _group=None, _pusher=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # --- routing ---------------------------------------------------------------------------------------

    def _route(self, key: str) -> int:
        with self._lock:
            index = self._routes.get(key)
        if index is None:
            index = ray.get(self.router.route.remote(key))
            if index < 0:
                raise InfraError("no rollout engine replica is alive")
            with self._lock:
                self._routes[key] = index
        return index

    def _lost(self, index: int) -> None:
        ray.get(self.router.mark_dead.remote(index))
        with self._lock:
            self._routes = {k: v for k, v in self._routes.items() if v != index}

    def live(self) -> list[int]:
        return ray.get(self.router.live.remote())

    def probe(self, timeout_s: float = 30.0) -> list[int]:
        """Ask every replica thought alive whether it still is (a replica killed while no request or weight
        push reached it is otherwise found only by the next one); mark the dead ones; the live indices."""
        infra = on_ray.infra_errors(self.config)
        refs = [(i, self.replicas[i].ready.remote()) for i in self.live()]
        for index, ref in refs:
            try:
                ray.get(ref, timeout=timeout_s)
            except infra:
                self._lost(index)
            except ray.exceptions.GetTimeoutError:  # busy (a long generation): alive as far as we know
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
        return [self._one(p, k, s) for p, k, s in zip(prompts, keys, params)] if len(prompts) == 1 else \
            self._many(prompts, keys, params)

    def _one(self, prompt: list[int], key: str, sampling: SamplingParams) -> Generation:
        infra = on_ray.infra_errors(self.config)
        while True:
            index = self._route(key)
            try:
                return ray.get(self.replicas[index].generate_ids.remote([prompt], sampling))[0]
            except infra:
                self._lost(index)

    def _many(self, prompts: list[list[int]], keys: list[str], params: list[SamplingParams]) -> list[Generation]:
        refs = [(self._route(k), p, k, s) for p, k, s in zip(prompts, keys, params)]
        submitted = [(i, self.replicas[i].generate_ids.remote([p], s)) for i, p, _, s in refs]
        infra = on_ray.infra_errors(self.config)
        out = []
        for (index, ref), (_, prompt, key, sampling) in zip(submitted, refs):
            try:
                out.append(ray.get(ref)[0])
            except infra:
                self._lost(index)
                out.append(self._one(prompt, key, sampling))
        return out

    def count_tokens(self, conversation: list[Message]) -> int:
        return len(self.prompt_fn(conversation))

    # --- TrainableEngine -------------------------------------------------------------------------------

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """Push the tensors of ``model`` that changed since the last push to every live replica."""
        import time

        if not self._owner:
            raise RuntimeError("update_weights is called on the driver's engine, not on a copy in an episode")
        version = self.policy_version + 1 if version is None else int(version)
        # vLLM serves a LoRA policy's adapters as LoRA requests, which a sync group does not feed.
        if self._pusher is not None and not (self._whole_state and _is_lora(model)):
            if self._push_collective(model, version):
                return
        started = time.perf_counter()
        if self._asleep:
            self.wake_up()
        state = model.state_dict()
        changed = self._tracker.changed(state, everything=self._whole_state)
        packed = pack(changed)
        box = [ray.put((packed, ChangeTracker.ties(state)))]
        put_s = time.perf_counter() - started
        self._broadcast("load_weights", box, version)
        self._tracker.mark(state)
        self.policy_version = version
        self.sync_stats = {
            "tensors": float(len(changed)), "params": float(sum(t.numel() for t in changed.values())),
            "bytes": float(sum(a.nbytes for _, a in packed.values())), "put_s": put_s,
            "total_s": time.perf_counter() - started,
        }

    def _push_collective(self, model: Any, version: int) -> bool:
        """Push the changed tensors (vLLM: all) straight from ``model`` to the live replicas over the sync group
        (NCCL when model and replicas are on GPUs, else gloo; see :mod:`.collective`). False when it failed
        (e.g. a replica died: marked dead by a probe): the caller pushes through the object store instead."""
        from ..weight_sync import sync_tensors

        named, ties = sync_tensors(model, everything=True)
        changed = self._tracker.changed(named, everything=self._whole_state)
        on_gpu = next(model.parameters()).is_cuda and float(self.config.placement.engine_gpus) > 0
        live = self.live()
        if self._pusher.forms_group(live, on_gpu):
            live = self.probe()  # no rendezvous with a replica that died unnoticed
        if not live:
            return False  # the object-store path raises the InfraError
        try:
            stats = self._pusher.push(self.replicas, live, changed, ties, version, on_gpu)
        except Exception:
            log.exception("collective weight push failed; pushing through the object store")
            self.probe()
            return False
        self._tracker.mark(named)
        self.policy_version, self._asleep = version, False
        self.sync_stats = {"tensors": float(len(changed)), "params": float(sum(t.numel() for t in changed.values())),
                           "bytes": stats["bytes"], "buckets": stats["buckets"], "put_s": 0.0,
                           "total_s": stats["seconds"]}
        return True

    def mark_synced(self, model: Any) -> None:
        """The replicas were built from ``model``'s current weights: the next push sends only changes."""
        self._tracker.mark(model.state_dict())

    def sleep(self) -> None:
        """Engines give their accelerator memory back during the update (colocated placement); the next
        ``update_weights`` wakes them first."""
        self._broadcast("sleep")
        self._asleep = True

    def wake_up(self) -> None:
        self._broadcast("wake_up")
        self._asleep = False

    def _broadcast(self, method: str, *args: Any) -> list[Any]:
        infra = on_ray.infra_errors(self.config)
        live = self.live()
        refs = [(i, getattr(self.replicas[i], method).remote(*args)) for i in live]
        out = []
        for index, ref in refs:
            try:
                out.append(ray.get(ref))
            except infra:
                self._lost(index)
        if not self.live():
            raise InfraError("no rollout engine replica is alive")
        return out

    def stats(self) -> list[dict[str, Any]]:
        return [ray.get(self.replicas[i].stats.remote()) for i in self.live()]

    def close(self) -> None:
        if not self._owner:
            return
        self._owner = False
        if self._pusher is not None:
            self._pusher.close()
        for replica in self.replicas:
            try:
                ray.get(replica.close.remote(), timeout=30)
            except Exception:  # dead or stuck: killed below
                pass
            ray.kill(replica, no_restart=True)
        ray.kill(self.router, no_restart=True)
        if self._group is not None:
            try:
                ray.util.remove_placement_group(self._group)
            except Exception:
                pass
        on_ray.release(self.config)


def start_replicas(kind: str, config: on_ray.OnRay, n: int, builder: Callable[[], Any],
                   prompt_fn: Callable[[list[Message]], list[int]], weight_sync: str = "host",
                   bucket_bytes: int = 256 * 2**20) -> RayEngineClient:
    """K replicas of an engine (``builder()`` runs in each replica's actor), placed per ``config`` (the run's
    Ray cluster and ``grpo.placement``), and the client that routes to them (pushing weights as
    ``weight_sync`` says: ``collective`` or ``host``, see :class:`RayEngineClient`)."""
    on_ray.acquire(config)
    try:
        place = config.placement
        if place.colocate:  # the trainer workers' bundles, shared (engines sleep during the update)
            strategies, group = on_ray.colocated(config, n), None
        else:
            bundles = [{"CPU": place.engine_cpus, "GPU": place.engine_gpus}] * n
            strategies, group = on_ray.placement(config, bundles, name=f"seal-engines-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        replicas = [
            EngineReplica.options(
                num_cpus=place.engine_cpus, num_gpus=place.engine_gpus, max_concurrency=256,
                scheduling_strategy=strategies[i],
            ).remote(builder, i)
            for i in range(n)
        ]
        ray.get([r.ready.remote() for r in replicas])
        router = Router.remote(n)
    except BaseException:
        on_ray.release(config)
        raise
    return RayEngineClient(kind, replicas, router, prompt_fn, config, group, weight_sync=weight_sync,
                           bucket_bytes=bucket_bytes)
