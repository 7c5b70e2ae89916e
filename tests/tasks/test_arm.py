"""A run's arm follows from what it selects (seal.tasks.arm): a preset's name where its choices equal the
preset's, else the nearest preset and what differs; never the label of the preset the command line named."""

import pytest

from seal.tasks.arm import arm_choices, arm_name, arm_of, preset_choices
from tests.test_configs import choices, compose_with


def arm(*overrides):
    return arm_of(compose_with(*overrides))[0]


def test_a_sweep_over_reweighting_gives_one_arm_per_value():
    # python run.py -m reweighting=off,closed_loop: the default is seal_evolving, and only one job is it
    assert [arm(f"reweighting={r}") for r in ("off", "closed_loop")] == ["seal_evolving+reweighting=off", "seal_evolving"]


def test_a_preset_with_an_override_is_named_by_what_it_selects_not_by_the_preset():
    # seal with reweighting off is the release's arm 02 exactly
    assert arm("experiment=seal", "reweighting=off") == "wo_reweighting"
    # seal with the project's rendering is no preset: seal, and the difference
    assert arm("experiment=seal", "rendering=project") == "seal+rendering=project"
    assert arm("experiment=seal", "budget.step_limit=turn") == "seal+budget.step_limit=turn"


def test_two_changed_groups_are_both_named_in_key_order():
    assert arm("reweighting=fixed", "diagnoser=random") == "seal_evolving+diagnoser=random+reweighting=fixed"


def test_a_value_changed_inside_a_group_is_part_of_the_arm():
    assert arm("reweighting.rho0.pass=1.2") == "seal_evolving+reweighting.rho0.pass=1.2"
    assert arm("experiment=vanilla_rl", "protocol.max_observation_tokens=1024") == \
        "vanilla_rl+protocol.max_observation_tokens=1024"


def test_the_backbone_seed_and_budget_sizes_are_not_part_of_the_arm():
    assert arm("experiment=seal", "backbone=qwen2.5-7b", "seed=3", "budget=paper") == "seal"
    assert arm("budget=tiny", "budget.rounds=5", "trainer.learning_rate=1e-5") == "seal_evolving"


def test_a_label_on_the_command_line_does_not_change_the_arm():
    cfg = compose_with("reweighting=off", "experiment_name=my_probe")
    assert cfg.experiment_name == "my_probe" and arm_of(cfg)[0] == "seal_evolving+reweighting=off"


@pytest.mark.parametrize("experiment", choices("experiment"))
def test_each_preset_composes_to_its_own_name_and_its_choices(experiment):
    cfg = compose_with(f"experiment={experiment}")
    assert arm_of(cfg) == (experiment, preset_choices()[experiment])


def test_the_choices_name_each_group_and_the_budget_settings():
    assert arm_choices(compose_with("reweighting=off")) == {
        "env_interface": "evolving", "diagnoser": "rules", "reweighting": "off", "rendering": "project",
        "protocol": "bfcl", "budget.step_limit": "turn", "budget.max_train_tokens": None}
    # the release arms' choices, read from conf/experiment/seal.yaml by hand
    assert preset_choices()["seal"] == {
        "env_interface": "schema", "diagnoser": "rules", "reweighting": "closed_loop", "rendering": "release",
        "protocol": "release", "budget.step_limit": "episode", "budget.max_train_tokens": 4096}


def test_a_resolved_config_gives_the_same_choices_as_the_composed_one():
    # a run folder's config.yaml is the resolved config (${seed} a number there): its arm is the run's
    from omegaconf import OmegaConf

    cfg = compose_with("diagnoser=random", "seed=5")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert arm_of(resolved) == arm_of(cfg) == ("seal_evolving+diagnoser=random", arm_choices(cfg))


def test_the_name_takes_the_nearest_preset_and_breaks_ties_by_name():
    presets = {"b": {"x": 1, "y": None}, "a": {"x": 2, "y": None}}
    assert arm_name({"x": 1, "y": None}, presets) == "b"
    # one difference from each: the first name wins, values as JSON
    assert arm_name({"x": 3, "y": None}, presets) == "a+x=3"
    assert arm_name({"x": 2, "y": True}, presets) == "a+y=true"
    # a key no preset has is a difference too
    assert arm_name({"x": 1, "y": None, "z": "q"}, presets) == "b+z=q"
