"""The run's budget (conf/budget/*.yaml) as one typed, checked object, built once per run.

`Budget.from_config(cfg.budget, world)` refuses, with one sentence naming the key, the value and what
would be valid, every value a run could not use: a wrong type, a size below its minimum, an unknown or
missing key, a step-limit mode that does not exist, and a round that does not split evenly over the
data-parallel ranks, micro-batches and optimizer steps. The tasks then pass the object where it is
needed (the rollout engine, the GRPO config, the trainer) instead of reading the raw config.

A round rolls out `prompts_per_round` x `rollouts_per_prompt` episodes in total, shared out over the
ranks; each rank consumes its share in micro-batches of `micro_batch_size` episodes, accumulated into
`steps_per_round` optimizer steps (the paper: 32 prompts x 8 rollouts in PPO mini-batches of 8 prompts,
so 4 optimizer steps of 64 episodes per round).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from seal.env.episode import MAXIMUM_STEP_LIMIT, check_step_limit
from seal.errors import UserError

_INT, _FLOAT = (int,), (int, float)


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


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Sizes and decoding of a run. `None` means "all" for the entry counts and "off" for the options."""

    name: str
    # evaluation: entries per category (None: all), chosen among those whose prompt fits the context
    eval_entries_per_category: int | None
    # task=train: entries per category of the before/after held-out evaluation (0: none)
    heldout_entries_per_category: int | None
    # task=train: how many train entries the rounds draw prompts from (None: the whole train part)
    train_entries: int | None
    # GRPO: prompts per round and rollouts per prompt (the group size)
    prompts_per_round: int
    rollouts_per_prompt: int
    steps_per_round: int
    micro_batch_size: int
    # optimisation rounds (None: `epochs` passes over the train entries)
    rounds: int | None
    epochs: int
    max_new_tokens: int
    batch_size: int
    temperature: float
    max_steps_per_turn: int = MAXIMUM_STEP_LIMIT
    step_limit: str = "turn"
    eval_temperature: float = 0.0
    ood_benchmarks: tuple[str, ...] = ()
    ood_entries_per_category: int | None = None
    rollout_memory_gb: float | None = None
    rollout_memory_fraction: float = 0.7
    max_train_tokens: int | None = None
    val_every: int | None = None
    # scenarios carved from train as the validation part (conf/split/seal_release.yaml reads it)
    val_scenarios: int = 0
    # checkpoints: rounds between two (None: none) and how many complete ones stay on disk (None: all);
    # conf/trainer/grpo.yaml reads them as trainer.save_every and trainer.keep_checkpoints
    save_every: int | None = 1
    keep_checkpoints: int | None = 2
    # task=train on a machine without a GPU (false: refused in one sentence, as budget=paper is)
    allow_cpu: bool = True
    # the ranks the round is planned for (not a config key: the launch decides it)
    world: int = field(default=1, metadata={"config": False})

    @classmethod
    def from_config(cls, node: Mapping[str, Any], world: int = 1) -> "Budget":
        """The checked budget of a config group (a DictConfig or a plain mapping)."""
        values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
        keys = {f.name for f in dataclasses.fields(cls) if f.metadata.get("config", True)}
        unknown = sorted(set(values) - keys)
        if unknown:
            raise UserError(f"budget.{unknown[0]} is not a budget key; the keys are {', '.join(sorted(keys))}")
        missing = [f.name for f in dataclasses.fields(cls) if f.name in keys and f.name not in values
                   and f.default is dataclasses.MISSING]
        if missing:
            raise UserError(f"budget.{missing[0]} is missing; every budget names it (see conf/budget/smoke.yaml)")
        for key, value in values.items():
            _check(key, value)
        check_step_limit(values.get("step_limit", "turn"), "budget.step_limit")
        if "ood_benchmarks" in values:
            values["ood_benchmarks"] = tuple(values["ood_benchmarks"] or ())
        for key in ("temperature", "eval_temperature", "rollout_memory_gb", "rollout_memory_fraction"):
            if values.get(key) is not None:
                values[key] = float(values[key])
        budget = cls(**values, world=world)
        budget.plan  # a round that does not split stops the run here
        return budget

    @property
    def episodes(self) -> int:
        return self.prompts_per_round * self.rollouts_per_prompt

    @property
    def plan(self) -> RoundPlan:
        """How a round splits over the ranks, micro-batches and optimizer steps."""
        micro, steps, world = self.micro_batch_size, self.steps_per_round, self.world
        if self.episodes % (world * micro * steps):
            raise UserError(
                f"a round's {self.episodes} episodes (budget.prompts_per_round x budget.rollouts_per_prompt) do not "
                f"split over {world} rank(s) x budget.micro_batch_size={micro} x budget.steps_per_round={steps}; "
                f"choose sizes whose product divides {self.episodes}"
            )
        per_rank = self.episodes // world
        micro_steps = per_rank // micro
        return RoundPlan(episodes=self.episodes, world=world, episodes_per_rank=per_rank, micro_batch=micro,
                         micro_steps_per_rank=micro_steps, steps=steps, accumulation=micro_steps // steps)

    def check_device(self, gpus: int) -> None:
        """A budget that does not allow the CPU (budget=paper: weeks there) is refused in one sentence on a
        machine with no GPU, before anything is loaded."""
        if gpus == 0 and not self.allow_cpu:
            raise UserError(
                f"budget={self.name} is sized for GPUs ({self.epochs} epochs of rounds of {self.prompts_per_round} "
                f"prompts x {self.rollouts_per_prompt} rollouts, up to {self.max_new_tokens} new tokens per step) and "
                "would train for weeks on this machine, which has no GPU: run it on a GPU machine, try budget=tiny or "
                "budget=paper_miniature here, or add budget.allow_cpu=true to start it anyway")

    def rounds_for(self, num_train: int) -> int:
        """Rounds of a run: `rounds`, or whole epochs. An epoch is num_train // prompts_per_round rounds:
        TRL's sampler drops the last partial batch of every pass over the data, as the release does
        (6 epochs of 400 entries at 32 prompts: 72 rounds, not 75)."""
        if self.rounds is not None:
            return self.rounds
        return self.epochs * self.rounds_per_epoch(num_train)

    def rounds_per_epoch(self, num_train: int) -> int:
        return max(1, num_train // self.prompts_per_round)


# key: (types, minimum, null allowed, what the value means when it is wrong)
_RULES: dict[str, tuple[tuple[type, ...], float | None, bool, str]] = {
    "name": ((str,), None, False, "a name"),
    "eval_entries_per_category": (_INT, 1, True, "a number of entries (at least 1) or null for all"),
    "heldout_entries_per_category": (_INT, 0, True, "a number of entries (0: none) or null for all"),
    "train_entries": (_INT, 1, True, "a number of entries (at least 1) or null for all"),
    "prompts_per_round": (_INT, 1, False, "a number of prompts, at least 1"),
    "rollouts_per_prompt": (_INT, 2, False, "a group size of at least 2 (GRPO needs at least 2 rollouts per prompt)"),
    "steps_per_round": (_INT, 1, False, "a number of optimizer steps, at least 1"),
    "micro_batch_size": (_INT, 1, False, "a number of episodes, at least 1"),
    "rounds": (_INT, 1, True, "a number of rounds (at least 1) or null for whole epochs"),
    "epochs": (_INT, 1, False, "a number of epochs, at least 1"),
    "max_new_tokens": (_INT, 1, False, "a number of tokens, at least 1"),
    "max_steps_per_turn": (_INT, 1, False, "a number of steps, at least 1 (BFCL: 20)"),
    "step_limit": ((str,), None, False, "turn or episode"),
    "batch_size": (_INT, 1, False, "a number of episodes, at least 1"),
    "temperature": (_FLOAT, 0, False, "a sampling temperature above 0"),
    "eval_temperature": (_FLOAT, 0, False, "a temperature of 0 (greedy) or more"),
    "ood_benchmarks": ((list, tuple), None, True, "a list of benchmark names (conf/benchmark/)"),
    "ood_entries_per_category": (_INT, 1, True, "a number of questions (at least 1) or null for all"),
    "rollout_memory_gb": (_FLOAT, 0, True, "a size in GiB above 0, or null for a fraction of the free memory"),
    "rollout_memory_fraction": (_FLOAT, 0, False, "a fraction above 0 and at most 1"),
    "max_train_tokens": (_INT, 1, True, "a number of tokens (at least 1) or null for every token"),
    "val_every": (_INT, 1, True, "a number of rounds (at least 1) or null for no validation"),
    "val_scenarios": (_INT, 0, False, "a number of scenarios (0: no validation part)"),
    "save_every": (_INT, 1, True, "a number of rounds (at least 1) or null for no periodic checkpoints"),
    "keep_checkpoints": (_INT, 1, True, "a number of checkpoints (at least 1) or null for all"),
    "allow_cpu": ((bool,), None, False, "true or false"),
}
# bounds that are strict (the value must exceed the minimum) or capped above
_STRICT = {"temperature", "rollout_memory_gb", "rollout_memory_fraction"}
_MAXIMUM = {"rollout_memory_fraction": 1.0}


def validated_after(round_: int, every: int | None, rounds: int | None) -> bool:
    """Whether the model is validated after round `round_` (0-based) of `rounds` (None: not known): every
    `every`-th round and the last, as the authors' trainer did (`global_steps % test_freq == 0` or the last
    step); never when `every` is None."""
    return every is not None and ((round_ + 1) % every == 0 or round_ + 1 == rounds)


def _check(key: str, value: Any) -> None:
    types, minimum, nullable, meaning = _RULES[key]
    if value is None:
        if nullable:
            return
        raise UserError(f"budget.{key}=null: give {meaning}")
    wrong_type = (isinstance(value, bool) and bool not in types) or not isinstance(value, types)
    if not wrong_type and minimum is not None:
        below = value <= minimum if key in _STRICT else value < minimum
        if below or value > _MAXIMUM.get(key, float("inf")):
            wrong_type = True
    if wrong_type:
        raise UserError(f"budget.{key}={value!r}: give {meaning}")
    if key == "ood_benchmarks" and not all(isinstance(v, str) for v in value):
        raise UserError(f"budget.ood_benchmarks={value!r}: give {meaning}")
