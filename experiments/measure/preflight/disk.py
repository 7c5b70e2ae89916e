"""The disk the preflight needs (checkpoints, models, the built model) and the time a step may take,
which grows with what it loads and writes."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.measure.preflight.model import compose
from experiments.measure.preflight.steps import COMMON, TINY_SHAPE, GiB, train_overrides
from seal.errors import UserError

# what the plan assumes a node's disk sustains while loading and writing models and checkpoints (GiB/s): a
# slow network file system's rate, so that a step's timeout catches a hang, not a slow disk
DISK_GIB_PER_S = 0.2
# a step's time beyond its disk traffic: imports, the model's build, the rounds themselves, vLLM's start
BASE_STEP_S = 600
# the same without CUDA, where the runs are the tiny shape's at a CPU's speed, in bf16 like a GPU node's: the
# paper miniature's train run on two gloo ranks took 10 min 36 s on a 2-core machine alone (2026-12-02)
BASE_STEP_CPU_S = 1800


@dataclass(frozen=True)
class DiskPlan:
    """What the preflight writes under --out, in bytes, and what its runs read."""

    checkpoint: int
    checkpoints: int
    model: int
    models: int
    built: int
    # what one run (sanity, train) loads from the built model: every rank its policy and its reference (TRL loads
    # the reference from the model's path), and under vLLM every rank's engine once more
    loaded: int
    # the built model is already there (an earlier preflight's, reused): its bytes are on the disk, not to come
    reused: bool = False

    @property
    def total(self) -> int:
        return self.checkpoint * self.checkpoints + self.model * self.models + (0 if self.reused else self.built)

    def step_timeout(self, engine_starts: int = 0, cuda: bool = True) -> float:
        """Seconds one run may take: BASE_STEP_S (BASE_STEP_CPU_S without CUDA), as much again for each vLLM
        start, and the disk traffic at DISK_GIB_PER_S."""
        base = BASE_STEP_S if cuda else BASE_STEP_CPU_S
        return base * (1 + engine_starts) + (self.total + self.loaded) / GiB / DISK_GIB_PER_S

    def describe(self) -> str:
        built = "the built model reused" if self.reused else f"the built model {self.built / GiB:.1f} GiB"
        return (f"{self.total / GiB:.1f} GiB ({self.checkpoints} checkpoint(s) of {self.checkpoint / GiB:.1f} GiB at "
                f"once, {self.models} model(s) of {self.model / GiB:.1f} GiB, {built})")


def disk_plan(name: str, bb: dict[str, Any], tiny: bool, overrides: list[str], processes: int,
              vllm: bool = False, reused: bool = False) -> DiskPlan:
    """The train step's checkpoints and models (seal.rl.checkpoint.run_disk_need, as the run itself refuses a disk
    too small, but for the whole node: every rank's share of a sharded checkpoint lands on this disk), and the
    built model, from the (tiny or published) architecture alone. `vllm`: the runs' rollouts are vLLM's (each rank's
    engine loads the model too); `reused`: the built model is there already."""
    from seal.budget import Budget
    from seal.policy.memory import _BYTES, param_count
    from seal.rl.checkpoint import run_disk_need

    cfg = compose(name, [*train_overrides(processes, overrides), *COMMON, *overrides], mine=overrides)
    budget = Budget.from_config(cfg.budget, processes)
    arch = bb["arch"] | (TINY_SHAPE if tiny else {})
    need = run_disk_need(arch, cfg, budget, budget.train_entries, dtype=bb["dtype"])
    model = param_count(arch) * _BYTES[bb["dtype"]]
    return DiskPlan(checkpoint=need.checkpoint, checkpoints=need.at_once, model=need.model, models=need.models,
                    built=model, loaded=processes * model * (3 if vllm else 2), reused=reused)


def check_disk(plan: DiskPlan, out: Path) -> str:
    """The disk line printed first; one sentence when --out's disk cannot hold what the runs write."""
    free = shutil.disk_usage(out).free
    line = f"the runs write up to {plan.describe()} under {out}; {free / GiB:.1f} GiB free there"
    if plan.total > free:
        raise UserError(f"{line}: free space, or choose a larger disk with --out, before the preflight starts")
    return line


