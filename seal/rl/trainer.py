"""The one subclass of TRL's GRPOTrainer: group advantages, then SEAL's trajectory weights.

Everything SEAL-specific is a plain method of the co-evolution state (seal.rl.coevolution) that
this class calls at TRL's advantage hook; the GRPO loss, KL term, clipping and optimisation are
TRL's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from trl import GRPOTrainer


class SealGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, coevolution: Any, **kwargs: Any):
        self.coevolution = coevolution
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        # TRL calls the rollout function (episodes under Omega_t, verification, diagnosis) and
        # computes group-relative advantages A_j; SEAL scales them by w_j and closes the round.
        out = super()._generate_and_score_completions(inputs)
        weights = self.coevolution.end_round(self.state.global_step)
        if weights is not None:
            out["advantages"] = scale_advantages(out["advantages"], weights)
        for name, value in self.coevolution.last_round_metrics().items():
            self._metrics["train"][name].append(value)
        return out


def scale_advantages(advantages: torch.Tensor, weights: list[float]) -> torch.Tensor:
    """A~_j = w_j * A_j, for advantages of shape (B,) or (B, T)."""
    w = torch.as_tensor(weights, dtype=advantages.dtype, device=advantages.device)
    if w.shape[0] != advantages.shape[0]:
        raise ValueError(f"{w.shape[0]} weights for {advantages.shape[0]} advantages")
    return advantages * (w if advantages.dim() == 1 else w.unsqueeze(-1))


def verifier_reward(completions: list[Any], verifier_reward: list[float], **_: Any) -> list[float]:
    """The reward is the official verifier's binary verdict, passed through from the rollouts."""
    return list(verifier_reward)


def make_trainer(
    cfg: DictConfig,
    *,
    model: Any,
    tokenizer: Any,
    coevolution: Any,
    train_ids: list[str],
    out_dir: Path,
    dtype: str = "float32",
    peft_config: Any = None,
) -> SealGRPOTrainer:
    """TRL's trainer for one run: prompts are entry ids, the rollout function plays them."""
    import os

    from datasets import Dataset

    from seal.rl.checkpoint import SealStateCallback
    from seal.rl.config import grpo_config

    args = grpo_config(cfg, out_dir, len(train_ids), dtype)
    # rollout_func is marked experimental in TRL 1.16; it is the documented multi-turn hook
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return SealGRPOTrainer(
        model=model,
        reward_funcs=verifier_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": list(train_ids)}),
        processing_class=tokenizer,
        rollout_func=coevolution.rollout,
        peft_config=peft_config,
        callbacks=[SealStateCallback(coevolution, cfg.budget.steps_per_round)],
        coevolution=coevolution,
    )
