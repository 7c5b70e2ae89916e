"""Ctrl-C on a training run: one sentence of what was kept, exit code 130, no traceback; the same command
resumes, and its resume line numbers rounds as the per-round lines do."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUND_LINE = re.compile(r"^\[\d+/\d+\] round \d+")
# one evaluation protocol (the second one doubles the before- and after-training evaluations; protocols: tests/evaluation)
ARGS = ["backbone=tiny-random", "budget=tiny", "budget.rounds=2", "budget.heldout_entries_per_category=0",
        "logger.mode=disabled", "eval.protocols=[bfcl]"]


def test_ctrl_c_says_what_was_kept_and_the_same_command_resumes(tmp_path):
    command = [sys.executable, str(ROOT / "run.py"), *ARGS]
    # a terminal's Ctrl-C reaches the whole foreground process group
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 900
        while time.time() < deadline and not list(tmp_path.glob("outputs/train/*/checkpoints/checkpoint-*/seal_state.json")):
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "train").iterdir()
    # what was kept, read from the disk: the newest complete checkpoint and the rounds its state holds
    checkpoint = max((p.parent for p in run_dir.glob("checkpoints/checkpoint-*/seal_state.json")),
                     key=lambda p: int(p.name.split("-")[1]))
    done = len(json.loads((checkpoint / "seal_state.json").read_text())["history"])
    rounds = "round 0" if done == 1 else f"rounds 0-{done - 1}"
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (f"interrupted: {run_dir} keeps {rounds} ({done} of 2) in checkpoints/"
                                           f"{checkpoint.name}; the same command resumes after round {done - 1}")
    # the round lines before it numbered the kept rounds [1/2] round 0, ...
    assert [line.split(" | ")[0] for line in out.splitlines() if ROUND_LINE.match(line)][:done] == [
        f"[{i + 1}/2] round {i}" for i in range(done)]

    # run.log has what the console had: the round lines and the sentence
    log = (run_dir / "run.log").read_text()
    first = next(line for line in out.splitlines() if ROUND_LINE.match(line))
    assert first in log and err.strip().splitlines()[-1] in log

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming from {checkpoint}: {rounds} done ([{done}/2]); next: round {done}" in again.stdout
    # and says up front what is left, and how long it should take at the rates the first attempt measured
    plan = next(line for line in again.stdout.splitlines() if "plan: " in line)
    assert plan.split("plan: ")[1].startswith(f"train round {done} ({2 - done} of 2)"), plan
    assert "; the time it takes: about " in plan and plan.endswith(" at the earlier attempt's rates, then on every round line")
    assert [line.split(" | ")[0] for line in again.stdout.splitlines() if ROUND_LINE.match(line)] == [
        f"[{i + 1}/2] round {i}" for i in range(done, 2)]

    # the same command once the run has finished: nothing is loaded, evaluated or written again
    metrics = run_dir / "metrics.json"
    # (Hydra rewrites its record of the command, .hydra/, and run.log gets the sentence)
    stamps = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")
              if p.is_file() and p.name != "run.log" and ".hydra" not in p.parts}
    third = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"{run_dir} holds this run, finished (metrics.json, report.md): nothing to do" in third.stdout
    assert "plan: " not in third.stdout and "eval " not in third.stdout
    assert metrics in stamps and {p: p.stat().st_mtime_ns for p in stamps} == stamps

    # a metrics.json cut short does not finish the run: it is kept aside, named, and the run resumes to write it again
    whole = json.loads(metrics.read_text())
    cut = metrics.read_bytes()[: metrics.stat().st_size // 2]
    metrics.write_bytes(cut)
    fourth = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert fourth.returncode == 0, fourth.stderr[-3000:]
    assert (f"{metrics} is damaged: it ends in the middle of a value after {len(cut)} bytes (cut short while it was "
            "written?); kept as metrics.json.damaged, and the run resumes from checkpoints/checkpoint-2 (2 rounds "
            "done) to write it again") in fourth.stdout + fourth.stderr
    assert (run_dir / "metrics.json.damaged").read_bytes() == cut
    assert (f"resuming from {checkpoint.parent}/checkpoint-2: rounds 0-1 done ([2/2]); next: no round left to train: "
            "the evaluations after training") in fourth.stdout
    # its plan says so, with no round line to come, and its last line that this attempt trained none
    plan = next(line for line in fourth.stdout.splitlines() if "plan: " in line)
    assert "plan: no round left to train (2 of 2 done); " in plan and "round line" not in plan, plan
    assert re.search(r"done: 2 rounds, none of them in this attempt, which took \d+ s; report in ", fourth.stdout)
    again_whole = json.loads(metrics.read_text())
    assert {k: v for k, v in again_whole.items() if k != "wall_seconds"} == {
        k: v for k, v in whole.items() if k != "wall_seconds"}


def test_a_finished_run_is_one_of_this_configuration_with_its_metrics(tmp_path, caplog):
    from seal.io import claim_run_dir, config_fingerprint
    from seal.tasks.run_folder import finished_already
    from tests.tasks.test_run_folder import checkpoint
    from tests.test_configs import compose_with

    cfg = compose_with(*ARGS)
    claim_run_dir(tmp_path, config_fingerprint(cfg))
    assert finished_already(cfg, tmp_path) is None  # claimed, not finished: resumed
    (tmp_path / "metrics.json").write_text("{}")
    assert finished_already(cfg, tmp_path) == (
        f"{tmp_path} holds this run, finished (metrics.json, report.md): nothing to do; to train it again, remove that "
        "folder or choose another with hydra.run.dir=<directory> (a sweep: hydra.sweep.dir=<directory>)")
    # a metrics.json that is not an object (a list) is damaged: moved aside, the run resumed
    (tmp_path / "metrics.json").write_text("[1, 2]")
    assert finished_already(cfg, tmp_path) is None
    assert not (tmp_path / "metrics.json").exists() and (tmp_path / "metrics.json.damaged").read_text() == "[1, 2]"
    assert caplog.messages[-1] == (f"{tmp_path / 'metrics.json'} is damaged: it holds a list where a run writes an "
                                   "object; kept as metrics.json.damaged, and no checkpoint is left, so the run trains "
                                   "again from round 0")
    # a second damaged one keeps the first beside it
    (tmp_path / "metrics.json").write_text("")
    assert finished_already(cfg, tmp_path) is None
    assert (tmp_path / "metrics.json.damaged").read_text() == "[1, 2]"
    assert (tmp_path / "metrics.json.damaged-2").read_text() == ""
    assert "it is empty; kept as metrics.json.damaged-2" in caplog.messages[-1]
    # with a complete checkpoint of one round (its state file written last), the resume is named
    checkpoint(tmp_path, 4, rounds=1)
    (tmp_path / "metrics.json").write_text("[]")
    assert finished_already(cfg, tmp_path) is None
    assert caplog.messages[-1].endswith("kept as metrics.json.damaged-3, and the run resumes from "
                                        "checkpoints/checkpoint-4 (1 round done) to write it again")
    (tmp_path / "metrics.json").write_text("{}")
    # another configuration in the folder: not this run (train refuses it in its own sentence)
    assert finished_already(compose_with(*ARGS, "seed=1"), tmp_path) is None
