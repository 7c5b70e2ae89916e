"""Data-parallel facts of this process: rank, world size, and gathering Python objects across ranks.

Under `accelerate launch` or `torchrun` every rank plays its share of a round's episodes; what
changes shared state (labels, rewards, the failure profile) is gathered first, so every rank applies
the same deterministic update and holds the same rho and Omega. A single process needs none of it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from seal.errors import UserError


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def gather(self, items: list) -> list:
        """Every rank's list, concatenated in rank order, on every rank."""
        if self.world == 1:
            return list(items)
        from accelerate.utils import gather_object

        return list(gather_object(list(items)))

    def report(self, key: str, item: Any, seconds: float | None = None) -> list | None:
        """Every rank's `item` (what JSON holds) in rank order, on every rank, exchanged through the process group's
        key-value store (`key`: unique to the exchange within this launch), not through a collective: a rank may
        report while another is blocked in a collective that waits for it, where a collective of its own would
        pair with that one. None when a rank has not reported within `seconds` (None: the store's own timeout,
        the process group's)."""
        if self.world == 1:
            return [item]
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _get_default_store

        store = _get_default_store()
        store.set(f"{key}/{self.rank}", json.dumps(item))
        keys = [f"{key}/{rank}" for rank in range(self.world)]
        try:
            store.wait(keys) if seconds is None else store.wait(keys, timedelta(seconds=seconds))
        except dist.DistStoreError:
            return None
        return [json.loads(store.get(k)) for k in keys]

    def check_agree(self, what: str, state: Any) -> None:
        """Stop the run when the ranks' copies of shared state have drifted apart."""
        if self.world == 1:
            return
        digest = hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()
        digests = self.gather([digest])
        if len(set(digests)) != 1:
            raise RuntimeError(f"the ranks disagree on {what} (digests by rank: {digests}); shared state drifted")

    def shard(self, items: list) -> list:
        """This rank's share of `items` (every world-th item)."""
        return list(items[self.rank :: self.world])


def local_world(dist: Dist) -> int:
    """Processes of this run on this node."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", dist.world))


def cuda_devices() -> int:
    """The GPUs this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def machine_kind(world: int) -> str:
    """What the job's processes run on, to compare one run's rates with another's (seal.report.clock): the
    GPUs' name and how many the job uses, else the CPU's model and the cores this process may use."""
    import platform

    import torch

    if torch.cuda.is_available():
        return f"{world} x {torch.cuda.get_device_name()}"
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{world} process{'es' if world > 1 else ''} on {model or platform.machine() or 'a CPU'} ({cores} cores)"


def collective_timeout(minutes: Any) -> timedelta:
    """launch.timeout_minutes as the process group's timeout, with one sentence for a value that is not one."""
    number = isinstance(minutes, (int, float)) and not isinstance(minutes, bool)
    # (NaN fails both comparisons; infinity and what timedelta cannot hold fail the second)
    if number and 0 < minutes <= timedelta.max // timedelta(minutes=1):
        return timedelta(minutes=minutes)
    raise UserError(f"launch.timeout_minutes={minutes!r}: give a positive number of minutes a rank may wait "
                    "for the others in a collective (e.g. 120)")


def current(timeout_minutes: Any, *, sharded: bool = False) -> Dist:
    """The process group of this launch (initialised here when a launcher started several ranks, or one rank
    that shards its model: `sharded`, FSDP2 needs a group whatever its size), whose collectives fail after
    `timeout_minutes` (launch.timeout_minutes) of waiting."""
    timeout = collective_timeout(timeout_minutes)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and not (sharded and os.environ.get("LOCAL_RANK") is not None):
        return Dist()
    import torch
    from accelerate import PartialState

    # the group is made here, before any trainer: TRL's ddp_timeout would come too late to set it.
    # Without a GPU, accelerate joins the ranks over gloo only when told the run is on the CPU
    state = PartialState(cpu=not torch.cuda.is_available(), timeout=timeout)
    return Dist(rank=state.process_index, world=state.num_processes)


def close() -> None:
    """Leave this launch's process group, when the process joined one, so that every rank ends cleanly
    (torch warns about, and a loaded machine may abort at exit on, a group left for the interpreter's teardown)."""
    import sys

    dist = sys.modules.get("torch.distributed")  # a run that never imported it never joined a group
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    vllm_groups = sys.modules.get("vllm.distributed.parallel_state")
    if vllm_groups is not None:
        # an in-process vLLM engine made groups of its own inside this one, and its exit handler destroys them:
        # after the world group is gone that raises at exit. vLLM's teardown removes its groups, then the world's
        vllm_groups.cleanup_dist_env_and_memory()
    else:
        dist.destroy_process_group()
