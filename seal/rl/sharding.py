"""How the training state is spread over the ranks of a launch: `ddp` or `fsdp2` (`launch.sharding`).

`ddp` replicates the model, its gradients and the optimizer state on every rank (what fits: LoRA, and
full fine-tuning up to about 3B parameters on 80 GB). `fsdp2` is PyTorch's FSDP2 (`fully_shard`) through
accelerate, as transformers' Trainer drives it: fp32 master weights, gradients and AdamW state divided
over the ranks, every decoder layer gathered in the compute dtype only while it computes, sharded
checkpoints (each rank writes its own part). What the project adds around it:

- the reference model (KL term) sharded per layer with its parameters offloaded to host memory, as the
  authors ran it (TRL would shard it as one unit, so its first forward would gather the whole model);
- an unsharded compute-dtype copy of the policy that the transformers rollout engine generates with,
  refreshed from the shards at the start of every play (generating with the sharded model would need
  every rank to run the same number of forward passes, and the ranks' episodes differ in length);
- the final model gathered into one full state dict in the backbone's dtype;
- the authors' precision (their FSDP workers: bf16 parameters, fp32 gradient reduction, no output cast):
  accelerate's own policy for a bf16 launch would also reduce gradients in bf16 and cast every forward's
  output (TRL's fp32 log-probs of the policy, the old policy and the reference) to bf16, which leaves the
  k3 KL of nearby policies mostly exact zeros; and a gradient reduction after every micro-batch, so that
  the fp32 reduction never keeps a full-size unsharded gradient on a rank between micro-batches (that
  reduction after every micro-batch is this project's choice, not the authors');
- on a CPU (gloo processes, the tests' stand-in for GPUs), accelerate 1.15 turns an FSDP plugin into
  plain data parallelism; `shard_on_gloo` restores the FSDP2 path there, so the same accelerate code
  (fully_shard in bf16, the sharded save and load, the full state dict) runs on the CPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from seal.errors import UserError
from seal.policy.memory import SHARDINGS

CHOICES = ("auto", *SHARDINGS)


def launched_sharding() -> str | None:
    """The sharding an `accelerate launch --config_file ...` asked for (None: not said by the launch)."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() != "true":
        return None
    version = os.environ.get("FSDP_VERSION", "1")
    if version != "2":
        raise UserError(
            f"the accelerate launch config asks for FSDP version {version}; seal trains with FSDP2: use "
            "experiments/cluster/accelerate/fsdp2.yaml (fsdp_version: 2)"
        )
    return "fsdp2"


def under_a_launcher() -> bool:
    """Whether a launcher (torchrun, accelerate launch) started this process, even as its only rank: FSDP2
    needs the process group such a launch provides."""
    return os.environ.get("LOCAL_RANK") is not None


def requested(value: str) -> str | None:
    """What `launch.sharding` asks for before the ranks are counted (auto: the accelerate launch's, if any)."""
    return launched_sharding() if value == "auto" else value


def resolve(requested: str, world: int) -> str:
    """The run's sharding: `launch.sharding` checked against the launch and the number of ranks. FSDP2 runs
    on any number of ranks, one included (the same arithmetic as the paper's 4-GPU node, on one GPU), as long
    as a launcher started the process."""
    if requested not in CHOICES:
        raise UserError(f"launch.sharding={requested!r}: choose one of {', '.join(CHOICES)}")
    launched = launched_sharding()
    if requested == "auto":
        requested = launched or "ddp"
    elif launched is not None and launched != requested:
        raise UserError(
            f"launch.sharding={requested} but the accelerate launch config asks for {launched}: launch with "
            f"experiments/cluster/accelerate/{requested}.yaml, or drop the override (launch.sharding=auto)"
        )
    if requested == "fsdp2" and world < 2 and not under_a_launcher():
        raise UserError(
            "launch.sharding=fsdp2 runs its ranks under a launcher, and this process was started without one: "
            "add launch.processes=<GPUs> (1 for one GPU), or launch `accelerate launch --config_file "
            "experiments/cluster/accelerate/fsdp2.yaml --num_processes <GPUs> run.py ...`, or use launch.sharding=ddp"
        )
    return requested


def check_devices(world_on_node: int, cuda_devices: int) -> None:
    """Every rank of a node needs a GPU of its own (rank i uses cuda:i), and a training process of its own
    for every GPU it sees: a single process that sees several GPUs is refused before anything loads, since
    transformers would count them all (n_gpu) and TRL's trainer then refuses to spread one process over them
    (DataParallel), after the whole evaluation before training."""
    if cuda_devices and world_on_node > cuda_devices:
        raise UserError(
            f"{world_on_node} ranks were launched on this node but it has {cuda_devices} GPU(s): set the launch "
            f"config's num_processes (or --nproc_per_node) to {cuda_devices}"
        )
    if world_on_node == 1 and cuda_devices > 1 and not under_a_launcher():
        raise UserError(
            f"this single training process sees {cuda_devices} GPUs, and TRL's trainer takes one GPU per process: "
            f"start one process per GPU (launch.processes={cuda_devices}, or launch=paper), or show it one GPU "
            "(CUDA_VISIBLE_DEVICES=0 python run.py ...)"
        )


def check_combination(sharding: str, *, lora: bool) -> None:
    """Refuse, before anything loads, what the sharded path cannot do."""
    if sharding != "fsdp2":
        return
    if lora:
        raise UserError(
            "LoRA adapters are trained with launch.sharding=ddp (the frozen base fits every rank): drop "
            "backbone.lora or use experiments/cluster/accelerate/ddp.yaml"
        )


# what transformers' Trainer writes into a checkpoint of an FSDP2 model (accelerate's sharded model folder)
SHARDED_MODEL = "pytorch_model_fsdp_0"


def check_checkpoint(checkpoint: Any, sharding: str) -> None:
    """A checkpoint resumes under the sharding that wrote it (any number of ranks)."""
    written = "fsdp2" if (checkpoint / SHARDED_MODEL).is_dir() else "ddp"
    if written != sharding:
        raise UserError(
            f"{checkpoint} was written with launch.sharding={written} and this launch is {sharding}: resume it "
            f"with experiments/cluster/accelerate/{written}.yaml, or start the run in another hydra.run.dir"
        )


# accelerate's names of the mixed precision a launch asks for, by the backbone's compute dtype
MIXED_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "no"}


def mixed_precision(compute_dtype: str) -> str:
    """accelerate's `mixed_precision` for a backbone's compute dtype: the backbone decides, never the launch
    config (whose bf16 is the paper backbones')."""
    if compute_dtype not in MIXED_PRECISION:
        raise ValueError(f"compute dtype {compute_dtype!r}: choose one of {', '.join(MIXED_PRECISION)}")
    return MIXED_PRECISION[compute_dtype]


def mixed_precision_policy(compute_dtype: str) -> Any:
    """FSDP2's policy, as the authors' FSDP workers set it: parameters gathered in the compute dtype, gradients
    reduced in fp32, and no output cast (output_dtype None). TRL's fused LM head computes the log-probs in
    fp32 and they reach the loss so; accelerate's default would cast them to the compute dtype. A cast to
    fp32 would not change one value either (each unit's output is computed in the compute dtype), but it
    applies to every unit: the residual stream between the decoder layers, which gradient checkpointing
    keeps for the backward, would be stored in fp32, twice the memory (seal.policy.memory plans it in the
    compute dtype). Buffers are not FSDP2's to cast: they stay in the dtype the model was loaded in."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=getattr(torch, compute_dtype), reduce_dtype=torch.float32,
                                output_dtype=None)


def grpo_arguments(sharding: str) -> dict[str, Any]:
    """transformers' TrainingArguments for the sharding (nothing for ddp, accelerate's default). The mixed
    precision policy is not a TrainingArguments value: `plugin_arguments` adds it to what transformers builds."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    if sharding == "ddp":
        return {}
    return {
        "fsdp": True,
        "fsdp_config": {
            "version": 2,
            # every decoder layer (the model's _no_split_modules) is one FSDP unit
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "reshard_after_forward": True,
            # each rank writes its own shard of the model and optimizer: no gather at every checkpoint
            "state_dict_type": "SHARDED_STATE_DICT",
            "cpu_ram_efficient_loading": False,
        },
        # reduce-scatter every micro-batch's gradients (into the sharded fp32 gradients) instead of keeping
        # full-size unsharded ones in the compute dtype through the accumulation window (accelerate's no_sync)
        "accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": True}},
    }


def check_policy(model: Any, compute_dtype: str, what: str) -> None:
    """That FSDP2 holds seal's policy (mixed_precision_policy) on `model`'s root, as prepared by accelerate
    (the policy) or shard_reference (the reference): the plugin's policy passes through accelerate and
    transformers, whose handling of it has changed between versions (accelerate's set_mixed_precision
    replaces a policy it is not given). Under fsdp2 a model FSDP2 did not shard is an error too."""
    state = getattr(model, "_get_fsdp_state", None)
    if state is None:
        raise RuntimeError(f"launch.sharding=fsdp2 but the {what} was not sharded by FSDP2 (accelerate prepared it as "
                           f"{type(model).__name__}): the installed accelerate or transformers prepares it differently "
                           "(requirements.txt pins them)")
    held, wanted = state()._mp_policy, mixed_precision_policy(compute_dtype)
    if held != wanted:
        raise RuntimeError(f"FSDP2 prepared the {what} with {held}, not seal's {wanted}: the installed accelerate or "
                           "transformers passes the plugin's policy on differently (requirements.txt pins them)")


def check_in_host_memory(model: Any, what: str) -> None:
    """That every parameter of the sharded `model` (each rank's shard) lives in host memory: on CUDA the reference
    as shard_reference asks FSDP2 to keep it (CPUOffloadPolicy) and the memory plan counts it (on a CPU there is
    no other memory). Read back from the prepared model, so that a library that moved it would stop the run."""
    elsewhere = {str(local.device) for p in model.parameters()
                 if (local := p.to_local() if hasattr(p, "to_local") else p).device.type != "cpu"}
    if elsewhere:
        raise RuntimeError(f"FSDP2 holds the {what}'s parameters on {', '.join(sorted(elsewhere))}, not in host memory "
                           "as seal.rl.sharding.shard_reference asks and the memory plan counts them: the installed "
                           "torch or TRL prepares it differently (requirements.txt pins them)")


def check_reference(model: Any | None, compute_dtype: str) -> None:
    """The prepared reference model under fsdp2: seal's policy on it (check_policy) and its shards in host memory
    (check_in_host_memory). None: no reference to check (trainer.beta=0, where TRL builds none)."""
    if model is None:
        return
    check_policy(model, compute_dtype, "reference model")
    check_in_host_memory(model, "reference model")


def plugin_arguments(args: Any, compute_dtype: str) -> None:
    """Complete transformers' FSDP plugin arguments (TrainingArguments.fsdp_plugin_args) with the policy of
    `mixed_precision_policy`: the plugin keeps a policy it is given, whatever mixed precision the launch says."""
    if args.fsdp_plugin_args is not None:
        args.fsdp_plugin_args["mixed_precision_policy"] = mixed_precision_policy(compute_dtype)


def shard_on_gloo(accelerator: Any, plugin_args: dict[str, Any]) -> None:
    """Put accelerate on its FSDP path on the CPU. accelerate 1.15 keeps an FSDP plugin only on
    accelerators and turns a CPU launch into plain data parallelism (MULTI_CPU), although torch's
    `fully_shard` trains over gloo; the distributed type lives in two shared states (PartialState's is
    copied into AcceleratorState whenever one is built), so both are set."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    if accelerator.distributed_type != DistributedType.MULTI_CPU:
        raise RuntimeError(f"FSDP on gloo is a CPU stand-in; this launch is {accelerator.distributed_type}")
    plugin = FullyShardedDataParallelPlugin(**plugin_args)
    if accelerator.mixed_precision != "no":
        # as AcceleratorState does on a GPU: a policy already given (plugin_arguments) is kept
        plugin.set_mixed_precision(accelerator.mixed_precision)
    accelerator.state.fsdp_plugin = plugin
    accelerator.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP


def decoder_layers(model: Any) -> list[Any]:
    """The modules FSDP2 shards as units: the model's own `_no_split_modules` (its decoder layers)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def shard_reference(model: Any, accelerator: Any) -> Any:
    """The reference model sharded per decoder layer, its parameters in host memory on CUDA (FSDP2
    copies one layer at a time to the GPU while it scores); it never trains."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    plugin = accelerator.state.fsdp_plugin
    options = {
        "reshard_after_forward": True,
        "offload_policy": CPUOffloadPolicy() if accelerator.device.type == "cuda" else OffloadPolicy(),
        "mp_policy": plugin.mixed_precision_policy or MixedPrecisionPolicy(),
    }
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)
    model.eval()
    return model


@contextlib.contextmanager
def reference_sharded_per_layer() -> Iterator[None]:
    """While TRL builds its trainer, its reference-model preparation under FSDP is `shard_reference`
    (TRL's own shards the reference as one unit)."""
    import trl.trainer.grpo_trainer as grpo

    original = grpo.prepare_fsdp
    grpo.prepare_fsdp = shard_reference
    try:
        yield
    finally:
        grpo.prepare_fsdp = original


def full_tensors(model: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """(name, full tensor) for every parameter and buffer of a possibly FSDP2-sharded model. A sharded
    parameter is gathered in `dtype` (a collective: every rank must iterate in the same order)."""
    from seal.policy.weights import whole

    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        yield name, whole(tensor, dtype)


def is_sharded(model: Any) -> bool:
    """Whether any parameter of `model` is an FSDP2 shard (a DTensor)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def require_plain(model: Any, what: str) -> None:
    """Refuse an FSDP2-sharded model where code reads or writes whole tensors (a DTensor's data_ptr() is 0 and
    its local part is a slice): such a caller needs the gathered weights (full_state_dict, RolloutCopy)."""
    if is_sharded(model):
        raise ValueError(f"{what} needs whole tensors and this model is FSDP2-sharded (DTensor parameters): gather "
                         "it first (seal.rl.sharding.full_state_dict or RolloutCopy)")


class RolloutCopy:
    """An unsharded copy of a sharded policy in the compute dtype: the transformers rollout engine generates with it
    (on the rank's device); a vLLM run gathers its final model into one (in host memory, seal.tasks.train).

    `refresh()` (called at the start of every play, on every rank at once) gathers the current weights
    from the shards into it; the copy is built on the first refresh, on its `device`. `version`
    (e.g. the trainer's optimizer step, the same on every rank) skips the gather when the weights have
    not changed since the last one: an evaluation of many plays gathers once."""

    def __init__(self, sharded: Any, dtype: Any, device: Any, version: Any = None):
        self.sharded, self.dtype, self.device = sharded, dtype, device
        self.version = version
        self.model: Any = None
        self._gathered_at: Any = None

    def _build(self) -> Any:
        import copy

        import torch
        from transformers import AutoModelForCausalLM

        config = copy.deepcopy(self.sharded.config)
        with torch.device(self.device):
            model = AutoModelForCausalLM.from_config(config, dtype=self.dtype)
        model.generation_config = copy.deepcopy(self.sharded.generation_config)
        model.eval().requires_grad_(False)
        return model

    def refresh(self) -> Any:
        import torch

        if self.model is None:
            self.model = self._build()
        elif self.version is not None and self.version() == self._gathered_at:
            return self.model
        self._gathered_at = None if self.version is None else self.version()
        target = dict([*self.model.named_parameters(), *self.model.named_buffers()])
        with torch.no_grad():
            for name, tensor in full_tensors(self.sharded, self.dtype):
                if name in target:
                    target[name].copy_(tensor)
        return self.model
