"""FSDP2 proven on the CPU: two gloo ranks started by torchrun, with accelerate on its FSDP path
(seal.rl.sharding.shard_on_gloo). A GPU user starts the same code with
`accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml`."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seal.policy.backbones import TinyRandomBackbone

from tests.rl.test_loop import ROOT, extend_by_rounds, rounds

TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))


def torchrun(*args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node", "2", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.costly
def test_two_gloo_ranks_shard_gather_and_checkpoint_through_accelerates_fsdp2_path(tmp_path):
    proc = torchrun("tests/rl/gloo_fsdp_worker.py", str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert "best_model_equal" in ranks[0] and "tied_written_once" in ranks[0]
    for report in ranks:
        assert report["distributed_type"] == "DistributedType.FSDP"
        # every parameter's first dimension is split in two (vocab 96, hidden 32, q 32, kv 2 x 8, MLP 64)
        shapes = report["local_shapes"]
        assert shapes["model.embed_tokens.weight"] == [48, 32] and shapes["lm_head.weight"] == [48, 32]
        assert shapes["model.layers.0.self_attn.k_proj.weight"] == [8, 32]
        assert shapes["model.layers.1.mlp.down_proj.weight"] == [16, 64] and shapes["model.norm.weight"] == [16]
        # the rollout copy is a plain module holding the gathered weights, before and after a step
        assert report["copy_equals_unsharded"] and report["copy_is_plain"]
        assert report["trained_moved"] and report["copy_follows_training"]
        # while the optimizer has not stepped (its version unchanged) a play reuses the copy without a gather
        assert report["same_version_not_gathered"]
        # the best model is gathered by both ranks and written by rank 0 (every tensor, in bf16); loading a full
        # state dict into shards is refused; tied weights stay one tensor, kept on rank 0 only, written once
        assert report.get("best_model_equal", True) and report["load_into_shards_refused"]
        assert report["tied_shared"] and report["tied_equal"] and report["kept_only_on_rank0"]
        assert report.get("tied_written_once", True)
        # the reference: one unit per decoder layer plus the root, scoring exactly as unsharded
        assert report["reference_units"] == 3 and report["reference_max_diff"] == 0.0
        # accelerate's sharded checkpoint (a directory of shards) loads back into a fresh model exactly
        assert "pytorch_model_fsdp_0" in report["state_files"] and report["reload_equal"]


@pytest.mark.costly
def test_fsdp2_in_bf16_reduces_in_fp32_and_hands_the_loss_fp32_as_the_authors_ran_it(tmp_path):
    """One accumulation window of 8 micro-batches on two gloo ranks in bf16 mixed precision
    (tests/rl/gloo_precision_worker.py), prepared as seal's trainer prepares FSDP2 and DDP."""
    from seal.policy.memory import training_memory
    from tests.rl.gloo_precision_worker import TINY

    proc = torchrun("tests/rl/gloo_precision_worker.py", str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # what the memory plan keeps per token between the layers under fsdp2 (checkpointing: each layer's input, the
    # rotary tables): 2 layers x 64 x 2 bytes + 2 x 16 x 2, the stream in bf16
    planned = training_memory(TINY, compute_dtype="bfloat16", episode_tokens=1, sharding="fsdp2", ranks=2).activations
    assert planned == 2 * 64 * 2 + 2 * 16 * 2
    for report in (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)):
        seal, accelerate = report["fsdp2"], report["accelerate"]
        # the policy of the authors' FSDP2 workers (no output cast); TRL's fused head hands the loss fp32
        # log-probs, as under DDP, for the policy and for the reference sharded by seal alike
        assert seal["policy"] == seal["reference"]["policy"] == ["torch.bfloat16", "torch.float32", "None"]
        assert seal["log_probs_dtype"] == seal["reference"]["log_probs_dtype"] == "torch.float32"
        assert report["ddp"]["log_probs_dtype"] == "torch.float32"
        # the stream between the layers stays bf16, the bytes the plan counts (a cast of every unit's output to
        # fp32 would double them); DDP's is fp32 under autocast over fp32 masters
        assert seal["stream_dtypes"] == ["torch.bfloat16"] and seal["kept_bytes_per_token"] == planned
        assert report["ddp"]["stream_dtypes"] == ["torch.float32"]
        assert report["ddp"]["kept_bytes_per_token"] == training_memory(TINY, compute_dtype="bfloat16",
                                                                        episode_tokens=1).activations
        # the gradients are the bf16 model's exactly: each micro-batch's bf16 gradient summed in fp32, as a
        # float64 sum of the same gradients computed in one process gives them
        assert seal["diff_to_exact"] < 1e-6
        # and DDP's within bf16's resolution (DDP keeps the norms and the embedding in fp32 under autocast,
        # FSDP2 gathers every parameter in bf16: two roundings of 2^-7 apart at most)
        assert seal["diff_to_ddp"] < 2 * 2**-7
        # what accelerate's own policy for the same launch computes: bf16 outputs, a bf16 reduction and a
        # bf16 sum of the unsynced micro-batches, three orders of magnitude further from the exact gradients
        assert accelerate["log_probs_dtype"] == accelerate["reference"]["log_probs_dtype"] == "torch.bfloat16"
        assert accelerate["diff_to_exact"] > 1e-3
        # the memory plan's fsdp2 gradients: fp32 shards only (4 bytes a parameter over 2 ranks; FSDP2 pads each
        # parameter's rows to an even split), and nothing whole-size held between micro-batches, where accelerate's
        # no_sync kept every parameter's bf16 gradient unsharded (2 bytes a parameter, the whole model on each rank)
        n = seal["parameters"]
        assert seal["held_between_micro_batches"] == 0
        assert 4 * n / 2 <= seal["sharded_gradient_bytes"] <= 4 * n / 2 + 4 * 64 * 10
        assert accelerate["held_between_micro_batches"] >= 2 * n
        # GRPO's loss reaches the head through TRL's fused head, which reads the head's weight without calling the
        # head (FSDP2's unit of the final norm and the head runs its forward in part): its gradients too are the
        # bf16 model's, within bf16's resolution of DDP's, and the loss's through the logits to bf16 roundings
        fused = report["fsdp2_fused_head"]
        assert fused["diff_to_exact"] < 1e-6 and fused["diff_to_ddp"] < 2 * 2**-7
        # (0 on the CPU, where TRL's head computes without Triton kernels)
        assert fused["exact_to_logits_path"] < 2 * 2**-7 and fused["head_gradient_norm"] > 0


ARGS = ["run.py", "backbone=tiny-random", "budget.prompts_per_round=2", "budget.rollouts_per_prompt=2",
        "budget.micro_batch_size=1", "budget.steps_per_round=1", "budget.train_entries=4",
        "budget.heldout_entries_per_category=0", "budget.max_new_tokens=6", "logger.mode=disabled",
        # tiny-random earns no reward, so only the KL term and weight decay move it: a large step makes them show
        "trainer.learning_rate=1e-3"]


def train(out: Path, sharding: str, rounds_: int) -> None:
    proc = torchrun(*ARGS, f"launch.sharding={sharding}", f"budget.rounds={rounds_}", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]


def weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(out / "final_model" / "model.safetensors")


# about 15 minutes on two cores (four two-rank runs): in `make test-slow`
@pytest.mark.slow
def test_fsdp2_trains_the_rounds_of_ddp_and_resumes_from_its_sharded_checkpoint(tmp_path):
    fsdp, ddp, resumed = tmp_path / "fsdp", tmp_path / "ddp", tmp_path / "resumed"
    train(fsdp, "fsdp2", 3)
    train(ddp, "ddp", 3)
    assert json.loads((fsdp / "run_config.json").read_text())["sharding"] == "fsdp2"
    # the same episodes, labels, rho and interface every round; optimizer signals within float tolerance
    assert [r.keys() for r in rounds(fsdp)] == [r.keys() for r in rounds(ddp)]
    for a, b in zip(rounds(fsdp), rounds(ddp), strict=True):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    # both ranks held the same co-evolution state after every round
    assert (fsdp / "ranks" / "rank0.jsonl").read_text() == (fsdp / "ranks" / "rank1.jsonl").read_text()
    # every checkpoint is sharded (each rank's part of the model and optimizer), complete with seal_state.json
    checkpoint = fsdp / "checkpoints" / "checkpoint-3"
    assert (checkpoint / "pytorch_model_fsdp_0").is_dir() and (checkpoint / "seal_state.json").is_file()
    # the final model is one full state dict that transformers loads, in the backbone's dtype, equal to
    # data parallel's within float tolerance, and it moved
    from transformers import AutoModelForCausalLM

    a, b = weights(fsdp), weights(ddp)
    loaded = AutoModelForCausalLM.from_pretrained(fsdp / "final_model")
    assert {p.dtype for p in loaded.parameters()} == {torch.float32}
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    from safetensors.torch import load_file

    start = load_file(Path(TinyRandomBackbone().model_path()) / "model.safetensors")
    assert any(not torch.allclose(a[k], start[k]) for k in a if k in start)
    # killed after round 2 of 3, resumed from the sharded checkpoint: the same rounds and weights
    train(resumed, "fsdp2", 2)
    extend_by_rounds(resumed)
    train(resumed, "fsdp2", 3)
    for x, y in zip(rounds(resumed), rounds(fsdp), strict=True):
        assert x == pytest.approx(y, rel=1e-6, abs=1e-9)
    c = weights(resumed)
    assert all(torch.equal(c[k], a[k]) for k in a)


@pytest.mark.slow
def test_a_job_asking_for_two_processes_starts_them_with_the_fsdp2_launch_config(tmp_path):
    """What a SLURM job holding two GPUs does (seal.tasks.launch), here with gloo ranks."""
    args = [a for a in ARGS if not a.startswith("trainer.")]
    proc = subprocess.run([sys.executable, *args, "budget.rounds=1", "launch.processes=2", "launch.sharding=fsdp2",
                           f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert (run_config["world_size"], run_config["sharding"]) == (2, "fsdp2")
    assert (tmp_path / "checkpoints" / "checkpoint-1" / "pytorch_model_fsdp_0").is_dir()
    assert sorted(p.name for p in (tmp_path / "ranks").iterdir()) == ["rank0.jsonl", "rank1.jsonl"]


@pytest.mark.slow
def test_one_rank_launched_with_fsdp2_trains_sharded_as_a_single_gpu_checks_the_paper_node(tmp_path):
    """launch.processes=1 launch.sharding=fsdp2: the job launches its one rank with accelerate and the fsdp2
    launch config in the backbone's bf16; FSDP2 over a world of one writes accelerate's sharded checkpoints."""
    args = [a for a in ARGS if not a.startswith("trainer.")]
    proc = subprocess.run([sys.executable, *args, "backbone.dtype=bfloat16", "budget.rounds=1", "launch.processes=1",
                           "launch.sharding=fsdp2", f"hydra.run.dir={tmp_path}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert (run_config["world_size"], run_config["sharding"]) == (1, "fsdp2")
    assert (tmp_path / "checkpoints" / "checkpoint-1" / "pytorch_model_fsdp_0").is_dir()


@pytest.mark.slow
def test_fsdp2_without_a_kl_term_trains_without_a_reference(tmp_path):
    """trainer.beta=0 under fsdp2 (about 40 s on one rank): TRL builds no reference model, so there is none to shard
    or read back, and no KL is computed; before, the run stopped at the trainer's build, reporting the missing
    reference as one FSDP2 had not sharded."""
    args = [a for a in ARGS if not a.startswith("trainer.")]
    proc = subprocess.run([sys.executable, *args, "backbone.dtype=bfloat16", "budget.rounds=1", "launch.processes=1",
                           "launch.sharding=fsdp2", "trainer.beta=0", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert (run_config["sharding"], run_config["trainer"]["beta"]) == ("fsdp2", 0)
    (round_0,) = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert round_0["round"] == 0 and "train/kl" not in round_0 and "train/loss" in round_0
