"""From the Hydra config to TRL's GRPOConfig: one round = one TRL generation batch, whatever the world size.

A round rolls out `prompts_per_round` x `rollouts_per_prompt` episodes in total, shared out over the
data-parallel ranks. They are consumed in micro-batches of `budget.micro_batch_size` episodes per rank,
accumulated into `budget.steps_per_round` optimizer steps (the paper: 32 prompts x 8 rollouts, PPO
mini-batches of 8 prompts, so 4 optimizer steps of 64 episodes per round). A checkpoint is written at
round boundaries only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from seal.errors import UserError

# loss aggregations the paper's KL term can follow (seal.rl.trainer.aggregate)
LOSS_TYPES = ("grpo", "bnpo")


def rounds_for(budget: DictConfig, num_train: int) -> int:
    """Rounds of a run: `budget.rounds`, or whole epochs. An epoch is num_train // prompts_per_round
    rounds: TRL's sampler drops the last partial batch of every pass over the data, as the release does
    (6 epochs of 400 entries at 32 prompts: 72 rounds, not 75)."""
    if budget.rounds is not None:
        return int(budget.rounds)
    return int(budget.epochs) * max(1, num_train // int(budget.prompts_per_round))


@dataclass(frozen=True)
class RoundPlan:
    """The batch arithmetic of one round on `world` ranks."""

    episodes: int
    world: int
    episodes_per_rank: int
    micro_batch: int
    micro_steps_per_rank: int
    steps: int
    accumulation: int

    @property
    def episodes_per_step(self) -> int:
        return self.episodes // self.steps


def round_plan(budget: DictConfig, world: int = 1) -> RoundPlan:
    """Check that a round splits evenly over ranks, micro-batches and optimizer steps."""
    prompts, group = int(budget.prompts_per_round), int(budget.rollouts_per_prompt)
    micro, steps = int(budget.micro_batch_size), int(budget.steps_per_round)
    if group < 2:
        raise UserError(f"budget.rollouts_per_prompt={group}: GRPO needs at least 2 rollouts per prompt")
    episodes = prompts * group
    if episodes % (world * micro * steps):
        raise UserError(
            f"a round's {episodes} episodes (budget.prompts_per_round x budget.rollouts_per_prompt) do not split "
            f"over {world} rank(s) x budget.micro_batch_size={micro} x budget.steps_per_round={steps}; "
            f"choose sizes whose product divides {episodes}"
        )
    per_rank = episodes // world
    micro_steps = per_rank // micro
    return RoundPlan(episodes=episodes, world=world, episodes_per_rank=per_rank, micro_batch=micro,
                     micro_steps_per_rank=micro_steps, steps=steps, accumulation=micro_steps // steps)


def check_hardware(cfg: DictConfig) -> None:
    """Fail at once, with the fix, when the config asks for hardware or extras this machine lacks."""
    if cfg.trainer.loss_type not in LOSS_TYPES:
        raise UserError(f"trainer.loss_type={cfg.trainer.loss_type!r}: choose one of {', '.join(LOSS_TYPES)}")


def grpo_config(cfg: DictConfig, out_dir: Path, num_train: int, compute_dtype: str, world: int = 1):
    from trl import GRPOConfig

    check_hardware(cfg)
    budget, tr = cfg.budget, cfg.trainer
    plan = round_plan(budget, world)
    if budget.prompts_per_round > num_train:
        raise UserError(
            f"budget.prompts_per_round={budget.prompts_per_round} exceeds the {num_train} train entries; lower it "
            "or raise budget.train_entries"
        )
    cuda = torch.cuda.is_available()
    if compute_dtype == "float16" and not cuda:
        raise UserError("backbone.dtype=float16 needs a CUDA GPU; use bfloat16 or float32 on a CPU")
    rounds = rounds_for(budget, num_train)
    return GRPOConfig(
        output_dir=str(out_dir / "checkpoints"),
        per_device_train_batch_size=plan.micro_batch,
        gradient_accumulation_steps=plan.accumulation,
        # TRL's generation batch is per_device x world x steps_per_generation = the round's episodes
        steps_per_generation=plan.micro_steps_per_rank,
        num_generations=budget.rollouts_per_prompt,
        num_iterations=1,
        max_steps=rounds * plan.steps,
        learning_rate=tr.learning_rate,
        lr_scheduler_type=tr.lr_scheduler_type,
        # a float below 1 is a fraction of the training steps
        warmup_steps=float(tr.warmup_ratio),
        beta=tr.beta,
        # the paper's KL (verl's low_var_kl) has no importance-ratio factor; seal.rl.trainer computes it
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
        # mixed precision: fp32 master weights, forward passes under autocast to the backbone's dtype
        bf16=compute_dtype == "bfloat16",
        fp16=compute_dtype == "float16",
        # the reference model only scores: keep it in the compute dtype, not the masters' fp32
        model_init_kwargs={"dtype": compute_dtype},
        gradient_checkpointing=tr.gradient_checkpointing,
        disable_dropout=True,
        save_strategy="steps",
        save_steps=plan.steps * tr.save_every,
        save_total_limit=tr.keep_checkpoints,
        logging_steps=1,
        report_to=[],
        # the loop prints one line per round; the trainer's per-step dicts go to run.log (seal.rl.trainer)
        disable_tqdm=True,
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
        log_completions=False,
        # an episode ends wherever its last turn ends: never mask it as truncated
        mask_truncated_completions=False,
    )
