"""What one small training run leaves behind, as a newcomer meets it: the arm it is filed under (run_config.json,
metrics.json, W&B), what the job will do said up front, labelled progress bars (turns, episodes, tokens) and a
clock on every round line, the report's title, the checkpoint folder's model card, and the notebook's plot
from the command line and under `jupyter execute` (budget=tiny, backbone=tiny-random, an ablation of the
default arm)."""

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from seal.policy.progress import duration
from seal.report import wandb_run
from seal.tasks import run
from tests.config_values import backbone_cfg
from tests.test_configs import compose_with

ARM = "seal_evolving+reweighting=off"


def shown_seconds(shown: str) -> float:
    """A duration as seal.policy.progress.duration shows it ("45 s", "3 min 20 s", "2 h 05 min"), in seconds."""
    words = shown.split()
    return sum(float(n) * {"s": 1, "min": 60, "h": 3600}[unit] for n, unit in zip(words[::2], words[1::2]))
ROOT = Path(__file__).resolve().parents[2]


def test_an_ablation_run_is_filed_under_its_arm_and_leaves_readable_outputs(tmp_path, monkeypatch, capsys, caplog):
    seen = {}

    class Recording(wandb_run.WandbRun):
        def __init__(self, **kwargs):
            seen.update(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(wandb_run, "WandbRun", Recording)
    overrides = ("backbone=tiny-random", "budget=tiny", "reweighting=off", "logger.mode=disabled",
                 "budget.ood_benchmarks=[bfcl_single_turn]", "benchmark=bfcl_single_turn",
                 "benchmark.categories=[simple_python]")
    cfg = compose_with(*overrides)
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the bars are drawn
    # the trainer's preparation (sharding, moving, resuming the model; minutes for a sharded 7B) made to take
    # 1000 s on the job's clock
    from seal.rl.trainer import SealGRPOTrainer
    from seal.tasks import train as train_task

    offset, prepare = [0.0], SealGRPOTrainer._prepare_for_training

    def slow_preparation(self, *args, **kwargs):
        offset[0] += 1000.0
        return prepare(self, *args, **kwargs)

    monkeypatch.setattr(train_task, "time", SimpleNamespace(perf_counter=lambda: time.perf_counter() + offset[0]))
    monkeypatch.setattr(SealGRPOTrainer, "_prepare_for_training", slow_preparation)
    run_dir = tmp_path / "run"  # beside no other run: a fresh run's plan has no rates to estimate from
    run_dir.mkdir()  # (Hydra makes it before the task runs)
    run(cfg, run_dir)
    choices = {"env_interface": "evolving", "diagnoser": "rules", "reweighting": "off", "rendering": "project",
               "protocol": "bfcl", "budget.step_limit": "turn", "budget.max_train_tokens": None}
    config = json.loads((run_dir / "run_config.json").read_text())
    assert (config["arm"], config["arm_choices"], config["experiment_name"]) == (ARM, choices, ARM)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["arm"], metrics["arm_choices"]) == (ARM, choices)
    # W&B: the arm is the job type, the name is short, the config is run_config.json's
    assert (seen["job_type"], seen["name"]) == (ARM, f"{ARM} | tiny-random | seed 0")
    assert seen["config"]["arm_choices"] == choices

    # what the job will do, said up front (conf/budget/tiny.yaml: one held-out entry per category, 2 rounds of
    # 1 prompt x 2 rollouts and 1 optimizer step; both evaluation protocols; out of domain smoke's one question of
    # the one category, before and after: 8 + 8 + 2 evaluation episodes)
    said = [r.getMessage() for r in caplog.records if r.name == "seal.tasks.train"]
    assert said[0] == ("plan: evaluate (test part) before training on 4 entries under 2 protocols (bfcl, release): 8 "
                       "episodes; train rounds 0-1 (2 of 2), each 2 episodes (1 prompt x 2 rollouts) and 1 optimizer "
                       "step; evaluate (test part) after training on 4 entries under 2 protocols (bfcl, release): 8 "
                       "episodes; out of domain before and after training: bfcl_single_turn (1 episode); 18 evaluation "
                       "and 4 training episodes in all; the time it takes: estimated once the first evaluation or round "
                       "is timed, then on every round line")
    out = capsys.readouterr()
    # every round line ends with the job's clock
    rounds = [line for line in out.out.splitlines() if line.startswith(("[1/2] round 0 |", "[2/2] round 1 |"))]
    assert len(rounds) == 2 and all(" so far" in line.rsplit(" | ", 1)[1] for line in rounds)
    # after the last round the writes still to come are counted: its checkpoint at the time round 0's took (a
    # checkpoint every round), the final model named (no model was kept on validation to time it)
    assert "not timed" not in rounds[0] and rounds[1].endswith(" left + the final model (not timed yet)")
    # the preparation is in the time so far, and in no round's rate: round 0's line does not expect another 1000 s
    so_far, left = rounds[0].rsplit(" | ", 1)[1].removesuffix(" left").split(" so far, about ")
    assert shown_seconds(so_far) >= 1000 > shown_seconds(left)
    # a bar per protocol for the held-out evaluations (turns, episodes, tokens), a bar per category of an
    # out-of-domain benchmark, and each round's rollouts and optimisation
    err = out.err.replace("\r", "\n")
    for label in ("eval before · bfcl", "eval before · release", "eval after · bfcl", "eval after · release"):
        assert f"{label}: 100%|" in err and "4/4 episodes" in err, label
    for when in ("before", "after"):
        assert f"ood {when} · bfcl_single_turn · simple_python: 100%|" in err
    for r in (0, 1):  # bars cleared when done (the console keeps one line a round)
        assert f"round {r} · rollouts:" in err and f"round {r} · optimisation:" in err
    # the same as lines for run.log (seal.progress)
    progress = [r.getMessage() for r in caplog.records if r.name == "seal.progress"]
    assert any(m.startswith("eval before · release: turn ") and "4 of 4 episodes done" in m for m in progress)

    report = (run_dir / "report.md").read_text()
    assert report.startswith(f"# SEAL training run: {ARM} | tiny-random | seed 0\n")
    # TRL's model card names the base model (a local weights folder would read "[None]")
    card = (run_dir / "checkpoints" / "README.md").read_text()
    assert "fine-tuned version of [tiny-random]" in card and "[None]" not in card

    # the notebook, run from the command line, saves its plot beside the run, and says only where
    cli = subprocess.run([sys.executable, "-m", "seal.report.inspect_run", str(run_dir)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert (cli.returncode, cli.stdout, cli.stderr) == (0, f"{run_dir / 'inspect_run.ipynb'}\n", "")
    notebook = json.loads((run_dir / "inspect_run.ipynb").read_text())
    outputs = [o for c in notebook["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert f"| {ARM} | tiny-random | 2 rounds" in "".join("".join(o.get("text", "")) for o in outputs)
    # under `jupyter execute`, which keeps no output, the terminal is told which run and where its figure went
    jupyter = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "execute", "notebooks/inspect_run.ipynb"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "SEAL_RUN_DIR": str(run_dir)})
    assert jupyter.returncode == 0, jupyter.stderr
    assert f"inspect_run: {run_dir} (named by SEAL_RUN_DIR)\n" in jupyter.stderr
    assert f"inspect_run: figure saved as {run_dir / 'inspect_run.png'}\n" in jupyter.stderr
    assert (run_dir / "inspect_run.png").read_bytes().startswith(b"\x89PNG")

    # a fresh run beside it with the same backbone, budget and launch on this machine takes its estimate up front
    # from this run's rates: its rounds' times (metrics.jsonl's time/ split) and its evaluation before training (4
    # entries under 2 protocols, the plan above)
    from seal.report.pace import similar_run

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    split = [{k: v for k, v in line.items() if k.startswith("time/")} for line in lines]
    assert len(split) == 2 and all({"time/generation", "time/optimisation"} <= set(s) for s in split)
    before = json.loads((run_dir / "eval_before.json").read_text())
    assert similar_run(tmp_path / "next", config) == (run_dir, {
        "round_seconds": [sum(s.values()) for s in split], "eval_episodes": 8,
        "eval_seconds": before["timing"]["seconds"] + before["timing_release"]["seconds"]})
    assert config["machine"].startswith("1 process on ") and similar_run(run_dir, config) is None  # not itself
    for other in ({"backbone": {**config["backbone"], "name": "smollm2-135m"}}, {"machine": "4 x NVIDIA H100"}):
        assert similar_run(tmp_path / "next", {**config, **other}) is None

    # and a fresh run of another seed (a sweep's next job) says so on its plan line (it is stopped once it has said
    # it): its 16 evaluation episodes at
    # this run's rate (8 in eval_seconds) and its 2 rounds at this run's mean round; the out-of-domain benchmark,
    # which this run's evaluation file does not time, is named
    from seal.tasks import train as train_task

    class Said(Exception):
        pass

    def stop(run):
        raise Said

    monkeypatch.setattr(train_task, "evaluate_before", stop)
    caplog.clear()
    (tmp_path / "next").mkdir()
    with pytest.raises(Said):
        run(compose_with(*overrides, "seed=1"), tmp_path / "next")
    seconds = 16 * (before["timing"]["seconds"] + before["timing_release"]["seconds"]) / 8 + sum(map(sum, [
        s.values() for s in split]))
    said = [r.getMessage() for r in caplog.records if r.name == "seal.tasks.train" and "plan: " in r.getMessage()]
    assert said[0].endswith(
        f"; the time it takes: about {duration(seconds)} at the rates of {run_dir} (the same backbone, budget, launch "
        "and evaluation on this kind of machine) + 2 out-of-domain evaluations (not timed yet), then on every round line")


def test_a_model_card_names_the_hub_checkpoint_behind_the_weights():
    from hydra.utils import instantiate

    # the embedded SmolLM2 is a GGUF copy of the hub's instruct model; a hub backbone is its hub id
    assert instantiate(backbone_cfg("smollm2-135m")).base_model_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert instantiate(backbone_cfg("qwen2.5-3b")).base_model_id == "Qwen/Qwen2.5-3B-Instruct"
