"""task=sanity: the learning check users run before spending GPU hours, on the tiny random model."""

import json
import subprocess
import sys

import pytest

from seal.rl.learning_check import rose
from tests.rl.test_loop import ROOT

SANITY = [sys.executable, "run.py", "task=sanity", "backbone=tiny-random", "logger.mode=disabled"]


def test_rose_compares_the_first_and_last_three_rounds():
    assert rose([0.25, 0.25, 0.25, 0.3, 0.5, 0.5, 0.5], 0.15) == (True, 0.25, 0.5)
    assert rose([0.3, 0.3, 0.3, 0.4, 0.4, 0.4], 0.15)[0] is False
    assert rose([0.0, 1.0], 0.5) == (True, 0.0, 1.0)
    # at most three rounds a side, at least one, and half the rounds between: four rounds compare two and two
    assert rose([0, 0, 0, 1, 0, 1, 1, 1], 0.5) == (True, 0.0, 1.0)
    assert rose([0.0, 0.5, 0.5, 1.0], 0.5) == (True, 0.25, 0.75)
    assert rose([0.0, 0.0, 1.0, 1.0, 1.0], 0.5) == (True, 0.0, 1.0)
    # a rise of exactly min_rise passes
    assert rose([0.25, 0.5], 0.25) == (True, 0.25, 0.5)


def test_a_bf16_configured_tiny_model_learns_the_rewarded_choice(tmp_path):
    # fp32 master weights, bf16 autocast, the run's trainer (KL, clipping, masks); a higher learning rate
    # than the paper's, because a 64-wide random model moves its logits 50x less per step than a 3B one
    proc = subprocess.run([*SANITY, "backbone.dtype=bfloat16", "sanity.learning_rate=3e-4", f"hydra.run.dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / "sanity.json").read_text())
    assert len(result["rewards"]) == 12 and result["rose"]
    # four options under a near-uniform random model: the rewarded one starts near 1/4
    assert result["first_rounds_mean"] < 0.45 and result["last_rounds_mean"] >= result["first_rounds_mean"] + 0.15
    assert "sanity round  11: reward" in proc.stdout and "(rose;" in proc.stdout
    # a check that is never resumed writes no checkpoint
    assert not list((tmp_path / "checkpoints").glob("checkpoint-*"))


@pytest.mark.slow  # six rounds through the trainer, about 35 s on two cores: in `make test-slow`; the decision
# itself is test_rose_compares_the_first_and_last_three_rounds, and a run that rises is tested above
def test_a_model_that_does_not_move_fails_the_check(tmp_path):
    proc = subprocess.run([*SANITY, "sanity.learning_rate=1e-12", "sanity.rounds=6", f"hydra.run.dir={tmp_path}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 1
    assert "did NOT rise" in proc.stdout and "check precision" in proc.stderr
    assert json.loads((tmp_path / "sanity.json").read_text())["rose"] is False


@pytest.mark.parametrize("override, message", [("sanity.target=purple", "sanity.target"),
                                               ("backbone=oracle", "cannot be trained")])
def test_bad_sanity_settings_are_one_clear_error(tmp_path, override, message):
    proc = subprocess.run([*SANITY, override, f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.parametrize("override, message", [("sanity.target=purple", "'purple' is not one of sanity.options"),
                                               ("backbone=oracle", "cannot be trained"),
                                               ("trainer.loss_type=dr_grpo", "choose one of grpo, bnpo")])
def test_bad_sanity_settings_are_refused_before_the_trainers_libraries_load(tmp_path, monkeypatch, override, message):
    from seal.errors import UserError
    from seal.tasks.sanity import sanity
    from tests.test_configs import compose_with

    # an import of the trainer (TRL, PEFT: 20 s on two slow cores) fails here: the refusal must come first
    monkeypatch.setitem(sys.modules, "seal.rl.trainer", None)
    with pytest.raises(UserError, match=message):
        sanity(compose_with("task=sanity", "backbone=tiny-random", override), tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("override, message", [
    # 0 fell through `or` to the run's learning rate, and a negative one reached AdamW after the model loaded
    ("sanity.learning_rate=0", "sanity.learning_rate=0: give a positive number (e.g. 3e-4), or null for the run's "
                               "trainer.learning_rate"),
    ("sanity.learning_rate=-1", "sanity.learning_rate=-1: give a positive number (e.g. 3e-4), or null for the run's "
                                "trainer.learning_rate"),
    ("sanity.learning_rate=fast", "sanity.learning_rate='fast': give a positive number (e.g. 3e-4), or null for the "
                                  "run's trainer.learning_rate"),
    # the budget's refusal, named as the sanity key given (it said budget.rounds=0)
    ("sanity.rounds=0", "sanity.rounds=0: give a number of rounds (at least 1) or null for whole epochs"),
    ("sanity.rollouts_per_prompt=1", "sanity.rollouts_per_prompt=1: give a group size of at least 2 (GRPO needs at "
                                     "least 2 rollouts per prompt)"),
    # a budget key sanity does not set keeps its own name
    ("budget.batch_size=0", "budget.batch_size=0: give a number of episodes, at least 1"),
])
def test_a_sanity_setting_is_refused_under_its_own_name_before_the_model_loads(tmp_path, monkeypatch, override,
                                                                               message):
    from seal.errors import UserError
    from seal.policy import backbones
    from seal.tasks.sanity import sanity
    from tests.test_configs import compose_with

    monkeypatch.setitem(sys.modules, "seal.rl.trainer", None)
    monkeypatch.setattr(backbones.TinyRandomBackbone, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(UserError) as refused:
        sanity(compose_with("task=sanity", "backbone=tiny-random", override), tmp_path)
    assert str(refused.value) == message


def test_the_sanity_learning_rate_is_its_own_or_the_runs():
    from seal.tasks.sanity import sanity_learning_rate
    from tests.test_configs import compose_with

    assert sanity_learning_rate(compose_with("task=sanity", "sanity.learning_rate=3e-4")) == 3e-4
    assert sanity_learning_rate(compose_with("task=sanity", "trainer.learning_rate=2e-6")) == 2e-6


def test_the_sanity_budget_is_the_runs_on_sanitys_batch_one_sampled_token_a_reply():
    from seal.tasks.sanity import sanity_budget
    from tests.test_configs import compose_with

    # conf/config.yaml's sanity: 4 prompts x 4 replies in one step of micro-batches of 4, 12 rounds; one token a
    # reply at temperature 1; the rest is the run's budget, interpolations resolved (max_train_tokens reads one)
    cfg = compose_with("task=sanity", "budget.max_train_tokens=${budget.batch_size}", "budget.batch_size=5")
    b = sanity_budget(cfg, world=1)
    assert (b.prompts_per_round, b.rollouts_per_prompt, b.steps_per_round, b.micro_batch_size, b.rounds) == (4, 4, 1, 4, 12)
    assert (b.max_new_tokens, b.temperature, b.max_train_tokens, b.name) == (1, 1.0, 5, "smoke")
    # planned for the launch's ranks: 16 replies over 2 ranks, 8 each in micro-batches of 4
    two = sanity_budget(cfg, world=2)
    assert (b.world, two.world) == (1, 2)


def test_one_sanity_process_on_four_gpus_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    """The sanity task builds the same trainer as train, so the same single process on a 4-GPU node would die in
    TRL's DataParallel refusal after loading: refused first, the device count stubbed as the node's."""
    from seal.errors import UserError
    from seal.policy import backbones
    from seal.rl import distributed
    from seal.tasks.sanity import sanity
    from tests.test_configs import compose_with

    monkeypatch.setattr(distributed, "cuda_devices", lambda: 4)
    monkeypatch.setattr("seal.budget.Budget.check_device", lambda self, gpus: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(backbones.TinyRandomBackbone, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(UserError, match=r"^this single training process sees 4 GPUs, .*launch.processes=4"):
        sanity(compose_with("task=sanity", "backbone=tiny-random"), tmp_path)
