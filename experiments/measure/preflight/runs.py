"""The preflight's runs: run.py in a child process (one per rank, launched as the training job launches
them) under a wrapper that records its peak memory, and the checks of what each run left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.measure.preflight.steps import CHILD, GiB, PEAK_ENV, ROOT, Failure, Step
from seal.rl.distributed import cuda_devices

def child(argv: list[str] | None = None) -> None:
    """`python run.py <overrides>` in this process (argv: run.py and its overrides), with the peak memory
    recorded at exit; under a launch of several ranks each writes its own (<peak file>.rank<r>)."""
    import atexit
    import runpy

    path = os.environ[PEAK_ENV]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        path = f"{path}.rank{os.environ['RANK']}"
    atexit.register(_write_peak, path)
    sys.argv = list(sys.argv[1:] if argv is None else argv)
    sys.path[0] = str(Path(sys.argv[0]).resolve().parent)
    runpy.run_path(sys.argv[0], run_name="__main__")


def peak() -> dict[str, Any]:
    """This process's peak resident memory, and its CUDA allocator's peaks when it used CUDA."""
    import resource

    peak: dict[str, Any] = {"max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        peak |= {"device": torch.cuda.get_device_name(),
                 "cuda_max_allocated_gib": torch.cuda.max_memory_allocated() / GiB,
                 "cuda_max_reserved_gib": torch.cuda.max_memory_reserved() / GiB}
    return peak


def _write_peak(path: str) -> None:
    Path(path).write_text(json.dumps(peak()))


@dataclass(frozen=True)
class Launch:
    """How the runs are launched: ranks, their sharding, the rollout engine."""

    processes: int = 1
    sharding: str = "ddp"
    engine: str = "transformers"

    def overrides(self) -> list[str]:
        return [f"launch.sharding={self.sharding}", f"backbone.generation={self.engine}"]


def run_command(args: list[str], launch: Launch, run_dir: Path, gpus: int, dtype: str) -> list[str]:
    """`python run.py <args>` under the peak wrapper; with several processes, or one that shards (FSDP2 needs
    a launch's process group), accelerate's launch of them with the sharding's config in the backbone's mixed
    precision (seal.tasks.launch.launch_command, as a SLURM job starts them), each rank running run.py under
    the wrapper (`-m experiments.gpu_check --child run.py ...`)."""
    run_py = str(ROOT / "run.py")
    if launch.processes == 1 and launch.sharding != "fsdp2":
        return [sys.executable, "-c", CHILD.format(root=str(ROOT)), run_py, *args, f"hydra.run.dir={run_dir}"]
    from seal.tasks.launch import launch_command

    command = launch_command(processes=launch.processes, sharding=launch.sharding, overrides=args, out_dir=run_dir,
                             gpus=gpus, dtype=dtype)
    at = command.index(run_py)
    return [*command[:at], "--module", "experiments.gpu_check", "--child", *command[at:]]


def visible_gpus(gpus: int, processes: int, env: dict[str, str]) -> str | None:
    """CUDA_VISIBLE_DEVICES for the runs when the process sees more GPUs (`gpus`, as CUDA counts them under the
    environment's CUDA_VISIBLE_DEVICES) than the launch has processes: the first `processes` of them, so that each
    process sees only the GPUs it uses (a single training process that sees several is refused,
    seal.rl.sharding.check_devices). Where the environment already lists GPUs (a SLURM allocation lists every GPU
    of the job), the first of that list, in CUDA's order. None: every GPU seen is used."""
    if gpus <= processes:
        return None
    listed = [d.strip() for d in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if d.strip()]
    return ",".join(listed[:processes] if len(listed) >= processes else [str(i) for i in range(processes)])


def run_step(name: str, overrides: list[str], out: Path, timeout: float,
             launch: Launch = Launch(), dtype: str = "float32") -> tuple[int, Step, Path]:
    """`python run.py <overrides>` with hydra.run.dir=<out>/<name> on the launch's ranks; its console goes to
    <out>/logs/<name>.log. The step's peak is the largest any rank recorded."""
    log, peak_file = out / "logs" / f"{name}.log", out / "logs" / f"{name}.peak.json"
    log.parent.mkdir(parents=True, exist_ok=True)
    for old in log.parent.glob(f"{name}.peak.json*"):
        old.unlink()
    gpus = cuda_devices()
    command = run_command([*overrides, *launch.overrides()], launch, out / name, min(gpus, launch.processes), dtype)
    env = os.environ | {PEAK_ENV: str(peak_file), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    visible = visible_gpus(gpus, launch.processes, dict(os.environ))
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    print(f"step {name}: {' '.join(command[command.index(str(ROOT / 'run.py')):])}  ({launch.processes} "
          f"process(es); log: {log})", flush=True)
    started = time.perf_counter()
    with log.open("w") as fh:
        try:
            rc = subprocess.run(command, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise Failure(f"step {name} did not finish within {timeout:.0f} s (a hang, or a machine far slower than "
                          f"planned; raise --step-timeout to wait longer); its log is {log}") from None
    return rc, Step(name, time.perf_counter() - started, _largest_peak(log.parent, name)), log


def _largest_peak(logs: Path, name: str) -> dict[str, Any]:
    """The step's peak record: its process's, or the rank with the largest GPU (else resident) peak, with every
    rank's record under `ranks`."""
    records = [json.loads(p.read_text()) for p in sorted(logs.glob(f"{name}.peak.json*"))]
    if not records:
        return {}
    if len(records) == 1:
        return records[0]
    largest = max(records, key=lambda r: (r.get("cuda_max_allocated_gib", 0.0), r["max_rss_gib"]))
    return largest | {"ranks": records}


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def failure_reason(log_text: str) -> str:
    """The line of a run's console that says why it stopped: seal's own `error: ...` sentence, a traceback's
    exception, or the first line of Hydra's config error."""
    lines = [line.rstrip() for line in log_text.splitlines() if "HYDRA_FULL_ERROR" not in line]
    own = [line for line in lines if line.startswith("error: ")]
    if own:
        return own[-1].removeprefix("error: ")
    if any(line.startswith("Traceback") for line in lines):
        return next(line for line in reversed(lines) if line.strip())
    paragraphs = [p for p in "\n".join(lines).split("\n\n") if p.strip()]
    return first_line(paragraphs[-1]) if paragraphs else "no output"


def _failed(step: str, rc: int, log: Path) -> Failure:
    # a run killed by a signal (the kernel's OOM killer sends SIGKILL) leaves no line that says why
    reason = f"killed by {signal.Signals(-rc).name}" if rc < 0 else failure_reason(log.read_text())
    return Failure(f"step {step} failed with exit code {rc}: {reason} (log: {log})")


def check_sanity(rc: int, run_dir: Path, log: Path, mechanics_only: bool) -> str:
    """sanity.json's verdict; a reward that did not rise fails unless only the mechanics count (a tiny shape)."""
    path = run_dir / "sanity.json"
    # exit code 1 with sanity.json written is the task's own "did not rise"; anything else is a crash
    if rc not in (0, 1) or not path.is_file():
        raise _failed("sanity", rc, log)
    result = json.loads(path.read_text())
    if rc == 1 and result["rose"]:
        raise _failed("sanity", rc, log)
    rise = (f"reward {result['first_rounds_mean']:.2f} -> {result['last_rounds_mean']:.2f} over "
            f"{len(result['rewards'])} rounds at lr {result['learning_rate']:g}")
    if result["rose"]:
        return f"{rise} (rose)"
    if mechanics_only:
        return f"{rise} (did not rise: expected on a tiny shape, only the mechanics count)"
    raise Failure(f"step sanity: the reward did not rise ({rise}, +{result['min_rise']:.2f} needed), so training does "
                  f"not move this backbone: check precision, the learning rate and the launch (log: {log})")


def check_train(rc: int, run_dir: Path, log: Path, processes: int = 1) -> tuple[dict[str, Any], str]:
    """The plan (run_config.json's training_memory_gib) and a note, once the run has done what the paper run
    does: every planned round on the launch's ranks, a model kept by validation, the out-of-domain benchmarks
    before and after, the final and best models on test."""
    if rc != 0:
        raise _failed("train", rc, log)
    for name in ("run_config.json", "metrics.json", "best.json"):
        if not (run_dir / name).is_file():
            raise Failure(f"step train exited 0 but wrote no {name} in {run_dir} (log: {log})")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if metrics["rounds"] != metrics["planned_rounds"]:
        raise Failure(f"step train ran {metrics['rounds']} of its {metrics['planned_rounds']} rounds (log: {log})")
    if metrics["world_size"] != processes:
        raise Failure(f"step train ran on {metrics['world_size']} rank(s) instead of {processes} (log: {log})")
    config = json.loads((run_dir / "run_config.json").read_text())
    # the out-of-domain evaluations unless the run was given none (-- budget.ood_benchmarks=[], as on a machine
    # without the vector memory's encoder)
    ood = bool(config["budget"]["ood_benchmarks"])
    expected = ("ood_before", "ood_after") * ood + ("test_final", "test_best_on_val")
    missing = [k for k in expected if not metrics.get(k)]
    if missing:
        raise Failure(f"step train wrote no {missing[0]} in {run_dir / 'metrics.json'} (log: {log})")
    if not (run_dir / "best_model" / "config.json").is_file():
        raise Failure(f"step train kept no best model in {run_dir / 'best_model'} (log: {log})")
    plan = config["training_memory_gib"]
    if not plan:
        raise Failure(f"step train wrote no memory plan (training_memory_gib) in {run_dir / 'run_config.json'}")
    split = metrics.get("round_time_split") or {}
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in split.items() if v >= 0.5)
    best = json.loads((run_dir / "best.json").read_text())
    return plan, (f"{metrics['rounds']} rounds on {processes} rank(s) (per round: {parts or 'under a second'}); "
                  f"best model of round {best['round']} on {best['entries']} validation entries; "
                  + (f"{', '.join(metrics['ood_after'])} before and after" if ood else "no out-of-domain benchmark "
                     "(budget.ood_benchmarks=[])"))


def k3(ref_logps: Any, logps: Any) -> Any:
    """The KL term's per-token k3 = exp(r) - r - 1, r = reference - policy, in float64 with the bounds the release's
    `low_var_kl` sets (r within [-20, 20], the term within [-10, 10]), written out here rather than imported, so
    that a wrong line in the trainer's shows."""
    import torch

    r = (ref_logps.double() - logps.double()).clamp(-20.0, 20.0)
    return (torch.exp(r) - r - 1.0).clamp(-10.0, 10.0)


def saved_logprobs(run_dir: Path) -> list[tuple[int, int, dict[str, Any]]]:
    """The log-probs a run saved as they reached the loss (trainer.save_logprobs): (optimizer step, micro-batch
    index, record) for each logprobs/step<k>_rank<r>_<i>.pt, every rank's, in file-name order."""
    import torch

    saved = []
    for path in sorted((run_dir / "logprobs").glob("step*_rank*_*.pt")):
        step, _, index = path.stem.split("_")
        saved.append((int(step[4:]), int(index), torch.load(path)))
    return saved


def recomputed_kl(run_dir: Path, steps_per_round: int,
                  saved: list[tuple[int, int, dict[str, Any]]] | None = None) -> list[float]:
    """Each round's train/kl from the log-probs the run saved (saved_logprobs, read again unless given), in float64
    and without seal's code: per micro-batch the masked mean of k3 over every rank's tokens, averaged over a
    step's micro-batches, then over a round's steps_per_round steps."""
    sums: dict[int, dict[int, list[float]]] = {}
    for step, index, record in saved_logprobs(run_dir) if saved is None else saved:
        mask = record["mask"].double()
        total = sums.setdefault(step, {}).setdefault(index, [0.0, 0.0])
        total[0] += float((k3(record["ref_logps"], record["logps"]) * mask).sum())
        total[1] += float(mask.sum())
    means = [sum(n / max(d, 1.0) for n, d in batches.values()) / len(batches)
             for _, batches in sorted(sums.items())]
    return [sum(means[i:i + steps_per_round]) / steps_per_round for i in range(0, len(means), steps_per_round)]


def check_logprobs(step: str, run_dir: Path, log: Path, logged: list[float | None]) -> dict[str, Any]:
    """What reached a step's loss, from the log-probs its run saved (trainer.save_logprobs): the policy's, the old
    policy's and the reference's in float32 and not bf16 values only (a bf16 output cast would leave nearby
    policies' KL at 0), and each round's `logged` train/kl equal to recomputed_kl within 1e-6 relative."""
    import torch

    saved = saved_logprobs(run_dir)
    folder = run_dir / "logprobs"
    if not saved:
        raise Failure(f"step {step} saved no log-probs in {folder} (trainer.save_logprobs; log: {log})")
    tokens = zero = references = 0
    for optimizer_step, index, record in saved:
        trained = record["mask"].bool()
        for key in ("logps", "old_logps", "ref_logps"):
            values = record.get(key)
            if values is None:  # no old policy's on-policy, none of the reference's without a KL term
                continue
            where = f"{folder}, step {optimizer_step}, micro-batch {index}"
            if values.dtype != torch.float32:
                raise Failure(f"step {step}: {key} reached the loss as {values.dtype}, not torch.float32 ({where})")
            if trained.any() and bool((values[trained].to(torch.bfloat16).float() == values[trained]).all()):
                raise Failure(f"step {step}: {key} holds bf16 values only, rounded before the loss ({where})")
        tokens += int(trained.sum())
        if "ref_logps" in record:
            references += 1
            zero += int((k3(record["ref_logps"], record["logps"])[trained] == 0).sum())
    figures = {"files": len(saved), "tokens": tokens, "tokens_with_zero_kl": zero, "train_kl": logged,
               "recomputed_kl_fp64": None}
    if references == 0 and all(k is None for k in logged):  # no KL term (trainer.beta=0): nothing to recompute
        return figures | {"train_kl": None}
    if references != len(saved):
        raise Failure(f"step {step}: {len(saved) - references} of its {len(saved)} saved micro-batches hold no "
                      f"reference log-probs, so its logged train/kl {logged} cannot be recomputed ({folder})")
    steps = len({optimizer_step for optimizer_step, _, _ in saved})
    if not logged or None in logged:
        raise Failure(f"step {step}: its saved log-probs hold the reference's, but it logged no train/kl for "
                      f"{'a round' if logged else 'any round'} ({run_dir})")
    if steps % len(logged):
        raise Failure(f"step {step}: its log-probs were saved over {steps} optimizer steps, which do not split "
                      f"into the {len(logged)} rounds it logged ({folder})")
    recomputed = recomputed_kl(run_dir, steps // len(logged), saved)
    if any(abs(a - b) > 1e-6 * abs(b) + 1e-12 for a, b in zip(logged, recomputed, strict=True)):
        raise Failure(f"step {step}: its logged train/kl {logged} is not the KL of its saved log-probs over {steps} "
                      f"optimizer steps, {recomputed} recomputed in float64 ({folder})")
    return figures | {"recomputed_kl_fp64": recomputed}


def logged_kl(step: str, run_dir: Path) -> list[float | None]:
    """Each round's train/kl as the run logged it: sanity.json's history, or the train run's metrics.jsonl."""
    if step == "sanity":
        rows = json.loads((run_dir / "sanity.json").read_text())["history"]
    else:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row.get("train/kl") for row in rows]


def check_checkpoint(run_dir: Path, sharding: str = "ddp") -> Path:
    """The last round's checkpoint, complete (seal_state.json, written last, holding every round), with the
    model in the sharding's layout: safetensors under ddp, accelerate's sharded folder under fsdp2."""
    from seal.rl.checkpoint import SEAL_STATE, latest_complete_checkpoint, read_state
    from seal.rl.sharding import SHARDED_MODEL

    folder = run_dir / "checkpoints"
    found = latest_complete_checkpoint(folder)
    if found is None:
        raise Failure(f"step checkpoint: no complete checkpoint (a checkpoint-<step> folder with {SEAL_STATE}) "
                      f"in {folder}")
    rounds = len(read_state(found)["history"])
    planned = json.loads((run_dir / "metrics.json").read_text())["planned_rounds"]
    if rounds != planned:
        raise Failure(f"step checkpoint: {found / SEAL_STATE} records {rounds} rounds instead of {planned}")
    if sharding == "fsdp2" and not (found / SHARDED_MODEL).is_dir():
        raise Failure(f"step checkpoint: {found} holds no sharded model ({SHARDED_MODEL}/), which fsdp2 writes")
    if sharding == "ddp" and not any(found.glob("*.safetensors")):
        raise Failure(f"step checkpoint: {found} holds no model weights (*.safetensors)")
    return found


def size_gib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GiB


