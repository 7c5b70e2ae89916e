"""task=sanity: does training move this backbone? A learning check to run before spending GPU hours.

    python run.py task=sanity backbone=qwen2.5-7b          # on a new cluster, first
    python run.py task=sanity backbone=tiny-random sanity.learning_rate=3e-4

A tiny verifiable task where reward is reachable from the first round: the model is asked to pick
one of a few options (order shuffled per prompt) and its reply is the first token, sampled among the
options' tokens only; the verifier rewards one fixed option. Under a uniform-ish prior the reward
starts near 1 / len(options), so GRPO has signal at once, and it can only rise if the whole update
path works: rewards to group advantages, the mask, the KL term, the optimizer and its precision
(pure bf16 weights at the paper's learning rate barely move), data-parallel ranks. It trains through
the same SealGRPOTrainer, GRPO config mapping, precision and world-size arithmetic as task=train,
prints the reward per round, writes sanity.json, and exits with status 1 when the reward did not rise
by `sanity.min_rise` (mean of the last three rounds over the mean of the first three).
"""

from __future__ import annotations

import logging
import random
from typing import Any

import torch

from seal.errors import UserError
from seal.policy.generation import derive_seed, sample

log = logging.getLogger(__name__)


def check_target(options: list[str], target: str) -> None:
    """The rewarded option must be one of the options (checked before anything loads)."""
    if target not in options:
        raise UserError(f"sanity.target={target!r} is not one of sanity.options {list(options)}")


class ChoiceTask:
    """The rollout side of the sanity check, in the shape SealGRPOTrainer calls (play / close / finish)."""

    def __init__(self, *, model: Any, tokenizer: Any, chat: Any, options: list[str], target: str, seed: int,
                 dist: Any, compute_dtype: torch.dtype | None = None):
        self.model, self.tokenizer, self.chat = model, tokenizer, chat
        self.seed, self.dist, self.compute_dtype = seed, dist, compute_dtype
        first = [tokenizer(o, add_special_tokens=False)["input_ids"][0] for o in options]
        if len(set(first)) != len(first):
            raise UserError(f"sanity.options {options} do not start with distinct tokens for this tokenizer; "
                            "choose other words")
        self.options, self.option_ids = list(options), first
        check_target(options, target)
        self.target_id = first[options.index(target)]
        self.history: list[dict[str, float]] = []
        self._rewards: list[float] = []
        self._round_rewards: list[float] = []

    def prompt_ids(self, prompt: str) -> list[int]:
        """The chat-formatted question for prompt `sanity_<i>`: the options in an order fixed by i."""
        order = list(self.options)
        random.Random(f"{self.seed}:{prompt}").shuffle(order)
        text = (self.chat.begin + self.chat.message("user", f"Pick one of these options and reply with it only: "
                                                             f"{', '.join(order)}.") + self.chat.assistant_header())
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def play_round(self, prompts: list[str], trainer: Any = None) -> dict[str, list]:
        ids = [self.prompt_ids(p) for p in prompts]
        width = max(map(len, ids))
        pad = self.tokenizer.pad_token_id or 0
        batch = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        model = self.model
        device = next(model.parameters()).device
        autocast = (torch.autocast(device.type, dtype=self.compute_dtype)
                    if self.compute_dtype is not None and self.compute_dtype != next(model.parameters()).dtype
                    else torch.autocast(device.type, enabled=False))
        was_training = model.training
        model.eval()
        with torch.no_grad(), autocast:
            logits = model(input_ids=batch.to(device), attention_mask=mask.to(device), logits_to_keep=1).logits[:, -1]
        model.train(was_training)
        # the reply is sampled among the options' first tokens only
        allowed = torch.full_like(logits, float("-inf"), dtype=torch.float32)
        allowed[:, self.option_ids] = 0.0
        offset = self.dist.rank * len(prompts)
        seeds = [derive_seed(self.seed, len(self.history), offset + i) for i in range(len(prompts))]
        tokens, logprobs = sample(logits.float() + allowed, 1.0, seeds, [len(x) for x in ids])
        self._rewards = [float(t == self.target_id) for t in tokens.tolist()]
        return {"prompt_ids": ids, "completion_ids": [[t] for t in tokens.tolist()],
                "logprobs": [[lp] for lp in logprobs.tolist()], "verifier_reward": list(self._rewards)}

    def close_round(self, global_step: int) -> None:
        rewards = self.dist.gather(self._rewards)
        self._round_rewards = rewards
        self.history.append({"round": len(self.history), "reward_mean": sum(rewards) / len(rewards)})
        return None

    def round_rewards(self) -> list[float]:
        """The closed round's rewards over all ranks, in global episode order."""
        return list(self._round_rewards)

    def finish_round(self, global_step: int, optimizer_metrics: dict[str, float] | None = None) -> None:
        record = self.history[-1]
        record.update({k: v for k, v in (optimizer_metrics or {}).items() if k in ("train/kl", "train/grad_norm")})
        if self.dist.main:
            print(f"sanity round {record['round']:3d}: reward {record['reward_mean']:.3f}", flush=True)

    def state_dict(self) -> dict:
        return {"history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.history = list(state["history"])


def rose(rewards: list[float], min_rise: float) -> tuple[bool, float, float]:
    """Mean of the first three and of the last three rounds, and whether the second beats the first by min_rise."""
    k = min(3, max(1, len(rewards) // 2))
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    return last >= first + min_rise, first, last
