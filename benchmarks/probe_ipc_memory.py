"""Does a CUDA IPC weight push leave GPU memory behind? A sender and two receivers on cuda:0 (the colocated
case: ``SyncGroup(backend="auto")`` picks ``ipc``), 1 GiB of float32 weights in 256 MiB buckets, pushed 20
times; the sender's and one receiver's allocated and reserved memory, and the GPU's used memory, after pushes
1, 2, 5, 10 and 20. Flat figures: nothing left behind.

    python3 benchmarks/probe_ipc_memory.py      # on a GPU machine (benchmarks/gpu_checks.sh runs it)

On an H200 with torch 2.11 (2026-11-27), before each receiver got its own share of a bucket
(``seal_platform_libs/policy/ipc_sync.py``), the sender held 2, 3, 6, 11, 21 GiB: every pushed bucket stayed allocated.
With one share per receiver, on the same kind of machine: 1.00 GiB allocated (1.50 reserved) after every push.
"""

import os
import subprocess
import sys
import time

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.getcwd())
from seal_platform_libs.policy.weight_sync import SyncGroup, push, receive  # noqa: E402
from seal_platform_plugins.grpo.distributed import free_port  # noqa: E402

PUSHES, WORLD, NUMEL = 20, 3, 64 * 1024 * 1024  # 4 tensors x 64 Mi float32 = 1 GiB
MARKS = {1, 2, 5, 10, 20}


def report(who: str, k: int) -> None:
    torch.cuda.synchronize()
    line = (f"{who} push {k:2d}: allocated {torch.cuda.memory_allocated() / 2**30:6.2f} GiB, reserved "
            f"{torch.cuda.memory_reserved() / 2**30:6.2f} GiB")
    if who == "sender":
        used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True).stdout.strip()
        line += f"; GPU used {used} MiB"
    print(line, flush=True)


def member(rank: int, port: int) -> None:
    torch.cuda.set_device(0)
    group = SyncGroup("127.0.0.1", port, rank, WORLD, host_store=(rank == 0), backend="auto", device="cuda:0",
                      timeout_s=120)
    if rank == 0:
        print("backend:", group.backend, flush=True)
        named = {f"w{i}": torch.randn(NUMEL, device="cuda:0") for i in range(4)}
        for k in range(1, PUSHES + 1):
            for t in named.values():
                t.add_(0.001)
            push(named, group, version=k, bucket_bytes=256 * 1024 * 1024)
            if k in MARKS:
                report("sender", k)
    else:
        dst = {f"w{i}": torch.zeros(NUMEL, device="cuda:0") for i in range(4)}

        def sink(incoming):
            for name, t in incoming:
                dst[name].copy_(t)

        for k in range(1, PUSHES + 1):
            receive(group, sink)
            if k in MARKS and rank == 1:
                report("receiver1", k)
    group.close()


if __name__ == "__main__":
    port, started = free_port(), time.time()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=member, args=(r, port)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    print("exit codes:", [p.exitcode for p in procs], f"in {time.time() - started:.1f} s", flush=True)
    sys.exit(0 if all(p.exitcode == 0 for p in procs) else 1)
