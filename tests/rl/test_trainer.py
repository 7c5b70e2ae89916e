"""The TRL side of the loop: the advantage hook, the environment mask, checkpoints of SEAL state."""

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
import trl

from seal.env.benchmark import get_entries
from seal.interface import initial_interface
from seal.rl.coevolution import CoEvolution
from seal.rl.trainer import make_trainer, scale_advantages
from tests.rl.scripted import MASK, ScriptedEngine
from tests.test_configs import CONF

IDS = ["multi_turn_base_0", "multi_turn_miss_param_1"]


def config(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[
            "backbone=tiny-random", "budget.prompts_per_round=2", "budget.rollouts_per_prompt=2",
            "budget.micro_batch_size=4", "budget.steps_per_round=1", "budget.rounds=1", *overrides,
        ])


def build(cfg, tmp_path):
    policy = instantiate(cfg.backbone).load()
    entries = get_entries(IDS)
    icfg = instantiate(cfg.env_interface)
    co = CoEvolution(
        engine=ScriptedEngine(policy.model.config.vocab_size), entries={e.id: e for e in entries},
        omega=initial_interface(icfg), interface_cfg=icfg, diagnoser=instantiate(cfg.diagnoser),
        reweighting=instantiate(cfg.reweighting), temperature=1.0, seed=cfg.seed,
    )
    trainer = make_trainer(cfg, model=policy.model, tokenizer=policy.tokenizer, coevolution=co,
                           train_ids=IDS, out_dir=tmp_path)
    return co, trainer


def one_generation_batch(co, trainer, monkeypatch):
    """Run TRL's generate-and-score on one round; return (batch, advantages before SEAL's scaling)."""
    seen = {}
    original = trl.GRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        out = original(self, inputs)
        seen["advantages"] = out["advantages"].clone()
        return out

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", spy)
    # TRL's sampler repeats each prompt num_generations times in a row
    inputs = [{"prompt": i} for i in IDS for _ in range(2)]
    return trainer._generate_and_score_completions(inputs), seen["advantages"]


def test_scale_advantages_multiplies_per_trajectory():
    a = torch.tensor([1.0, -1.0, 0.5])
    assert torch.equal(scale_advantages(a, [2.0, 0.5, 1.0]), torch.tensor([2.0, -0.5, 0.5]))
    a2 = torch.ones(2, 3)
    assert torch.equal(scale_advantages(a2, [2.0, 3.0]), torch.tensor([[2.0] * 3, [3.0] * 3]))
    with pytest.raises(ValueError):
        scale_advantages(a, [1.0])


def test_hook_scales_the_group_advantages_by_the_diagnosis_weights(tmp_path, monkeypatch):
    co, trainer = build(config("reweighting=closed_loop"), tmp_path)
    out, plain = one_generation_batch(co, trainer, monkeypatch)
    record = co.history[-1]
    valid = [e["valid"] for e in record.episodes]
    assert valid == [True, False, True, False]  # one pass and one failure per group
    assert [e["labels"] for e in record.episodes] == [
        ["pass"] * 4, ["empty_turn_model_response"] * 4,
        ["pass"] * 3 + ["correct_abstention", "pass"], ["empty_turn_model_response"] * 3 + ["correct_abstention", "empty_turn_model_response"],
    ]
    # rho moves on this batch before weighting it (18 counted turns, confidence over 32 samples):
    #   empty turn:         target = 1.5 * (1 + 8/18 * 1 * 8/32) = 5/3;   rho = 0.75 * 1.5 + 0.25 * 5/3 = 37/24
    #   correct_abstention: one in a passed, one in a failed episode: stagnation 1/2
    #                       target = 1.8 * (1 + 2/18 * 1/2 * 2/32) = 1.80625; rho = 1.35 + 0.25 * 1.80625
    empty, abstain = 37 / 24, 1.35 + 0.25 * 1.80625
    expected_w = [1.0, empty, (4 + abstain) / 5, (4 * empty + abstain) / 5]
    assert record.rho["empty_turn_model_response"] == pytest.approx(empty) and record.rho["pass"] == 1.0
    assert torch.allclose(out["advantages"], plain * torch.tensor(expected_w))
    assert torch.equal(torch.sign(out["advantages"]), torch.sign(plain))
    assert plain.abs().min() > 0.5  # real group advantages, not zeros


def test_reweighting_off_leaves_trl_advantages_untouched(tmp_path, monkeypatch):
    co, trainer = build(config("reweighting=off"), tmp_path)
    out, plain = one_generation_batch(co, trainer, monkeypatch)
    assert torch.equal(out["advantages"], plain)


def test_environment_tokens_get_zero_gradient(tmp_path, monkeypatch):
    co, trainer = build(config(), tmp_path)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    assert torch.equal(out["tool_mask"][:, : len(MASK)], torch.tensor([MASK] * 4))
    captured = {}

    def keep_hidden(module, args, output):
        output.retain_grad()
        captured["hidden"] = output

    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop, which is not running here
    # TRL scores tokens with a fused LM head, so watch the final hidden states: the one at position
    # p feeds only the prediction of token p + 1, so its gradient is that token's share of the loss
    handle = model.get_decoder().norm.register_forward_hook(keep_hidden)
    try:
        model.train()
        loss = trainer.compute_loss(model, out)
        loss.backward()
    finally:
        handle.remove()
    start = out["prompt_ids"].shape[1] - 1
    per_token = captured["hidden"].grad[:, start : start + len(MASK)].abs().sum(-1)
    mask = torch.tensor([MASK] * 4, dtype=torch.bool)
    assert torch.all(per_token[~mask] == 0)
    assert torch.all(per_token[mask] > 0)
