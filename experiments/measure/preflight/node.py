"""The preflight of one node: every step in order (build, sanity, train, checkpoint, throughput), each
timed, its peak against the memory plan, and the table."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from experiments.measure.preflight.disk import check_disk, disk_plan
from experiments.measure.preflight.model import (build_in_a_child, embedding_note, model_folder, published_backbone,
                                                throughput_step)
from experiments.measure.preflight.runs import (Launch, check_checkpoint, check_logprobs, check_sanity, check_train,
                                                logged_kl, run_step, size_gib, visible_gpus)
from experiments.measure.preflight.steps import (COMMON, MARKER, OWN_KEYS, SAVE_LOGPROBS, GiB, Step,
                                                 train_overrides)
from seal.errors import UserError
from seal.tasks.command_line import CONF, added_key_refusal
from seal.rl.distributed import cuda_devices

def prepare_out(out: Path) -> None:
    """Claim --out, and clear the step folders and the report a previous preflight left there (a train run would
    resume from its checkpoint instead of training); built models stay, to be reused."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise UserError(f"--out {out} holds files this preflight did not write; choose a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by python -m experiments.gpu_check, which clears its step folders here\n")
    for name in ("sanity", "train", "logs"):
        shutil.rmtree(out / name, ignore_errors=True)
    # an earlier preflight's report, which a preflight stopped before its own would leave to be read as this one's
    (out / "gpu_check.json").unlink(missing_ok=True)


def preflight(backbone: str, out: Path, *, tiny: bool | None = None, overrides: list[str] | None = None,
              keep: bool = False, step_timeout: float | None = None, launch: Launch = Launch()) -> dict[str, Any]:
    """Every step; returns the figures (also written to <out>/gpu_check.json). Raises Failure at the first
    failing step. step_timeout=None: DiskPlan.step_timeout, which grows with the model."""
    import torch

    started = time.perf_counter()
    overrides = list(overrides or [])
    gpus = cuda_devices()
    check_launch(launch, overrides, gpus)
    cuda = torch.cuda.is_available()
    tiny = (not cuda) if tiny is None else tiny
    bb = published_backbone(backbone, overrides)
    disk = disk_plan(backbone, bb, tiny, overrides, launch.processes, vllm=launch.engine == "vllm")
    out = out.resolve()
    prepare_out(out)
    # an earlier preflight's model of this shape is reused: its bytes are on the disk already
    built = model_folder(bb["arch"], int(bb["context_length"]), tiny, bb["dtype"], str(out / "models"))[0]
    disk = replace(disk, reused=built.is_dir())
    # what the runs will write, before anything is built
    disk_line = check_disk(disk, out)
    if step_timeout is None:
        step_timeout = disk.step_timeout(engine_starts=launch.engine == "vllm", cuda=cuda)
    visible = visible_gpus(gpus, launch.processes, dict(os.environ))
    print(f"gpu_check: {backbone} ({bb['arch']['model_type']}), {'a tiny shape' if tiny else 'its published shape'}, "
          f"randomly initialised, {bb['dtype']}, on {'CUDA' if cuda else 'no CUDA device: the CPU'}, "
          f"{launch.processes} process(es), {launch.sharding}, {launch.engine} rollouts; output in {out}", flush=True)
    print(f"gpu_check: disk: {disk_line}; each run may take {step_timeout / 60:.0f} min (--step-timeout)", flush=True)
    if visible is not None:
        print(f"gpu_check: this node has {gpus} GPUs and the runs take {launch.processes}: they see "
              f"CUDA_VISIBLE_DEVICES={visible}", flush=True)
    model, build = build_step(bb, tiny, out)
    model_args = [f"backbone={backbone}", f"backbone.local_path={model['path']}", f"backbone.name={backbone}-random",
                  f"backbone.params_b={model['parameters'] / 1e9:.6f}"]

    sanity_args = ["task=sanity", *model_args, *COMMON, *SAVE_LOGPROBS, *overrides]
    rc, sanity, log = run_step("sanity", sanity_args, out, step_timeout, launch, bb["dtype"])
    sanity.note = check_sanity(rc, out / "sanity", log, mechanics_only=tiny)
    logprobs = {"sanity": check_logprobs("sanity", out / "sanity", log, logged_kl("sanity", out / "sanity"))}
    sanity.note += f"; {logprobs_note(logprobs['sanity'])}"
    train_args = [*train_overrides(launch.processes, overrides), *model_args, *COMMON, *SAVE_LOGPROBS, *overrides]
    rc, train, log = run_step("train", train_args, out, step_timeout, launch, bb["dtype"])
    plan, train.note = check_train(rc, out / "train", log, launch.processes)
    train.plan_gib = plan["total"]
    logprobs["train"] = check_logprobs("train", out / "train", log, logged_kl("train", out / "train"))
    train.note += f"; {logprobs_note(logprobs['train'])}"
    checkpoint = check_checkpoint(out / "train", launch.sharding)
    size = size_gib(checkpoint)
    layout = "sharded model and optimizer" if launch.sharding == "fsdp2" else "weights"
    saved = Step("checkpoint", 0.0, note=f"{checkpoint.name} complete (seal_state.json, {layout}), {size:.2f} GiB")
    if not keep:
        saved.note += f"; removed with the final and kept models afterwards ({remove_weights(out / 'train'):.2f} " \
                      "GiB; --keep keeps them)"

    rate = throughput_step([*model_args, *overrides])
    steps = [build, sanity, train, saved, rate]
    summary = {
        "backbone": backbone, "tiny": tiny, "cuda": cuda, "dtype": bb["dtype"], "model": model,
        "vocab_size": model["vocab_size"], "published_vocab_size": bb["arch"]["vocab_size"], "plan_gib": plan,
        "logprobs": logprobs,
        "launch": vars(launch), "checkpoint": str(checkpoint), "checkpoint_gib": size, "kept": keep,
        "disk_plan_gib": disk.total / GiB, "step_timeout_s": step_timeout,
        "steps": [vars(s) for s in steps], "seconds": time.perf_counter() - started,
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    print_table(steps, cuda, plan)
    goal = " (the goal on one H100: under 8 min)" if cuda and not tiny and launch.processes == 1 else ""
    print(f"gpu_check: passed in {summary['seconds'] / 60:.1f} min{goal}; figures in {out / 'gpu_check.json'}",
          flush=True)
    return summary


def logprobs_note(found: dict[str, Any]) -> str:
    """check_logprobs's figures in a few words."""
    if found["train_kl"] is None:
        return f"log-probs reached the loss in float32 ({found['tokens']} tokens); no KL term (trainer.beta=0)"
    kl = ", ".join(f"{k:.3g}" for k in found["train_kl"])
    return (f"log-probs reached the loss in float32 ({found['tokens']} tokens, {found['tokens_with_zero_kl']} with a "
            f"KL of exactly 0); train/kl per round {kl} = its float64 recomputation")


def check_launch(launch: Launch, overrides: list[str], gpus: int) -> None:
    """One sentence for a launch the preflight cannot run (more processes than the node's `gpus`, when it has any:
    without, the processes are gloo ranks on the CPU), or an override it sets itself; before anything is built."""
    taken = [o for o in overrides if o.lstrip("+~").startswith(OWN_KEYS)]
    if taken:
        raise UserError(f"the preflight sets {' '.join(taken)} itself: name the backbone with --backbone, the folder "
                        "with --out, the launch with --processes, --sharding and --engine")
    refused = added_key_refusal(overrides, CONF)  # what every run.py step would refuse as it starts
    if refused:
        raise UserError(refused)
    if launch.processes < 1:
        raise UserError(f"--processes {launch.processes}: give a number of processes (one per GPU), at least 1")
    if gpus and launch.processes > gpus:
        raise UserError(f"--processes {launch.processes} but this node shows {gpus} GPU(s) (CUDA_VISIBLE_DEVICES "
                        f"included): give --processes {gpus} or less, or run on a node with {launch.processes} GPUs")


def build_step(bb: dict[str, Any], tiny: bool, out: Path) -> tuple[dict[str, Any], Step]:
    """The model (built in a child process, or reused) and its step, whose note says what was built."""
    model = build_in_a_child(bb["arch"], int(bb["context_length"]), tiny, bb["dtype"], str(out / "models"))
    model["vocab_size"] = json.loads((Path(model["path"]) / "config.json").read_text())["vocab_size"]
    model["embedding"] = embedding_note(bb["arch"], model["vocab_size"], model["tokenizer_size"], tiny)
    size = size_gib(Path(model["path"]))
    step = Step("build", model["seconds"], model["peak"], note=f"{model['parameters'] / 1e9:.3f}B parameters "
                f"({'built' if model['built'] else 'reused'}, {size:.2f} GiB) in {model['path']}")
    print(f"step build: {step.note}; {model['embedding']}", flush=True)
    return model, step


def remove_weights(run_dir: Path) -> float:
    """Delete a train run's checkpoints, final model and kept (best, validated) models; the GiB they held."""
    folders = [p for p in (run_dir / "checkpoints", run_dir / "final_model", run_dir / "best_model",
                           run_dir / "validated") if p.exists()]
    freed = sum(size_gib(p) for p in folders)
    for folder in folders:
        shutil.rmtree(folder)
    return freed


def print_table(steps: list[Step], cuda: bool, plan: dict[str, float]) -> None:
    """One line per step: wall time, the measured peak, the plan's estimate where the step has one."""
    peak_head = "peak GPU GiB alloc (reserved)" if cuda else "peak RSS GiB"
    print(f"\n{'step':11} {'wall s':>7} {peak_head:>30} {'plan GiB':>9}  note")
    for s in steps:
        if cuda and "cuda_max_allocated_gib" in s.peak:
            peak = f"{s.peak['cuda_max_allocated_gib']:.2f} ({s.peak['cuda_max_reserved_gib']:.2f})"
        elif "max_rss_gib" in s.peak:
            peak = f"{s.peak['max_rss_gib']:.2f}"
        else:
            peak = "-"
        planned = f"{s.plan_gib:.2f}" if s.plan_gib is not None else "-"
        print(f"{s.name:11} {s.seconds:7.1f} {peak:>30} {planned:>9}  {s.note}")
    parts = ", ".join(f"{k} {v:g}" for k, v in plan.items() if k != "total")
    # the plan sizes activations for one full-context episode per micro-batch: an upper bound for a smoke round
    print(f"\nthe train step's memory plan (run_config.json training_memory_gib): total {plan['total']:g} GiB "
          f"({parts})")
    if not cuda:
        print("on a CPU the peak is the process's resident memory (Python, libraries, the benchmark), not the "
              "plan's tensors: compare the two on a GPU")


