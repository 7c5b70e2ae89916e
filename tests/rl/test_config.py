"""How the Hydra config maps onto TRL's GRPOConfig: one round = the paper's batch, on any world size."""

import pytest

from seal.budget import Budget
from seal.errors import UserError
from seal.rl.config import grpo_config
from tests.test_configs import compose_with


def budget_of(*overrides, world=1):
    return Budget.from_config(compose_with(*overrides).budget, world)


def round_plan(node, world=1):
    return Budget.from_config(node, world).plan


def args_of(cfg, tmp_path, num_train, compute_dtype, world=1, sharding="ddp"):
    return grpo_config(cfg, Budget.from_config(cfg.budget, world), tmp_path, num_train, compute_dtype, sharding)

PAPER_BACKBONES = ["qwen2.5-3b", "qwen2.5-7b", "toolace-2-8b"]


@pytest.mark.parametrize("world, accumulation", [(1, 64), (2, 32), (4, 16)])
def test_the_paper_round_is_32_prompts_x_8_rollouts_in_4_steps_on_any_world_size(world, accumulation):
    # Table 4: 32 prompts x 8 rollouts = 256 episodes, PPO mini-batch 8 prompts = 64 episodes per
    # optimizer step, micro-batch 1: each rank accumulates 64 / world micro-batches per step
    plan = round_plan(compose_with("budget=paper").budget, world)
    assert (plan.episodes, plan.steps, plan.episodes_per_step) == (256, 4, 64)
    assert plan.episodes_per_rank == 256 // world and plan.accumulation == accumulation
    assert plan.micro_batch * world * plan.accumulation == plan.episodes_per_step


@pytest.mark.parametrize("backbone", PAPER_BACKBONES)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_paper_budget_grpo_config_per_backbone_and_world(tmp_path, backbone, world):
    cfg = compose_with("budget=paper", f"backbone={backbone}")
    args = args_of(cfg, tmp_path, num_train=400, compute_dtype=cfg.backbone.dtype, world=world)
    # TRL's generation batch = per-device batch x world x steps_per_generation: the whole round
    assert args.per_device_train_batch_size * world * args.steps_per_generation == 256
    assert args.gradient_accumulation_steps == 64 // world and args.num_generations == 8
    # 6 epochs of 400 entries at 32 prompts per round, each epoch dropping its last partial batch (as TRL's
    # sampler and the release do): 6 x 12 = 72 rounds of 4 steps
    assert budget_of("budget=paper").rounds_for(400) == 72 and args.max_steps == 288
    # a checkpoint every 6 rounds of 4 steps, only the last kept (the authors saved none periodically)
    assert (args.save_strategy, args.save_steps, args.save_total_limit) == ("steps", 24, 1)
    assert args.bf16 and not args.fp16
    # the reference model loads on the host with no device map whatever the launch (seal.rl.config)
    assert args.model_init_kwargs == {"dtype": "bfloat16", "device_map": None}


def test_every_number_the_paper_or_the_release_fixes_reaches_trl(tmp_path):
    args = args_of(compose_with("budget=paper"), tmp_path, num_train=400, compute_dtype="bfloat16")
    # Table 4: lr 1e-6, KL coefficient 0.001, group size 8, temperature 1.0 for training rollouts, max response
    # 4096. The release's actor config alone: the KL estimator low_var_kl (no importance-ratio factor), clip
    # ratio 0.2, grad clip 1.0
    assert args.learning_rate == 1e-6 and args.beta == 0.001 and args.use_bias_correction_kl is False
    assert args.epsilon == 0.2 and args.max_grad_norm == 1.0 and args.num_generations == 8
    assert args.temperature == 1.0 and args.max_completion_length == 4096
    # the release's loss aggregation: a per-episode token mean, averaged over episodes
    assert args.loss_type == "grpo" and args.lr_scheduler_type == "constant" and args.num_iterations == 1
    # the release's optimizer and loss details: weight decay 0.01, dual clip 10 (TRL's two-sided delta)
    assert args.weight_decay == 0.01 and args.delta == 10.0


@pytest.mark.parametrize("override, world", [("budget.steps_per_round=3", 1), ("budget.prompts_per_round=33", 4)])
def test_a_round_that_does_not_split_is_one_clear_error(override, world):
    with pytest.raises(UserError, match="do not split"):
        round_plan(compose_with("budget=paper", override).budget, world)


def test_each_setting_reaches_its_grpo_config_field(tmp_path):
    # values no TRL default has, so a dropped or crossed argument shows (the paper's and the release's values are
    # mostly TRL's defaults, which hide a missing mapping)
    cfg = compose_with(
        "budget=paper", "seed=11", "trainer.learning_rate=3e-6", "trainer.beta=0.02", "trainer.epsilon=0.3",
        "trainer.dual_clip=7.0", "trainer.weight_decay=0.05", "trainer.max_grad_norm=0.7", "trainer.loss_type=bnpo",
        "trainer.lr_scheduler_type=cosine", "trainer.warmup_ratio=0.1", "trainer.scale_rewards=batch",
        "trainer.gradient_checkpointing=false", "trainer.save_every=3", "trainer.keep_checkpoints=5",
        "budget.temperature=0.9", "budget.max_new_tokens=1234", "budget.rollouts_per_prompt=4",
        "budget.micro_batch_size=2", "budget.epochs=2", "launch.timeout_minutes=45",
    )
    args = args_of(cfg, tmp_path, num_train=100, compute_dtype="float32")
    # 32 prompts x 4 rollouts = 128 episodes per round, 4 steps of 32, micro-batches of 2: 16 per step;
    # 2 epochs of 100 // 32 = 3 rounds: 6 rounds of 4 steps
    expected = {
        "learning_rate": 3e-6, "beta": 0.02, "epsilon": 0.3, "delta": 7.0, "weight_decay": 0.05,
        "max_grad_norm": 0.7, "loss_type": "bnpo", "warmup_steps": 0.1, "scale_rewards": "batch",
        "gradient_checkpointing": False, "save_total_limit": 5, "temperature": 0.9, "max_completion_length": 1234,
        "num_generations": 4, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 16,
        "steps_per_generation": 64, "max_steps": 24, "save_steps": 12, "seed": 11, "data_seed": 11,
        "output_dir": str(tmp_path / "checkpoints"), "report_to": [], "bf16": False, "fp16": False,
        "disable_dropout": True, "dataloader_num_workers": 0, "log_completions": False,
        "mask_truncated_completions": False, "num_iterations": 1, "use_bias_correction_kl": False,
        "model_init_kwargs": {"dtype": "float32", "device_map": None}, "logging_steps": 1,
        # 45 minutes in seconds (transformers' default is 1800)
        "ddp_timeout": 2700,
    }
    assert {k: getattr(args, k) for k in expected} == expected
    assert getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type) == "cosine"
    assert budget_of("budget=paper", "budget.rounds=5").rounds_for(400) == 5
    # fewer train entries than one round's prompts still make one round per epoch
    assert budget_of("budget=paper").rounds_for(20) == 6


def test_round_plan_counts_are_integers_and_bad_sizes_are_named(tmp_path):
    from dataclasses import astuple

    plan = round_plan(compose_with("budget=paper").budget, 2)
    assert plan.world == 2 and all(type(v) is int for v in astuple(plan))
    # a group of 2 is the smallest GRPO group
    smallest = round_plan(compose_with("budget=paper", "budget.rollouts_per_prompt=2").budget)
    assert (smallest.episodes, smallest.world, smallest.episodes_per_rank) == (64, 1, 64)  # one rank by default
    with pytest.raises(UserError, match="rollouts_per_prompt=1: give a group size of at least 2 .GRPO needs at least 2"):
        round_plan(compose_with("budget=paper", "budget.rollouts_per_prompt=1").budget)
    # 256 episodes over 2 ranks x micro 4 x 4 steps = 32 split; over 3 ranks they do not
    assert round_plan(compose_with("budget=paper", "budget.micro_batch_size=4").budget, 2).accumulation == 8
    with pytest.raises(UserError, match="over 3 rank"):
        round_plan(compose_with("budget=paper", "budget.micro_batch_size=4").budget, 3)
    # micro-batches of 3 x 4 steps = 12 does not divide 256
    with pytest.raises(UserError, match="budget.micro_batch_size=3 x budget.steps_per_round=4"):
        round_plan(compose_with("budget=paper", "budget.micro_batch_size=3").budget, 1)
    # 3 ranks x micro-batches of 3 x 4 steps = 36 does not divide 256 either
    with pytest.raises(UserError, match="over 3 rank"):
        round_plan(compose_with("budget=paper", "budget.micro_batch_size=3").budget, 3)
    # as many prompts per round as train entries is allowed; one more is not
    args_of(compose_with("budget=paper"), tmp_path, num_train=32, compute_dtype="float32")
    with pytest.raises(UserError, match="prompts_per_round=32 exceeds the 31 train entries; lower it or raise budget.train_entries$"):
        args_of(compose_with("budget=paper"), tmp_path, num_train=31, compute_dtype="float32")
    with pytest.raises(UserError, match="trainer.loss_type='dapo': choose one of grpo, bnpo"):
        args_of(compose_with("budget=paper", "trainer.loss_type=dapo"), tmp_path, 400, "float32")
    for cap in ("0", "-1.5", "true", "abc"):
        with pytest.raises(UserError, match=r"^trainer.tis_cap=.*: the importance-sampling ratio's cap is a positive "
                                            r"number \(TRL's default cap is 3.0\), or null for no correction$"):
            args_of(compose_with("budget=paper", f"trainer.tis_cap={cap}"), tmp_path, 400, "float32")
    # any positive cap, also one at or below 1 (it then only ever lowers a token's weight)
    for cap in ("2", "1", "0.5"):
        args_of(compose_with("budget=paper", f"trainer.tis_cap={cap}"), tmp_path, 400, "float32")


def test_trl_is_told_the_process_groups_timeout_in_whole_seconds(tmp_path):
    assert args_of(compose_with("budget=paper"), tmp_path, 400, "float32").ddp_timeout == 2 * 60 * 60
    # 0.01 minutes is 0.6 s: rounded up, never to a zero timeout
    assert args_of(compose_with("budget=paper", "launch.timeout_minutes=0.01"), tmp_path, 400, "float32").ddp_timeout == 1
    with pytest.raises(UserError, match="^launch.timeout_minutes=-1: give a positive number of minutes"):
        args_of(compose_with("budget=paper", "launch.timeout_minutes=-1"), tmp_path, 400, "float32")


def test_float16_needs_a_gpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match="^backbone.dtype=float16 needs a CUDA GPU; use bfloat16 or float32 on a CPU$"):
        args_of(compose_with("budget=paper"), tmp_path, 400, compute_dtype="float16")


def test_the_checkpoint_cadence_comes_from_the_budget_and_null_saves_none(tmp_path):
    smoke = args_of(compose_with(), tmp_path, num_train=4, compute_dtype="float32")
    assert (smoke.save_strategy, smoke.save_steps, smoke.save_total_limit) == ("steps", 1, 2)
    # the authors' cadence: no periodic checkpoint (the best model is kept by budget.val_every)
    none = args_of(compose_with("budget=paper", "trainer.save_every=null", "trainer.keep_checkpoints=null"), tmp_path,
                   num_train=400, compute_dtype="bfloat16")
    assert none.save_strategy == "no" and none.save_total_limit is None
    for override, null in (("trainer.save_every=0", "no periodic checkpoints"),
                           ("trainer.keep_checkpoints=0", "keep every checkpoint"),
                           ("trainer.save_every=1.5", "no periodic checkpoints")):
        with pytest.raises(UserError, match=rf"^{override.split('=')[0]}=.*: give a number of at least 1, or null for {null}$"):
            args_of(compose_with(override), tmp_path, num_train=4, compute_dtype="float32")


def test_the_launchs_sharding_reaches_trl(tmp_path):
    """fsdp2 becomes transformers' FSDP2 plugin arguments; ddp none (accelerate's data parallel)."""
    fsdp = args_of(compose_with(), tmp_path, num_train=4, compute_dtype="float32", sharding="fsdp2")
    assert fsdp.fsdp_plugin_args["fsdp_version"] == 2 and fsdp.fsdp_plugin_args["state_dict_type"] == "SHARDED_STATE_DICT"
    assert args_of(compose_with(), tmp_path, num_train=4, compute_dtype="float32").fsdp_plugin_args is None
    with pytest.raises(ValueError, match="sharding 'zero3': choose one of ddp, fsdp2"):
        args_of(compose_with(), tmp_path, num_train=4, compute_dtype="float32", sharding="zero3")


@pytest.mark.parametrize("dtype, precision", [("float32", "no"), ("bfloat16", "bf16")])  # float16: CUDA only
def test_the_backbones_compute_dtype_is_the_trainers_mixed_precision(tmp_path, dtype, precision):
    # accelerate's names for the backbone's dtype (bf16 autocast for a bf16 backbone over fp32 masters)
    args = args_of(compose_with("backbone=tiny-random"), tmp_path, 8, dtype)
    assert args.mixed_precision == precision


# each number at the edge of what it takes, and just past it (the edges from what each means: a KL coefficient and a
# weight decay of 0 turn them off, a gradient norm of 0 turns clipping off in transformers' trainer, a warm-up is a
# fraction of the run, the dual clip caps a ratio and so lies above 1)
@pytest.mark.parametrize("key, taken, refused", [
    ("learning_rate", 1e-9, 0.0),
    ("beta", 0.0, -1e-9),
    ("epsilon", 1e-9, 0.0),
    ("weight_decay", 0.0, -1e-9),
    ("std_epsilon", 1e-12, 0.0),
    ("max_grad_norm", 0.0, -1e-9),
    ("warmup_ratio", 1.0, 1.000001),
    ("warmup_ratio", 0.0, -1e-9),
    ("dual_clip", 1.000001, 1.0),
    ("dual_clip", None, True),
    ("dual_clip", 10, "10"),
    ("learning_rate", 1, "1e-6"),
    ("beta", 2, False),
])
def test_each_trainer_number_is_refused_past_its_edge_in_one_sentence(key, taken, refused):
    from seal.rl.config import TRAINER_NUMBERS, check_trainer_numbers

    trainer = {"learning_rate": 1e-6, "beta": 0.001, "epsilon": 0.2, "weight_decay": 0.01, "std_epsilon": 1e-6,
               "max_grad_norm": 1.0, "warmup_ratio": 0.0, "dual_clip": 10.0}
    check_trainer_numbers(trainer | {key: taken})
    with pytest.raises(UserError) as caught:
        check_trainer_numbers(trainer | {key: refused})
    what = {"learning_rate": "give a positive number (the paper's 1e-6)",
            "beta": "give the KL coefficient, 0 or more (the paper's 0.001; 0: no reference model)",
            "epsilon": "give the ratio's clip range, a positive number (0.2)",
            "weight_decay": "give 0 or more",
            "std_epsilon": "give a positive number, added to a group's reward std before dividing (1e-6)",
            "max_grad_norm": "give 0 or more (0: no clipping)",
            "warmup_ratio": "give a fraction from 0 to 1",
            "dual_clip": "the cap on a negative advantage's ratio is a number above 1 (the release's 10), or null for none"}
    assert str(caught.value) == f"trainer.{key}={refused!r}: {what[key]}"
    # a number the config lacks is refused too (a config of another project's trainer group)
    if key in TRAINER_NUMBERS:
        with pytest.raises(UserError, match=f"^trainer.{key}=None: give "):
            check_trainer_numbers({k: v for k, v in trainer.items() if k != key})
