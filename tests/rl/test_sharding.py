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
    monkeypatch.delenv("LOCAL_RANK", raising=False)


def test_auto_takes_the_accelerate_launch_config_and_defaults_to_ddp(monkeypatch, no_launch):
    assert sharding.resolve("auto", 4) == "ddp"
    # before the ranks are counted (which process group to join): what the override says, auto says nothing yet
    assert [sharding.requested(v) for v in ("auto", "ddp", "fsdp2")] == [None, "ddp", "fsdp2"]
    # what `accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml` exports
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert sharding.resolve("auto", 4) == "fsdp2"
    assert sharding.resolve("fsdp2", 4) == "fsdp2"
    # auto is the launch's; an explicit choice stays the user's (resolve refuses a contradiction)
    assert [sharding.requested(v) for v in ("auto", "ddp", "fsdp2")] == ["fsdp2", "ddp", "fsdp2"]


def test_a_launch_config_that_contradicts_the_run_is_refused(monkeypatch, no_launch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(UserError, match=r"launch.sharding=ddp but the accelerate launch config asks for fsdp2"):
        sharding.resolve("ddp", 4)
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(UserError, match="FSDP version 1; seal trains with FSDP2"):
        sharding.resolve("auto", 4)


def test_fsdp2_needs_a_launcher_and_unknown_choices_are_named(monkeypatch, no_launch):
    with pytest.raises(UserError, match="this process was started without one"):
        sharding.resolve("fsdp2", 1)
    # one rank started by torchrun or accelerate launch (LOCAL_RANK set): FSDP2 over a world of one, the paper
    # node's arithmetic on one GPU
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert sharding.resolve("fsdp2", 1) == "fsdp2"
    with pytest.raises(UserError, match="launch.sharding='zero3': choose one of auto, ddp, fsdp2"):
        sharding.resolve("zero3", 2)


def test_more_ranks_on_a_node_than_gpus_is_refused(no_launch):
    sharding.check_devices(4, 4)
    sharding.check_devices(2, 0)  # no GPU: gloo ranks on the CPU
    with pytest.raises(UserError, match="8 ranks were launched on this node but it has 4 GPU"):
        sharding.check_devices(8, 4)


def test_one_process_that_sees_several_gpus_is_refused_before_anything_loads(monkeypatch, no_launch):
    """transformers counts every visible GPU of a process no launcher started (n_gpu = torch.cuda.device_count())
    and TRL's GRPOTrainer then refuses DataParallel: the decision is taken at once, with the device count given."""
    sharding.check_devices(1, 1)
    sharding.check_devices(1, 0)
    with pytest.raises(UserError, match="^this single training process sees 2 GPUs"):
        sharding.check_devices(1, 2)
    with pytest.raises(UserError) as caught:
        sharding.check_devices(1, 4)
    assert str(caught.value) == (
        "this single training process sees 4 GPUs, and TRL's trainer takes one GPU per process: start one process "
        "per GPU (launch.processes=4, or launch=paper), or show it one GPU (CUDA_VISIBLE_DEVICES=0 python run.py ...)")
    # a launched rank uses its own GPU (cuda:LOCAL_RANK; transformers counts one), however many it sees
    monkeypatch.setenv("LOCAL_RANK", "0")
    sharding.check_devices(1, 4)


def test_train_refuses_one_process_on_four_gpus_before_loading_or_evaluating(monkeypatch, tmp_path, no_launch):
    from seal.tasks import train
    from tests.test_configs import compose_with

    # the device count stubbed as a 4-GPU node's; the model must never be loaded
    monkeypatch.setattr(train, "cuda_devices", lambda: 4)
    monkeypatch.setattr("seal.budget.Budget.check_device", lambda self, gpus: None)
    run = train.start(compose_with("backbone=tiny-random", "logger.mode=disabled"), tmp_path)
    with pytest.raises(UserError, match="this single training process sees 4 GPUs"):
        train.check_config(run)
    assert run.policy is None and not (tmp_path / "fingerprint.txt").exists()


def test_training_on_gpus_checks_the_nodes_host_memory_before_loading(monkeypatch, tmp_path, no_launch):
    """With CUDA (the device count stubbed), every rank checks its node's ranks against host memory; without it
    the devices' memory is the host's and check_training_fits has checked it."""
    from seal.tasks import train
    from tests.test_configs import compose_with

    checked = []
    monkeypatch.setattr("seal.budget.Budget.check_device", lambda self, gpus: None)
    monkeypatch.setattr("seal.policy.backbones.host_available_bytes", lambda: 5 * 2**30)
    monkeypatch.setattr("seal.policy.backbones.check_host_fits",
                        lambda plan, ranks, **kw: checked.append((plan.host, ranks, kw)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    for gpus in (0, 1):
        monkeypatch.setattr(train, "cuda_devices", lambda: gpus)
        (tmp_path / str(gpus)).mkdir()
        run = train.start(compose_with("backbone=tiny-random", "logger.mode=disabled"), tmp_path / str(gpus))
        train.check_config(run)
        assert run.policy is None
    assert checked == [(0, 1, {"name": "tiny-random", "sharding": "ddp", "available": 5 * 2**30})]
    # several ranks: each sends what it measured (5 GiB here), all judge the least of them
    sent = []
    monkeypatch.setattr("seal.rl.distributed.Dist.gather", lambda self, items: sent.extend(items) or [7 * 2**30, *items,
                                                                                                   3 * 2**30])
    (tmp_path / "3").mkdir()
    train.check_config(train.start(compose_with("backbone=tiny-random", "logger.mode=disabled"), tmp_path / "3"))
    assert sent == [5 * 2**30] and checked[-1][2]["available"] == 3 * 2**30


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
    # every micro-batch's gradients are reduce-scattered (transformers reads this, not accelerate's no_sync)
    assert args.accelerator_config.gradient_accumulation_kwargs == {"sync_each_batch": True}


def test_the_fsdp2_settings_are_asked_for_by_name_not_left_to_defaults():
    # transformers' defaults give the same today; named, a change of default cannot change the run
    assert sharding.grpo_arguments("fsdp2") == {"fsdp": True, "fsdp_config": {
        "version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT", "cpu_ram_efficient_loading": False},
        "accelerator_config": {"gradient_accumulation_kwargs": {"sync_each_batch": True}}}
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
        "launch.sharding=fsdp2 runs its ranks under a launcher, and this process was started without one: add "
        "launch.processes=<GPUs> (1 for one GPU), or launch `accelerate launch --config_file "
        "experiments/cluster/accelerate/fsdp2.yaml --num_processes <GPUs> run.py ...`, or use launch.sharding=ddp")
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


@pytest.mark.parametrize("dtype, policy", [
    # the authors' FSDP2 workers: bf16 parameters, fp32 reduction, no output cast (het_fsdp_worker.py ~353-395)
    ("bfloat16", ("bfloat16", "float32", None)),
    ("float32", ("float32", "float32", None)),
])
def test_the_fsdp2_policy_computes_in_the_backbones_dtype_reduces_in_fp32_and_casts_no_output(tmp_path, dtype, policy):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from seal.rl.config import grpo_config
    from seal.budget import Budget
    from tests.test_configs import compose_with

    made = sharding.mixed_precision_policy(dtype)
    assert isinstance(made, MixedPrecisionPolicy)
    assert (made.param_dtype, made.reduce_dtype, made.output_dtype) == tuple(d and getattr(torch, d) for d in policy)
    # what reaches transformers' plugin arguments, whatever the launch's mixed precision says
    cfg = compose_with("backbone=tiny-random")
    args = grpo_config(cfg, Budget.from_config(cfg.budget), tmp_path, 8, dtype, "fsdp2")
    assert args.fsdp_plugin_args["mixed_precision_policy"] == made
    assert args.mixed_precision == {"bfloat16": "bf16", "float32": "no"}[dtype]
    assert grpo_config(cfg, Budget.from_config(cfg.budget), tmp_path, 8, dtype, "ddp").fsdp_plugin_args is None


def test_the_backbones_dtype_decides_the_mixed_precision_not_the_launch_config(monkeypatch, tmp_path):
    from seal.budget import Budget
    from seal.rl.config import grpo_config
    from tests.test_configs import compose_with

    # what `accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml` exports (its bf16)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    cfg = compose_with("backbone=tiny-random")
    assert grpo_config(cfg, Budget.from_config(cfg.budget), tmp_path, 8, "float32", "ddp").mixed_precision == "no"
    assert sharding.mixed_precision("bfloat16") == "bf16" and sharding.mixed_precision("float16") == "fp16"
    with pytest.raises(ValueError, match="^compute dtype 'int8': choose one of bfloat16, float16, float32$"):
        sharding.mixed_precision("int8")


def test_a_plugin_built_from_the_arguments_keeps_the_policy_under_a_bf16_launch():
    """AcceleratorState (on a GPU) and shard_on_gloo (on the CPU) call set_mixed_precision('bf16') on the plugin;
    accelerate's own policy would then reduce in bf16 and cast outputs to bf16 (TRL's fp32 log-probs included)."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin

    args = {"fsdp_version": 2, "mixed_precision_policy": sharding.mixed_precision_policy("bfloat16")}
    plugin = FullyShardedDataParallelPlugin(**args)
    plugin.set_mixed_precision("bf16")
    policy = plugin.mixed_precision_policy
    assert (policy.param_dtype, policy.reduce_dtype, policy.output_dtype) == (torch.bfloat16, torch.float32, None)
    # accelerate's default for the same launch, what seal no longer trains with
    default = FullyShardedDataParallelPlugin(fsdp_version=2)
    default.set_mixed_precision("bf16")
    assert default.mixed_precision_policy.reduce_dtype == default.mixed_precision_policy.output_dtype == torch.bfloat16


def test_before_training_the_transformers_engine_generates_with_a_compute_dtype_copy_of_the_host_model():
    """Under fsdp2 the loaded fp32 masters stay in host memory until the trainer shards them: the evaluations
    before training generate with the rollout copy (the compute dtype, on the rank's device), which training
    then refreshes from the shards; the loaded model itself is never moved."""
    from types import SimpleNamespace

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from seal.tasks.train import generate_with_the_loaded_model

    torch.manual_seed(0)
    loaded = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64))
    generator = SimpleNamespace(refresh=None)
    run = SimpleNamespace(engine=SimpleNamespace(generator=generator), backbone=SimpleNamespace(generation="transformers"),
                          policy=SimpleNamespace(model=loaded, device=torch.device("cpu"), compute_dtype=torch.bfloat16),
                          layout="fsdp2")
    copy = generate_with_the_loaded_model(run)
    assert generator.refresh == copy.refresh
    model = generator.refresh()
    assert model is not loaded and {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert all(torch.equal(model.state_dict()[k], v.to(torch.bfloat16)) for k, v in loaded.state_dict().items())
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    # under ddp the loaded model is on the device already and generates itself
    run.layout, generator.refresh = "ddp", None
    assert generate_with_the_loaded_model(run) is None and generator.refresh is None


def test_a_vllm_run_gathers_its_final_model_into_host_memory_and_the_transformers_engine_onto_the_device():
    """Under fsdp2 the copy gathered after training is, for a vLLM run, only what the engine syncs from, evaluates
    and writes: it goes to host memory (the engine reads host tensors, as the loaded model's before training), not
    beside the woken engine's share of the GPU, where the plan counts no such copy. The transformers engine
    generates with its copy, on the rank's device. The rank's device stands in for a GPU."""
    from types import SimpleNamespace

    import torch

    from seal.tasks.train import generate_with_the_loaded_model

    for generation, device in (("vllm", torch.device("cpu")), ("transformers", "cuda:3")):
        engine = SimpleNamespace(generator=SimpleNamespace(refresh=None))
        run = SimpleNamespace(engine=engine, backbone=SimpleNamespace(generation=generation), layout="fsdp2",
                              policy=SimpleNamespace(model=object(), device="cuda:3", compute_dtype=torch.bfloat16))
        copy = generate_with_the_loaded_model(run)
        assert torch.device(copy.device) == torch.device(device) and copy.model is None, generation
        assert copy.dtype == torch.bfloat16


def test_the_prepared_references_shards_are_read_back_in_host_memory_and_no_reference_is_nothing_to_check():
    """On CUDA shard_reference asks FSDP2 to keep the reference's shards in host memory (the memory plan counts
    them there); the prepared reference is read back, so a shard on a device (a meta tensor stands in for a GPU's
    here, plain and as a DTensor's local shard) stops the run. trainer.beta=0: TRL builds no reference, and the
    run goes on (before, the missing reference was reported as one FSDP2 had not sharded)."""
    from types import SimpleNamespace

    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    class Shard(torch.nn.Parameter):  # what to_local() gives a DTensor's holder: the rank's own shard
        def to_local(self):
            return self.local

    def reference(*devices, sharded=False):
        model = torch.nn.Module()
        for i, device in enumerate(devices):
            if sharded:
                param = Shard(torch.zeros(2))
                param.local = torch.zeros(2, device=device)
            else:
                param = torch.nn.Parameter(torch.zeros(2, device=device))
            model.register_parameter(f"p{i}", param)
        model._get_fsdp_state = lambda: SimpleNamespace(_mp_policy=MixedPrecisionPolicy(torch.bfloat16, torch.float32))
        return model

    sharding.check_reference(None, "bfloat16")
    sharding.check_reference(reference("cpu", "cpu"), "bfloat16")
    sharding.check_reference(reference("cpu", sharded=True), "bfloat16")
    for model in (reference("cpu", "meta"), reference("cpu", "meta", sharded=True)):
        with pytest.raises(RuntimeError) as caught:
            sharding.check_reference(model, "bfloat16")
        assert str(caught.value) == (
            "FSDP2 holds the reference model's parameters on meta, not in host memory as "
            "seal.rl.sharding.shard_reference asks and the memory plan counts them: the installed torch or TRL "
            "prepares it differently (requirements.txt pins them)")
    # the policy is still read back first
    with pytest.raises(RuntimeError, match="^FSDP2 prepared the reference model with "):
        sharding.check_reference(reference("cpu"), "float32")
    # what a GPU node would show: each device holding a shard named once, in order
    on = [torch.device("cuda", 1), torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")]
    held = SimpleNamespace(parameters=lambda: [SimpleNamespace(to_local=lambda d=d: SimpleNamespace(device=d)) for d in on])
    with pytest.raises(RuntimeError, match="^FSDP2 holds the reference's parameters on cuda:0, cuda:1, not in host memory "):
        sharding.check_in_host_memory(held, "reference")


def test_a_prepared_model_whose_fsdp2_policy_is_not_seals_stops_the_run():
    """What accelerate or transformers hand FSDP2 is read back from the prepared model's root: another policy
    (here accelerate's own for a bf16 launch: bf16 reduction and outputs) is an error, not a quiet run."""
    from types import SimpleNamespace

    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    def prepared(policy):
        return SimpleNamespace(_get_fsdp_state=lambda: SimpleNamespace(_mp_policy=policy))

    sharding.check_policy(prepared(MixedPrecisionPolicy(torch.bfloat16, torch.float32)), "bfloat16", "policy")
    # not sharded at all (accelerate fell back to data parallelism): the same kind of error
    with pytest.raises(RuntimeError) as caught:
        sharding.check_policy(torch.nn.Linear(2, 2), "bfloat16", "policy")
    assert str(caught.value) == (
        "launch.sharding=fsdp2 but the policy was not sharded by FSDP2 (accelerate prepared it as Linear): the "
        "installed accelerate or transformers prepares it differently (requirements.txt pins them)")
    accelerates = MixedPrecisionPolicy(torch.bfloat16, torch.bfloat16, torch.bfloat16)
    with pytest.raises(RuntimeError) as caught:
        sharding.check_policy(prepared(accelerates), "bfloat16", "reference model")
    assert str(caught.value) == (
        f"FSDP2 prepared the reference model with {accelerates}, not seal's "
        f"{MixedPrecisionPolicy(torch.bfloat16, torch.float32)}: the installed accelerate or transformers passes the "
        "plugin's policy on differently (requirements.txt pins them)")
    # an fp32 backbone's policy is fp32 throughout
    with pytest.raises(RuntimeError, match="^FSDP2 prepared the policy with "):
        sharding.check_policy(prepared(MixedPrecisionPolicy(torch.bfloat16, torch.float32)), "float32", "policy")


def test_training_starts_only_with_seals_policy_on_the_policy_and_a_reduction_every_micro_batch():
    """The callback make_trainer adds under fsdp2, as transformers calls it once accelerate has prepared the model."""
    from types import SimpleNamespace

    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from seal.rl.trainer import ShardedPrecision

    model = SimpleNamespace(_get_fsdp_state=lambda: SimpleNamespace(
        _mp_policy=MixedPrecisionPolicy(torch.bfloat16, torch.float32)))
    accelerator = SimpleNamespace(gradient_state=SimpleNamespace(plugin_kwargs={"num_steps": 1, "sync_each_batch": True}))
    check = ShardedPrecision("bfloat16", accelerator)
    check.on_train_begin(None, None, None, model=model)
    accelerator.gradient_state.plugin_kwargs["sync_each_batch"] = False
    with pytest.raises(RuntimeError, match="^the accelerator would accumulate FSDP2's gradients unreduced \\(no "
                                           "sync_each_batch\\): the installed transformers passes accelerator_config "
                                           "on differently \\(requirements.txt pins it\\)$"):
        check.on_train_begin(None, None, None, model=model)
    del accelerator.gradient_state.plugin_kwargs["sync_each_batch"]  # accelerate's default: not said, no sync
    with pytest.raises(RuntimeError, match="^the accelerator would accumulate"):
        check.on_train_begin(None, None, None, model=model)
    accelerator.gradient_state.plugin_kwargs["sync_each_batch"] = True
    with pytest.raises(RuntimeError, match="^FSDP2 prepared the policy with "):
        ShardedPrecision("float32", accelerator).on_train_begin(None, None, None, model=model)


def test_under_fsdp2_the_run_loads_its_policy_into_host_memory_and_under_ddp_onto_the_device(monkeypatch):
    """What `train` asks the backbone for (seal.tasks.train.build): under fsdp2 the fp32 masters stay in host memory
    until the trainer shards them (28.4 GiB of a 7B model would otherwise sit on every rank's GPU through the vLLM
    engine's start and the evaluations before training); under ddp the loaded model goes to the device."""
    from types import SimpleNamespace

    from hydra.utils import instantiate

    from seal.tasks import train
    from tests.test_configs import compose_with

    asked = []

    class Loaded(Exception):
        pass

    def load(self, training=False, host=False):
        asked.append((training, host))
        raise Loaded

    monkeypatch.setattr("seal.policy.backbones.TinyRandomBackbone.load", load)
    cfg = compose_with("backbone=tiny-random")
    for layout in ("fsdp2", "ddp"):
        with pytest.raises(Loaded):
            train.build(SimpleNamespace(cfg=cfg, budget=None, backbone=instantiate(cfg.backbone), layout=layout))
    assert asked == [(True, True), (True, False)]


@pytest.mark.parametrize("device, offload", [("cuda", "CPUOffloadPolicy"), ("cpu", "OffloadPolicy")])
def test_the_reference_is_sharded_per_layer_with_seals_policy_and_kept_in_host_memory_on_gpus(monkeypatch, device,
                                                                                                offload):
    """shard_reference: one FSDP2 unit per decoder layer and one for the root, each with the launch's policy (the
    one the policy model has: bf16 parameters, fp32 reduction, no output cast), resharded after every forward;
    on CUDA its parameters live in host memory (FSDP2 copies a layer at a time to the GPU), on the CPU they are
    there already (no offload)."""
    from types import SimpleNamespace

    import torch
    import torch.distributed.fsdp as fsdp
    from transformers import Qwen2Config, Qwen2ForCausalLM

    units = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda module, **options: units.append((module, options)))
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=32))
    policy = sharding.mixed_precision_policy("bfloat16")
    accelerator = SimpleNamespace(device=torch.device(device),
                                  state=SimpleNamespace(fsdp_plugin=SimpleNamespace(mixed_precision_policy=policy)))
    assert sharding.shard_reference(model, accelerator) is model and not model.training
    assert [module for module, _ in units] == [*model.model.layers, model]
    for _, options in units:
        assert type(options["offload_policy"]).__name__ == offload and options["reshard_after_forward"] is True
        assert options["mp_policy"] is policy
        assert (policy.param_dtype, policy.reduce_dtype, policy.output_dtype) == (torch.bfloat16, torch.float32, None)


def test_the_rollout_copy_gathers_each_shard_in_the_compute_dtype():
    """RolloutCopy.refresh gathers the shards already cast to the copy's dtype (a bf16 gather moves half the bytes
    of an fp32 one and never holds a whole fp32 tensor), and the copy holds the sharded weights' values."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from seal.rl.sharding import RolloutCopy
    from tests.policy.test_weights import one_rank_shards

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=16))
    weight = torch.randn(8)
    with one_rank_shards() as group:
        model.model.norm.weight = torch.nn.Parameter(group.shard(weight))
        copy = RolloutCopy(model, dtype=torch.bfloat16, device="cpu").refresh()
        assert group.gathered == [torch.bfloat16]
    assert torch.equal(copy.model.norm.weight, weight.to(torch.bfloat16))
