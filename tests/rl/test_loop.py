"""`python run.py` end to end on the tiny random backbone: outputs, every preset, kill and resume."""

import json
import re
import os
import signal
import subprocess
import sys
import time

import pytest

from seal.io import FINGERPRINT_FILE
from seal.tasks import run
from tests.marks import slow_except
from tests.test_configs import CONF, choices, compose_with

ROOT = CONF.parent
TINY = [
    "backbone=tiny-random", "budget.train_entries=2", "budget.prompts_per_round=1", "budget.rollouts_per_prompt=2",
    "budget.rounds=2", "budget.max_new_tokens=6", "budget.heldout_entries_per_category=1",
]


def train(out_dir, *overrides):
    cfg = compose_with(*TINY, *overrides)
    out_dir.mkdir(parents=True, exist_ok=True)
    run(cfg, out_dir)
    return json.loads((out_dir / "metrics.json").read_text())


def rounds(out_dir):
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def extend_by_rounds(out_dir):
    """A finished run of N rounds made into one that was killed after round N and is free to be resumed for more
    rounds: a finished run is never started again (its metrics.json is written last, see finished_already), and
    only the round count differs, so the fingerprint is moved along (the resume logic itself is tested here)."""
    (out_dir / "metrics.json").unlink()
    (out_dir / FINGERPRINT_FILE).unlink()


def test_the_main_job_leaves_its_outputs(tmp_path):
    # with an out-of-domain benchmark before and after training: one simple_python and one irrelevance entry
    metrics = train(tmp_path, "budget.ood_benchmarks=[bfcl_single_turn]", "budget.ood_entries_per_category=1",
                    "benchmark=bfcl_single_turn", "benchmark.categories=[simple_python,irrelevance]")
    assert metrics["rounds"] == 2 == len(rounds(tmp_path))
    # six new tokens cannot hold a tool call: simple_python fails, and irrelevance (no call) passes
    for when in ("ood_before", "ood_after"):
        assert metrics[when]["bfcl_single_turn"]["counts"] == {
            "simple_python": {"passed": 0, "total": 1}, "irrelevance": {"passed": 1, "total": 1}}
        assert metrics[when]["bfcl_single_turn"]["eval/bfcl_single_turn/avg"] == 0.5
        assert (tmp_path / when / "bfcl_single_turn" / "trajectories.jsonl").is_file()
    assert "## Out-of-domain evaluation" in (tmp_path / "report.md").read_text()
    for name in ["config.yaml", "run_config.json", "leakage.json", "report.md", "curves.png",
                 "eval_before/trajectories.jsonl", "eval_after/trajectories.jsonl", "interface/round_0001.json"]:
        assert (tmp_path / name).is_file(), name
    assert set(metrics["eval_after"]) >= {"eval/bfcl_v3/avg", "eval/bfcl_v3/base", "counts"}
    assert sorted(metrics["round_time_split"]) == sorted(
        ["generation", "execution", "verification", "rollout_other", "scoring", "diagnosis", "weighting", "interface",
         "optimisation"])
    report = (tmp_path / "report.md").read_text()
    assert "## Rounds" in report and "## Held-out evaluation" in report
    first = rounds(tmp_path)[0]
    assert {"train/reward_mean", "reweight/weight_mean", "iface/version"} <= set(first)
    # the optimizer's own signals and the reweighting statistics over non-zero advantages, per round
    assert {"train/kl", "train/entropy", "train/clip_ratio/region_mean", "train/grad_norm", "train/loss",
            "train/zero_spread_groups_frac", "train/logprob_gap"} <= set(first)
    assert "## Optimisation signals" in report
    assert {"diag/outcome/num_turns", "diag/cause/num_turns"} <= set(first) and any(k.startswith("reweight/rho/") for k in first)
    assert "outcomes (top 3)" in report and "causes (top 3)" in report
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert run_config["heldout_part"] == "test" and not set(run_config["heldout_ids"]) & set(run_config["train_ids"])
    assert run_config["precision"] == {"param_dtype": "float32", "compute_dtype": "float32", "kv_cache_dtype": "float32",
                                       "mixed_precision": "no"}
    assert run_config["world_size"] == 1 and run_config["round_plan"]["episodes"] == 2
    assert run_config["train_filter"]["train_part"] == 400
    # W&B offline files in the run directory
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    checkpoints = sorted((tmp_path / "checkpoints").glob("checkpoint-*"))
    assert checkpoints and all((c / "seal_state.json").is_file() for c in checkpoints)
    # the notebook reads the same run directory, top to bottom, without errors
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(ROOT / "notebooks" / "inspect_run.ipynb", as_version=4)
    os.environ["SEAL_RUN_DIR"] = str(tmp_path)
    try:
        NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    finally:
        del os.environ["SEAL_RUN_DIR"]
    printed = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs)
    assert "2 rounds" in printed and "after" in printed


# the method and its baseline in the default suite; each ablation preset only swaps components whose own tests are
# there, so training them (about 35 s each on two cores) waits for `make test-slow`
@pytest.mark.parametrize("experiment", slow_except(choices("experiment"), {"seal", "vanilla_rl"}))
def test_every_experiment_preset_trains(tmp_path, experiment):
    metrics = train(tmp_path, f"experiment={experiment}", "logger.mode=disabled", "budget.rounds=1",
                    "budget.heldout_entries_per_category=0")
    assert metrics["rounds"] == 1
    (record,) = rounds(tmp_path)
    cfg = compose_with(f"experiment={experiment}")
    weighted = cfg.reweighting.mode != "off" and cfg.diagnoser.name != "none"
    assert ("reweight/weight_mean" in record) == weighted


def test_a_wrong_override_fails_at_once_naming_the_choices():
    proc = subprocess.run([sys.executable, "run.py", "reweighting=sometimes"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "closed_loop" in proc.stderr and "shuffled" in proc.stderr


def episode_ids(out_dir):
    """Each round's episodes, by entry id, from the last checkpoint's SEAL state."""
    last = max((out_dir / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return [[e["id"] for e in r["episodes"]] for r in json.loads((last / "seal_state.json").read_text())["history"]]


@pytest.mark.slow  # three runs of 4 rounds in their own processes, about 4 min on two cores; in the default suite,
# tests/rl/test_checkpoint.py's failed save resumes a run from its checkpoint to the same rounds
def test_a_run_killed_in_its_second_epoch_resumes_to_the_same_rounds_and_model(tmp_path):
    # 2 train entries, 1 prompt per round: 2 rounds per epoch, so rounds 2 and 3 are epoch 1
    args = [sys.executable, "run.py", *TINY, "budget.rounds=4", "budget.heldout_entries_per_category=0", "logger.mode=disabled"]
    full, killed = tmp_path / "full", tmp_path / "killed"
    done = subprocess.run([*args, f"hydra.run.dir={full}"], cwd=ROOT, check=True, timeout=600, capture_output=True,
                          text=True)
    # the console, not a terminal here: what the job will do, one line per round, each round's progress as lines
    # (no bar: no terminal to draw it on) and the closing line; no step dict or library warning
    lines = done.stdout.splitlines()
    round_lines = [line.split(" | ")[0] for line in lines if re.match(r"^\[\d/4\] round", line)]
    assert round_lines == [f"[{i + 1}/4] round {i}" for i in range(4)], lines
    assert "plan: train rounds 0-3 (4 of 4)" in lines[0] and "done: 4 rounds" in lines[-1], lines
    assert all("[seal." in line or re.match(r"^\[\d/4\] round", line) for line in lines), lines
    assert sum("[seal.progress]" in line and "rollouts: turn" in line for line in lines) == 4
    assert done.stderr == "", done.stderr
    # ... while run.log has everything, each optimizer step's values included
    assert (full / "run.log").read_text().count("[trainer.steps]") >= 4
    # epoch 1 draws its own prompt order (else a resume replaying epoch 0's order would go unnoticed)
    order = [ids[0] for ids in episode_ids(full)]
    assert sorted(order[:2]) == sorted(order[2:]) and order[:2] != order[2:], order

    proc = subprocess.Popen([*args, f"hydra.run.dir={killed}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # killed once epoch 1's first round is saved: the resumed process restarts midway through epoch 1
    marker = killed / "checkpoints" / "checkpoint-3" / "seal_state.json"
    deadline = time.time() + 600
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert marker.exists() and not (killed / "metrics.json").exists(), "the run was not killed mid-training"

    subprocess.run([*args, f"hydra.run.dir={killed}"], cwd=ROOT, check=True, timeout=600, capture_output=True)
    assert episode_ids(killed) == episode_ids(full)
    assert rounds(killed) == rounds(full)
    from safetensors.torch import load_file

    a = load_file(full / "final_model" / "model.safetensors")
    b = load_file(killed / "final_model" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.slow
def test_one_round_on_the_embedded_smollm2(tmp_path):
    """The main job's own backbone and budget, cut to one round (about 3 minutes on two cores)."""
    cfg = compose_with("budget.rounds=1", "logger.mode=disabled")
    run(cfg, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["rounds"] == 1 and metrics["eval_after"]["num_entries"] == 4
    (record,) = rounds(tmp_path)
    assert record["train/model_tokens_mean"] > 0 and record["train/episode_tokens_mean"] > 1000


@pytest.mark.slow
def test_one_round_of_the_paper_budget_on_tiny_random(tmp_path):
    """budget=paper end to end for one round: 32 prompts x 8 rollouts = 256 episodes, 4 optimizer steps of 64
    episodes in micro-batches of 1. Generations are cut to 32 tokens and every evaluation is off (the held-out
    one, model selection's test evaluations of the initial, final and best models with the validation part it
    carves from train, and BFCL V4 memory): a random model's 4,096-token noise over 400 entries is beyond a
    2-core CPU. budget=paper refuses a machine without a GPU unless told otherwise."""
    cfg = compose_with("budget=paper", "budget.allow_cpu=true", "backbone=tiny-random", "budget.rounds=1",
                       "budget.max_new_tokens=32", "budget.heldout_entries_per_category=0", "budget.val_every=null",
                       "budget.val_scenarios=0", "budget.ood_benchmarks=[]", "logger.mode=disabled")
    run(cfg, tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["rounds"] == 1
    state = json.loads(next((tmp_path / "checkpoints").glob("checkpoint-4")).joinpath("seal_state.json").read_text())
    (record,) = state["history"]
    assert len(record["episodes"]) == 256 and record["global_step"] == 4
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert run_config["round_plan"]["accumulation"] == 64 and run_config["train_filter"]["fit"] == 400
