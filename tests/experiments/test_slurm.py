"""Sweeps through hydra-submitit-launcher on a real one-node SLURM cluster on this machine
(experiments/cluster/local_slurm.sh). `make test-slurm` runs these; the default suite does not."""

import json
import os
import shutil
import subprocess
import sys
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

    tables = tmp_path / "tables"
    agg = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(sweep_dir), "--out", str(tables)],
                         cwd=REPO, capture_output=True, text=True)
    assert agg.returncode == 0, agg.stderr
    # one row per arm and one for the base model, each over the two seeds
    for arm in ("base model", "seal", "vanilla_rl"):
        assert f"| tiny-random | {arm} | 2 |" in agg.stdout
    assert "Missing" not in agg.stdout
    assert (tables / "tables.md").exists() and (tables / "tables.csv").read_text().count("\n") == 1 + 3


def test_a_failing_job_leaves_its_error_and_the_rest_of_the_sweep_finishes(cluster, tmp_path):
    sweep_dir = tmp_path / "multirun" / "replay"
    proc = sweep(sweep_dir, "task=replay", "split=seal_release", "split.val_scenarios=0,-3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    good, bad = sweep_dir / "split.val_scenarios=0,split=seal_release", sweep_dir / "split.val_scenarios=-3,split=seal_release"
    summary = json.loads((good / "summary.json").read_text())
    assert summary["total"] == summary["passed"] == 800  # every gold trajectory replays (BFCL's checker)
    assert "val_scenarios=-3" in (bad / "error.txt").read_text() and not (bad / "summary.json").exists()
