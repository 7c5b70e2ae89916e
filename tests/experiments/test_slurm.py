"""Sweeps through hydra-submitit-launcher on a real one-node SLURM cluster on this machine
(experiments/cluster/local_slurm.sh). `make test-slurm` runs these; the default suite does not."""

import json
import re
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "cluster" / "local_slurm.sh"
# the launcher's own settings, sized for the local node (2 cores: two jobs at a time)
LAUNCHER = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=local", "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=4", "hydra.launcher.timeout_min=30"]
TINY = ["backbone=tiny-random", "budget.train_entries=2", "budget.prompts_per_round=1", "budget.rollouts_per_prompt=2",
        "budget.rounds=2", "budget.max_new_tokens=6", "budget.heldout_entries_per_category=1", "logger.mode=offline"]


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (apt-get and the daemons)")
    if not shutil.which("apt-get") and not shutil.which("slurmctld"):
        pytest.skip("no apt-get to install slurm-wlm, and no slurmctld")
    proc = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"SLURM could not start here: {proc.stderr.strip()}")
    yield
    subprocess.run(["bash", str(SCRIPT), "down"], capture_output=True, text=True, timeout=120)


def sweep(sweep_dir, *overrides, cwd):
    """`python run.py -m ...` as a user types it, from a directory that is not the checkout."""
    return subprocess.run([sys.executable, str(REPO / "run.py"), "-m", *LAUNCHER, *overrides,
                           f"hydra.sweep.dir={sweep_dir}"], cwd=cwd, capture_output=True, text=True, timeout=1800)


def test_a_sweep_of_two_arms_and_two_seeds_runs_as_slurm_jobs_and_aggregates(cluster, tmp_path):
    sweep_dir = tmp_path / "multirun" / "train"
    proc = sweep(sweep_dir, "experiment=vanilla_rl,seal", "seed=0,1", *TINY, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))
    assert len(runs) == 2 * 2  # arms x seeds
    for run in runs:
        assert (run / "final_model").is_dir() and (run / "report.md").exists()
        assert len((run / "metrics.jsonl").read_text().splitlines()) == 2  # budget.rounds
        # it ran as a SLURM job: submitit left the job's own log and result for each of the four
    results = list((sweep_dir / ".submitit").glob("*/*_result.pkl"))
    logs = [p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.out")]
    assert len(results) == 4 and len(logs) == 4
    arms = {(json.loads((r / "run_config.json").read_text())["experiment_name"],
             json.loads((r / "run_config.json").read_text())["seed"]) for r in runs}
    assert arms == {("vanilla_rl", 0), ("vanilla_rl", 1), ("seal", 0), ("seal", 1)}

    # W&B (offline files): one group for the sweep, the arm as job_type; the record holds the strings
    from seal.report.wandb_run import run_identity

    group = run_identity(out_dir=runs[0], fingerprint="", experiment="", backbone="", seed=0, sweep_dir=sweep_dir)["group"]
    for run in runs:
        (record,) = run.glob("wandb/offline-run-*/run-*.wandb")
        config = json.loads((run / "run_config.json").read_text())
        data = record.read_bytes()
        assert group.encode() in data and config["experiment_name"].encode() in data
        assert f"seed={config['seed']}".encode() in data and b"backbone=tiny-random" in data

    tables = tmp_path / "tables"
    agg = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(sweep_dir), "--out", str(tables)],
                         cwd=REPO, capture_output=True, text=True)
    assert agg.returncode == 0, agg.stderr
    # one row per arm and one for the base model, each over the two seeds of two expected
    for arm, model in (("base model", "base model (initial)"), ("seal", "final model"), ("vanilla_rl", "final model")):
        assert f"| tiny-random | {arm} | {model} | 2 of 2 |" in agg.stdout
    assert "Missing" not in agg.stdout
    import csv

    assert (tables / "tables.md").exists()
    rows = list(csv.DictReader((tables / "tables.csv").open()))
    # three rows x two protocols, then the paper's eight reference models of Table 1 (its release protocol only)
    assert len([r for r in rows if r["arm"] != "reference"]) == 3 * 2
    assert [r["protocol"] for r in rows if r["arm"] == "reference"] == ["release"] * 8


def test_a_failing_job_leaves_its_error_and_the_rest_of_the_sweep_finishes(cluster, tmp_path):
    sweep_dir = tmp_path / "multirun" / "replay"
    proc = sweep(sweep_dir, "task=replay", "split=seal_release", "split.val_scenarios=0,-3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    good, bad = sweep_dir / "split.val_scenarios=0,split=seal_release", sweep_dir / "split.val_scenarios=-3,split=seal_release"
    summary = json.loads((good / "summary.json").read_text())
    assert summary["total"] == summary["passed"] == 800  # every gold trajectory replays (BFCL's checker)
    assert "val_scenarios=-3" in (bad / "error.txt").read_text() and not (bad / "summary.json").exists()


def test_a_preempted_job_is_requeued_by_submitit_and_resumes_to_the_same_rounds_and_model(cluster, tmp_path):
    """SLURM's preemption/time-limit warning is SIGUSR2 (submitit asks for it); submitit's handler
    requeues the job, and the requeued job resumes from its last complete round."""
    from safetensors.torch import load_file

    from tests.rl.test_loop import rounds

    args = [*TINY, "budget.rounds=3", "budget.heldout_entries_per_category=0", "logger.mode=disabled"]
    full = tmp_path / "full"
    subprocess.run([sys.executable, str(REPO / "run.py"), *args, f"hydra.run.dir={full}"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=900)

    sweep_dir = tmp_path / "multirun"
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "-m", *LAUNCHER, *args, "seed=0",
                             f"hydra.sweep.dir={sweep_dir}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 900
        marker = None
        while time.time() < deadline and proc.poll() is None:
            marker = next(sweep_dir.glob("*/checkpoints/checkpoint-1/seal_state.json"), None)
            if marker is not None:
                break
            time.sleep(0.2)
        assert marker is not None, "round 1 never finished"
        run_dir = marker.parents[2]
        (job,) = [p.name for p in (sweep_dir / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name)]
        subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=30)
        assert proc.wait(timeout=1800) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log = "\n".join(p.read_text() for p in (sweep_dir / ".submitit").glob("*/*_log.*"))
    assert "requeu" in log.lower(), log[-2000:]
    # it was stopped before the end: round 1's checkpoint existed when the signal came, the last did not
    assert rounds(run_dir) == rounds(full)
    a, b = load_file(full / "final_model" / "model.safetensors"), load_file(run_dir / "final_model" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_reproduce_submits_every_arm_names_its_jobs_skips_finished_runs_and_aggregates(cluster, tmp_path):
    """experiments.reproduce end to end, tiny-random standing in for every backbone: Table 1's two arms
    and Table 3's three ablations (seal shared) for one seed, as five SLURM jobs of a CPU-sized budget (they ask
    for no GPU, so the GPU-less partition takes them), submitted with --submit; the job ids it prints are
    the ones SLURM runs, with their logs where it says."""
    root = tmp_path / "reproduce"
    args = [sys.executable, "-m", "experiments.reproduce", "--root", str(root), "--backbones", "tiny-random",
            "--seeds", "0", "--ablation-backbone", "tiny-random", "--", "budget=smoke", *TINY[1:], *LAUNCHER[1:]]
    proc = subprocess.Popen([*args[:3], "--submit", *args[3:]], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("cancel: "):
                break
        # while they run: what SLURM itself says of every id printed
        ids = lines[-1].removeprefix("cancel: scancel ").split()
        submitted = [line.split()[0] for line in lines if re.match(r"^ +\d+(_\d+)? +backbone=", line)]
        assert len(ids) == 5 and sorted(ids) == sorted(submitted), lines
        assert f"watch: squeue -j {','.join(ids)}" in lines
        for slurm_id in ids:
            shown = subprocess.run(["scontrol", "show", "job", slurm_id], capture_output=True, text=True, check=True).stdout
            stdout = re.search(r"StdOut=(\S+)", shown).group(1)
            assert stdout.startswith(f"{root}/.submitit/"), shown
            assert re.search(r"JobState=(PENDING|RUNNING|COMPLETING|COMPLETED)", shown), shown
        out, err = proc.communicate(timeout=2400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    assert lines[0] == "5 jobs, 0 finished, 5 to run (under %s)" % root
    assert lines[lines.index(next(x for x in lines if x.startswith("submitted")))] == "submitted 5 of 5 jobs to partition local:"
    # each job is named as it returns
    assert len([x for x in out.splitlines() if re.match(r"^\d/5 returned: backbone=tiny-random", x)]) == 5
    assert len(list(root.glob("*/metrics.json"))) == 5
    table = (root / "tables" / "tables.md").read_text()
    for arm in ("vanilla_rl", "seal", "wo_env_adaptation", "wo_reweighting", "wo_closed_loop"):
        assert f"| tiny-random | {arm} | final model | 1 of 1 |" in table
    assert "seal - vanilla_rl" in table and "seal - wo_closed_loop" in table
    # again: everything is finished, nothing is submitted
    again = subprocess.run([*args[:3], "--dry-run", *args[3:]], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.stdout.startswith("5 jobs, 5 finished, 0 to run"), again.stdout


def test_reproduce_refuses_the_papers_gpu_jobs_on_the_partition_without_gpus(cluster, tmp_path):
    """The paper's own jobs (budget=paper, launch=paper: 4 GPUs each) on the local partition, whose node has no
    GPU (sinfo's GRES: (null)): one sentence, exit code 2, nothing submitted."""
    gres = subprocess.run(["sinfo", "-h", "-p", "local", "-o", "%G"], capture_output=True, text=True, check=True).stdout
    assert gres.split() == ["(null)"]
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
    root = tmp_path / "reproduce"
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--root", str(root), "--submit",
                           "--backbones", "qwen2.5-7b", "--seeds", "0", "--ablation-backbone", "", "--",
                           "hydra.launcher.partition=local", "hydra.launcher.gpus_per_node=4"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert proc.stderr == ("error: partition local has no GPUs (sinfo's GRES: (null)) but each job asks for 4 GPU(s): "
                           "choose a partition that has them with hydra.launcher.partition=<name> (`sinfo -o \"%P %G %f\"` "
                           "lists each partition's GPUs and features)\n")
    after = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout.split()
    assert after == before and not root.exists()
    # asking SLURM for no GPU at all, for jobs whose launch runs 4 processes on 4 GPUs
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--root", str(root), "--submit",
                           "--backbones", "qwen2.5-7b", "--seeds", "0", "--ablation-backbone", "", "--",
                           "hydra.launcher.partition=local"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stderr.startswith(
        "error: each job runs 4 process(es), one per GPU, but asks SLURM for 0 GPU(s)"), proc.stderr


def test_a_sweep_without_a_folder_of_its_own_gets_one_named_after_it(cluster, tmp_path):
    """Two sweeps of the same task from one directory, as SLURM jobs: each in its own folder under
    multirun/<task>/ (the jobs compose their folder in the SLURM job itself), each with its multirun.yaml."""
    for args in (["split.val_scenarios=0,1"], ["split.val_scenarios=2", "split=seal_release,scenario_disjoint"]):
        proc = subprocess.run([sys.executable, str(REPO / "run.py"), "-m", *LAUNCHER, "task=replay", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = tmp_path / "multirun" / "replay"
    first, second = sweeps / "split.val_scenarios=0,1", sweeps / "split.val_scenarios=2,split=scenario_disjoint,seal_release"
    assert sorted(p.name for p in sweeps.iterdir()) == sorted([first.name, second.name])
    assert sorted(p.parent.name for p in first.glob("*/summary.json")) == ["split.val_scenarios=0", "split.val_scenarios=1"]
    assert sorted(p.parent.name for p in second.glob("*/summary.json")) == [
        "split.val_scenarios=2,split=scenario_disjoint", "split.val_scenarios=2,split=seal_release"]
    assert (first / "multirun.yaml").exists() and (second / "multirun.yaml").exists()
