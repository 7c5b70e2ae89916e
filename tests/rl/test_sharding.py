"""seal.rl.sharding: the launch's sharding, its refusals, TRL's FSDP2 arguments (the per-rank memory plan
is in tests/policy/test_memory.py). The FSDP2 path itself runs on two gloo processes in
tests/rl/test_sharding_gloo.py."""

import pytest

from seal.errors import UserError
from seal.rl import sharding


@pytest.fixture
def no_launch(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("FSDP_VERSION", raising=False)


def test_auto_takes_the_accelerate_launch_config_and_defaults_to_ddp(monkeypatch, no_launch):
    assert sharding.resolve("auto", 4) == "ddp"
    # what `accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml` exports
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert sharding.resolve("auto", 4) == "fsdp2"
    assert sharding.resolve("fsdp2", 4) == "fsdp2"


def test_a_launch_config_that_contradicts_the_run_is_refused(monkeypatch, no_launch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(UserError, match=r"launch.sharding=ddp but the accelerate launch config asks for fsdp2"):
        sharding.resolve("ddp", 4)
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(UserError, match="FSDP version 1; seal trains with FSDP2"):
        sharding.resolve("auto", 4)


def test_fsdp2_needs_several_ranks_and_unknown_choices_are_named(no_launch):
    with pytest.raises(UserError, match="this is a single process"):
        sharding.resolve("fsdp2", 1)
    with pytest.raises(UserError, match="launch.sharding='zero3': choose one of auto, ddp, fsdp2"):
        sharding.resolve("zero3", 2)


def test_more_ranks_on_a_node_than_gpus_is_refused():
    sharding.check_devices(4, 4)
    sharding.check_devices(2, 0)  # no GPU: gloo ranks on the CPU
    with pytest.raises(UserError, match="8 ranks were launched on this node but it has 4 GPU"):
        sharding.check_devices(8, 4)


def test_lora_is_not_sharded():
    sharding.check_combination("ddp", lora=True)
    with pytest.raises(UserError, match="LoRA adapters are trained with launch.sharding=ddp"):
        sharding.check_combination("fsdp2", lora=True)


def test_fsdp2_reaches_transformers_as_an_fsdp2_plugin(tmp_path):
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **sharding.grpo_arguments("fsdp2"))
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["state_dict_type"] == "SHARDED_STATE_DICT"
    assert plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and plugin["reshard_after_forward"] is True
    assert GRPOConfig(output_dir=str(tmp_path), use_cpu=True, **sharding.grpo_arguments("ddp")).fsdp_plugin_args is None
    # every rank loads the weights itself (no rank-0 load and broadcast)
    assert str(plugin["cpu_ram_efficient_loading"]).lower() == "false"


def test_the_fsdp2_settings_are_asked_for_by_name_not_left_to_defaults():
    # transformers' defaults give the same today; named, a change of default cannot change the run
    assert sharding.grpo_arguments("fsdp2") == {"fsdp": True, "fsdp_config": {
        "version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT", "cpu_ram_efficient_loading": False}}
    assert sharding.grpo_arguments("ddp") == {}
    with pytest.raises(ValueError) as caught:
        sharding.grpo_arguments("zero3")
    assert str(caught.value) == "sharding 'zero3': choose one of ddp, fsdp2"


def test_a_checkpoint_resumes_only_under_the_sharding_that_wrote_it(tmp_path):
    ddp = tmp_path / "checkpoint-4"
    ddp.mkdir()
    sharding.check_checkpoint(ddp, "ddp")
    with pytest.raises(UserError, match="written with launch.sharding=ddp and this launch is fsdp2"):
        sharding.check_checkpoint(ddp, "fsdp2")
    (ddp / "pytorch_model_fsdp_0").mkdir()  # what transformers writes for an FSDP2 model
    sharding.check_checkpoint(ddp, "fsdp2")
    with pytest.raises(UserError, match="accelerate/fsdp2.yaml"):
        sharding.check_checkpoint(ddp, "ddp")


def test_how_a_run_is_spread_over_ranks_does_not_change_its_fingerprint():
    from seal.io import config_fingerprint
    from tests.test_configs import compose_with

    base = config_fingerprint(compose_with())
    assert config_fingerprint(compose_with("launch.sharding=fsdp2", "launch.processes=4")) == base
    assert config_fingerprint(compose_with("seed=1")) != base


@pytest.mark.parametrize("env, sentence", [
    # ACCELERATE_USE_FSDP alone: accelerate's default FSDP version is 1
    ({"ACCELERATE_USE_FSDP": "True"}, "the accelerate launch config asks for FSDP version 1; seal trains with "
                                      "FSDP2: use experiments/cluster/accelerate/fsdp2.yaml (fsdp_version: 2)"),
    ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, None),
    ({"ACCELERATE_USE_FSDP": "false", "FSDP_VERSION": "1"}, None),
    ({"FSDP_VERSION": "1"}, None),
])
def test_the_launch_says_fsdp2_only_with_both_variables(monkeypatch, no_launch, env, sentence):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if sentence is None:
        assert sharding.launched_sharding() == ("fsdp2" if env.get("FSDP_VERSION") == "2" else None)
    else:
        with pytest.raises(UserError) as caught:
            sharding.launched_sharding()
        assert str(caught.value) == sentence


def test_the_refusals_are_one_sentence_naming_the_fix(no_launch):
    with pytest.raises(UserError) as caught:
        sharding.resolve("fsdp2", 1)
    assert str(caught.value) == (
        "launch.sharding=fsdp2 divides the model over several ranks, and this is a single process: launch "
        "`accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml --num_processes <GPUs> "
        "run.py ...`, or use launch.sharding=ddp on one GPU")
    assert sharding.resolve("fsdp2", 2) == "fsdp2"  # two ranks are several
    with pytest.raises(UserError) as caught:
        sharding.check_combination("fsdp2", lora=True)
    assert str(caught.value) == ("LoRA adapters are trained with launch.sharding=ddp (the frozen base fits every "
                                 "rank): drop backbone.lora or use experiments/cluster/accelerate/ddp.yaml")
    sharding.check_combination("ddp", lora=True)
    sharding.check_combination("fsdp2", lora=False)


def test_a_plain_model_passes_and_a_sharded_one_is_refused_naming_what_needs_it(monkeypatch):
    import torch

    plain = torch.nn.Linear(2, 2)
    assert not sharding.is_sharded(plain)
    sharding.require_plain(plain, "writing LoRA adapters")
    monkeypatch.setattr(sharding, "is_sharded", lambda model: True)
    with pytest.raises(ValueError) as caught:
        sharding.require_plain(plain, "writing LoRA adapters")
    assert str(caught.value) == (
        "writing LoRA adapters needs whole tensors and this model is FSDP2-sharded (DTensor parameters): gather it "
        "first (seal.rl.sharding.full_state_dict or RolloutCopy)")
