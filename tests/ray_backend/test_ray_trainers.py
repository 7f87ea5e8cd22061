"""Trainer workers as Ray actors: N ranks placed in a placement group, one process group (gloo) formed at
rank 0's rendezvous, every call collective, rank 0's answer returned."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")



class SumWorker:
    """A minimal collective worker with TrainerWorker's constructor and methods."""

    def __init__(self, rank, world_size, address, port, options):
        import os

        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)
        self.rank, self.updates, self.scale, self.pid = rank, 0, options["scale"], os.getpid()

    def step(self, samples):
        import torch.distributed as dist

        t = torch.tensor([float(sum(samples[self.rank :: dist.get_world_size()]))])
        dist.all_reduce(t)
        self.updates += 1
        return {"total": float(t.item()) * self.scale, "rank": self.rank}

    def full_state_dict(self):
        import torch.distributed as dist

        pids = [None] * dist.get_world_size()
        dist.all_gather_object(pids, self.pid)
        return {"pids": pids} if self.rank == 0 else None

    def close(self):
        import torch.distributed as dist

        dist.destroy_process_group()


def test_ranks_form_one_group_and_calls_are_collective(local_ray):
    from seal_platform_libs.policy.ray_trainers import RayTrainerGroup

    with RayTrainerGroup(SumWorker, 2, {"scale": 10.0}, local_ray) as group:
        out = group.step(list(range(1, 7)))  # rank 0 sums 1+3+5, rank 1 2+4+6; all_reduce: 21
        assert out == {"total": 210.0, "rank": 0}
        assert group.updates == 1
        pids = group.full_state_dict()["pids"]
        assert len(set(pids)) == 2  # two processes
    assert group.actors == []
