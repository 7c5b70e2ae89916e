"""experiments.reproduce: the job list behind Tables 1 and 3, what each job needs of a cluster (GPUs, host
memory, disk, hours, requeues), skipping finished runs, and nothing submitted without --submit or a typed
confirmation, nor to a partition without the GPUs the jobs ask for."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from types import SimpleNamespace

from experiments.cluster.jobs import Job, plan, run_dir, with_budget
from experiments.cluster.needs import gpu_hours_bound
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
    assert "  finished backbone=qwen2.5-3b experiment=seal seed=1 launch=paper budget=paper  <= 27.7 GPU-h" in proc.stdout
    # the launcher's settings every job shares are named once, not on every job's line
    assert "(every job also gets hydra.launcher.partition=gpu)" in proc.stdout
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
    assert "backbone=qwen2.5-7b experiment=seal seed=0 budget=paper launch=paper  <= 68.3 GPU-h | 4 GPU(s)" in proc.stdout
    assert (f"GPU-hours of training to run, upper bound: {181.02 * per_billion:.1f} (context-filling episodes, 30% "
            "of 312 TFLOPS)") == "GPU-hours of training to run, upper bound: 1622.3 (context-filling episodes, 30% of 312 TFLOPS)"
    assert "GPU-hours of training to run, upper bound: 1622.3 (context-filling episodes, 30% of 312 TFLOPS)" in lines


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
    from experiments.cluster.jobs import with_budget

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
    # the hours are divided by the GPU's speed: none, or a fraction of the peak that is not one, has no hours
    (["--gpu-tflops", "0"], "error: --gpu-tflops 0: give the GPU's peak bf16 TFLOPS, a number above 0 (A100: 312)\n"),
    (["--mfu", "-1"], "error: --mfu -1: give the fraction of the peak reached, above 0 and at most 1 (e.g. 0.3)\n"),
    (["--mfu", "1.5"], "error: --mfu 1.5: give the fraction of the peak reached, above 0 and at most 1 (e.g. 0.3)\n"),
    # a budget the jobs' plan refuses, refused before anything is printed
    (["--", "budget.rounds=-3"], "error: budget.rounds=-3: give a number of rounds (at least 1) or null for whole "
                                 "epochs\n"),
    # a key no config declares, added with +: each job's run.py would refuse it after the submission
    (["--", "+trainer.learning_rat=1e-5"], "error: +trainer.learning_rat adds trainer.learning_rat, which no config of "
                                           "seal has and nothing reads (the closest one is trainer.learning_rate)\n"),
    (["--backbones", "qwen9"], "error: backbone qwen9: there is no conf/backbone/qwen9.yaml; the paper's are "
                               "qwen2.5-3b, qwen2.5-7b, toolace-2-8b\n"),
    # hydra-submitit-launcher declares gpus_per_node an integer: a GPU type goes in gres or additional_parameters
    (["--", "hydra.launcher.gpus_per_node=a100:4"],
     "error: hydra.launcher.gpus_per_node: Value 'a100:4' of type 'str' could not be converted to Integer; it takes a "
     "number; ask for a GPU type with hydra.launcher.gres=gpu:<type>:<n> (or "
     "+hydra.launcher.additional_parameters.gpus_per_node=<type>:<n>)\n"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, message):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path), *args],
                          cwd=REPO, capture_output=True, text=True)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, message, "")


def test_the_run_directory_is_the_one_hydra_names_with_launch_overrides():
    from hydra import compose, initialize_config_dir

    job, extra = Job("qwen2.5-7b", "seal", 2), ("budget=paper", "launch.processes=4", "launch.sharding=fsdp2",
                                                "logger.mode=disabled")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=job.overrides(extra), return_hydra_config=True)
    assert run_dir(REPO, job, extra).name == cfg.hydra.job.override_dirname == "backbone=qwen2.5-7b,budget=paper,experiment=seal,seed=2"


def test_submission_writes_the_manifest_of_every_planned_run_first(tmp_path, monkeypatch):
    import experiments.reproduce as reproduce

    seen = {}

    def submit(jobs, root, extra, launcher, partition=None):
        seen["manifest"] = json.loads((root / "manifest.json").read_text())  # already there when jobs start
        return [(job, 0) for job in jobs]

    monkeypatch.setattr(reproduce, "submit", submit)
    monkeypatch.setattr(reproduce, "gpu_hours_bound", lambda *a, **k: 0.0)
    monkeypatch.setattr(reproduce.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    # no budget given: the paper's, in every run directory's name and in the manifest
    assert reproduce.main(["--root", str(tmp_path), "--backbones", "qwen2.5-3b", "--seeds", "0,1",
                           "--ablation-backbone", "", "--launcher", "basic", "--submit"]) == 0
    # 1 backbone x {vanilla_rl, seal} x seeds {0, 1}, each named as Hydra names its folder
    assert seen["manifest"]["overrides"] == ["budget=paper", "launch=paper"]
    assert seen["manifest"]["runs"] == [
        {"dir": f"backbone=qwen2.5-3b,budget=paper,experiment={arm},launch=paper,seed={seed}", "backbone": "qwen2.5-3b",
         "experiment": arm, "seed": seed} for arm in ("vanilla_rl", "seal") for seed in (0, 1)]


# -- nothing submitted by surprise ----------------------------------------------------------------------------

SMALL = ["--backbones", "qwen2.5-3b", "--seeds", "0", "--ablation-backbone", ""]


def test_without_submit_and_without_a_terminal_nothing_is_submitted(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--root", str(tmp_path), "--launcher",
                           "basic", *SMALL], cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stdout.startswith("2 jobs, 0 finished, 2 to run")  # the plan is shown
    assert proc.stderr == "error: nothing submitted: add --submit to submit these 2 jobs (or run it at a terminal, which asks)\n"
    assert list(tmp_path.iterdir()) == []  # no manifest, no job


@pytest.mark.parametrize("at_terminal", [False, True])
def test_a_root_that_cannot_be_written_is_one_sentence_and_nothing_submitted(tmp_path, monkeypatch, capsys,
                                                                             at_terminal):
    import experiments.reproduce as reproduce

    calls, prompts = [], []
    monkeypatch.setattr(reproduce, "submit", lambda jobs, *a, **k: calls.append(jobs) or [(j, 0) for j in jobs])
    monkeypatch.setattr(sys.stdin, "isatty", lambda: at_terminal)
    monkeypatch.setattr("builtins.input", lambda prompt: prompts.append(prompt) or "submit")
    (tmp_path / "a_file").write_text("")
    root = tmp_path / "a_file" / "runs"  # a part of the path is a file (a read-only mount is refused alike)
    submit = [] if at_terminal else ["--submit"]
    assert reproduce.main(["--root", str(root), "--launcher", "basic", *submit, *SMALL]) == 2
    assert capsys.readouterr().err == (f"error: cannot write {root}: a part of the path is a file, not a folder; give "
                                       "--root a folder you can write; nothing was submitted\n")
    # at a terminal the refusal comes before the question: nobody types "submit" for nothing
    assert calls == [] and prompts == []


def test_a_dry_run_plans_whatever_the_root(tmp_path, capsys):
    import experiments.reproduce as reproduce

    (tmp_path / "a_file").write_text("")
    assert reproduce.main(["--root", str(tmp_path / "a_file" / "runs"), "--launcher", "basic", "--dry-run", *SMALL]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("2 jobs, 0 finished, 2 to run") and out.err == ""
    # a name no file system takes: no run folder under it can even be looked for
    root = tmp_path / ("x" * 300)
    assert reproduce.main(["--root", str(root), "--launcher", "basic", "--dry-run", *SMALL]) == 2
    assert capsys.readouterr().err == (f"error: cannot write {root}: the name is too long; give --root a folder you "
                                       "can write; nothing was submitted\n")


def test_check_writable_raises_what_making_the_folder_would(tmp_path, monkeypatch):
    import errno

    from seal.errors import check_writable

    (tmp_path / "a_file").write_text("")
    for folder, code in ((tmp_path / "a_file", errno.EEXIST), (tmp_path / "a_file" / "x" / "y", errno.ENOTDIR)):
        with pytest.raises(OSError) as caught:
            check_writable(folder)
        # the same errno as the mkdir it stands for
        with pytest.raises(OSError) as made:
            folder.mkdir(parents=True, exist_ok=True)
        assert caught.value.errno == made.value.errno == code and caught.value.filename == str(folder)
    # a link to nothing in the path: mkdir finds the link's name taken; a name longer than the file system takes
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    too_long = tmp_path / ("x" * 300) / "runs"
    for folder, code, named in ((tmp_path / "link" / "runs", errno.EEXIST, tmp_path / "link"),
                                (too_long, errno.ENAMETOOLONG, too_long)):
        with pytest.raises(OSError) as caught:
            check_writable(folder)
        with pytest.raises(OSError) as made:
            folder.mkdir(parents=True, exist_ok=True)
        assert caught.value.errno == made.value.errno == code and caught.value.filename == str(named)
    (tmp_path / "link").unlink()
    check_writable(tmp_path / "new" / "deeper")  # a folder that can be made: nothing raised, nothing made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]
    # a folder this user may not write: permission denied, or read-only where the file system is
    monkeypatch.setattr(os, "access", lambda path, mode: not str(path).startswith(str(tmp_path)))
    with pytest.raises(OSError) as caught:
        check_writable(tmp_path / "new")
    assert caught.value.errno == errno.EACCES
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(OSError) as caught:
        check_writable(tmp_path / "new")
    assert caught.value.errno == errno.EROFS


def test_a_run_whose_metrics_json_is_damaged_is_not_finished_and_is_named(tmp_path):
    from experiments.cluster.jobs import finished

    done = run_dir(tmp_path, Job("qwen2.5-3b", "seal", 0), with_budget(()))
    done.mkdir(parents=True)
    (done / "metrics.json").write_text('{"eval_after": {"eval/bfcl_v3/avg": 0.1')  # cut short: 39 bytes
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path),
                           "--launcher", "basic", *SMALL], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 jobs, 0 finished, 2 to run")
    assert (f"to run again: {done}/metrics.json is damaged: it ends in the middle of a value after 39 bytes (cut short "
            "while it was written?); its job resumes the run to write it again\n") in proc.stdout
    (done / "metrics.json").write_text("null")
    assert not finished(done)
    (done / "metrics.json").write_text("{}")
    assert finished(done)


@pytest.mark.parametrize("typed, submitted", [("submit", True), ("yes", False), ("", False), (KeyboardInterrupt, False),
                                              (EOFError, False)])
def test_at_a_terminal_only_the_typed_word_submits(tmp_path, monkeypatch, capsys, typed, submitted):
    """Ctrl-C (KeyboardInterrupt) and Ctrl-D (EOFError) at the question are a no: the same sentence and exit 1, no
    traceback, the prompt's line ended."""
    import experiments.reproduce as reproduce

    calls = []
    monkeypatch.setattr(reproduce, "submit", lambda jobs, *a, **k: calls.append(jobs) or [(j, 0) for j in jobs])
    monkeypatch.setattr(reproduce.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    prompts = []
    def answer(prompt):
        prompts.append(prompt)
        if isinstance(typed, type):
            raise typed
        return typed

    monkeypatch.setattr("builtins.input", answer)
    code = reproduce.main(["--root", str(tmp_path), "--launcher", "basic", *SMALL])
    # the prompt names the jobs and their GPU-hour bound: 2 x 27.7
    assert prompts == ["submit 2 jobs, at most 55.4 GPU-hours of training? type submit to go on: "]
    assert (code, bool(calls)) == ((0, True) if submitted else (1, False))
    if not submitted:
        out = capsys.readouterr().out
        # the user's Enter ends the prompt's line; after Ctrl-C or Ctrl-D the command ends it (an empty line here)
        assert out.endswith("\n\nnothing submitted\n") == isinstance(typed, type) and out.endswith("nothing submitted\n")
        assert "Traceback" not in out and not (tmp_path / "manifest.json").exists()


# -- what the jobs ask SLURM for, and what a partition has ----------------------------------------------------

def test_the_printed_id_is_this_submissions_not_an_earlier_ones(tmp_path):
    """A second --submit of the same runs (how unfinished runs are resumed) finds the earlier submission's folders
    under .submitit/<job>/: the id printed (and put in the squeue and scancel lines) is the folder that appears
    after this submission started, compared as numbers (100 after 99)."""
    from experiments.cluster.slurm import label, slurm_ids, submitit_folders

    job, other = Job("qwen2.5-3b", "seal", 0), Job("qwen2.5-3b", "seal", 1)
    folder = tmp_path / ".submitit" / label(job)
    for old in ("98", "99"):
        (folder / old).mkdir(parents=True)
    before = {job: submitit_folders(tmp_path, job), other: submitit_folders(tmp_path, other)}
    assert before == {job: {"98", "99"}, other: set()}
    # the job's process makes its folder as submitit does once sbatch returns, a moment later; the other one's
    # process ends without submitting
    make = f"import time, pathlib; time.sleep(1); pathlib.Path({str(folder / '100')!r}).mkdir()"
    procs = [(job, subprocess.Popen([sys.executable, "-c", make])), (other, subprocess.Popen([sys.executable, "-c", ""]))]
    ids = slurm_ids(procs, tmp_path, before, timeout=30)
    assert ids == {job: "100", other: None}
    # an array job's folders are <id>_<index>: the highest of the new ones
    (folder / "101_2").mkdir()
    (folder / "101_10").mkdir()
    done = subprocess.Popen([sys.executable, "-c", ""])
    assert slurm_ids([(job, done)], tmp_path, {job: {"98", "99", "100"}}, timeout=30) == {job: "101_10"}


def test_gres_as_sinfo_prints_it():
    from experiments.cluster.slurm import parse_gres

    assert parse_gres("(null)") == {}
    assert parse_gres("gpu:a100:4(S:0-1)") == {"a100": 4}
    assert parse_gres("gpu:2") == {None: 2}
    assert parse_gres("gpu:a100:4(S:0,2),gpu:v100:2,tmpdisk:100") == {"a100": 4, "v100": 2}
    assert parse_gres("gpu") == {None: 1}


@pytest.mark.parametrize("override", ["hydra.launcher.gres=gpu:a100:4",
                                      "+hydra.launcher.additional_parameters.gpus_per_node=a100:4"])
def test_the_documented_ways_to_ask_for_a_gpu_type_compose_with_the_launcher(override):
    # docs/gpus-and-slurm.md's two forms, composed as a job's config is, ask for four A100s
    from experiments.cluster.jobs import job_config
    from experiments.cluster.slurm import GpuAsk, gpus_asked

    cfg = job_config(Job("qwen2.5-7b", "seal", 0), ("budget=paper", override), launcher="submitit_slurm")
    assert gpus_asked(cfg.hydra.launcher) == GpuAsk(4, "a100")


def test_what_the_launcher_settings_ask_slurm_for():
    from experiments.cluster.slurm import GpuAsk, gpus_asked

    assert gpus_asked({"gpus_per_node": 4}) == GpuAsk(4)
    assert gpus_asked({"gpus_per_node": "a100:4"}) == GpuAsk(4, "a100")
    assert gpus_asked({"gres": "gpu:h100:8"}) == GpuAsk(8, "h100")
    assert gpus_asked({"gpus_per_task": 1, "tasks_per_node": 4}) == GpuAsk(4)
    assert gpus_asked({"gpus_per_node": 4, "additional_parameters": {"constraint": "a100"}}) == GpuAsk(4, None, "a100")
    # an expression is left to SLURM
    assert gpus_asked({"gpus_per_node": 4, "constraint": "a100|h100"}) == GpuAsk(4)
    assert gpus_asked({}) == GpuAsk(0)


@pytest.fixture
def fake_sinfo(tmp_path, monkeypatch):
    """A `sinfo` on PATH answering as a cluster with a CPU partition `local` (default) and `gpu` (2 nodes of 4 A100s)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sinfo"
    script.write_text('#!/bin/sh\ncase "$*" in\n'
                      '  *"-o %P"*) printf "local*\\ngpu\\n" ;;\n'
                      '  *"-p local"*) printf "(null)|(null)\\n" ;;\n'
                      '  *"-p gpu"*) printf "gpu:a100:4(S:0-1)|a100,ib\\n" ;;\n'
                      'esac\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_a_partition_without_the_gpus_asked_for_is_refused_in_one_sentence(fake_sinfo):
    from experiments.cluster.slurm import GpuAsk, check_partition

    with pytest.raises(UserError) as refused:
        check_partition(None, GpuAsk(4), needed=4, processes=4)  # the default partition: local
    assert str(refused.value) == ("partition local has no GPUs (sinfo's GRES: (null)) but each job asks for 4 GPU(s): "
                                  "choose a partition that has them with hydra.launcher.partition=<name> "
                                  "(`sinfo -o \"%P %G %f\"` lists each partition's GPUs and features)")
    assert check_partition("gpu", GpuAsk(4, "a100", "a100"), needed=4, processes=4) == "gpu"
    with pytest.raises(UserError, match=r"^partition gpu has no node with them \(sinfo's GRES: gpu:a100:4\(S:0-1\)\) but "
                                        r"each job asks for 8 GPU\(s\):"):
        check_partition("gpu", GpuAsk(8), needed=8, processes=8)
    with pytest.raises(UserError, match="each job asks for 4 h100 GPU"):
        check_partition("gpu", GpuAsk(4, "h100"), needed=4, processes=4)
    # a node feature no node has (the nodes of gpu have a100 and ib), and one GPU fewer asked than the launch uses
    with pytest.raises(UserError, match=r"^partition gpu has no node with them .* each job asks for 4 GPU\(s\) on nodes "
                                        r"with feature h100:"):
        check_partition("gpu", GpuAsk(4, None, "h100"), needed=4, processes=4)
    assert check_partition("gpu", GpuAsk(4, None, "ib"), needed=4, processes=4) == "gpu"
    with pytest.raises(UserError, match=r"^each job runs 4 process\(es\), one per GPU, but asks SLURM for 3 GPU\(s\)"):
        check_partition("gpu", GpuAsk(3), needed=4, processes=4)
    with pytest.raises(UserError, match=r"^partition big is not one of this cluster's \(gpu, local\)"):
        check_partition("big", GpuAsk(4), needed=4, processes=4)
    # a job that runs 4 processes, one per GPU, but asks SLURM for none
    with pytest.raises(UserError, match=r"^each job runs 4 process\(es\), one per GPU, but asks SLURM for 0 GPU\(s\): set "
                                        r"hydra.launcher.gpus_per_node=4"):
        check_partition("gpu", GpuAsk(0), needed=4, processes=4)
    # CPU-sized jobs (budget=smoke) go to a partition without GPUs
    assert check_partition("local", GpuAsk(0), needed=0, processes=1) == "local"


def test_submitting_the_papers_jobs_to_a_partition_without_gpus_submits_nothing(tmp_path, fake_sinfo):
    root = tmp_path / "reproduce"
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--root", str(root), "--submit", *SMALL,
                           "--", "hydra.launcher.partition=local", "hydra.launcher.gpus_per_node=4"],
                          cwd=REPO, capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: partition local has no GPUs (sinfo's GRES: (null)) but each job asks for 4 GPU(s)")
    assert not root.exists()


# -- what each job needs of the cluster ---------------------------------------------------------------------

def test_host_memory_is_the_docs_table():
    from experiments.cluster.jobs import job_config
    from experiments.cluster.needs import host_memory_gib, needs_of

    # docs/gpus-and-slurm.md, Host memory: R ranks x 4 bytes x P, under fsdp2 with the whole bf16 reference
    # beside it (2 bytes x P more), plus 8 GiB a rank
    assert round(host_memory_gib(7.62e9, 4, lora=False, reference_beside=2), 1) == \
        round(4 * 6 * 7.62e9 / 2**30 + 32, 1) == 202.3
    assert round(host_memory_gib(8.03e9, 4, lora=False, reference_beside=2), 1) == 211.5
    assert round(host_memory_gib(3.09e9, 4, lora=False), 1) == 78.0
    assert round(host_memory_gib(3.09e9, 1, lora=False), 1) == 19.5
    # paper jobs on their fsdp2 node (beta 0.001: a reference), and the 3B's under ddp (the policy moves to the
    # GPU before the reference loads), and without a KL term (no reference)
    assert round(needs_of(job_config(Job("qwen2.5-7b", "seal", 0), with_budget(())), 68.3).host_gib, 1) == 202.3
    three_b = Job("qwen2.5-3b", "seal", 0)
    assert round(needs_of(job_config(three_b, with_budget(())), 1.0).host_gib, 1) == 101.1
    assert round(needs_of(job_config(three_b, (*with_budget(()), "launch.sharding=ddp")), 1.0).host_gib, 1) == 78.0
    assert round(needs_of(job_config(three_b, (*with_budget(()), "trainer.beta=0")), 1.0).host_gib, 1) == 78.0
    assert round(host_memory_gib(3.09e9, 1, lora=True), 1) == round(2 * 3.09e9 / 2**30 + 8, 1)


def test_a_cpu_jobs_host_memory_is_its_training_state_not_a_gpu_processs_allowance():
    from experiments.cluster.jobs import job_config
    from experiments.cluster.needs import Needs, cpu_host_memory_gib, memory_lines, needs_of

    # the main job (SmolLM2-135M, float32, a KL term): 135M x (16 + 4) bytes = 2.51 GiB, 1 GiB of KV cache and 1 GiB
    # for the process: 4.51 GiB, above the 4.17 GiB it peaked at (docs/results.md), far under the 8 GiB a GPU
    # process is allowed
    smol = cpu_host_memory_gib(0.135e9, 1, lora=False, dtype_bytes=4, reference=True, kv_gib=1.0)
    assert round(smol, 2) == round(0.135e9 * 20 / 2**30 + 2, 2) == 4.51
    assert cpu_host_memory_gib(0.135e9, 2, lora=False, dtype_bytes=4, reference=False, kv_gib=0.5) == \
        2 * (0.135e9 * 16 / 2**30 + 1.5)
    assert cpu_host_memory_gib(0.135e9, 1, lora=True, dtype_bytes=2, reference=True, kv_gib=1.0) == \
        0.135e9 * 2 / 2**30 + 2
    # the docs' CPU-sized sweep (tiny-random, budget=tiny: 4M parameters, float32): 2.07 GiB a job, which the
    # documented hydra.launcher.mem_gb=4 holds; SmolLM2's main job at 4 would not (submitit asks for --mem=4GB, which
    # SLURM reads as 4 GiB), 4.6 GiB would
    tiny = needs_of(job_config(Job("tiny-random", "seal", 0), ("budget=tiny",)), 0.0)
    assert (tiny.gpus, round(tiny.host_gib, 2)) == (0, round(0.004e9 * 20 / 2**30 + 2, 2)) == (0, 2.07)
    assert memory_lines([tiny], {"mem_gb": 4}) == []
    main = needs_of(job_config(Job("smollm2-135m", "seal", 0), ("budget=smoke",)), 0.0)
    assert round(main.host_gib, 2) == 4.51
    assert memory_lines([main], {"mem_gb": 4}) == [
        "warning: hydra.launcher.mem_gb=4 is below the 4.5 GiB a job peaks at while it trains on the CPU: raise it "
        "(docs/gpus-and-slurm.md, Host memory)"]
    assert memory_lines([main], {"mem_gb": 4.6}) == memory_lines([main], {"mem_gb": 5}) == []
    # the sentence names the phase of the job that peaks highest: a GPU job's load beside a CPU job's 4.5 GiB
    gpu = needs_of(job_config(Job("qwen2.5-3b", "seal", 0), with_budget(("launch.processes=1",))), 1.0)
    assert memory_lines([main, gpu], {"mem_gb": 10}) == [
        f"warning: hydra.launcher.mem_gb=10 is below the {gpu.host_gib:.1f} GiB a job peaks at while its ranks load the "
        "model: raise it (docs/gpus-and-slurm.md, Host memory)"]
    low_gpu = Needs(gpus=1, ranks=1, host_gib=1.0, disk_gib=0, gpu_hours=0, rounds=1, save_every=None, reload_gib=0)
    assert memory_lines([low_gpu, main], {"mem_gb": 4})[0].endswith("4.5 GiB a job peaks at while it trains on the "
                                                                     "CPU: raise it (docs/gpus-and-slurm.md, Host memory)")


def test_a_paper_jobs_disk_is_the_runs_own_preflight_figure():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from experiments.cluster.jobs import job_config
    from experiments.cluster.needs import needs_of
    from seal.budget import Budget
    from seal.rl.checkpoint import run_disk_need

    cfg = job_config(Job("qwen2.5-7b", "seal", 0), with_budget(()))
    need = needs_of(cfg, gpu_hours=68.3)
    preflight = run_disk_need(OmegaConf.to_container(cfg.backbone.arch), cfg, Budget.from_config(cfg.budget),
                              len(instantiate(cfg.split).train), dtype=cfg.backbone.dtype)
    assert need.disk_gib == pytest.approx(preflight.total / 2**30, rel=1e-9)
    # by hand: 352 train entries (400 less the 48 of the validation part) -> 66 rounds, a checkpoint every 6
    # and 1 kept: 2 on disk at once of 12 bytes a parameter, and 2 bf16 models (final, best on validation)
    params = preflight.model / 2
    assert need.disk_gib == pytest.approx((2 * 12 * params + 2 * 2 * params) / 2**30)
    assert (need.gpus, need.rounds, need.save_every) == (4, 66, 6)
    # a requeued job reads its bf16 weights and its last checkpoint back: 14 bytes a parameter
    assert need.reload_gib == pytest.approx(14 * params / 2**30)


def test_the_requeues_a_job_takes_under_the_time_limit():
    from experiments.cluster.needs import Needs

    # 68 GPU-hours on 4 GPUs: 17 h; 720-minute allocations. The first works 720 minutes; each later one loses
    # 30 minutes to the reload (360 GiB at 0.2 GiB/s) and replays 6 of 68 rounds (17 h / 68 = 15 min each: 90 min),
    # so works 600: (1020 - 720) / 600 -> 1 requeue
    need = Needs(gpus=4, ranks=4, host_gib=0, disk_gib=0, gpu_hours=68.0, rounds=68, save_every=6, reload_gib=360.0)
    assert (need.hours, need.reload_minutes, need.replay_minutes) == (17.0, 30.0, 90.0)
    assert need.requeues(720) == 1
    assert need.requeues(1020) == 0
    assert need.requeues(420) == 2  # 600 left, 300 a requeue
    assert need.requeues(120) == float("inf")  # a requeue gets no further than its reload and replay


def test_the_example_launcher_settings_are_the_examples_own():
    from experiments.cluster.needs import EXAMPLE_LAUNCHER

    example = (REPO / "conf" / "local" / "example.yaml").read_text()
    for setting in EXAMPLE_LAUNCHER:
        key, value = setting.removeprefix("hydra.launcher.").split("=")
        assert f"#     {key}: {value} " in example or f"#     {key}: {value}\n" in example, setting


def test_the_examples_host_memory_is_the_planners_and_its_mem_gb_holds_it():
    from experiments.cluster.jobs import job_config
    from experiments.cluster.needs import EXAMPLE_LAUNCHER, needs_of

    example = (REPO / "conf" / "local" / "example.yaml").read_text()
    stated = re.search(r"mem_gb: (\d+) .*a 7B / 8B job on 4 ranks peaks at ([\d.]+) / ([\d.]+) GiB", example)
    planned = [needs_of(job_config(Job(b, "seal", 0), with_budget(EXAMPLE_LAUNCHER)), 0.0).host_gib
               for b in ("qwen2.5-7b", "toolace-2-8b")]
    assert [float(stated[2]), float(stated[3])] == [round(g, 1) for g in planned]
    # submitit asks for --mem=256GB, which SLURM reads as 256 GiB: over the 8B job's peak
    assert int(stated[1]) > max(planned)


def test_the_dry_run_prints_what_every_job_needs(tmp_path):
    from experiments.cluster.needs import EXAMPLE_LAUNCHER

    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path),
                           "--backbones", "qwen2.5-7b", "--seeds", "0", "--ablation-backbone", "", "--",
                           *EXAMPLE_LAUNCHER], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "experiment=seal" in x)
    # 68.3 GPU-h on 4 GPUs: 17.1 h, one requeue at 720 minutes; 202.3 GiB of host memory (docs' table); the disk
    # as test_a_paper_jobs_disk_is_the_runs_own_preflight_figure counts it
    assert line.endswith("<= 68.3 GPU-h | 4 GPU(s), <= 17.1 h, 1 requeue | 202.3 GiB RAM, 198.6 GiB disk"), line
    assert "requeues: the longest job (17.1 h at most) takes 1 at hydra.launcher.timeout_min=720" in proc.stdout
    assert "warning" not in proc.stdout
    # with Hydra's own default time limit (60 minutes) and no requeue allowed, the plan says it cannot finish
    short = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--dry-run", "--root", str(tmp_path),
                            "--backbones", "qwen2.5-3b", "--seeds", "0", "--ablation-backbone", "", "--",
                            "hydra.launcher.timeout_min=60"], cwd=REPO, capture_output=True, text=True)
    assert "warning: hydra.launcher.max_num_timeout=0 allows 0 requeue(s) of the 19 it takes" in short.stdout
    # and that the jobs, which run 4 processes each, ask SLURM for no GPU (Hydra's default): --submit would refuse
    assert ("warning: each job runs 4 process(es), one per GPU, but asks SLURM for 0 GPU(s), which --submit refuses: "
            "set hydra.launcher.gpus_per_node=4 (in conf/local/default.yaml, as conf/local/example.yaml shows, or "
            "after --)") in short.stdout


def test_after_submitting_the_ids_logs_and_how_to_watch_and_cancel_are_printed(tmp_path, capsys):
    """What a user needs to follow the jobs (the SLURM test submits for real: tests/experiments/test_slurm.py): every
    job's id or its launcher log, where SLURM's logs and the runs' go, and the squeue and scancel lines for the
    submitted ones alone."""
    from experiments.cluster.slurm import announce

    first, second = Job("qwen2.5-3b", "seal", 0), Job("qwen2.5-3b", "vanilla_rl", 1)
    announce({first: "101", second: None}, tmp_path, (), "gpu")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "submitted 1 of 2 jobs to partition gpu:"
    assert lines[1].split() == ["101", "backbone=qwen2.5-3b", "experiment=seal", "seed=0"]
    assert lines[2].split()[:5] == ["not", "submitted", "backbone=qwen2.5-3b", "experiment=vanilla_rl", "seed=1"]
    assert lines[2].endswith(f"(see {tmp_path}/.reproduce/qwen2.5-3b-vanilla_rl-seed1.log)")
    assert lines[3] == f"logs: SLURM's in {tmp_path}/.submitit/<job>/<id>/, each run's run.log in its directory under {tmp_path}"
    assert lines[4:6] == ["watch: squeue -j 101", "cancel: scancel 101"]
    announce({first: "101", second: "102"}, tmp_path, (), "gpu")
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith(("watch", "cancel"))] == [
        "watch: squeue -j 101,102", "cancel: scancel 101 102"]
    # nothing submitted: nothing to watch or cancel
    announce({first: None}, tmp_path, (), "gpu")
    assert not [line for line in capsys.readouterr().out.splitlines() if line.startswith(("watch", "cancel", "logs"))]
