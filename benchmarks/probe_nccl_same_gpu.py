"""Probe: can two processes on one GPU form an NCCL weight-sync group and broadcast (colocated members)?

No: on an H200 (torch 2.11, NCCL 2.28.9) both ranks fail with "Duplicate GPU detected" (docs/scaling.md). That is
why colocated members push over CUDA IPC (``SyncGroup(backend="ipc")``, chosen by ``backend="auto"``).

    python benchmarks/probe_nccl_same_gpu.py      # on a machine with a CUDA GPU
"""
import socket

import torch
import torch.multiprocessing as mp

from seal_platform_libs.policy.weight_sync import SyncGroup


def member(rank, port, q):
    try:
        torch.cuda.set_device(0)
        g = SyncGroup("127.0.0.1", port, rank, 2, host_store=(rank == 0), backend="nccl", device="cuda:0", timeout_s=30)
        t = torch.full((1024,), float(rank + 1), device="cuda:0")
        if rank == 0:
            t.fill_(7.0)
        g.broadcast(t)
        torch.cuda.synchronize()
        q.put((rank, "ok", float(t[0])))
        g.close()
    except Exception as e:
        q.put((rank, "error", f"{type(e).__name__}: {str(e)[:300]}"))

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=member, args=(r, port, q)) for r in range(2)]
    for p in ps:
        p.start()
    for _ in range(2):
        try:
            print("NCCL, 2 ranks on cuda:0:", q.get(timeout=60))
        except Exception as e:
            print("NCCL, 2 ranks on cuda:0: no answer in 60 s", type(e).__name__)
    for p in ps:
        if p.is_alive():
            p.kill()
