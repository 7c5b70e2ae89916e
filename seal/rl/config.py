"""From the Hydra config and the checked budget to TRL's GRPOConfig: one round = one TRL generation
batch, whatever the world size (the round's arithmetic is seal.budget.RoundPlan). A checkpoint is
written at round boundaries only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from seal.budget import Budget
from seal.errors import UserError
from seal.rl.distributed import collective_timeout

# loss aggregations the KL term (the release's low_var_kl at the paper's coefficient) can follow
# (seal.rl.trainer.aggregate)
LOSS_TYPES = ("grpo", "bnpo")


# the trainer's numbers and what each takes: a wrong one failed deep in torch or TRL once the trainer was built
# (after the evaluation before training), or trained silently (a negative beta rewards moving off the reference)
TRAINER_NUMBERS = {
    "learning_rate": (lambda v: v > 0, "a positive number (the paper's 1e-6)"),
    "beta": (lambda v: v >= 0, "the KL coefficient, 0 or more (the paper's 0.001; 0: no reference model)"),
    "epsilon": (lambda v: v > 0, "the ratio's clip range, a positive number (0.2)"),
    "weight_decay": (lambda v: v >= 0, "0 or more"),
    "std_epsilon": (lambda v: v > 0, "a positive number, added to a group's reward std before dividing (1e-6)"),
    "max_grad_norm": (lambda v: v >= 0, "0 or more (0: no clipping)"),
    "warmup_ratio": (lambda v: 0 <= v <= 1, "a fraction from 0 to 1"),
}


def check_trainer_numbers(trainer: Any) -> None:
    """Each of TRAINER_NUMBERS the trainer config sets is a number it takes; dual_clip is null or above 1."""
    for key, (takes, what) in TRAINER_NUMBERS.items():
        value = trainer.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not takes(value):
            raise UserError(f"trainer.{key}={value!r}: give {what}")
    clip = trainer.get("dual_clip")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip <= 1):
        raise UserError(f"trainer.dual_clip={clip!r}: the cap on a negative advantage's ratio is a number above 1 "
                        "(the release's 10), or null for none")


def check_hardware(cfg: DictConfig) -> None:
    """Fail at once, with the fix, when the config asks for hardware or extras this machine lacks, or
    names a trainer setting that cannot be used."""
    check_trainer_numbers(cfg.trainer)
    if cfg.trainer.loss_type not in LOSS_TYPES:
        raise UserError(f"trainer.loss_type={cfg.trainer.loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")
    cap = cfg.trainer.get("tis_cap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0):
        raise UserError(
            f"trainer.tis_cap={cap!r}: the importance-sampling ratio's cap is a positive number (TRL's default "
            "cap is 3.0), or null for no correction"
        )
    for key, null in (("save_every", "no periodic checkpoints"), ("keep_checkpoints", "keep every checkpoint")):
        value = cfg.trainer[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"trainer.{key}={value!r}: give a number of at least 1, or null for {null}")


def reference_init_kwargs(compute_dtype: str) -> dict[str, Any]:
    """How TRL loads the reference model (`create_model_from_path`): in the compute dtype, on the host, with
    no device map, for every sharding and launch (seal.rl.sharding and accelerate then place it)."""
    return {"dtype": compute_dtype, "device_map": None}


def score_labelled_positions_only() -> None:
    """TRL's fused LM head scores only the positions that carry a label (the completion) where Triton runs, and
    every position of the padded batch elsewhere, to keep tile shapes fixed for compiled backends (TRL 1.16,
    trl/trainer/utils.py `_fused_forward`). A CPU compiles nothing, and there the prompt's positions through the
    whole vocabulary were most of a small model's training step: score the labelled positions there too. Each
    position's log-prob and entropy is computed from its own row either way; the choice of kernel stays TRL's."""
    import trl.trainer.utils as fused

    if fused._use_triton.__module__ == __name__:  # already this module's choice
        return
    kernels = fused._use_triton

    def compact(device: torch.device) -> bool:
        return device.type == "cpu" or kernels(device)

    compact.__wrapped__ = kernels
    fused._use_triton = compact


def grpo_config(cfg: DictConfig, budget: Budget, out_dir: Path, num_train: int, compute_dtype: str,
                sharding: str):
    """TRL's arguments for a run of `budget` (planned for budget.world ranks) on num_train entries, with the
    launch's sharding (seal.rl.sharding)."""
    from trl import GRPOConfig

    from seal.rl.sharding import grpo_arguments, mixed_precision, plugin_arguments

    check_hardware(cfg)
    tr = cfg.trainer
    plan = budget.plan
    if budget.prompts_per_round > num_train:
        raise UserError(
            f"budget.prompts_per_round={budget.prompts_per_round} exceeds the {num_train} train entries; lower it "
            "or raise budget.train_entries"
        )
    cuda = torch.cuda.is_available()  # pragma: no mutate (False on every machine the tests run on)
    if compute_dtype == "float16" and not cuda:
        raise UserError("backbone.dtype=float16 needs a CUDA GPU; use bfloat16 or float32 on a CPU")
    rounds = budget.rounds_for(num_train)
    args = GRPOConfig(
        output_dir=str(out_dir / "checkpoints"),
        per_device_train_batch_size=plan.micro_batch,
        gradient_accumulation_steps=plan.accumulation,
        # TRL's generation batch is per_device x world x steps_per_generation = the round's episodes
        steps_per_generation=plan.micro_steps_per_rank,
        num_generations=budget.rollouts_per_prompt,
        num_iterations=1,  # pragma: no mutate (TRL's default, kept explicit)
        max_steps=rounds * plan.steps,
        learning_rate=tr.learning_rate,
        lr_scheduler_type=tr.lr_scheduler_type,
        # a float below 1 is a fraction of the training steps
        warmup_steps=float(tr.warmup_ratio),
        beta=tr.beta,
        # the release's KL estimator (verl's low_var_kl; the paper gives only its coefficient 0.001) has no
        # importance-ratio factor; seal.rl.trainer computes it
        use_bias_correction_kl=False,
        epsilon=tr.epsilon,
        # TRL's two-sided clipping caps the ratio at delta for every token; with delta > 1 + epsilon that
        # changes only negative advantages: verl's dual clip
        delta=tr.dual_clip,
        weight_decay=tr.weight_decay,
        max_grad_norm=tr.max_grad_norm,
        loss_type=tr.loss_type,
        scale_rewards=tr.scale_rewards,
        # logprobs in the loss are taken at the sampling temperature
        temperature=budget.temperature,
        max_completion_length=budget.max_new_tokens,
        use_cpu=not cuda,
        # the process group exists before the trainer (seal.rl.distributed.current); TRL is told the same timeout
        ddp_timeout=math.ceil(collective_timeout(cfg.launch.timeout_minutes).total_seconds()),
        # mixed precision: fp32 master weights, forward passes under autocast to the backbone's dtype
        bf16=compute_dtype == "bfloat16",
        fp16=compute_dtype == "float16",  # pragma: no mutate (float16 is refused on a CPU above)
        # the reference model only scores: keep it in the compute dtype, not the masters' fp32. It is loaded
        # whole on the host (device_map=None) and then placed by the launch: TRL passes device_map=None itself
        # only under MULTI_GPU and DeepSpeed; under FSDP, or one process on CUDA, it would otherwise load with
        # device_map="auto", spreading the layers over every visible GPU behind accelerate's device hooks,
        # which keep moving inputs to the other GPUs once fully_shard has put the shards on this rank's
        model_init_kwargs=reference_init_kwargs(compute_dtype),
        gradient_checkpointing=tr.gradient_checkpointing,
        disable_dropout=True,
        # trainer.save_every=null: no periodic checkpoint (the authors' runs; such a run cannot resume)
        # a checkpoint every save_every rounds, or none (save_steps is then TRL's default, never read)
        **({"save_strategy": "steps", "save_steps": plan.steps * tr.save_every} if tr.save_every
           else {"save_strategy": "no"}),
        save_total_limit=tr.keep_checkpoints,
        logging_steps=1,
        report_to=[],  # pragma: no mutate (transformers' default reports nowhere either)
        # the loop prints one line per round; the trainer's per-step dicts go to run.log (seal.rl.trainer)
        disable_tqdm=True,  # pragma: no mutate (display only)
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,  # pragma: no mutate (the default)
        log_completions=False,  # pragma: no mutate (TRL's default)
        # an episode ends wherever its last turn ends: never mask it as truncated
        mask_truncated_completions=False,  # pragma: no mutate (TRL's default, kept explicit)
        **grpo_arguments(sharding),
    )
    # the backbone's dtype decides the mixed precision, not the launch: transformers takes an accelerate launch
    # config's (ACCELERATE_MIXED_PRECISION) unless bf16 or fp16 is set, so a float32 backbone launched with the
    # paper's bf16 config would otherwise train under bf16 autocast
    args.mixed_precision = mixed_precision(compute_dtype)
    plugin_arguments(args, compute_dtype)
    return args
