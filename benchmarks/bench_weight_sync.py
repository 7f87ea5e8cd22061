"""Weight sync per GB: the collective path (``grpo.weight_sync: collective``, gloo on CPU) against the host path
(``host``), side by side in one run, on the two hops grpo makes after an update.

* **rank -> driver** (``grpo.train_workers > 1``): a trainer process holds the weights. host: the state dict is
  sent through a ``torch.multiprocessing`` pipe (tensors moved to shared memory, as ``LocalTrainerGroup``
  does) and loaded into the driver's copy with ``load_state_dict``. collective: the trainer pushes over a gloo
  :class:`~seal_platform_libs.policy.weight_sync.SyncGroup` in buckets, received into the driver's copy.
* **driver -> K replicas** (``grpo.replicas`` on Ray): host: ``pack`` + ``ray.put`` once, each replica actor
  ``ray.get`` + ``unpack`` + copy into its model (``RayEngineClient``'s object-store path). collective: the
  driver pushes over one gloo group to the K actors, each receiving into its model.
* **driver -> K local replica processes** (``engine.replicas`` / ``engine.gpus`` without Ray): host: the
  tensors copied once into one shared-memory file (``engines/buckets.py``), each process maps it and copies
  into its model (``LocalEngineClient``'s host path). collective: the driver pushes over one gloo group to the
  K processes, each receiving into its model (a ``receive`` request over its pipe first, as the client's
  ``receive_weights`` call).

The weights are ``--size-mb`` MiB of float32 tensors of ``--tensor-mb`` MiB each (a model's layers). Each
path is timed ``--repeats`` times after one warm-up push; the table gives the median seconds and seconds per
GB (1e9 bytes). Every receiver's copy is checked against the sender's after the last push of each path.

    .venv/bin/python benchmarks/bench_weight_sync.py --size-mb 1024 --replicas 2
    .venv/bin/python benchmarks/bench_weight_sync.py --size-mb 16 --repeats 1   # a quick check
    python benchmarks/bench_weight_sync.py --device cuda --size-mb 4096   # one GPU: CUDA IPC vs host path

Numbers depend on the machine and its load; nothing here is asserted. Needs ray for the second hop
(``--no-ray`` skips it; the local-replicas hop needs no Ray).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any

import torch

from seal_platform_libs.policy.weight_sync import SyncGroup, load_into, push, receive, sync_tensors


class Blob(torch.nn.Module):
    """``n`` float32 parameters of ``numel`` elements each, filled with ``fill``."""

    def __init__(self, n: int, numel: int, fill: float = 0.0):
        super().__init__()
        for i in range(n):
            setattr(self, f"p{i}", torch.nn.Parameter(torch.full((numel,), fill), requires_grad=True))

    def bump(self) -> None:
        with torch.no_grad():
            for p in self.parameters():
                p.add_(1.0)

    def first(self) -> float:
        return float(next(self.parameters()).detach()[0])


def _free_port() -> int:
    from seal_platform_libs.policy.engines.collective import free_port

    return free_port()


# --- hop 1: a trainer process -> the driver ------------------------------------------------------------------


def _backend(device: str) -> str:
    """Both processes on one GPU: CUDA IPC (NCCL refuses two ranks on one GPU); on the CPU: gloo."""
    return "ipc" if device.startswith("cuda") else "gloo"


def _trainer(n: int, numel: int, rounds: int, mode: str, port: int, bucket_bytes: int, conn: Any,
             device: str = "cpu") -> None:
    torch.set_num_threads(1)
    model = Blob(n, numel).to(device)
    group = (
        SyncGroup("127.0.0.1", port, 0, 2, backend=_backend(device), device=device) if mode == "collective" else None
    )
    for k in range(rounds):
        conn.recv()  # the driver is ready
        model.bump()
        if group is None:  # the host path: a state dict in host memory through the pipe (full_state_dict's)
            conn.send({name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()})
        else:
            named, ties = sync_tensors(model)
            push(named, group, version=k, ties=ties, bucket_bytes=bucket_bytes)
    conn.recv()
    if group is not None:
        group.close()


def hop_trainer_to_driver(args: argparse.Namespace, mode: str) -> tuple[list[float], bool]:
    import torch.multiprocessing as mp

    n, numel = _shape(args)
    rounds = args.repeats + 1
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    port = _free_port()
    proc = ctx.Process(target=_trainer, args=(n, numel, rounds, mode, port, args.bucket_mb * 2**20, child,
                                              args.device), daemon=True)
    proc.start()
    driver = Blob(n, numel).to(args.device)
    group = (SyncGroup("127.0.0.1", port, 1, 2, host_store=True, backend=_backend(args.device), device=args.device)
             if mode == "collective" else None)
    times = []
    for _ in range(rounds):
        parent.send("go")
        started = time.perf_counter()
        if group is None:
            driver.load_state_dict(parent.recv())
        else:
            receive(group, functools.partial(load_into, driver))
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    parent.send("stop")
    proc.join(timeout=60)
    if group is not None:
        group.close()
    return times[1:], driver.first() == float(rounds)


def _driver_push(driver: Blob, group: Any, port: int, world: int, version: int, args: argparse.Namespace) -> Any:
    """The driver's side of one collective push to its replicas (gloo rank 0, hosting the store; the group is
    formed on the first push and kept); returns the group."""
    if group is None:
        group = SyncGroup("127.0.0.1", port, 0, world, host_store=True, backend="gloo")
    named, ties = sync_tensors(driver)
    push(named, group, version=version, ties=ties, bucket_bytes=args.bucket_mb * 2**20)
    return group


# --- hop 2: the driver -> K replica actors ---------------------------------------------------------------------


def _replica_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class Replica:
        def __init__(self, n: int, numel: int):
            torch.set_num_threads(1)
            self.model = Blob(n, numel)
            self.group: Any = None

        def load(self, box: list[Any]) -> None:
            from seal_platform_libs.policy.engines.shipping import unpack

            packed, _ = ray.get(box[0])
            params = self.model.state_dict()
            with torch.no_grad():
                for name, tensor in unpack(packed).items():
                    params[name].copy_(tensor)

        def receive(self, address: str, port: int, rank: int, world: int) -> None:
            if self.group is None:
                self.group = SyncGroup(address, port, rank, world, backend="gloo")
            receive(self.group, functools.partial(load_into, self.model))

        def first(self) -> float:
            return self.model.first()

    return Replica


def hop_driver_to_replicas(args: argparse.Namespace, mode: str) -> tuple[list[float], bool]:
    import ray

    from seal_platform_libs.policy.engines.shipping import pack

    n, numel = _shape(args)
    replicas = [_replica_class().remote(n, numel) for _ in range(args.replicas)]
    ray.get([r.first.remote() for r in replicas])
    driver = Blob(n, numel)
    port, group = _free_port(), None
    times = []
    for k in range(args.repeats + 1):
        driver.bump()
        started = time.perf_counter()
        if mode == "host":
            box = [ray.put((pack(driver.state_dict()), {}))]
            ray.get([r.load.remote(box) for r in replicas])
        else:
            refs = [r.receive.remote("127.0.0.1", port, j + 1, len(replicas) + 1) for j, r in enumerate(replicas)]
            group = _driver_push(driver, group, port, len(replicas) + 1, k, args)
            ray.get(refs)
        times.append(time.perf_counter() - started)
    ok = all(v == driver.first() for v in ray.get([r.first.remote() for r in replicas]))
    for r in replicas:
        ray.kill(r)
    if group is not None:
        group.close()
    return times[1:], ok


# --- hop 3: the driver -> K local replica processes (no Ray) ------------------------------------------------------


def _local_replica(n: int, numel: int, conn: Any) -> None:
    from seal_platform_libs.policy.engines import buckets

    torch.set_num_threads(1)
    model, group = Blob(n, numel), None
    while True:
        message = conn.recv()
        if message[0] == "load":  # the host path: map the shared-memory file, copy into the model
            params = model.state_dict()
            with torch.no_grad():
                for name, tensor in buckets.read(message[1]).items():
                    params[name].copy_(tensor)
        elif message[0] == "receive":
            if group is None:
                group = SyncGroup(*message[1:], backend="gloo")
            receive(group, functools.partial(load_into, model))
        else:
            conn.send(model.first())
            break
        conn.send(None)
    if group is not None:
        group.close()


def hop_driver_to_local_replicas(args: argparse.Namespace, mode: str) -> tuple[list[float], bool]:
    import multiprocessing

    from seal_platform_libs.policy.engines import buckets

    n, numel = _shape(args)
    ctx = multiprocessing.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(args.replicas)]
    procs = [ctx.Process(target=_local_replica, args=(n, numel, child), daemon=True) for _, child in pipes]
    for proc in procs:
        proc.start()
    conns = [parent for parent, _ in pipes]
    driver = Blob(n, numel)
    port, group = _free_port(), None
    times = []
    for k in range(args.repeats + 1):
        driver.bump()
        started = time.perf_counter()
        if mode == "host":
            bucket = buckets.write(dict(driver.state_dict()))
            for conn in conns:
                conn.send(("load", bucket.to_dict()))
            for conn in conns:
                conn.recv()
            bucket.remove()
        else:
            for j, conn in enumerate(conns):
                conn.send(("receive", "127.0.0.1", port, j + 1, len(conns) + 1))
            group = _driver_push(driver, group, port, len(conns) + 1, k, args)
            for conn in conns:
                conn.recv()
        times.append(time.perf_counter() - started)
    firsts = []
    for conn in conns:
        conn.send(("stop",))
        firsts.append(conn.recv())
    for proc in procs:
        proc.join(timeout=60)
    if group is not None:
        group.close()
    return times[1:], all(v == driver.first() for v in firsts)


def _shape(args: argparse.Namespace) -> tuple[int, int]:
    per = max(1, int(args.tensor_mb * 2**20) // 4)
    return max(1, int(args.size_mb * 2**20) // (per * 4)), per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=1024.0, help="MiB of float32 weights pushed per sync")
    parser.add_argument("--tensor-mb", type=float, default=16.0, help="MiB per tensor")
    parser.add_argument("--bucket-mb", type=int, default=256, help="grpo.weight_sync_bucket_mb")
    parser.add_argument("--replicas", type=int, default=2, help="engine replicas of the second hop")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true", help="only the rank -> driver hop")
    parser.add_argument("--device", default="cpu", help="where both ends of the rank -> driver hop hold the "
                        "weights; cuda: both on one GPU (colocated), collective = CUDA IPC, host = through host "
                        "memory and the pipe (implies --no-ray)")
    args = parser.parse_args()
    if args.device != "cpu":
        args.no_ray = True
    n, numel = _shape(args)
    gb = n * numel * 4 / 1e9
    print(f"weights: {n} float32 tensors of {numel * 4 / 2**20:.1f} MiB = {gb:.3f} GB; bucket {args.bucket_mb} MiB; "
          f"{args.repeats} timed pushes per path (median)")
    rows = []
    hops = [("rank -> driver", hop_trainer_to_driver)]
    if args.device == "cpu":
        hops.append((f"driver -> {args.replicas} local procs", hop_driver_to_local_replicas))
    if not args.no_ray:
        import ray

        ray.init(num_cpus=max(2, args.replicas), include_dashboard=False, log_to_driver=False)
        hops.append((f"driver -> {args.replicas} replicas", hop_driver_to_replicas))
    try:
        for label, hop in hops:
            found = {}
            for mode in ("host", "collective"):
                times, ok = hop(args, mode)
                found[mode] = statistics.median(times)
                if not ok:
                    raise SystemExit(f"{label} ({mode}): a receiver's weights differ from the sender's")
            rows.append((label, found["host"], found["collective"]))
    finally:
        if not args.no_ray:
            ray.shutdown()
    print(f"\n{'hop':<28} {'host s':>9} {'host s/GB':>10} {'coll. s':>9} {'coll. s/GB':>11} {'host/coll.':>10}")
    for label, host, coll in rows:
        print(f"{label:<28} {host:>9.3f} {host / gb:>10.3f} {coll:>9.3f} {coll / gb:>11.3f} {host / coll:>10.2f}")


if __name__ == "__main__":
    main()
