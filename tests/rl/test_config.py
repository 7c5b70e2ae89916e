"""How the Hydra config maps onto TRL's GRPOConfig: one round = the paper's batch, on any world size."""

import pytest

from seal.errors import UserError
from seal.rl.config import grpo_config, round_plan, rounds_for
from tests.test_configs import compose_with

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
    args = grpo_config(cfg, tmp_path, num_train=400, compute_dtype=cfg.backbone.dtype, world=world)
    # TRL's generation batch = per-device batch x world x steps_per_generation: the whole round
    assert args.per_device_train_batch_size * world * args.steps_per_generation == 256
    assert args.gradient_accumulation_steps == 64 // world and args.num_generations == 8
    # 6 epochs of 400 entries at 32 prompts per round, each epoch dropping its last partial batch (as TRL's
    # sampler and the release do): 6 x 12 = 72 rounds of 4 steps
    assert rounds_for(cfg.budget, 400) == 72 and args.max_steps == 288
    assert args.save_steps == 4 and args.bf16 and not args.fp16
    assert args.model_init_kwargs == {"dtype": "bfloat16"}


def test_every_number_the_paper_fixes_reaches_trl(tmp_path):
    args = grpo_config(compose_with("budget=paper"), tmp_path, num_train=400, compute_dtype="bfloat16")
    # Table 4: lr 1e-6, KL coefficient 0.001 (low-variance KL, no importance-ratio factor), clip 0.2,
    # grad clip 1.0, group size 8, temperature 1.0 for training rollouts, max response 4096
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
