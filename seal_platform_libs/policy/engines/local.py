"""Engine replicas as processes on this machine, without Ray: one per GPU (or per ``engine.replicas``).

:func:`start_local_replicas` spawns K processes, each pinned to its device before CUDA starts
(``CUDA_VISIBLE_DEVICES`` = its GPU, or empty for a CPU replica, whose torch / vLLM threads get their own
share of the cores). Each builds the recipe's engine (``hf`` or ``vllm``) from the policy's
:class:`.spec.PolicySpec`, without weights, exactly as a Ray replica builds it (:func:`.remote.build_engine`),
and the driver then pushes the trainer's weights to all of them (policy version 0), cast to the engines'
dtype, as after every update. Each serves calls over a pipe: each generation
request is submitted to the engine's queue at once (so requests from many episode threads batch in the
replica), and its result goes back when done.

The returned :class:`LocalEngineClient` is the same :class:`.routing.ReplicaClient` the Ray replicas use:
sticky group routing, retry of a dead replica's requests on another one (same prompt and seed), sleep / wake,
and weight pushes of the changed tensors (vLLM: all). With ``grpo.weight_sync: collective`` (or ``auto``, the default,
for a model on a GPU) a push goes from the trainer's model straight to the live replicas over one sync group (driver
rank 0, replicas 1..K; gloo when the model is on the CPU, else ``auto``: CUDA IPC / NCCL / gloo from the members' GPUs):
each replica's ``receive_weights`` call joins the group and receives into its engine on the engine's worker thread,
between batches (:mod:`.collective`, the same code as the Ray replicas'), and returns once the push is in. The
shared-memory file carries every push with ``grpo.weight_sync: host`` (``auto`` from a model in host memory)
and a push whose collective attempt failed. A LoRA policy's replicas are plain models of its base and receive
its merged weights. A replica process that exits is found by
its pipe closing (or, before a push, by its process being gone); its pending calls fail over, and the next
collective push re-forms the group with the live replicas. One stopped (SIGSTOP) during a push is killed.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from seal_platform.types import Message

from . import buckets
from .base import QueuedEngine
from .routing import ReplicaClient, StickyRouter
from .shipping import with_ties
from .spec import PolicySpec
from .stopped import StoppedWatch

log = logging.getLogger(__name__)

# Calls a replica answers (nothing else is looked up on the engine).
_METHODS = ("generate_ids", "ready", "load_bucket", "receive_weights", "abort_receive", "score", "sleep", "wake_up",
            "wake_weights", "wake_kv_cache", "stats")


def _exited(process: Any) -> bool:
    """Whether a replica process has exited. Its sentinel, not ``is_alive()``: once anything else in this
    process reaps children (a ``waitpid(-1)``, a SIGCHLD handler), ``is_alive()`` stays True for a dead child."""
    from multiprocessing.connection import wait

    return bool(wait([process.sentinel], timeout=0)) or process.exitcode is not None


class ReplicaLost(RuntimeError):
    """The replica's process is gone (exited, killed) or its pipe broke."""


class ReplicaError(RuntimeError):
    """A call raised inside a replica; the message holds its traceback."""


# --- inside a replica process ----------------------------------------------------------------------------------


def _pin(device: str | None, threads: int, cpus: list[int] | None) -> None:
    """Before torch touches a device: the replica sees only its GPU (or none), and a CPU replica only its
    share of the cores (torch threads; vLLM's OpenMP binding)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "" if device is None else device
    if cpus:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)
        with contextlib.suppress(AttributeError, OSError):  # not Linux
            os.sched_setaffinity(0, set(cpus))
    import torch

    torch.set_num_threads(max(1, threads))


def _replica_main(index: int, spec: dict[str, Any], conn: Any) -> None:
    """A replica process: build the engine, then serve ``(kind, id, method, args)`` messages until closed."""
    _pin(spec["device"], spec["threads"], spec["cpus"])
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock, contextlib.suppress(OSError, EOFError):  # the driver is gone
            conn.send(message)

    try:
        import torch

        from .remote import build_engine

        if spec["seed"] is not None:
            torch.manual_seed(int(spec["seed"]) + index)  # sampling without a request seed differs per replica
        engine = build_engine(spec["kind"], spec["settings"], spec["policy"], spec["tokenizer"], spec["seed"])
    except BaseException:
        send((0, "error", traceback.format_exc()))
        return
    send((0, "ok", _info(index, engine)))
    from .collective import ReplicaReceiver

    receiver = ReplicaReceiver()  # this replica's membership of the client's sync group

    def reply(rid: int, fn: Callable[[], Any]) -> None:
        try:
            send((rid, "ok", fn()))
        except BaseException:
            send((rid, "error", traceback.format_exc()))

    def answer(rid: int, future: Future) -> None:
        reply(rid, future.result)

    def run(rid: int, method: str, args: tuple[Any, ...]) -> None:
        if method == "generate_ids" and len(args[0]) == 1:  # one request: straight into the engine's queue
            try:
                future = engine.submit(args[0][0], args[1])
            except BaseException:
                send((rid, "error", traceback.format_exc()))
                return
            future.add_done_callback(lambda f: reply(rid, lambda: [f.result()]))
            return
        threading.Thread(target=reply, args=(rid, lambda: _call(index, engine, receiver, method, args)),
                         daemon=True).start()

    while True:
        try:
            kind, rid, method, args = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            break
        if kind == "close":
            receiver.close()
            reply(rid, engine.close)
            break
        run(rid, method, args)


def _info(index: int, engine: QueuedEngine) -> dict[str, Any]:
    return {"index": index, "pid": os.getpid(), "max_model_len": int(engine.max_model_len or 0),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "dtype": engine.dtype}


def _call(index: int, engine: QueuedEngine, receiver: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method == "generate_ids":
        return engine.generate_ids(*args)
    if method == "ready":
        return _info(index, engine)
    if method == "load_bucket":
        bucket, ties, version = args
        engine.load_weights(with_ties(buckets.read(bucket), ties), version)
        return int(engine.policy_version)
    if method == "receive_weights":  # (address, port, rank, world_size, backend): returns once the push is in
        return receiver.receive(engine, *args)
    if method == "abort_receive":  # (address, port): the driver gave that push up (a member died)
        return receiver.abort(*args)
    if method == "score":  # log-probs of fixed sequences under the engine's current weights (a sync check)
        from ..testing import sequence_logprobs

        if engine.model is None:
            raise ValueError(f"a {engine.name} replica holds no torch model to score with (hf replicas do)")
        return engine.call_in_worker(lambda: sequence_logprobs(engine.model, args[0]))
    if method in ("sleep", "wake_up", "wake_weights", "wake_kv_cache"):  # the memory sequence's calls
        return {"sleep": engine.sleep, "wake_up": engine.wake_up, "wake_weights": engine.wake_weights,
                "wake_kv_cache": engine.wake_kv_cache}[method]()
    if method == "stats":
        return dict(engine.stats)
    raise ValueError(f"a local engine replica has no method {method!r} (it answers {', '.join(_METHODS)})")


# --- the driver's side -------------------------------------------------------------------------------------------


class _Replica:
    """The driver's end of one replica process: calls out, a reader thread resolving their futures."""

    def __init__(self, index: int, process: Any, conn: Any):
        self.index = index
        self.process = process
        self.conn = conn
        self.alive = True
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.started: Future = Future()  # the start-up answer (call id 0)
        self._pending: dict[int, Future] = {0: self.started}
        self._reader = threading.Thread(target=self._read, name=f"engine-replica-{index}", daemon=True)
        self._reader.start()

    def call(self, kind: str, method: str, *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if not self.alive:
                future.set_exception(ReplicaLost(f"engine replica {self.index} is gone"))
                return future
            rid = next(self._ids)
            self._pending[rid] = future
            try:
                self.conn.send((kind, rid, method, args))
            except (OSError, EOFError, ValueError) as exc:
                self._pending.pop(rid, None)
                future.set_exception(ReplicaLost(f"engine replica {self.index}: {exc}"))
        return future

    def _read(self) -> None:
        while True:
            try:
                rid, status, value = self.conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._pending.pop(rid, None)
            if future is None or future.done():
                continue
            if status == "ok":
                future.set_result(value)
            else:
                future.set_exception(ReplicaError(f"engine replica {self.index}:\n{value}"))
        self.process.join(timeout=5)
        with self._lock:
            self.alive = False
            pending, self._pending = list(self._pending.values()), {}
        lost = ReplicaLost(f"engine replica {self.index} exited (exit code {self.process.exitcode})")
        for future in pending:
            if not future.done():
                future.set_exception(lost)

    def stop(self, timeout_s: float) -> None:
        """Close politely, then kill; wait for the process and the reader."""
        if self.alive:
            with contextlib.suppress(Exception):  # dead, stuck or closed with an error: killed below
                self.call("close", "close").result(timeout=timeout_s)
        self.process.join(timeout=timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)
        self._reader.join(timeout=10)  # it sees the pipe close once the process is gone
        with contextlib.suppress(OSError):
            self.conn.close()


class LocalEngineClient(ReplicaClient):
    """A ``RolloutEngine`` (and ``TrainableEngine``) over K local replica processes. Thread-safe; not picklable
    (episodes run in this process's threads)."""

    def __init__(self, kind: str, replicas: list[_Replica], prompt_fn: Callable[[list[Message]], list[int]],
                 devices: list[str | None], weight_sync: str = "auto", bucket_bytes: int = 256 * 2**20):
        where = "cpu" if all(d is None for d in devices) else "gpu"
        super().__init__(f"{kind}x{len(replicas)}@local-{where}", replicas, prompt_fn, whole_state=kind == "vllm",
                         weight_sync=weight_sync, bucket_bytes=bucket_bytes)
        self.kind = kind
        self.devices = devices
        self.router = StickyRouter(len(replicas))
        self._router_lock = threading.Lock()
        self._closed = False
        self.max_model_len = 0
        self.requests = [0] * len(replicas)  # prompts sent to each replica (retries included)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("local engine replicas are driven from the process that started them; on Ray use "
                        "settings.grpo.replicas (Ray actors), which episodes in Ray actors can call")

    # --- the transport ---------------------------------------------------------------------------------

    def _submit(self, index: int, method: str, *args: Any) -> Future:
        if method == "generate_ids":
            with self._router_lock:
                self.requests[index] += len(args[0])
        return self.replicas[index].call("call", method, *args)

    def _result(self, handle: Future, timeout: float | None = None) -> Any:
        return handle.result(timeout=timeout)

    def _router_call(self, method: str, *args: Any) -> Any:
        with self._router_lock:
            return getattr(self.router, method)(*args)

    def _infra_errors(self) -> tuple[type[BaseException], ...]:
        return (ReplicaLost,)

    def _check_owner(self) -> None:
        if self._closed:
            raise RuntimeError("the local engine replicas are closed")

    def _collective_on_gpu(self, model: Any) -> bool:
        return bool(next(model.parameters()).is_cuda) and any(d is not None for d in self.devices)

    def live(self) -> list[int]:
        """The replicas not marked dead, after marking those whose process is gone (no push waits for one)."""
        for index in super().live():
            replica = self.replicas[index]
            if not replica.alive or _exited(replica.process):
                self._lost(index)
        return super().live()

    def update_weights(self, model: Any, version: int | None = None) -> None:
        """:meth:`.routing.ReplicaClient.update_weights`; a replica stopped during it is killed (:mod:`.stopped`)."""
        with StoppedWatch(self.replicas):
            super().update_weights(model, version)

    def _push(self, changed: dict[str, Any], ties: dict[str, str], version: int) -> dict[str, float]:
        """The host path: one shared-memory file for all replicas; removed once every live one has loaded it."""
        started = time.perf_counter()
        bucket = buckets.write(changed)
        put_s = time.perf_counter() - started
        try:
            self._broadcast("load_bucket", bucket.to_dict(), ties, version)
        finally:
            bucket.remove()
        return {"put_s": put_s}

    def pids(self) -> list[int]:
        """The replica processes' ids (alive or not)."""
        return [int(r.process.pid) for r in self.replicas]

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop every replica process (politely, then by force) and wait for them."""
        if self._closed:
            return
        self._closed = True
        if self._pusher is not None:
            self._pusher.close()
        threads = [threading.Thread(target=r.stop, args=(timeout_s,)) for r in self.replicas]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def start_local_replicas(kind: str, model: Any, tokenizer: Any, settings: Any, devices: list[int | None],
                         seed: int | None, timeout_s: float = 900.0, weight_sync: str = "auto",
                         bucket_bytes: int = 256 * 2**20) -> LocalEngineClient:
    """One replica process of the ``kind`` engine per entry of ``devices`` (a CUDA index as this process sees
    it, or None: on CPU), started together from ``model``'s current weights; the routing client over them
    (pushing weights as ``weight_sync`` says: ``collective`` or ``host``, see :class:`LocalEngineClient`)."""
    from ..tokens import prompt_ids
    from .settings import cpu_shares, visible_device

    if not devices:
        raise ValueError("start_local_replicas needs at least one device entry (None for a CPU replica)")
    cuda = [visible_device(d) for d in devices]
    on_cpu = [i for i, d in enumerate(cuda) if d is None]
    shares = cpu_shares(len(on_cpu)) if on_cpu else []
    policy = PolicySpec.of(model)  # no weights: the first push brings them, once every replica is up
    context = multiprocessing.get_context("spawn")
    replicas: list[_Replica] = []
    try:
        for index, device in enumerate(cuda):
            cpus = shares[on_cpu.index(index)] if device is None else None
            spec = {
                "kind": kind,
                "settings": settings,
                "policy": policy,
                "tokenizer": tokenizer,
                "seed": seed,
                "device": device,
                "cpus": cpus,
                "threads": len(cpus) if cpus else 1,
            }
            parent, child = context.Pipe()
            process = context.Process(target=_replica_main, args=(index, spec, child), daemon=True,
                                      name=f"seal-engine-replica-{index}")
            process.start()
            child.close()
            replicas.append(_Replica(index, process, parent))
        deadline = time.monotonic() + timeout_s
        errors = []
        for replica in replicas:
            try:
                replica.started.result(timeout=max(1.0, deadline - time.monotonic()))
            except Exception as exc:
                errors.append(f"replica {replica.index}: {exc}")
        if errors:
            raise RuntimeError("local engine replicas failed to start:\n" + "\n".join(errors))
    except BaseException:
        for replica in replicas:
            replica.stop(timeout_s=10)
        raise
    client = LocalEngineClient(kind, replicas, functools.partial(prompt_ids, tokenizer), cuda, weight_sync,
                               bucket_bytes)
    infos = [r.started.result() for r in replicas]
    client.max_model_len = min(int(i["max_model_len"]) for i in infos)
    client.set_engine_dtype([i["dtype"] for i in infos])
    return client.first_push(model)  # the replicas' first weights: policy version 0


__all__ = ["LocalEngineClient", "ReplicaError", "ReplicaLost", "start_local_replicas"]
