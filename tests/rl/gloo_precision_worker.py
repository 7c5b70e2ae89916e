"""One of two gloo ranks (started by torchrun from tests/rl/test_sharding_gloo.py): one accumulation window of a
tiny Llama's gradients under the three set-ups a GPU node could train with, each prepared the way seal's trainer
prepares it (accelerate's FSDP2 path through seal.rl.sharding, or DDP), in bf16 mixed precision:

- fsdp2: seal's plugin arguments (grpo_config: bf16 parameters, fp32 reduction and outputs, a reduction every
  micro-batch, as transformers' loop decides from sync_each_batch);
- ddp: fp32 master weights under bf16 autocast, gradients accumulated in fp32 (accelerate's no_sync until the
  window's last micro-batch), the 3B row's arithmetic;
- accelerate: accelerate's own policy for the same bf16 launch (bf16 reduction and outputs) with its no_sync
  accumulation, what seal trained with before.

Then seal's fsdp2 and ddp again with the loss through TRL's fused LM head (GRPO's path to the head).

Writes <out>/rank<r>.json: each set-up's gradients against ddp's (relative to ddp's largest), the dtype of the
log-probs TRL's fused LM head hands the loss, the bytes of the residual stream the decoder layers pass on (what
gradient checkpointing keeps), the FSDP2 root's policy, and the same for the reference model as
seal.rl.sharding.shard_reference shards it."""

import contextlib
import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import GradientAccumulationPlugin
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.utils import add_fused_lm_head

from seal.rl import distributed, sharding
from tests.rl.ranks import leave_without_teardown

MICRO_BATCHES = 8


TINY = dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128)


def tiny() -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY))
    # as GRPOTrainer does before anything is prepared
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    return model


def what_the_loss_receives(accelerator: Accelerator, model, ids: torch.Tensor) -> dict:
    """The dtype of the log-probs of TRL's scoring forward (GRPOTrainer._get_per_token_logps_and_entropies: the
    fused head under accelerate's autocast), and the bytes per token of the residual stream that gradient
    checkpointing keeps: the outputs of the embedding and of every decoder layer but the last (the inputs of
    the layers), and the rotary tables, as each unit hands them on."""
    inner = getattr(model, "module", model).model
    kept = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: kept.append(out[0] if isinstance(out, tuple) else out))
             for m in (inner.embed_tokens, *inner.layers[:-1])]
    hooks.append(inner.rotary_emb.register_forward_hook(lambda _m, _i, out: kept.extend(out)))
    with torch.no_grad(), accelerator.autocast():
        out = model(input_ids=ids, labels=ids, fused_lm_head=True)
    for hook in hooks:
        hook.remove()
    return {"log_probs_dtype": str(out.log_probs.dtype),
            "stream_dtypes": sorted({str(t.dtype) for t in kept}),
            "kept_bytes_per_token": sum(t.nbytes for t in kept) // ids.numel()}


def batches(rank: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + rank)
    return [torch.randint(0, 96, (1, 24), generator=generator) for _ in range(MICRO_BATCHES)]


def accelerator_for(setup: str, plugin_args: dict | None, sync_each_batch: bool) -> Accelerator:
    """A fresh accelerator (accelerate keeps one shared state per process: reset between set-ups)."""
    from accelerate.state import AcceleratorState, GradientState, PartialState
    from accelerate.utils import DistributedType

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    # shard_on_gloo left the process's shared state on FSDP: the launch itself is gloo ranks
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_CPU
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_plugin=GradientAccumulationPlugin(
        num_steps=1, sync_each_batch=sync_each_batch))
    if plugin_args is not None:
        sharding.shard_on_gloo(accelerator, plugin_args)
    return accelerator


def unsharded_gradient_bytes(model) -> int:
    """Bytes of whole-size gradients FSDP2 holds for `model` outside a backward (what it keeps to accumulate
    micro-batches it did not reduce: the unsharded parameters' own gradients, or their upcast copies)."""
    from torch.distributed.fsdp import FSDPModule

    held = 0
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        for group in module._get_fsdp_state()._fsdp_param_groups:
            for fsdp_param in group.fsdp_params:
                unsharded = getattr(fsdp_param, "_unsharded_param", None)
                for grad in (fsdp_param.unsharded_accumulated_grad, getattr(unsharded, "grad", None)):
                    held += 0 if grad is None else grad.nbytes
    return held


def micro_batch_loss(model, ids: torch.Tensor, head: str) -> torch.Tensor:
    """A micro-batch's share of the window's loss, the mean negative log-likelihood of its next tokens, through the
    model's logits (`logits`) or through TRL's fused LM head (`fused`: the path of GRPO's loss, which reads the head's
    weight itself, so that FSDP2's unit of the final norm and the head runs its forward only in part)."""
    if head == "fused":
        return -model(input_ids=ids, labels=ids, fused_lm_head=True).log_probs.mean() / MICRO_BATCHES
    logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits.float()[0, :-1], ids[0, 1:]) / MICRO_BATCHES


def window(setup: str, rank: int, plugin_args: dict | None, sync_each_batch: bool,
           head: str = "logits") -> tuple[dict, dict]:
    """One accumulation window; (name -> whole fp32 gradient, facts)."""
    accelerator = accelerator_for(setup, plugin_args, sync_each_batch)
    model = tiny()
    model, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))
    facts = {}
    for i, ids in enumerate(batches(rank)):
        last = i == MICRO_BATCHES - 1
        # transformers' loop (Trainer._inner_training_loop): no_sync unless sync_each_batch or the last micro-batch
        sync = accelerator.gradient_state.plugin_kwargs.get("sync_each_batch", False) or last
        with contextlib.nullcontext() if sync else accelerator.no_sync(model):
            with accelerator.autocast():
                loss = micro_batch_loss(model, ids, head)
            accelerator.backward(loss)
        if i == 0 and plugin_args is not None:
            facts["held_between_micro_batches"] = unsharded_gradient_bytes(model)
    if plugin_args is not None:
        # this rank's part of the gradients once the window is reduced
        facts["sharded_gradient_bytes"] = sum(p.grad.to_local().nbytes for p in model.parameters())
        facts["parameters"] = sum(p.numel() for p in model.parameters())
    grads = {}
    for name, param in model.named_parameters():
        grad = param.grad
        facts.setdefault("grad_dtype", str(grad.dtype))
        grads[name.removeprefix("module.")] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).float()
    if plugin_args is not None:
        facts["policy"] = policy_of(model)
    # last: a forward without a backward leaves FSDP2's root unit gathered
    facts |= what_the_loss_receives(accelerator, model, batches(rank)[0])
    return grads, facts


def policy_of(model) -> list[str]:
    policy = model._get_fsdp_state()._mp_policy
    return [str(policy.param_dtype), str(policy.reduce_dtype), str(policy.output_dtype)]


def scored_reference(setup: str, plugin_args: dict, rank: int) -> dict:
    """The reference model (bf16, as TRL loads it with the backbone's dtype) sharded by seal.rl.sharding.shard_reference
    under the set-up's plugin, and what its scoring forward hands the loss."""
    accelerator = accelerator_for(setup, plugin_args, True)
    model = tiny().to(torch.bfloat16)
    sharding.shard_reference(model, accelerator)
    return {"policy": policy_of(model)} | what_the_loss_receives(accelerator, model, batches(rank)[0])


def exact(world: int, head: str = "logits") -> dict:
    """The window's gradient computed here, without any collective: the model's parameters in bf16 (what FSDP2's
    bf16 param_dtype gathers), each micro-batch of every rank under the same autocast, its logits in fp32, each
    bf16 gradient summed in float64, then averaged over the ranks (what the reduction divides by)."""
    model = tiny()
    for param in model.parameters():
        # parameters only: FSDP2 casts no buffer (the rotary frequencies stay fp32)
        param.data = param.data.to(torch.bfloat16)
    total = {name: torch.zeros_like(p, dtype=torch.float64) for name, p in model.named_parameters()}
    for rank in range(world):
        for ids in batches(rank):
            model.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = micro_batch_loss(model, ids, head)
            loss.backward()
            for name, p in model.named_parameters():
                total[name] += p.grad.double()
    return {name: (g / world).float() for name, g in total.items()}


def main(out: Path) -> None:
    from seal.budget import Budget
    from seal.rl.config import grpo_config
    from tests.test_configs import compose_with

    dist = distributed.current(10)
    cfg = compose_with("backbone=tiny-random")
    args = grpo_config(cfg, Budget.from_config(cfg.budget, dist.world), out / "unused", 8, "bfloat16", "fsdp2")
    seal_plugin = dict(args.fsdp_plugin_args)
    sync = args.accelerator_config.gradient_accumulation_kwargs["sync_each_batch"]
    accelerate_plugin = {k: v for k, v in seal_plugin.items() if k != "mixed_precision_policy"}

    ddp, ddp_facts = window("ddp", dist.rank, None, False)
    reference = exact(dist.world)
    report = {"ddp": ddp_facts}
    scale = max(g.abs().max().item() for g in ddp.values())
    for setup, plugin, each in (("fsdp2", seal_plugin, sync), ("accelerate", accelerate_plugin, False)):
        grads, facts = window(setup, dist.rank, plugin, each)
        facts["diff_to_ddp"] = max((grads[k] - ddp[k]).abs().max().item() for k in ddp) / scale
        facts["diff_to_exact"] = max((grads[k] - reference[k]).abs().max().item() for k in ddp) / scale
        facts["reference"] = scored_reference(setup, plugin, dist.rank)
        report[setup] = facts
    # GRPO's loss reaches the head through TRL's fused head: the same comparisons on that path, seal's set-up
    fused_ddp, _ = window("ddp", dist.rank, None, False, "fused")
    fused_exact = exact(dist.world, "fused")
    fused, _ = window("fsdp2", dist.rank, seal_plugin, sync, "fused")
    fused_scale = max(g.abs().max().item() for g in fused_ddp.values())
    report["fsdp2_fused_head"] = {
        "diff_to_ddp": max((fused[k] - fused_ddp[k]).abs().max().item() for k in fused_ddp) / fused_scale,
        "diff_to_exact": max((fused[k] - fused_exact[k]).abs().max().item() for k in fused_ddp) / fused_scale,
        # the fused path's gradients against the logits path's, both exact: the same loss through another kernel
        "exact_to_logits_path": max((fused_exact[k] - reference[k]).abs().max().item() for k in fused_ddp) / scale,
        "head_gradient_norm": fused["lm_head.weight"].norm().item(),
    }
    (out / f"rank{dist.rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    distributed.close()
    leave_without_teardown()
