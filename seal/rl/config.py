"""From the Hydra config to TRL's GRPOConfig: one round = one TRL generation batch.

A round rolls out `prompts_per_round` x `rollouts_per_prompt` episodes (TRL's generation batch).
They are consumed in micro-batches of `budget.micro_batch_size` episodes, accumulated into
`budget.steps_per_round` optimizer steps (the paper: 32 prompts, PPO mini-batches of 8 prompts, so
4 optimizer steps per round). A checkpoint is written at round boundaries only.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from omegaconf import DictConfig

from seal.errors import UserError


def rounds_for(budget: DictConfig, num_train: int) -> int:
    if budget.rounds is not None:
        return int(budget.rounds)
    return math.ceil(budget.epochs * num_train / budget.prompts_per_round)


def check_hardware(cfg: DictConfig) -> None:
    """Fail at once, with the fix, when the config asks for hardware or extras this machine lacks."""
    import importlib.util
    import os

    mode = cfg.trainer.get("vllm_mode")
    if mode not in (None, "colocate", "server"):
        raise UserError(f"trainer.vllm_mode={mode!r}: choose null, colocate or server")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.cuda.is_available():
        raise UserError(f"{world} processes were launched (accelerate/torchrun) but no CUDA GPU is visible; "
                        "multi-process training needs one GPU per process")
    if mode is not None:
        if not torch.cuda.is_available():
            raise UserError(f"trainer.vllm_mode={mode} needs a CUDA GPU; on a CPU keep trainer.vllm_mode=null")
        if importlib.util.find_spec("vllm") is None:
            raise UserError(f"trainer.vllm_mode={mode} needs vLLM: run `make install` (on a CUDA machine it "
                            "installs vllm==0.31.0, the newest TRL 1.16 supports)")
        raise UserError(
            f"trainer.vllm_mode={mode}: the multi-turn rollout engine generates with transformers only in this "
            "version; vLLM generation is not wired in yet. Use trainer.vllm_mode=null (HF generate on the GPU)"
        )


def grpo_config(cfg: DictConfig, out_dir: Path, num_train: int, dtype: str):
    from trl import GRPOConfig

    check_hardware(cfg)
    budget, tr = cfg.budget, cfg.trainer
    prompts, group = budget.prompts_per_round, budget.rollouts_per_prompt
    if group < 2:
        raise UserError(f"budget.rollouts_per_prompt={group}: GRPO needs at least 2 rollouts per prompt")
    if prompts > num_train:
        raise UserError(
            f"budget.prompts_per_round={prompts} exceeds the {num_train} train entries; lower it or raise budget.train_entries"
        )
    episodes = prompts * group
    if episodes % budget.micro_batch_size:
        raise UserError(
            f"a round's {episodes} episodes do not split into micro-batches of budget.micro_batch_size={budget.micro_batch_size}"
        )
    micro_steps = episodes // budget.micro_batch_size
    if micro_steps % budget.steps_per_round:
        raise UserError(
            f"{micro_steps} micro-batches per round do not split into budget.steps_per_round={budget.steps_per_round} steps"
        )
    cuda = torch.cuda.is_available()
    rounds = rounds_for(budget, num_train)
    return GRPOConfig(
        output_dir=str(out_dir / "checkpoints"),
        per_device_train_batch_size=budget.micro_batch_size,
        gradient_accumulation_steps=micro_steps // budget.steps_per_round,
        steps_per_generation=micro_steps,
        num_generations=group,
        num_iterations=1,
        max_steps=rounds * budget.steps_per_round,
        learning_rate=tr.learning_rate,
        lr_scheduler_type=tr.lr_scheduler_type,
        # a float below 1 is a fraction of the training steps
        warmup_steps=float(tr.warmup_ratio),
        beta=tr.beta,
        epsilon=tr.epsilon,
        max_grad_norm=tr.max_grad_norm,
        loss_type=tr.loss_type,
        scale_rewards=tr.scale_rewards,
        # logprobs in the loss are taken at the sampling temperature
        temperature=budget.temperature,
        max_completion_length=budget.max_new_tokens,
        use_cpu=not cuda,
        bf16=cuda and dtype == "bfloat16",
        gradient_checkpointing=tr.gradient_checkpointing,
        disable_dropout=True,
        save_strategy="steps",
        save_steps=budget.steps_per_round * tr.save_every,
        save_total_limit=tr.keep_checkpoints,
        logging_steps=1,
        report_to=[],
        seed=cfg.seed,
        data_seed=cfg.seed,
        dataloader_num_workers=0,
        log_completions=False,
        # an episode ends wherever its last turn ends: never mask it as truncated
        mask_truncated_completions=False,
    )
