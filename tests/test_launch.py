"""seal.tasks.launch: a job holding several GPUs starts one rank per GPU with accelerate and a launch config."""

import sys

import pytest
import yaml

from seal.errors import UserError
from seal.tasks import launch


def test_the_command_names_the_shardings_launch_config_and_keeps_the_overrides(tmp_path):
    command = launch.launch_command(
        processes=4, sharding="fsdp2", gpus=4, out_dir=tmp_path, dtype="bfloat16",
        overrides=["backbone=qwen2.5-7b", "launch.processes=4", "hydra.run.dir=elsewhere", "seed=1"])
    config = launch.ROOT / "experiments" / "cluster" / "accelerate" / "fsdp2.yaml"
    assert command[:6] == [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                           "--num_processes"]
    assert command[6] == "4" and command[7] == "--main_process_port" and int(command[8]) > 0
    assert command[9:11] == ["--mixed_precision", "bf16"]
    # the ranks run the same overrides in this job's directory, and never start ranks of their own
    assert command[11:] == [str(launch.ROOT / "run.py"), "backbone=qwen2.5-7b", "seed=1", "launch.processes=null",
                            f"hydra.run.dir={tmp_path}"]


@pytest.mark.parametrize("gpus", [0, 4])
@pytest.mark.parametrize("dtype, precision", [("bfloat16", "bf16"), ("float32", "no")])
def test_the_launch_takes_the_backbones_precision_on_gpus_and_on_gloo_ranks_alike(tmp_path, gpus, dtype, precision):
    """The CPU's gloo ranks run the GPU launch unchanged: a bf16 backbone in bf16 mixed precision (FSDP2 runs it
    on gloo), a float32 one without, whatever the launch config's own mixed_precision."""
    command = launch.launch_command(processes=2, sharding="fsdp2", gpus=gpus, out_dir=tmp_path, overrides=[],
                                    dtype=dtype)
    assert command.count("--mixed_precision") == 1 and command[command.index("--mixed_precision") + 1] == precision


def test_more_processes_than_the_jobs_gpus_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"launch.processes=8 but this job has 4 GPU\(s\).*gpus_per_node=8"):
        launch.launch_command(processes=8, sharding="ddp", gpus=4, out_dir=tmp_path, overrides=[], dtype="bfloat16")


@pytest.mark.parametrize("value", [0, -1, 2.5, "four", True])
def test_a_number_of_processes_is_a_positive_integer(value):
    with pytest.raises(UserError, match="launch.processes="):
        launch.processes_wanted(value)
    assert launch.processes_wanted(None) == 1 and launch.processes_wanted(4) == 4


@pytest.mark.parametrize("name, distributed_type", [("ddp", "MULTI_GPU"), ("fsdp2", "FSDP")])
def test_the_launch_configs_are_what_accelerate_reads(name, distributed_type):
    config = yaml.safe_load((launch.ACCELERATE_CONFIGS / f"{name}.yaml").read_text())
    assert config["distributed_type"] == distributed_type and config["mixed_precision"] == "bf16"
    if name == "fsdp2":
        from seal.rl.sharding import grpo_arguments

        # the launch config and the arguments seal gives transformers agree
        ours = grpo_arguments("fsdp2")["fsdp_config"]
        fsdp = config["fsdp_config"]
        assert fsdp["fsdp_version"] == ours["version"] == 2
        assert fsdp["fsdp_auto_wrap_policy"] == ours["auto_wrap_policy"]
        assert fsdp["fsdp_state_dict_type"] == ours["state_dict_type"]
        assert fsdp["fsdp_reshard_after_forward"] is ours["reshard_after_forward"] is True


def test_a_single_process_job_and_the_ranks_themselves_do_not_relaunch(monkeypatch, tmp_path):
    from tests.test_configs import compose_with

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    cfg = compose_with("launch.processes=2")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a rank of the launch
    assert launch.relaunch(cfg, tmp_path) is False
    monkeypatch.delenv("WORLD_SIZE")
    assert launch.relaunch(compose_with("launch.processes=null"), tmp_path) is False
    assert launch.relaunch(compose_with("launch.processes=1", "launch.sharding=ddp"), tmp_path) is False
    assert launch.relaunch(compose_with("launch.processes=2", "task=replay"), tmp_path) is False
    # the single rank of a launch (torchrun --nproc_per_node 1 sets LOCAL_RANK, not WORLD_SIZE > 1) stays itself
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert launch.relaunch(compose_with("launch.processes=1", "launch.sharding=fsdp2"), tmp_path) is False


def test_one_fsdp2_process_is_launched_too_with_the_backbones_precision(monkeypatch, tmp_path):
    """launch.processes=1 with fsdp2: FSDP2 needs a launch's process group, so the job starts its one rank with
    accelerate and the fsdp2 launch config (what `gpu_check --sharding fsdp2` runs on one GPU)."""
    from tests.test_configs import compose_with

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ran = []
    class Ranks:  # the launch's process, recorded instead of started
        def __init__(self, command, cwd):
            ran.append(command)

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", Ranks)
    monkeypatch.setattr("hydra.core.hydra_config.HydraConfig.get",
                        lambda: type("H", (), {"overrides": type("O", (), {"task": ["launch.processes=1"]})()})())
    cfg = compose_with("launch.processes=1", "launch.sharding=fsdp2", "backbone=qwen2.5-3b")
    assert launch.relaunch(cfg, tmp_path) is True
    (command,) = ran
    assert command[command.index("--num_processes") + 1] == "1"
    assert command[command.index("--config_file") + 1].endswith("accelerate/fsdp2.yaml")
    assert command[command.index("--mixed_precision") + 1] == "bf16"


def test_the_paper_launch_is_the_authors_setup_in_one_preset():
    """launch=paper: 4 GPUs per run, FSDP over them, vLLM colocated at 0.4 of each GPU (the release config's
    gpu_memory_utilization, exp/bfcl_seal_04_full_seal.yaml:52; Table 4 prints 0.6); the default launch is one
    process generating with transformers, and a command-line override still wins over the preset."""
    from tests.test_configs import compose_with

    paper = compose_with("launch=paper", "backbone=qwen2.5-7b", "budget=paper", "experiment=seal")
    assert (paper.launch.processes, paper.launch.sharding) == (4, "fsdp2")
    assert (paper.backbone.generation, paper.backbone.vllm.gpu_memory_utilization) == ("vllm", 0.4)
    plain = compose_with("backbone=qwen2.5-7b", "budget=paper")
    assert (plain.launch.processes, plain.launch.sharding, plain.backbone.generation) == (None, "auto", "transformers")
    assert plain.backbone.vllm.gpu_memory_utilization is None
    mine = compose_with("launch=paper", "launch.processes=8", "backbone.generation=transformers")
    assert (mine.launch.processes, mine.backbone.generation) == (8, "transformers")


def test_ctrl_c_waits_for_the_ranks_to_say_what_was_kept(monkeypatch, tmp_path):
    """Ctrl-C reaches the launching process and its ranks alike: it waits for the ranks (the main rank says what
    was kept) instead of killing them, and ends quietly itself."""
    from seal.errors import Interrupted
    from tests.test_configs import compose_with

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen = []

    class Ranks:
        def __init__(self, command, cwd):
            self.calls = 0

        def wait(self, timeout=None):
            self.calls += 1
            seen.append(timeout)
            if self.calls == 1:
                raise KeyboardInterrupt
            return 130

        def kill(self):
            seen.append("killed")

    monkeypatch.setattr(launch.subprocess, "Popen", Ranks)
    monkeypatch.setattr("hydra.core.hydra_config.HydraConfig.get",
                        lambda: type("H", (), {"overrides": type("O", (), {"task": ["launch.processes=2"]})()})())
    cfg = compose_with("launch.processes=2", "backbone=tiny-random")
    with pytest.raises(Interrupted) as stopped:
        launch.relaunch(cfg, tmp_path)
    assert str(stopped.value) == "" and seen == [None, 120]  # waited for them, never killed them
