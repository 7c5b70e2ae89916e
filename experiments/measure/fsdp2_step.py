"""One of the gloo ranks that measure an FSDP2 training step on the CPU (started by torchrun from
experiments.measure.memory.measure_fsdp2_steps): the policy prepared as seal's trainer prepares it under
launch.sharding=fsdp2 (the plugin arguments of seal.rl.config.grpo_config, accelerate's FSDP2 path through
seal.rl.sharding.shard_on_gloo, bf16 mixed precision with seal's policy, a reduction every micro-batch), gradient
checkpointing, TRL's fused LM head and transformers' fused AdamW. Rank 0 writes what its rank holds, model by
model, to the JSON file named on the command line.

usage: torchrun --standalone --nproc_per_node 2 -m experiments.measure.fsdp2_step OUT.json ARCHS_JSON TOKENS"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def prepared(arch: dict, world: int):
    """(accelerator, model, optimizer) for `arch` as GRPOTrainer prepares the policy under fsdp2."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState, PartialState
    from accelerate.utils import DistributedType, GradientAccumulationPlugin
    from trl.trainer.utils import add_fused_lm_head

    from experiments.measure.memory import _compose, _small_model
    from seal.budget import Budget
    from seal.rl.config import grpo_config, score_labelled_positions_only
    from seal.rl.sharding import check_policy, shard_on_gloo

    # a fresh accelerator for every model measured: accelerate keeps one shared state per process, and
    # shard_on_gloo left it on FSDP where the launch itself is gloo ranks
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_CPU
    cfg = _compose("backbone=tiny-random")
    with tempfile.TemporaryDirectory() as out:
        args = grpo_config(cfg, Budget.from_config(cfg.budget, world), Path(out), 10**6, "bfloat16", "fsdp2")
    accelerator = Accelerator(cpu=True, mixed_precision=args.mixed_precision,
                              gradient_accumulation_plugin=GradientAccumulationPlugin(
                                  num_steps=1, **args.accelerator_config.gradient_accumulation_kwargs))
    shard_on_gloo(accelerator, args.fsdp_plugin_args)
    model = _small_model(arch, torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    score_labelled_positions_only()  # as a run's trainer scores them (seal.rl.config)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    # transformers' default optimizer (adamw_torch_fused), prepared with the model as FSDP2 requires
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True))
    check_policy(model, "bfloat16", "policy")
    return accelerator, model, optimizer


def measure(arch: dict, tokens: int, rank: int, world: int) -> dict[str, int]:
    """This rank's resident terms (the sizes of its shards) and the three moments of a micro-batch (the peaks of
    the tensors alive above them while an accumulation's second micro-batch runs), as measure_training_step
    counts them under ddp. The backward is split where the last decoder layer's backward starts (before it the
    head's and the final norm's, and the reduction of the unit holding them; the decoder layers' after it) and
    ends where the embedding's starts: its gradient and the reduction of the unit holding it come after the
    last layer, beside nothing a layer's backward holds."""
    import torch

    from experiments.measure.memory import step_peaks

    accelerator, model, optimizer = prepared(arch, world)
    ids = torch.randint(0, arch["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(rank))

    def shards() -> dict[str, list]:
        return {"weights": [p.to_local() for p in model.parameters()],
                "optimizer": [t.to_local() for s in optimizer.optimizer.state.values() for t in s.values() if t.dim()],
                "gradients": [p.grad.to_local() for p in model.parameters()]}

    inner = model.model
    peaks = step_peaks(model, ids, autocast=accelerator.autocast, backward=accelerator.backward, optimizer=optimizer,
                       held=lambda: [t for held in shards().values() for t in held],
                       starts={inner.layers[-1]: "layer backward", inner.embed_tokens: ""})
    return {name: sum(t.nbytes for t in held) for name, held in shards().items()} | peaks


def main(out: Path, archs: list[dict], tokens: int) -> None:
    from seal.rl import distributed

    dist = distributed.current(10, sharded=True)
    try:
        measured = [measure(arch, tokens, dist.rank, dist.world) for arch in archs]
        if dist.rank == 0:
            out.write_text(json.dumps(measured))
    finally:
        distributed.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3]))
