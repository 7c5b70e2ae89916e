"""The budget as a typed, checked object: every conf/budget file builds, and each kind of wrong value is
refused with one sentence naming the key and the value."""

import pytest
from omegaconf import OmegaConf

from seal.budget import Budget
from seal.errors import UserError
from tests.test_configs import CONF, compose_with


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "budget").glob("*.yaml")))
def test_every_budget_file_builds_with_every_key_it_states(name):
    # as Hydra composes it (tiny and paper_miniature build on another budget's file)
    budget = Budget.from_config(compose_with(f"budget={name}").budget)
    stated = OmegaConf.to_container(OmegaConf.load(CONF / "budget" / f"{name}.yaml"))
    stated.pop("defaults", None)
    for key, value in stated.items():
        got = getattr(budget, key)
        assert (list(got) if isinstance(got, tuple) else got) == value, key


def test_the_paper_budget_is_table_4_and_the_releases():
    b = Budget.from_config(compose_with("budget=paper").budget)
    # Table 4: 32 prompts x 8 rollouts, mini-batches of 8 prompts (4 steps), micro-batch 1, max response 4096
    # tokens, temperature 1.0, up to 20 interaction steps (the unit unstated; the release counts 20 model outputs
    # per trajectory, BFCL 20 steps per turn, which this budget caps unless an arm sets budget.step_limit).
    # The release alone: 6 epochs (trainer.total_epochs)
    assert (b.prompts_per_round, b.rollouts_per_prompt, b.steps_per_round, b.micro_batch_size) == (32, 8, 4, 1)
    assert (b.rounds, b.epochs, b.max_new_tokens, b.temperature, b.max_steps_per_turn) == (None, 6, 4096, 1.0, 20)
    assert b.episodes == 256 and b.ood_benchmarks == ("bfcl_v4_memory",)
    # one rank unless the launch says otherwise: the whole round on it, 64 micro-batches per step
    assert (b.world, b.plan.episodes_per_rank, b.plan.accumulation) == (1, 256, 64)
    # 400 train entries // 32 prompts = 12 rounds per epoch (the last partial batch dropped)
    assert (b.rounds_per_epoch(400), b.rounds_for(400)) == (12, 72)


# a wrong value, and the words its one sentence must hold (the key=value and what is valid)
WRONG = [
    ({"prompts_per_round": 0}, "budget.prompts_per_round=0: give a number of prompts, at least 1"),
    ({"rollouts_per_prompt": 1}, "budget.rollouts_per_prompt=1: give a group size of at least 2"),
    ({"micro_batch_size": -1}, "budget.micro_batch_size=-1"),
    ({"steps_per_round": 2.5}, "budget.steps_per_round=2.5"),
    ({"max_new_tokens": "many"}, "budget.max_new_tokens='many'"),
    ({"batch_size": True}, "budget.batch_size=True"),
    ({"epochs": None}, "budget.epochs=null"),
    ({"rounds": 0}, "budget.rounds=0: give a number of rounds (at least 1) or null"),
    ({"temperature": 0}, "budget.temperature=0: give a sampling temperature above 0"),
    ({"eval_temperature": -0.1}, "budget.eval_temperature=-0.1"),
    ({"rollout_memory_fraction": 1.5}, "budget.rollout_memory_fraction=1.5: give a fraction above 0 and at most 1"),
    ({"rollout_memory_gb": 0}, "budget.rollout_memory_gb=0"),
    ({"heldout_entries_per_category": -1}, "budget.heldout_entries_per_category=-1"),
    ({"ood_benchmarks": "bfcl_v4_memory"}, "budget.ood_benchmarks='bfcl_v4_memory': give a list"),
    ({"ood_benchmarks": [3]}, "budget.ood_benchmarks=[3]"),
    ({"step_limit": "trajectory"}, "budget.step_limit='trajectory': choose turn"),
    ({"save_every": 0}, "budget.save_every=0: give a number of rounds (at least 1) or null for no periodic"),
    ({"keep_checkpoints": 0}, "budget.keep_checkpoints=0: give a number of checkpoints (at least 1) or null for all"),
    ({"allow_cpu": "yes"}, "budget.allow_cpu='yes': give true or false"),
    ({"allow_cpu": 1}, "budget.allow_cpu=1: give true or false"),
    ({"max_new_tokenz": 3}, "budget.max_new_tokenz is not a budget key; the keys are allow_cpu, batch_size, epochs, "
                            "eval_entries_per_category, eval_temperature, heldout_entries_per_category, keep_checkpoints, "
                            "max_new_tokens"),
    # the launch decides the world size, not the config
    ({"world": 2}, "budget.world is not a budget key"),
    ({"steps_per_round": 3}, "a round's 2 episodes (budget.prompts_per_round x budget.rollouts_per_prompt) do not split"),
]


@pytest.mark.parametrize("change, words", WRONG, ids=[next(iter(c)) + "=" + repr(v) for c, _ in WRONG for v in c.values()])
def test_a_wrong_budget_value_is_one_sentence_naming_it(change, words):
    smoke = OmegaConf.to_container(OmegaConf.load(CONF / "budget" / "smoke.yaml"))
    with pytest.raises(UserError) as err:
        Budget.from_config(smoke | change)
    assert str(err.value).startswith(words) and "\n" not in str(err.value)


def test_a_missing_key_is_named_and_optional_keys_take_the_benchmark_defaults():
    smoke = OmegaConf.to_container(OmegaConf.load(CONF / "budget" / "smoke.yaml"))
    with pytest.raises(UserError, match="^budget.batch_size is missing"):
        Budget.from_config({k: v for k, v in smoke.items() if k != "batch_size"})
    optional = ("max_steps_per_turn", "step_limit", "ood_benchmarks", "val_every", "max_train_tokens")
    b = Budget.from_config({k: v for k, v in smoke.items() if k not in optional})
    # BFCL: 20 steps per turn, the limit counted per turn; no OOD benchmark, no validation, every token
    assert (b.max_steps_per_turn, b.step_limit, b.ood_benchmarks, b.val_every, b.max_train_tokens) == (20, "turn", (), None, None)


def test_integers_are_accepted_where_a_float_is_meant_and_stored_as_floats():
    b = Budget.from_config(compose_with("budget.temperature=1", "budget.rollout_memory_gb=2", "budget.eval_temperature=0",
                                        "budget.rollout_memory_fraction=1").budget)
    floats = (b.temperature, b.rollout_memory_gb, b.eval_temperature, b.rollout_memory_fraction)
    # a fraction of exactly 1 (all the free memory) is the upper bound, and allowed
    assert floats == (1.0, 2.0, 0.0, 1.0) and all(type(v) is float for v in floats)


def test_interpolations_in_a_budget_are_resolved():
    smoke = OmegaConf.load(CONF / "budget" / "smoke.yaml")
    smoke.batch_size = "${rollouts_per_prompt}"
    assert Budget.from_config(smoke).batch_size == 2


def test_the_plan_is_checked_for_the_launch_world_size():
    paper = compose_with("budget=paper", "budget.micro_batch_size=4").budget
    # 256 episodes: 2 ranks x micro 4 x 4 steps = 32 divides them, 3 ranks x 4 x 4 = 48 does not
    assert Budget.from_config(paper, world=2).plan.accumulation == 8
    with pytest.raises(UserError, match="over 3 rank"):
        Budget.from_config(paper, world=3)


def test_the_budget_is_frozen():
    import dataclasses

    b = Budget.from_config(compose_with().budget)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.rounds = 10


# the six overrides the README's SLURM sweep used before budget=tiny stood for them
SIX = ["budget.train_entries=2", "budget.prompts_per_round=1", "budget.rollouts_per_prompt=2", "budget.rounds=2",
       "budget.max_new_tokens=6", "budget.heldout_entries_per_category=1"]


def test_the_tiny_budget_is_the_smoke_budget_with_the_six_overrides():
    tiny = OmegaConf.to_container(compose_with("budget=tiny").budget)
    by_hand = OmegaConf.to_container(compose_with("budget=smoke", *SIX).budget)
    assert tiny == by_hand | {"name": "tiny"}
    assert (tiny["train_entries"], tiny["rounds"], tiny["max_new_tokens"]) == (2, 2, 6)


@pytest.mark.parametrize("name, overrides, gpus, refused", [
    ("paper", [], 0, True),
    ("paper", [], 1, False),
    ("paper", ["budget.allow_cpu=true"], 0, False),
    # budget=paper with its sizes shrunk: the miniature paper run trains on a CPU
    ("paper_miniature", [], 0, False),
    ("smoke", [], 0, False),
    ("tiny", [], 0, False),
])
def test_the_paper_budget_is_refused_on_a_machine_without_a_gpu_unless_allowed(name, overrides, gpus, refused):
    budget = Budget.from_config(compose_with(f"budget={name}", *overrides).budget)
    if not refused:
        budget.check_device(gpus)
        return
    with pytest.raises(UserError) as err:
        budget.check_device(gpus)
    # budget=paper (6 epochs: the release's; 32 prompts x 8 rollouts, 4,096 new tokens: Table 4) and the three ways on
    assert str(err.value) == (
        "budget=paper is sized for GPUs (6 epochs of rounds of 32 prompts x 8 rollouts, up to 4096 new tokens per "
        "step) and would train for weeks on this machine, which has no GPU: run it on a GPU machine, try budget=tiny "
        "or budget=paper_miniature here, or add budget.allow_cpu=true to start it anyway")


@pytest.mark.parametrize("every, rounds, validated", [
    # every 3rd round (1-based 3, 6) and the last (7), whatever its remainder
    (3, 7, [3, 6, 7]),
    # the last round is a multiple: validated once
    (5, 10, [5, 10]),
    # every round
    (1, 3, [1, 2, 3]),
    # the number of rounds not known: the multiples only (of rounds 1 to 10)
    (4, None, [4, 8]),
    # no validation part
    (None, 7, []),
])
def test_the_model_is_validated_every_val_every_rounds_and_after_the_last(every, rounds, validated):
    from seal.budget import validated_after

    assert [r + 1 for r in range(rounds or 10) if validated_after(r, every, rounds)] == validated
