"""task=sanity: does training move this backbone? A tiny verifiable task through the same trainer.

    python run.py task=sanity backbone=tiny-random sanity.learning_rate=3e-4

The task itself (one of a few colour words, one rewarded) is seal.rl.learning_check's ChoiceTask. Writes
`sanity.json`; exits 1 when the reward did not rise by sanity.min_rise.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from seal.budget import Budget
from seal.errors import UserError


def sanity(cfg: DictConfig, out_dir: Path) -> None:
    from seal.rl.config import check_hardware
    from seal.rl.learning_check import ChoiceTask, check_target, rose

    started = time.perf_counter()
    s = cfg.sanity
    # the settings a user gets wrong are refused before the trainer's libraries load (20 s on two slow cores)
    check_target(list(s.options), s.target)
    check_hardware(cfg)
    learning_rate = sanity_learning_rate(cfg)
    sanity_budget(cfg, world=1)
    bb = instantiate(cfg.backbone)
    if not getattr(bb, "trainable", False):
        raise UserError(f"backbone={bb.name} is a scripted policy and cannot be trained; pick a model backbone")

    from seal.policy.formats import CHATS, chat_for
    from seal.rl import distributed, sharding
    from seal.rl.trainer import make_trainer

    dist = distributed.current(cfg.launch.timeout_minutes, sharded=sharding.requested(cfg.launch.sharding) == "fsdp2")
    backbone = OmegaConf.to_container(cfg.backbone, resolve=True)
    shards = sharding.resolve(cfg.launch.sharding, dist.world)
    sharding.check_devices(distributed.local_world(dist), distributed.cuda_devices())
    sharding.check_combination(shards, lora=bool(bb.lora))
    # under fsdp2 the fp32 masters stay in host memory until the trainer shards them onto the GPUs
    policy = bb.load(training=True, host=shards == "fsdp2")
    # the run's own trainer settings, on the sanity task's batch
    budget = sanity_budget(cfg, dist.world)
    # no checkpoint: the check is short and never resumed (a 3B model's would be about 35 GB to write)
    run_cfg = OmegaConf.merge(cfg, {"trainer": {"learning_rate": learning_rate, "save_every": None}})
    task = ChoiceTask(model=policy.model, tokenizer=policy.tokenizer, chat=CHATS[chat_for(policy.tokenizer)](),
                      options=list(s.options), target=s.target, seed=cfg.seed, dist=dist,
                      compute_dtype=policy.compute_dtype)
    prompts = [f"sanity_{i}" for i in range(s.prompts_per_round)]
    trainer = make_trainer(run_cfg, budget=budget, model=policy.model, tokenizer=policy.tokenizer, coevolution=task,
                           train_ids=prompts, out_dir=out_dir, compute_dtype=backbone["dtype"],
                           peft_config=bb.peft_config(), sharding=shards)
    task.model = trainer.model
    if dist.main:
        print(f"sanity check: {bb.describe()}, lr {run_cfg.trainer.learning_rate:g}, {s.rounds} rounds of "
              f"{s.prompts_per_round} x {s.rollouts_per_prompt} replies; rewarded option {s.target!r} of "
              f"{len(task.options)}", flush=True)
    trainer.train()
    rewards = [h["reward_mean"] for h in task.history]
    ok, first, last = rose(rewards, float(s.min_rise))
    result = {"backbone": bb.describe(), "learning_rate": run_cfg.trainer.learning_rate, "rewards": rewards,
              "first_rounds_mean": first, "last_rounds_mean": last, "min_rise": float(s.min_rise), "rose": ok,
              "world_size": dist.world, "sharding": shards, "seconds": time.perf_counter() - started, "history": task.history}
    if not dist.main:
        return
    (out_dir / "sanity.json").write_text(json.dumps(result, indent=2))
    verdict = "rose" if ok else "did NOT rise"
    print(f"sanity: reward {first:.3f} -> {last:.3f} ({verdict}; needed +{float(s.min_rise):.2f}); "
          f"{out_dir / 'sanity.json'}", flush=True)
    if not ok:
        print("sanity: training did not move this backbone; check precision (run_config), the learning rate and "
              "the launch before spending GPU hours", file=sys.stderr)
        sys.exit(1)


# the sanity task's own batch and length (conf/config.yaml's sanity:), each in place of the budget's key
SANITY_BUDGET_KEYS = ("prompts_per_round", "rollouts_per_prompt", "steps_per_round", "micro_batch_size", "rounds")


def sanity_budget(cfg: DictConfig, world: int) -> Budget:
    """The run's budget on the sanity task's batch (one token a reply, sampled at temperature 1); a value of
    sanity's the budget refuses is named as the sanity key the user gave."""
    s = cfg.sanity
    try:
        return Budget.from_config(OmegaConf.to_container(cfg.budget, resolve=True) | {
            key: s[key] for key in SANITY_BUDGET_KEYS} | {"max_new_tokens": 1, "temperature": 1.0}, world)
    except UserError as exc:
        key = next((k for k in SANITY_BUDGET_KEYS if str(exc).startswith(f"budget.{k}=")), None)
        if key is None:
            raise
        raise UserError(f"sanity.{str(exc).removeprefix('budget.')}") from None


def sanity_learning_rate(cfg: DictConfig) -> float:
    """sanity.learning_rate, or the run's trainer.learning_rate where it is null (0 is refused, not replaced)."""
    rate = cfg.sanity.learning_rate
    if rate is None:
        return float(cfg.trainer.learning_rate)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0:
        raise UserError(f"sanity.learning_rate={rate!r}: give a positive number (e.g. 3e-4), or null for the run's "
                        "trainer.learning_rate")
    return float(rate)
