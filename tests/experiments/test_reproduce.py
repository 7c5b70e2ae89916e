"""experiments.reproduce: the job list behind Tables 1 and 3, the GPU-hour bound, skipping finished runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from types import SimpleNamespace

from experiments.reproduce import Job, gpu_hours_bound, plan, run_dir, with_budget
from seal.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def test_the_plan_is_table_1_and_the_ablations_of_table_3():
    jobs = plan()
    # Table 1: 3 backbones x 2 arms x 3 seeds = 18; Table 3 adds 3 ablations x 3 seeds on Qwen2.5-7B
    # (its seal runs are Table 1's): 27
    assert len(jobs) == 27 == len(set(jobs))
    assert {j.experiment for j in jobs if j.backbone != "qwen2.5-7b"} == {"vanilla_rl", "seal"}
    assert sum(j.backbone == "qwen2.5-7b" for j in jobs) == 5 * 3


def test_the_gpu_hour_bound_by_hand():
    # budget=paper on Qwen2.5-7B (7.62B parameters, 16,384-token context): 6 epochs of 400 // 32 = 12
    # rounds -> 72 rounds x 256 episodes x 16,384 tokens x 10 FLOPs per parameter-token, at 30% of 312 TFLOPS
    expected = 72 * 256 * 16384 * 10 * 7.62e9 / (312e12 * 0.3) / 3600
    assert gpu_hours_bound(Job("qwen2.5-7b", "seal", 0), ("budget=paper",), gpu_tflops=312, mfu=0.3) == pytest.approx(expected)
    assert expected == pytest.approx(68.29, abs=0.01)


def test_a_dry_run_lists_the_jobs_and_skips_finished_ones(tmp_path):
    done = run_dir(tmp_path, Job("qwen2.5-3b", "seal", 1), with_budget(("budget=paper", "hydra.launcher.partition=gpu")))
    # as Hydra names it: sorted key=value pairs, hydra's own overrides left out; the paper's launch is named
    assert done.name == "backbone=qwen2.5-3b,budget=paper,experiment=seal,launch=paper,seed=1"
    done.mkdir(parents=True)
    (done / "metrics.json").write_text(json.dumps({"eval_after": {}}))
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path),
                           "--", "budget=paper", "hydra.launcher.partition=gpu"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("27 jobs, 1 finished, 26 to run")
    assert "finished backbone=qwen2.5-3b experiment=seal seed=1 launch=paper budget=paper" in proc.stdout
    assert not list(tmp_path.glob(".reproduce"))  # nothing submitted


def test_the_dry_run_plans_the_papers_budget_without_being_told(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"27 jobs, 0 finished, 27 to run (under {tmp_path})",
                         "budget=paper (the paper's, conf/budget/paper.yaml)"]
    jobs = [line for line in lines if line.startswith("  to run")]
    # with the paper's budget comes the authors' launch (conf/launch/paper.yaml)
    assert len(jobs) == 27 and all(" budget=paper launch=paper " in line for line in jobs)
    # 72 rounds x 256 episodes x 16,384 tokens x 10 FLOPs per parameter and token at 30% of 312 TFLOPS:
    # 8.962 GPU-hours per billion parameters; Qwen2.5-7B has 7.62B (68.3), and the 27 jobs hold
    # 6 x 3.09B (Qwen2.5-3B) + 15 x 7.62B (Qwen2.5-7B) + 6 x 8.03B (ToolACE-2-8B) = 181.02B
    per_billion = 72 * 256 * 16384 * 10 * 1e9 / (312e12 * 0.3) / 3600
    assert "backbone=qwen2.5-7b experiment=seal seed=0 budget=paper launch=paper  <= 68.3 GPU-h" in proc.stdout
    assert lines[-1] == (f"GPU-hours to run, upper bound: {181.02 * per_billion:.1f} (context-filling episodes, 30% "
                         "of 312 TFLOPS)") == "GPU-hours to run, upper bound: 1622.3 (context-filling episodes, 30% of 312 TFLOPS)"


def test_a_smaller_budget_is_an_explicit_choice_and_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path),
                           "--backbones", "qwen2.5-3b", "--seeds", "0", "--ablation-backbone", "", "--", "budget=smoke"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == ("budget=smoke (chosen; not the paper's budget: the tables say its runs are "
                                           "not comparable to the paper's numbers)")
    assert "  to run   backbone=qwen2.5-3b experiment=seal seed=0 budget=smoke  <= " in proc.stdout
    assert "budget=paper" not in proc.stdout and "launch=paper" not in proc.stdout


def test_the_paper_budget_brings_the_authors_launch_unless_one_is_chosen():
    from experiments.reproduce import with_budget

    assert with_budget(()) == ("budget=paper", "launch=paper")
    assert with_budget(("budget=paper",)) == ("launch=paper", "budget=paper")
    assert with_budget(("launch=default", "x=1")) == ("budget=paper", "launch=default", "x=1")
    assert with_budget(("budget=smoke",)) == ("budget=smoke",)
    with pytest.raises(UserError, match="launch=gpus: there is no conf/launch/gpus.yaml; choose one of default, paper"):
        with_budget(("launch=gpus",))


@pytest.mark.parametrize("args, message", [
    (["--", "budget=huge"], "error: budget=huge: there is no conf/budget/huge.yaml; choose one of "
                            f"{', '.join(sorted(p.stem for p in (REPO / 'conf' / 'budget').glob('*.yaml')))}\n"),
    (["--seeds", "0,x"], "error: --seeds 0,x: give whole numbers separated by commas, e.g. 0,1,2\n"),
    (["--backbones", "qwen9"], "error: backbone qwen9: there is no conf/backbone/qwen9.yaml; the paper's are "
                               "qwen2.5-3b, qwen2.5-7b, toolace-2-8b\n"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path), *args],
                          cwd=REPO, capture_output=True, text=True)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, message, "")


def test_the_run_directory_is_the_one_hydra_names_with_launch_overrides():
    from hydra import compose, initialize_config_dir

    job, extra = Job("qwen2.5-7b", "seal", 2), ("budget=paper", "launch.processes=4", "launch.sharding=fsdp2")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=job.overrides(extra), return_hydra_config=True)
    assert run_dir(REPO, job, extra).name == cfg.hydra.job.override_dirname == "backbone=qwen2.5-7b,budget=paper,experiment=seal,seed=2"


def test_submission_writes_the_manifest_of_every_planned_run_first(tmp_path, monkeypatch):
    import experiments.reproduce as reproduce

    seen = {}

    def submit(jobs, root, extra, launcher):
        seen["manifest"] = json.loads((root / "manifest.json").read_text())  # already there when jobs start
        return [(job, 0) for job in jobs]

    monkeypatch.setattr(reproduce, "submit", submit)
    monkeypatch.setattr(reproduce, "gpu_hours_bound", lambda *a, **k: 0.0)
    monkeypatch.setattr(reproduce.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    # no budget given: the paper's, in every run directory's name and in the manifest
    assert reproduce.main(["--root", str(tmp_path), "--backbones", "qwen2.5-3b", "--seeds", "0,1",
                           "--ablation-backbone", "", "--launcher", "basic"]) == 0
    # 1 backbone x {vanilla_rl, seal} x seeds {0, 1}, each named as Hydra names its folder
    assert seen["manifest"]["overrides"] == ["budget=paper", "launch=paper"]
    assert seen["manifest"]["runs"] == [
        {"dir": f"backbone=qwen2.5-3b,budget=paper,experiment={arm},launch=paper,seed={seed}", "backbone": "qwen2.5-3b",
         "experiment": arm, "seed": seed} for arm in ("vanilla_rl", "seal") for seed in (0, 1)]
