"""seal.rl.sharding and the per-rank memory plan: the launch's sharding, its refusals, TRL's FSDP2 arguments,
and the plan's figures worked out by hand from the published architectures. The FSDP2 path itself runs on
two gloo processes in tests/rl/test_sharding_gloo.py."""

import pytest

from seal.errors import UserError
from seal.policy.memory import GiB, layer_param_count, param_count, training_memory
from seal.rl import sharding
from tests.policy.test_backbones import backbone_cfg


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


def test_fsdp2_divides_the_training_state_over_the_ranks_by_hand():
    arch = backbone_cfg("qwen2.5-7b").arch
    n = param_count(arch)
    # Qwen2.5-7B: 28 layers of q (3584x3584 + bias), k and v (3584x512 + bias), o (3584x3584), MLP 3 x 3584x18944,
    # two norms; embedding and untied head 152064 x 3584; the final norm
    layer = 3584 * 3584 + 3584 + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    assert layer_param_count(arch) == layer and n == 28 * layer + 2 * 152064 * 3584 + 3584
    m = training_memory(arch, compute_dtype="bfloat16", episode_tokens=16384, sharding="fsdp2", shards=4,
                        rollout_engine_bytes=0)
    assert (m.weights, m.gradients, m.optimizer) == (4 * n // 4, n // 4 * 4, n // 4 * 8)
    # the reference lives in host memory; FSDP2 gathers two layers plus the embedding and the head in bf16
    assert m.reference == 0 and m.weight_copies == (2 * layer + 2 * 152064 * 3584) * 2
    # checkpointed layer inputs in bf16 (the gathered weights are bf16) plus one layer recomputed
    assert m.activations == 16384 * 3584 * 28 * 2 + 16384 * (6 * 3584 + 3 * 18944) * 2
    # bf16 logits, their temperature-scaled copy, one fp32 log-softmax
    assert m.logits == 16384 * 152064 * (2 + 2 + 4)
    ddp = training_memory(arch, compute_dtype="bfloat16", episode_tokens=16384)
    # data parallel: every rank holds it all, a bf16 reference, autocast's bf16 copy of every weight, and
    # the residual stream in fp32 (the embedding is not autocast)
    assert (ddp.weights, ddp.optimizer, ddp.reference, ddp.weight_copies) == (4 * n, 8 * n, 2 * n, 2 * n)
    assert ddp.activations == 16384 * 3584 * 28 * 4 + 16384 * (6 * 3584 + 3 * 18944) * 2


def test_the_peak_is_the_resident_state_plus_the_larger_phase():
    arch = backbone_cfg("qwen2.5-3b").arch
    n = param_count(arch)
    engine = 24 * GiB  # vLLM at 0.3 of an 80 GB GPU
    m = training_memory(arch, compute_dtype="bfloat16", episode_tokens=16384, rollout_engine_bytes=engine)
    resident = 4 * n + 8 * n + 2 * n
    training = 4 * n + 2 * n + m.activations + m.logits
    assert m.rollout_prefill == 0 and m.total == resident + max(training, engine)
    # the transformers engine instead: 8 rows of 1024 new tokens with the projections and MLP intermediates alive
    hf = training_memory(arch, compute_dtype="bfloat16", episode_tokens=16384, prefill_rows=8, prefill_tokens=1024)
    assert hf.rollout_prefill == 8 * 1024 * (6 * 2048 + 3 * 11008) * 2 and hf.rollout_weights == 0


@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.1-8b"])
def test_paper_backbones_fit_four_80_gb_gpus_with_fsdp2_and_not_with_ddp(name):
    from hydra.utils import instantiate

    from seal.policy.backbones import check_training_fits

    backbone = instantiate(backbone_cfg(name))
    usable = 80 * 10**9 - 2 * GiB  # an 80 GB GPU less the CUDA context
    kwargs = dict(episode_tokens=16384, micro_batch=1, reference=True, gradient_checkpointing=True,
                  rollout_engine_fraction=0.4, available=usable, where="GPU")
    assert check_training_fits(backbone, sharding="fsdp2", world=4, **kwargs).total < usable
    # data parallelism replicates the state, two shards are not enough: each refusal names the launch that
    # fits, four GPUs under fsdp2.yaml
    for launch, world in (("ddp", 4), ("fsdp2", 2)):
        with pytest.raises(UserError, match=f"on {world} rank.s. with {launch} needs .*fsdp2.yaml --num_processes 4 "):
            check_training_fits(backbone, sharding=launch, world=world, **kwargs)


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
