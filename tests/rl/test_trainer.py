"""The TRL side of the loop: the advantage hook, the environment mask, the KL term, padding, precision."""

import math

import pytest
import torch
from hydra.utils import instantiate
import trl

from seal.env.benchmarks.bfcl_v3 import get_entries
from seal.interface import initial_interface
from seal.rl.coevolution import CoEvolution
from seal.budget import Budget
from seal.rl.trainer import OptimisationProgress, make_trainer, scale_advantages
from tests.rl.scripted import MASK, ScriptedEngine
from tests.test_configs import compose_with

IDS = ["multi_turn_base_0", "multi_turn_miss_param_1"]


def config(*overrides):
    return compose_with(
        "backbone=tiny-random", "budget.prompts_per_round=2", "budget.rollouts_per_prompt=2",
        "budget.micro_batch_size=4", "budget.steps_per_round=1", "budget.rounds=1", *overrides,
    )


def build(cfg, tmp_path):
    policy = instantiate(cfg.backbone).load()
    entries = get_entries(IDS)
    icfg = instantiate(cfg.env_interface)
    co = CoEvolution(
        engine=ScriptedEngine(policy.model.config.vocab_size), entries={e.id: e for e in entries},
        omega=initial_interface(icfg), interface_cfg=icfg, diagnoser=instantiate(cfg.diagnoser),
        reweighting=instantiate(cfg.reweighting), temperature=1.0, seed=cfg.seed,
    )
    trainer = make_trainer(cfg, budget=Budget.from_config(cfg.budget), model=policy.model, tokenizer=policy.tokenizer,
                           coevolution=co, train_ids=IDS, out_dir=tmp_path)
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


def test_a_rounds_optimisation_is_shown_under_the_number_of_its_rollouts(tmp_path, monkeypatch):
    # the console's per-round lines start at round 0 ("[1/2] round 0 | ..."), and the rollouts of the first round
    # are shown as "round 0 · rollouts": its optimisation, counted in micro-batches, is "round 0 · optimisation"
    co, trainer = build(config(), tmp_path)
    trainer.optimisation = OptimisationProgress(micro_batches=3)
    one_generation_batch(co, trainer, monkeypatch)
    shown = trainer.optimisation.progress
    assert (shown.label, shown.total, shown.done, shown.unit) == ("round 0 · optimisation", 3, 0, "micro-batch")


def test_scale_advantages_multiplies_per_trajectory():
    a = torch.tensor([1.0, -1.0, 0.5])
    assert torch.equal(scale_advantages(a, [2.0, 0.5, 1.0]), torch.tensor([2.0, -0.5, 0.5]))
    a2 = torch.ones(2, 3)
    assert torch.equal(scale_advantages(a2, [2.0, 3.0]), torch.tensor([[2.0] * 3, [3.0] * 3]))
    with pytest.raises(ValueError):
        scale_advantages(a, [1.0])


def test_hook_scales_the_group_advantages_by_the_diagnosis_weights(tmp_path, monkeypatch):
    co, trainer = build(config("reweighting=closed_loop"), tmp_path)
    rho_before = dict(co.reweighting.rho)
    trainer.state.global_step = 12
    out, plain = one_generation_batch(co, trainer, monkeypatch)
    record = co.history[-1]
    assert record.global_step == 12  # the optimizer step the round closed at
    valid = [e["valid"] for e in record.episodes]
    assert valid == [True, False, True, False]  # one pass and one failure per group
    # the hand computation from the outcome tags (rho0 of Table 6): a good episode plays the gold calls, a
    # bad one makes no call at all; miss_param_1's turn 3 is a "no call" turn (correct_abstention)
    assert rho_before == {"spurious_tool_call": 2.0, "correct_abstention": 1.8, "empty_turn_model_response": 1.5,
                          "state_mismatch": 1.0, "response_mismatch": 0.9, "instance_mismatch": 0.6, "pass": 1.0}
    empty_tag, abstain_tag = "empty_turn_model_response", "correct_abstention"
    assert [[t["outcome"] for t in e["turn_labels"]] for e in record.episodes] == [
        ["pass"] * 4, [empty_tag] * 4, ["pass"] * 3 + [abstain_tag, "pass"], [empty_tag] * 3 + [abstain_tag, empty_tag]]
    # rho moves on this batch before weighting it (18 counted turns, confidence over 32 samples):
    #   empty turn:         target = 1.5 * (1 + 8/18 * 1 * 8/32) = 5/3;   rho = 0.75 * 1.5 + 0.25 * 5/3 = 37/24
    #   correct_abstention: one in a passed, one in a failed episode: stagnation 1/2
    #                       target = 1.8 * (1 + 2/18 * 1/2 * 2/32) = 1.80625; rho = 1.35 + 0.25 * 1.80625
    empty, abstain = 37 / 24, 1.35 + 0.25 * 1.80625
    expected_w = [1.0, empty, (4 + abstain) / 5, (4 * empty + abstain) / 5]
    assert record.rho["empty_turn_model_response"] == pytest.approx(empty) and record.rho["pass"] == 1.0
    # TRL divides by (std + 1e-4), the release by (std + 1e-6): each group (pass, fail) has std sqrt(1/2)
    std = 0.5 ** 0.5
    assert torch.allclose(out["advantages"], plain * (std + 1e-4) / (std + 1e-6) * torch.tensor(expected_w))
    assert torch.equal(torch.sign(out["advantages"]), torch.sign(plain))
    assert plain.abs().min() > 0.5  # real group advantages, not zeros


def test_reweighting_off_leaves_trl_advantages_unweighted(tmp_path, monkeypatch):
    co, trainer = build(config("reweighting=off", "trainer.std_epsilon=1e-4"), tmp_path)
    out, plain = one_generation_batch(co, trainer, monkeypatch)
    assert torch.equal(out["advantages"], plain)


def test_rank_0_of_two_rescales_only_its_own_episodes_by_their_groups_std(tmp_path, monkeypatch):
    from seal.rl.trainer import group_std_rescale

    co, trainer = build(config("reweighting=off"), tmp_path)
    # the round over two ranks: this rank's groups (one pass, one fail each) first, then the other rank's
    # groups, all passed (std 0)
    monkeypatch.setattr(co, "round_rewards", lambda: [e["reward"] for e in co.history[-1].episodes] + [1.0] * 4)
    out, plain = one_generation_batch(co, trainer, monkeypatch)
    own = [e["reward"] for e in co.history[-1].episodes]
    std = 0.5 ** 0.5
    assert own == [1.0, 0.0, 1.0, 0.0] and group_std_rescale(own + [1.0] * 4, 2, 1e-6)[:4] == [
        pytest.approx((std + 1e-4) / (std + 1e-6))] * 4
    assert torch.allclose(out["advantages"], plain * (std + 1e-4) / (std + 1e-6))


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


# ---------------------------------------------------------------------------------------- the KL term


def test_low_var_kl_is_the_clamped_k3_estimator():
    from seal.rl.trainer import low_var_kl

    logps = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    ref = torch.log(torch.tensor([0.25, 0.5, 1.0, 1e-30])) + torch.tensor([0.0, 0.0, 5.0, 0.0])
    # by hand, r = log pi_ref - log pi: k3 = e^r - r - 1
    r1 = math.log(0.5)
    expected = [0.5 - r1 - 1, 0.0, 10.0, 10.0]  # r = ln 2 + 5 -> e^r - r - 1 = 289 > 10; r << -20 -> 19 > 10
    assert low_var_kl(logps, ref).tolist() == pytest.approx(expected, abs=1e-6)


def test_each_micro_batchs_log_probs_are_written_as_they_reach_the_loss(tmp_path, monkeypatch):
    """trainer.save_logprobs: step<k>_rank<r>_<i>.pt for the i-th micro-batch of optimizer step k (from 1), the
    policy's, the old policy's and the reference's log-probs as the loss got them, and its loss mask."""
    co, trainer = build(config("trainer.beta=0.5", "trainer.save_logprobs=true"), tmp_path)
    assert trainer.logprob_dir == tmp_path / "logprobs"
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    trainer.current_gradient_accumulation_steps = 1
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention,
                                                                 out["completion_ids"].shape[1])
    out["old_per_token_logps"] = logps - 0.05
    out["ref_per_token_logps"] = logps - 0.1
    trainer.model.train()
    trainer.state.global_step = 3
    trainer.compute_loss(trainer.model, out)
    trainer.compute_loss(trainer.model, out)
    trainer.state.global_step = 4
    trainer.compute_loss(trainer.model, out)
    assert sorted(p.name for p in (tmp_path / "logprobs").iterdir()) == [
        "step00004_rank0_000.pt", "step00004_rank0_001.pt", "step00005_rank0_000.pt"]
    record = torch.load(tmp_path / "logprobs" / "step00004_rank0_001.pt")
    assert sorted(record) == ["logps", "mask", "old_logps", "ref_logps"]
    assert torch.allclose(record["logps"], logps, atol=1e-6)
    assert torch.equal(record["ref_logps"], out["ref_per_token_logps"])
    assert torch.equal(record["old_logps"], out["old_per_token_logps"])
    assert torch.equal(record["mask"], out["completion_mask"] * out["tool_mask"])
    # off by default: nothing written
    _, quiet = build(config("trainer.beta=0.5"), tmp_path / "quiet")
    assert quiet.logprob_dir is None


@pytest.mark.parametrize("gap", [1e-2, 1e-3, 1e-4, 1e-5, -1e-3, 0.3])
def test_the_kl_of_nearby_policies_equals_an_fp64_computation_to_1e6(gap):
    """fp32 log-probs of two nearby policies (what reaches the loss under FSDP2, which casts no output): the k3 term
    exp(r) - r - 1 is about r^2 / 2, which fp32 arithmetic on exp(r) ~ 1 loses (r = 1e-3: 24 % of it). The
    expected value is the exact series sum_{k>=2} r^k / k! in Python floats (no library exp), on the fp32 r."""
    from seal.rl.trainer import low_var_kl

    logps = torch.tensor([-2.302585, -0.693147, -7.5, -0.01], dtype=torch.float32)
    ref = logps + gap
    kl = low_var_kl(logps, ref)
    for got, a, b in zip(kl.tolist(), logps.tolist(), ref.tolist(), strict=True):
        r = b - a  # the fp32 values' exact difference, in doubles
        term, k, series = r, 1, 0.0
        while True:
            k += 1
            term *= r / k
            if abs(term) < 1e-30:
                break
            series += term
        assert got == pytest.approx(series, rel=1e-6)


def test_the_loss_adds_the_releases_low_var_kl_without_the_importance_ratio(tmp_path, monkeypatch):
    co, trainer = build(config("trainer.beta=0.5"), tmp_path)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1
    mask = (out["completion_mask"] * out["tool_mask"]).float()
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, out["completion_ids"].shape[1])
    # old policy 0.05 nats below the current one: ratio e^0.05 inside the clip range [0.8, 1.2];
    # reference 0.1 nats below: r = -0.1 (and 6 nats above on one token: k3 clamped to 10)
    out["old_per_token_logps"] = logps - 0.05
    out["ref_per_token_logps"] = logps - 0.1
    first = mask[0].nonzero()[0].item()
    out["ref_per_token_logps"][0, first] = logps[0, first] + 6.0
    ratio, k3 = math.exp(0.05), math.exp(-0.1) + 0.1 - 1
    kl = torch.full_like(logps, k3)
    kl[0, first] = 10.0
    per_token = -ratio * out["advantages"][:, None] + 0.5 * kl
    expected = ((per_token * mask).sum(1) / mask.sum(1)).mean()
    model.train()
    loss = trainer.compute_loss(model, out)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    # the KL is computed in float64 and joins TRL's loss in the loss's own dtype: float32 reaches the backward pass
    assert loss.dtype == torch.float32
    # TRL's default would have multiplied the KL by the ratio
    biased = ((((-ratio * out["advantages"][:, None]) + 0.5 * kl * ratio) * mask).sum(1) / mask.sum(1)).mean()
    assert abs(loss.item() - biased.item()) > 1e-4
    # the term's mean over the trained tokens is logged as kl: 10 on the first one, k3 on the others
    n = mask.sum().item()
    assert trainer._metrics["train"]["kl"][-1] == pytest.approx((k3 * (n - 1) + 10.0) / n, rel=1e-4)
    # under gradient accumulation TRL divides its loss by the steps: the KL term is divided with it
    trainer.current_gradient_accumulation_steps = 4
    assert trainer.compute_loss(model, out).item() == pytest.approx(expected.item() / 4, rel=1e-4)
    # outside training (TRL's evaluation loop) nothing is divided, and the term is logged under eval
    model.eval()
    assert trainer.compute_loss(model, out).item() == pytest.approx(expected.item(), rel=1e-4)
    assert trainer._metrics["eval"]["kl"] == [pytest.approx((k3 * (n - 1) + 10.0) / n, rel=1e-4)]
    # a micro-batch that trains one token only: the logged KL is that token's (10), and the loss is
    # episode 0's one-token mean over the 4 episodes (the other three train nothing and count 0)
    out["tool_mask"] = torch.zeros_like(out["tool_mask"])
    out["tool_mask"][0, first] = 1
    one = (-ratio * out["advantages"][0] + 0.5 * 10.0) / 4
    assert trainer.compute_loss(model, out).item() == pytest.approx(one.item(), rel=1e-4)
    assert trainer._metrics["eval"]["kl"][-1] == pytest.approx(10.0, rel=1e-6)


def test_log_probs_that_reach_the_loss_in_bf16_stop_the_run_naming_whose():
    """accelerate's own FSDP2 policy casts the model's outputs to bf16: a true per-token KL of 2e-4 then reads as
    about zero (issue 43). The loss takes float32 only, and says whose log-probs were not."""
    from seal.rl.trainer import check_logprob_dtypes

    logps = torch.full((1, 4), -1.0)
    fine = {"old_per_token_logps": logps - 0.01, "ref_per_token_logps": logps - 0.02}
    check_logprob_dtypes(logps, fine)
    check_logprob_dtypes(logps, {})  # a run without a KL term or an old policy (beta 0, one step a round)
    # why: bf16 log-probs near -1 are 2^-7 apart, so a gap of 1e-3 nats (a KL of 5e-7) rounds to none at all
    assert ((logps - 1e-3).bfloat16() == logps.bfloat16()).all() and (logps - 1e-3 != logps).all()
    with pytest.raises(RuntimeError) as stopped:
        check_logprob_dtypes(logps, {**fine, "ref_per_token_logps": fine["ref_per_token_logps"].bfloat16()})
    assert str(stopped.value) == (
        "log-probs reached the loss in low precision (reference bfloat16; float32 expected): the ratios and the KL "
        "term would be rounding noise. Something casts the model's outputs: check the sharding's mixed-precision "
        "policy (seal.rl.sharding.mixed_precision_policy casts none)")
    with pytest.raises(RuntimeError, match=r"\(policy bfloat16, old policy float16; float32 expected\)"):
        check_logprob_dtypes(logps.bfloat16(), {"old_per_token_logps": logps.half()})
    # more precision than float32 is no noise
    check_logprob_dtypes(logps.double(), {"ref_per_token_logps": logps.double()})


def test_the_loss_refuses_log_probs_in_bf16_whether_the_policys_or_the_references(tmp_path, monkeypatch):
    co, trainer = build(config("trainer.beta=0.5"), tmp_path)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, out["completion_ids"].shape[1])
    assert logps.dtype == torch.float32
    model.train()
    out["ref_per_token_logps"] = logps.bfloat16()
    with pytest.raises(RuntimeError, match=r"\(reference bfloat16; float32 expected\)"):
        trainer.compute_loss(model, out)
    out["ref_per_token_logps"] = logps.clone()
    assert torch.isfinite(trainer.compute_loss(model, out))
    # the policy's own scoring handed back in bf16, as accelerate's FSDP2 policy casts the model's outputs
    from trl import GRPOTrainer

    scoring = GRPOTrainer._get_per_token_logps_and_entropies
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies",
                        lambda *a, **k: (lambda lp, ent, aux: (lp.bfloat16(), ent, aux))(*scoring(*a, **k)))
    with pytest.raises(RuntimeError, match=r"\(policy bfloat16; float32 expected\)"):
        trainer.compute_loss(model, out)


# ---------------------------------------------------------------------------------------- padding


def test_each_micro_batch_is_scored_on_its_own_columns_only(tmp_path, monkeypatch):
    co, trainer = build(config(), tmp_path)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    model = trainer.model
    # pad the batch further, as a round with a much longer episode would: 7 more prompt columns on the
    # left, 11 more completion columns on the right
    pad = trainer.processing_class.pad_token_id
    ids = torch.cat([torch.full((4, 7), pad), out["prompt_ids"], out["completion_ids"], torch.full((4, 11), pad)], 1)
    attention = torch.cat([torch.zeros(4, 7, dtype=torch.long), out["prompt_mask"], out["completion_mask"],
                           torch.zeros(4, 11, dtype=torch.long)], 1)
    width = out["completion_ids"].shape[1] + 11
    seen = []
    handle = model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["input_ids"].shape[1]),
                                             with_kwargs=True)
    try:
        with torch.no_grad():
            trimmed, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, width, batch_size=2)
            full, _, _ = trl.GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, attention, width,
                                                                             batch_size=2)
    finally:
        handle.remove()
    assert seen[:2] == [ids.shape[1] - 18] * 2 and seen[2:] == [ids.shape[1]] * 2
    mask = torch.cat([out["completion_mask"] * out["tool_mask"], torch.zeros(4, 11, dtype=torch.long)], 1).bool()
    assert torch.allclose(trimmed[mask], full[mask], atol=1e-5)
    assert torch.all(trimmed[:, -11:] == 0)


# ---------------------------------------------------------------------------------------- precision


def test_a_bf16_backbone_trains_fp32_master_weights(tmp_path):
    from seal.policy.backbones import TinyRandomBackbone

    bf16 = TinyRandomBackbone(dtype="bfloat16")
    trained, served = bf16.load(training=True), bf16.load()
    assert {p.dtype for p in trained.model.parameters()} == {torch.float32}
    assert trained.compute_dtype == torch.bfloat16
    assert {p.dtype for p in served.model.parameters()} == {torch.bfloat16}
    lora = TinyRandomBackbone(dtype="bfloat16", lora={"r": 4, "target_modules": ["q_proj"]}).load(training=True)
    assert {p.dtype for p in lora.model.parameters()} == {torch.bfloat16}  # the frozen base (peft adds fp32 adapters)


def test_weights_move_at_the_papers_learning_rate_and_the_kv_cache_stays_bf16(tmp_path, monkeypatch):
    from seal.policy import generation_hf
    from seal.policy.formats import get_format
    from seal.policy.rollout import RolloutEngine

    cfg = config("backbone.dtype=bfloat16", "budget.rounds=2")
    policy = instantiate(cfg.backbone).load(training=True)
    entries = get_entries(IDS)
    icfg = instantiate(cfg.env_interface)
    co = CoEvolution(
        engine=ScriptedEngine(policy.model.config.vocab_size), entries={e.id: e for e in entries},
        omega=initial_interface(icfg), interface_cfg=icfg, diagnoser=instantiate(cfg.diagnoser),
        reweighting=instantiate(cfg.reweighting), temperature=1.0, seed=0, group_size=2,
    )
    trainer = make_trainer(cfg, budget=Budget.from_config(cfg.budget), model=policy.model, tokenizer=policy.tokenizer,
                           coevolution=co, train_ids=IDS, out_dir=tmp_path, compute_dtype="bfloat16")
    assert trainer.args.bf16 and trainer.ref_model.dtype == torch.bfloat16
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2
    # AdamW's first steps move every weight with a gradient by about lr (m / sqrt(v) = +-1 at step 1), so
    # after 2 steps at lr 1e-6 a weight moved by at most 2e-6; in bf16 a weight near 0.02 moves in steps of
    # 1.2e-4 and those updates would round away
    for name in ["model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"]:
        delta = (trainer.model.get_parameter(name).detach() - before[name]).abs()
        assert (delta > 0).float().mean() > 0.9, name
        assert delta.max() <= 2.2e-6, name
        assert ((before[name] + delta).bfloat16() == before[name].bfloat16()).float().mean() > 0.9
    # rollouts with the fp32 masters keep their KV cache in bf16
    kept = []
    real = generation_hf._row_cache

    def spy(cache, row, valid_row):
        rows = real(cache, row, valid_row)
        kept.append(rows[0][0].dtype)
        return rows

    monkeypatch.setattr(generation_hf, "_row_cache", spy)
    engine = RolloutEngine(policy, get_format("qwen_xml"), context_length=16384, max_new_tokens=4, batch_size=2,
                           compute_dtype=torch.bfloat16)
    engine.model = trainer.model
    engine.play(entries, temperature=1.0)
    assert kept and set(kept) == {torch.bfloat16}


# ---------------------------------------------------------------------------------------- release details


def test_group_std_rescale_by_hand():
    from seal.rl.trainer import group_std_rescale

    # group (1, 0, 0, 0): mean 1/4, unbiased variance (9/16 + 3/16) / 3 = 1/4, std 1/2
    # group (1, 1, 0, 0): mean 1/2, unbiased variance 4 * 1/4 / 3 = 1/3
    factors = group_std_rescale([1, 0, 0, 0, 1, 1, 0, 0], 4, 1e-6)
    s2 = (1 / 3) ** 0.5
    assert factors == pytest.approx([(0.5 + 1e-4) / (0.5 + 1e-6)] * 4 + [(s2 + 1e-4) / (s2 + 1e-6)] * 4, rel=1e-12)


def test_advantages_use_the_releases_std_epsilon(tmp_path, monkeypatch):
    co, trainer = build(config("reweighting=off"), tmp_path)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    # two groups of (pass, fail): mean 1/2, unbiased std sqrt(1/2); advantage +-(1/2) / (std + 1e-6)
    a = 0.5 / (0.5 ** 0.5 + 1e-6)
    assert out["advantages"].tolist() == pytest.approx([a, -a, a, -a], rel=1e-7)


def test_training_sees_only_the_first_max_train_tokens(tmp_path):
    from seal.policy.generation import derive_seed  # noqa: F401  (the round's seeds come from it)

    cfg = config()
    co, _ = build(cfg, tmp_path)
    co.max_train_tokens = 5
    out = co.play_round(["multi_turn_base_0", "multi_turn_base_0"])
    full = co._played
    assert [len(c) for c in out["completion_ids"]] == [5, 5]
    assert out["completion_ids"] == [r.completion_ids[:5] for r in full]
    assert out["env_mask"] == [r.completion_mask[:5] for r in full] and out["verifier_reward"] == [r.reward for r in full]


def test_an_episode_whose_prompt_cannot_fit_reaches_trl_as_one_environment_token(tmp_path):
    from seal.policy.backbones import TinyRandomBackbone
    from seal.policy.formats import get_format
    from seal.policy.rollout import RolloutEngine

    policy = TinyRandomBackbone().load()
    entries = get_entries(IDS)
    # a context shorter than any prompt: every episode ends as context_overflow before the model speaks
    engine = RolloutEngine(policy, get_format("qwen_xml"), context_length=100, max_new_tokens=8, batch_size=2)
    cfg = config()
    icfg = instantiate(cfg.env_interface)
    co = CoEvolution(engine=engine, entries={e.id: e for e in entries}, omega=initial_interface(icfg),
                     interface_cfg=icfg, diagnoser=instantiate(cfg.diagnoser), reweighting=instantiate(cfg.reweighting),
                     temperature=1.0, seed=0, group_size=2)
    out = co.play_round(IDS)
    im_end = policy.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert out["completion_ids"] == [[im_end], [im_end]] and out["env_mask"] == [[0], [0]]
    assert out["verifier_reward"] == [0.0, 0.0] and {r.ended for r in co._played} == {"context_overflow"}


# ---------------------------------------------------------------------------------------- sampler versus trainer


def _model_logps(model, prompt_ids, completion_ids, temperature):
    """log pi(token | prefix) of each completion token, from one plain forward pass of the model."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0].float() / temperature, -1)
    start = len(prompt_ids) - 1
    return [logps[start + i, token].item() for i, token in enumerate(completion_ids)]


class OffsetEngine(ScriptedEngine):
    """Scripted episodes whose sampler log-probs are the sampling model's own, minus `offset(episode,
    position)` on each model token: a rollout engine whose numerics differ from the trainer's by a known
    amount."""

    def __init__(self, vocab_size, offset, temperature):
        super().__init__(vocab_size)
        self.offset, self.temperature = offset, temperature

    def play(self, entries, view=None, **kwargs):
        rollouts = super().play(entries, view, **kwargs)
        for j, r in enumerate(rollouts):
            logps = _model_logps(self.model, r.prompt_ids, r.completion_ids, self.temperature)
            r.logprobs = [lp - self.offset(j, t) if m else 0.0
                          for t, (lp, m) in enumerate(zip(logps, r.completion_mask))]
        return rollouts


def build_offset(cfg, tmp_path, offset):
    policy = instantiate(cfg.backbone).load()
    entries = get_entries(IDS)
    icfg = instantiate(cfg.env_interface)
    engine = OffsetEngine(policy.model.config.vocab_size, offset, cfg.budget.temperature)
    co = CoEvolution(
        engine=engine, entries={e.id: e for e in entries}, omega=initial_interface(icfg), interface_cfg=icfg,
        diagnoser=instantiate(cfg.diagnoser), reweighting=instantiate(cfg.reweighting), temperature=1.0, seed=cfg.seed,
    )
    trainer = make_trainer(cfg, budget=Budget.from_config(cfg.budget), model=policy.model, tokenizer=policy.tokenizer,
                           coevolution=co, train_ids=IDS, out_dir=tmp_path)
    engine.model = trainer.model  # the loop's hand-over: the engine samples with the trained model
    return co, trainer


def _trl_batches(monkeypatch):
    """What TRL's own generate-and-score handed over, batch by batch (before SEAL's changes)."""
    seen = []
    original = trl.GRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        out = original(self, inputs)
        seen.append({k: v.clone() if torch.is_tensor(v) else v for k, v in out.items()})
        return out

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", spy)
    return seen


def test_the_gap_and_the_truncated_ratio_by_hand():
    from seal.rl.trainer import logprob_gap_totals, truncated_importance_weights

    old = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.1, -4.0]])
    sampling = torch.tensor([[-1.5, -1.0, -0.5], [-1.0, -0.3, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    # |old - sampling| on the four masked tokens: 0.5, 1.0, 2.0, 0.2
    assert logprob_gap_totals(old, sampling, mask).tolist() == pytest.approx([3.7, 4.0])
    # exp(old - sampling): e^0.5, e^-1, e^-2, e^0.2 on the masked tokens, capped at 1.5; 1 where masked out
    expected = [1.5, math.exp(-1.0), 1.0, math.exp(-2.0), math.exp(0.2), 1.0]
    assert truncated_importance_weights(old, sampling, mask, 1.5).flatten().tolist() == pytest.approx(expected)
    assert truncated_importance_weights(old, sampling, mask, 10.0)[0, 0].item() == pytest.approx(math.exp(0.5))


@pytest.mark.parametrize("overrides, trl_scored", [
    # one optimizer step per round: every micro-batch is scored before it, with the sampling weights
    (("budget.micro_batch_size=4", "budget.steps_per_round=1"), False),
    # two steps per round, at a learning rate that moves the weights far: TRL scores the batch up front
    (("budget.micro_batch_size=2", "budget.steps_per_round=2", "trainer.learning_rate=0.05"), True),
])
def test_the_round_record_holds_the_gap_between_sampler_and_trainer_logprobs(tmp_path, monkeypatch, overrides,
                                                                              trl_scored):
    co, trainer = build_offset(config(*overrides), tmp_path, offset=lambda episode, position: 0.25)
    batches = _trl_batches(monkeypatch)
    trainer.train()
    assert ("old_per_token_logps" in batches[0]) is trl_scored
    (record,) = co.history
    assert record.metrics["train/logprob_gap"] == pytest.approx(0.25, abs=1e-4)


def _hand_loss(per_token, mask, loss_type):
    if loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1)).mean()
    return (per_token * mask).sum() / mask.sum()


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo"])
def test_truncated_importance_sampling_weights_each_tokens_advantage(tmp_path, monkeypatch, loss_type):
    # the sampler below the trainer by these, by episode and position: ratios e^0.5, e^-0.3, e^1.5 (capped)
    offsets = [0.5, -0.3, 1.5]
    cfg = config("reweighting=off", "trainer.std_epsilon=1e-4", "trainer.beta=0.0", "trainer.tis_cap=2.0",
                 f"trainer.loss_type={loss_type}")
    co, trainer = build_offset(cfg, tmp_path, offset=lambda episode, position: offsets[(episode + position) % 3])
    batches = _trl_batches(monkeypatch)
    out = trainer._generate_and_score_completions([{"prompt": i} for i in IDS for _ in range(2)])
    (plain,) = batches
    # one optimizer step per round: TRL scored nothing up front, so the correction scored the batch once
    assert "old_per_token_logps" not in plain
    mask = (out["completion_mask"] * out["tool_mask"]).float()
    offset = torch.tensor([[offsets[(j + t) % 3] for t in range(mask.shape[1])] for j in range(mask.shape[0])])
    ratio = torch.where(mask.bool(), offset.exp().clamp(max=2.0), torch.ones_like(mask))
    gap = (out["old_per_token_logps"] - out["sampling_per_token_logps"]) * mask
    assert torch.allclose(gap, offset * mask, atol=1e-4)
    assert torch.allclose(out["advantages"], plain["advantages"][:, None] * ratio, rtol=1e-4)
    # the loss: TRL's clipped objective -min(r1 A, clip(r1) A) with the ratio on each token; r1 = 1 here
    # (the old log-probs are the current weights')
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, out)
    expected = _hand_loss(-plain["advantages"][:, None] * ratio, mask, loss_type)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    uncorrected = _hand_loss(-plain["advantages"][:, None] * torch.ones_like(mask), mask, loss_type)
    assert abs(loss.item() - uncorrected.item()) > 1e-3


def test_without_the_correction_nothing_changes(tmp_path, monkeypatch):
    cfg = config("reweighting=off", "trainer.std_epsilon=1e-4", "trainer.beta=0.0")
    assert cfg.trainer.tis_cap is None  # off by default, as in the authors' runs
    co, trainer = build_offset(cfg, tmp_path, offset=lambda episode, position: 1.5)
    batches = _trl_batches(monkeypatch)
    out = trainer._generate_and_score_completions([{"prompt": i} for i in IDS for _ in range(2)])
    (plain,) = batches
    assert torch.equal(out["advantages"], plain["advantages"]) and out["advantages"].dim() == 1
    assert "old_per_token_logps" not in out
    mask = (out["completion_mask"] * out["tool_mask"]).float()
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, out)
    assert loss.item() == pytest.approx(_hand_loss(-plain["advantages"][:, None] * mask, mask, "grpo").item(), rel=1e-5)


@pytest.mark.parametrize("scale", ["batch", "none", False])
def test_advantages_without_group_scaling_are_trls(tmp_path, monkeypatch, scale):
    """scale_rewards other than group: seal's advantages are TRL 1.16's, computed here from its formula
    (grpo_trainer: r - group mean, divided by the batch's unbiased std + 1e-4 for "batch", not divided for
    "none"; False is "none"), whatever seal's own std_epsilon (1e-6 by default) is."""
    co, trainer = build(config("reweighting=off", f"trainer.scale_rewards={str(scale).lower()}"), tmp_path)
    # rewards (1, 1 | 1, 0): group means 1 and 1/2; batch mean 3/4, unbiased variance (3/16 + 9/16) / 3 = 1/4
    co.engine = ScriptedEngine(trainer.model.config.vocab_size, good=lambda position: position < 3)
    out, _ = one_generation_batch(co, trainer, monkeypatch)
    assert [e["valid"] for e in co.history[-1].episodes] == [True, True, True, False]
    centred = [0.0, 0.0, 0.5, -0.5]
    expected = [a / (0.5 + 1e-4) for a in centred] if scale == "batch" else centred
    assert out["advantages"].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


class _CudaState:
    """What accelerate's PartialState reports on a GPU node (TRL reads only `.device`)."""

    device = torch.device("cuda", 0)


def test_the_reference_model_is_loaded_on_the_host_without_a_device_map_even_on_cuda(tmp_path, monkeypatch):
    """TRL's create_model_from_path falls back to device_map="auto" on CUDA unless it is told otherwise (it
    tells itself only under MULTI_GPU and DeepSpeed): on a node of several GPUs "auto" spreads the reference
    over all of them behind accelerate's device hooks, and its first log-prob pass fails after FSDP or DDP
    placed it. Here TRL is made to believe it runs on CUDA; the reference must still be requested with
    device_map=None, and come out as one plain module on the trainer's device with no hook."""
    import transformers
    from trl.trainer import utils as trl_utils

    monkeypatch.setattr(trl_utils, "PartialState", _CudaState)
    requested = []
    original = transformers.LlamaForCausalLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        requested.append(kwargs.get("device_map", "absent"))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.LlamaForCausalLM, "from_pretrained", classmethod(spy))
    _, trainer = build(config("trainer.beta=0.001"), tmp_path)
    # the first request is seal's own load of the policy (placed by seal.policy.backbones), the second TRL's
    assert requested[1:] == [None]
    reference = trainer.ref_model
    assert not hasattr(reference, "hf_device_map")
    assert not any(hasattr(m, "_hf_hook") for m in reference.modules())
    assert {p.device for p in reference.parameters()} == {trainer.accelerator.device}


def test_a_token_the_policy_cannot_write_keeps_the_kl_at_its_cap():
    from seal.rl.trainer import low_var_kl

    # log pi = -inf (a token under probability 0 after the update): r clamped to 20 keeps e^r - r - 1 finite
    assert low_var_kl(torch.tensor([-math.inf]), torch.tensor([-1.0])).tolist() == [10.0]


def test_the_trained_tokens_are_the_completions_less_the_environments():
    from seal.rl.trainer import loss_mask

    completion = torch.tensor([[1, 1, 1, 0]])
    assert loss_mask({"completion_mask": completion}) is completion
    assert loss_mask({"completion_mask": completion, "tool_mask": torch.tensor([[1, 0, 1, 1]])}).tolist() == [[1, 0, 1, 0]]


def test_a_per_token_term_reduced_as_trl_reduces_each_loss_by_hand():
    from seal.rl.trainer import aggregate

    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # grpo: each episode's token mean (1.5; 5; an episode with none counts 0), then their mean
    assert aggregate(per_token, mask, "grpo").item() == pytest.approx((1.5 + 5.0 + 0.0) / 3)
    # bnpo: all tokens of the micro-batch at once: (1 + 2 + 5) / 3
    assert aggregate(per_token, mask, "bnpo").item() == pytest.approx(8.0 / 3)
    one = torch.tensor([[0.0, 1.0, 0.0]])
    assert aggregate(per_token[:1], one, "bnpo").item() == 2.0 and aggregate(per_token[:1], one, "grpo").item() == 2.0
    assert aggregate(per_token[:1], torch.zeros(1, 3), "bnpo").item() == 0.0
    with pytest.raises(ValueError) as caught:
        aggregate(per_token, mask, "dr_grpo")
    assert str(caught.value) == "loss_type 'dr_grpo' is not supported with the KL term; use grpo or bnpo"


def test_the_columns_a_micro_batch_uses_by_hand():
    from seal.rl.trainer import trim_bounds

    # prompt of 3 (left-padded), completion of 3 (right-padded): the rows use columns 1 to 4
    mask = torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0]])
    assert trim_bounds(mask, 3) == (1, 5)
    # nothing used: no prompt column, and one completion column is kept (TRL scores at least one)
    assert trim_bounds(torch.zeros(2, 4, dtype=torch.long), 2) == (2, 3)


def test_the_weights_scale_advantages_in_their_dtype_and_device():
    for dtype in (torch.bfloat16, torch.float64):
        scaled = scale_advantages(torch.tensor([1.0, -1.0], dtype=dtype), [0.5, 3.0])
        assert scaled.dtype == dtype and scaled.tolist() == [0.5, -3.0]
    assert scale_advantages(torch.zeros(2, 3, device="meta"), [1.0, 2.0]).device.type == "meta"
    with pytest.raises(ValueError) as caught:
        scale_advantages(torch.zeros(3), [1.0])
    assert str(caught.value) == "1 weights for 3 advantages"


def test_on_a_cpu_the_fused_head_scores_the_labelled_positions_only_each_from_its_own_row(monkeypatch):
    import trl.kernels.chunked_logprob as kernels
    import trl.trainer.utils as fused
    from transformers import LlamaConfig, LlamaForCausalLM

    from seal.rl.config import score_labelled_positions_only

    monkeypatch.setattr(fused, "_use_triton", kernels._use_triton)  # TRL's own choice, restored afterwards
    rows = []
    apply = fused._ChunkedLogProbFunction.apply
    monkeypatch.setattr(fused._ChunkedLogProbFunction, "apply", lambda hidden, *a: rows.append(len(hidden)) or apply(hidden, *a))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    fused.add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, 96, (2, 12))
    # as TRL labels a batch: the prompt (8 tokens) and the padding (the second episode's last 2) carry no label
    labels = ids.clone()
    labels[:, :8] = -100
    labels[1, 10:] = -100
    scored = labels[:, 1:] != -100  # position t predicts token t + 1
    with torch.no_grad():
        everywhere = model(input_ids=ids, labels=labels, fused_lm_head=True)
        score_labelled_positions_only()
        score_labelled_positions_only()  # once is enough: the second call changes nothing
        compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
        # by hand, in fp64, from the model's plain logits
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].double(), -1)
    # TRL's own choice scores all 2 x 11 positions on a CPU; now only the 4 + 2 labelled ones (tokens 8-11, 8-9)
    assert rows == [22, int(scored.sum())] == [22, 6]
    target = logp.gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    for out in (everywhere, compact):
        assert torch.allclose(out.log_probs[scored].double(), target[scored], atol=1e-5)
        assert torch.allclose(out.entropy[scored].double(), entropy[scored], atol=1e-5)
        assert not out.log_probs[~scored].any() and not out.entropy[~scored].any()
    # the GPU's decision and the kernels' (Triton or torch tiles) stay TRL's
    assert fused._use_triton(torch.device("cuda")) == kernels._use_triton(torch.device("cuda"))
    assert fused._use_triton.__wrapped__ is kernels._use_triton
    # asked about the very device: a stand-in for TRL's choice that takes Triton on the second GPU only
    asked = []
    monkeypatch.setattr(fused, "_use_triton", lambda device: asked.append(device) or device.index == 1)
    score_labelled_positions_only()
    assert [fused._use_triton(torch.device("cuda", i)) for i in (1, 0)] == [True, False]
    assert fused._use_triton(torch.device("cpu")) and asked == [torch.device("cuda", 1), torch.device("cuda", 0)]


def test_a_resume_warns_of_missing_keys_but_not_of_a_tied_head_saved_as_the_embedding(caplog):
    """SmolLM2 ties its head to its embedding: a checkpoint holds the tensor once, and transformers 5.17 warned on
    every resume that lm_head.weight was missing. A key loaded through its tie is no loss; any other still warns."""
    import logging

    from torch.nn.modules.module import _IncompatibleKeys
    from transformers import LlamaConfig, LlamaForCausalLM

    from seal.rl.trainer import SealGRPOTrainer, loaded_through_a_tie

    shape = dict(vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=64)
    tied = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True))
    untied = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=False))
    assert loaded_through_a_tie(tied, ["lm_head.weight"]) == {"lm_head.weight"}
    # the embedding missing too: nothing loaded the pair
    assert loaded_through_a_tie(tied, ["lm_head.weight", "model.embed_tokens.weight"]) == set()
    assert loaded_through_a_tie(untied, ["lm_head.weight"]) == set()

    def warnings_after_load(model, missing):
        trainer = object.__new__(SealGRPOTrainer)  # the method reads only the model
        trainer.model = model
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="transformers.trainer"):
            trainer._issue_warnings_after_load(_IncompatibleKeys(missing, []))
        return [r.getMessage() for r in caplog.records]

    assert warnings_after_load(tied, ["lm_head.weight"]) == []
    assert warnings_after_load(untied, ["lm_head.weight"]) == [
        "There were missing keys in the checkpoint model loaded: ['lm_head.weight']."]
    assert warnings_after_load(tied, ["lm_head.weight", "model.norm.weight"]) == [
        "There were missing keys in the checkpoint model loaded: ['model.norm.weight']."]


def test_under_fsdp2_the_trainer_checks_the_references_policy_and_every_steps_precision(tmp_path, monkeypatch):
    """make_trainer under fsdp2: TRL's reference model is read back (seal.rl.sharding.check_reference: seal's policy
    of bf16 parameters, fp32 reduction and no output cast, its shards in host memory), and the policy's is checked
    when training starts (ShardedPrecision); under ddp neither."""
    from types import SimpleNamespace

    from seal.rl import sharding
    from seal.rl import trainer as trainer_module

    made, checked = [], []

    class Trainer:  # what make_trainer does with TRL's trainer once built: callbacks, its reference model
        def __init__(self, **kwargs):
            self.callbacks, self.ref_model, self.accelerator = [], object(), object()
            made.append(self)

        def remove_callback(self, callback):
            pass

        def add_callback(self, callback):
            self.callbacks.append(callback)

    monkeypatch.setattr(trainer_module, "SealGRPOTrainer", Trainer)
    monkeypatch.setattr(sharding, "check_reference", lambda model, dtype: checked.append((model, dtype)))
    cfg = config()
    for layout in ("fsdp2", "ddp"):
        make_trainer(cfg, budget=Budget.from_config(cfg.budget), model=None, tokenizer=None,
                     coevolution=SimpleNamespace(play_round=None), train_ids=["a", "b"], out_dir=tmp_path / layout,
                     compute_dtype="bfloat16", sharding=layout)
    fsdp2, ddp = made
    assert checked == [(fsdp2.ref_model, "bfloat16")]
    (precision,) = [c for c in fsdp2.callbacks if isinstance(c, trainer_module.ShardedPrecision)]
    assert precision.compute_dtype == "bfloat16" and precision.accelerator is fsdp2.accelerator
    assert not [c for c in ddp.callbacks if isinstance(c, trainer_module.ShardedPrecision)]


def test_the_optimisation_bar_counts_every_micro_batch_and_ends_with_the_rounds_last_step(caplog):
    """transformers calls on_substep_end after each micro-batch of an accumulation window but the last, and
    on_step_end after the last: a round of 2 optimizer steps of 2 micro-batches each moves the bar 1, 2, 3, 4 and
    closes it at 4 of 4 (run.log's last line); a round begun while another's bar is open closes that one."""
    import logging

    caplog.set_level(logging.INFO, logger="seal.progress")
    shown = OptimisationProgress(micro_batches=4)
    shown.on_step_end(None, None, None)  # before a round begins: nothing to move
    shown.begin(0)
    counts = []
    for hook in ("on_substep_end", "on_step_end", "on_substep_end"):
        getattr(shown, hook)(None, None, None)
        counts.append(shown.progress.done)
    assert counts == [1, 2, 3]
    shown.on_step_end(None, None, None)
    assert shown.progress is None
    assert caplog.messages[-1].startswith("round 0 · optimisation: micro-batch 4 of 4; ")
    shown.begin(1)
    shown.on_substep_end(None, None, None)
    shown.begin(2)  # round 1's bar never reached its end
    assert caplog.messages[-1].startswith("round 1 · optimisation: micro-batch 1 of 4; ")
    assert (shown.progress.label, shown.progress.done) == ("round 2 · optimisation", 0)
    shown.end()
