"""`python -m experiments.gpu_check`: a preflight to run on one GPU node before spending GPU hours.

    python -m experiments.gpu_check                                    # qwen2.5-3b, its published shape
    python -m experiments.gpu_check --backbone llama-3.1-8b --out /scratch/preflight
    python -m experiments.gpu_check -- trainer.learning_rate=1e-5      # Hydra overrides for both runs
    python -m experiments.gpu_check --tiny                             # a tiny shape (automatic without CUDA)

Steps, each timed:
  build       a randomly initialised model of the backbone's published shape (`arch` in
              conf/backbone/<name>.yaml; nothing is downloaded) with the embedded SmolLM2 tokenizer, saved
              in the backbone's dtype under --out; the runs load it through backbone.local_path
  sanity      `run.py task=sanity` at the run's learning rate: does training move this backbone?
  train       `run.py task=train budget=smoke budget.rounds=1` with short generations: rollouts, diagnosis,
              the interface, one GRPO step, evaluations before and after, the memory plan (run_config.json)
  checkpoint  the round's checkpoint is complete (seal_state.json in it)
  throughput  `make bench`'s rollout measurement (experiments.bench_rollout.throughput_rows) on the built
              model: aggregate new tokens/s of the transformers backend at THROUGHPUT_EPISODES concurrent
              episodes of distinct entries, in a child process of its own
Without CUDA the same steps run on a tiny shape of the same model type; there only the mechanics count
(a 64-wide random model does not learn the sanity task at lr 1e-6), so a flat sanity reward is reported,
not failed.

Peak memory: each run is run.py executed by runpy (as `python run.py` executes it) under a wrapper that
writes, at exit, the process's torch.cuda.max_memory_allocated and max_memory_reserved and its peak
resident memory. That is the figure the memory plan estimates (tensors); nvidia-smi would see the whole
process (CUDA context, the allocator's cache) and only at its sampling instants, missing short peaks.
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

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
GiB = 2**30
SEED = 0
# the tiny-random backbone's shape, used without CUDA (same model type and embedding tying as the backbone)
TINY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128}
# both runs: nothing sent to or kept for W&B
COMMON = ["logger.mode=disabled"]
# one smoke round with short generations and the smoke budget's held-out slice (one entry per category);
# one checkpoint kept, written after the round
TRAIN = ["task=train", "budget=smoke", "budget.rounds=1", "budget.max_new_tokens=16",
         "budget.heldout_entries_per_category=1", "trainer.save_every=1", "trainer.keep_checkpoints=1"]
# concurrent episodes of the throughput step (the bench's largest)
THROUGHPUT_EPISODES = 64
# what the preflight sets itself, refused among the extra overrides
OWN_KEYS = ("task=", "backbone=", "hydra.run.dir=")
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

def published_backbone(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/backbone/<name>.yaml composed with the `backbone.` overrides (dtype, context length, ...)."""
    with_arch = sorted(p.stem for p in (CONF / "backbone").glob("*.yaml") if _yaml(p).get("arch"))
    if name not in with_arch:
        raise UserError(f"--backbone {name}: choose a backbone with a published architecture "
                        f"(`arch` in conf/backbone/<name>.yaml): {', '.join(with_arch)}")
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from seal.policy.backbones import check_names

    mine = [o for o in overrides if o.startswith("backbone.")]
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"backbone={name}", *mine])
    except Exception as exc:
        raise UserError(f"the overrides {' '.join(mine)} do not apply to backbone {name}: "
                        f"{str(exc).strip().splitlines()[0]}") from exc
    bb = OmegaConf.to_container(cfg.backbone, resolve=True)
    check_names(bb["dtype"], bb["tool_format"], bb["generation"])
    return bb


def _yaml(path: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def model_config(arch: dict[str, Any], tokenizer: Any, context_length: int, tiny: bool) -> Any:
    """The transformers config of the published architecture (TINY_SHAPE's sizes when tiny), with the
    tokenizer's vocabulary: the embedding follows the tokenizer the runs use."""
    from transformers import AutoConfig

    shape = {k: v for k, v in arch.items() if k not in ("model_type", "vocab_size")}
    if tiny:
        shape |= TINY_SHAPE
        if "head_dim" in shape:
            # a published size too (Qwen3's 128 is not hidden / heads); the tiny shape's is hidden / heads
            shape["head_dim"] = TINY_SHAPE["hidden_size"] // TINY_SHAPE["num_attention_heads"]
    return AutoConfig.for_model(
        arch["model_type"], vocab_size=len(tokenizer), max_position_embeddings=context_length,
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
                  "tiny": tiny, "built_on": device}
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


def embedding_note(arch: dict[str, Any], vocab: int, tiny: bool) -> str:
    """How the built model's embedding differs from the published one (the tokenizer's vocabulary is smaller)."""
    from seal.policy.memory import param_count

    if tiny:
        return f"tiny {arch['model_type']} shape {TINY_SHAPE}, vocabulary {vocab:,} (the published shape is not built)"
    fewer = param_count(arch) - param_count(arch | {"vocab_size": vocab})
    matrices = "one tied matrix" if arch.get("tie_word_embeddings") else "embedding and LM head"
    return (f"vocabulary {vocab:,} (the embedded SmolLM2 tokenizer) instead of the published {arch['vocab_size']:,}: "
            f"the embedding ({matrices}) is {arch['vocab_size'] - vocab:,} rows smaller, {fewer / 1e6:,.1f}M fewer "
            f"parameters ({fewer / param_count(arch):.1%} of the published {param_count(arch) / 1e9:.2f}B)")


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

def _child() -> None:
    """`python run.py <overrides>` in this process, with the peak memory recorded at exit."""
    import atexit
    import runpy

    atexit.register(_write_peak, os.environ[PEAK_ENV])
    sys.argv = sys.argv[1:]
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


def run_step(name: str, overrides: list[str], out: Path, timeout: float) -> tuple[int, Step, Path]:
    """`python run.py <overrides>` with hydra.run.dir=<out>/<name>; its console goes to <out>/logs/<name>.log."""
    log, peak_file = out / "logs" / f"{name}.log", out / "logs" / f"{name}.peak.json"
    log.parent.mkdir(parents=True, exist_ok=True)
    args = [*overrides, f"hydra.run.dir={out / name}"]
    env = os.environ | {PEAK_ENV: str(peak_file), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    print(f"step {name}: python run.py {' '.join(args)}  (log: {log})", flush=True)
    started = time.perf_counter()
    with log.open("w") as fh:
        try:
            rc = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), str(ROOT / "run.py"), *args],
                                env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise Failure(f"step {name} did not finish within {timeout:.0f} s (a hang, or a machine far slower than "
                          f"planned; raise --step-timeout to wait longer); its log is {log}") from None
    peak = json.loads(peak_file.read_text()) if peak_file.is_file() else {}
    return rc, Step(name, time.perf_counter() - started, peak), log


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


def check_train(rc: int, run_dir: Path, log: Path) -> tuple[dict[str, Any], str]:
    """The plan (run_config.json's training_memory_gib) and a note, once the round and both files are there."""
    if rc != 0:
        raise _failed("train", rc, log)
    for name in ("run_config.json", "metrics.json"):
        if not (run_dir / name).is_file():
            raise Failure(f"step train exited 0 but wrote no {name} in {run_dir} (log: {log})")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    if metrics["rounds"] != 1:
        raise Failure(f"step train ran {metrics['rounds']} rounds instead of 1 (log: {log})")
    plan = json.loads((run_dir / "run_config.json").read_text())["training_memory_gib"]
    if not plan:
        raise Failure(f"step train wrote no memory plan (training_memory_gib) in {run_dir / 'run_config.json'}")
    split = metrics.get("round_time_split") or {}
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in split.items() if v >= 0.5)
    before = metrics.get("eval_before")
    evaluated = f", {before['num_entries']} held-out entries evaluated before and after" if before else ""
    return plan, f"1 round ({parts or 'under a second'}){evaluated}"


def check_checkpoint(run_dir: Path) -> Path:
    """The round's checkpoint, complete: seal_state.json (written last) holding the one round, and weights."""
    from seal.rl.checkpoint import SEAL_STATE, latest_complete_checkpoint, read_state

    folder = run_dir / "checkpoints"
    found = latest_complete_checkpoint(folder)
    if found is None:
        raise Failure(f"step checkpoint: no complete checkpoint (a checkpoint-<step> folder with {SEAL_STATE}) "
                      f"in {folder}")
    rounds = len(read_state(found)["history"])
    if rounds != 1:
        raise Failure(f"step checkpoint: {found / SEAL_STATE} records {rounds} rounds instead of 1")
    if not any(found.glob("*.safetensors")):
        raise Failure(f"step checkpoint: {found} holds no model weights (*.safetensors)")
    return found


def _size_gib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / GiB


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
              keep: bool = False, step_timeout: float = 600) -> dict[str, Any]:
    """Every step; returns the figures (also written to <out>/gpu_check.json). Raises Failure at the first
    failing step."""
    import torch

    started = time.perf_counter()
    overrides = list(overrides or [])
    taken = [o for o in overrides if o.lstrip("+~").startswith(OWN_KEYS)]
    if taken:
        raise UserError(f"the preflight sets {' '.join(taken)} itself: name the backbone with --backbone and the "
                        "folder with --out")
    cuda = torch.cuda.is_available()
    tiny = (not cuda) if tiny is None else tiny
    bb = published_backbone(backbone, overrides)
    out = out.resolve()
    prepare_out(out)
    print(f"gpu_check: {backbone} ({bb['arch']['model_type']}), {'a tiny shape' if tiny else 'its published shape'}, "
          f"randomly initialised, {bb['dtype']}, on {'CUDA' if cuda else 'no CUDA device: the CPU'}; output in {out}",
          flush=True)
    model, build = build_step(bb, tiny, out)
    model_args = [f"backbone={backbone}", f"backbone.local_path={model['path']}", f"backbone.name={backbone}-random",
                  f"backbone.params_b={model['parameters'] / 1e9:.6f}"]

    rc, sanity, log = run_step("sanity", ["task=sanity", *model_args, *COMMON, *overrides], out, step_timeout)
    sanity.note = check_sanity(rc, out / "sanity", log, mechanics_only=tiny)
    rc, train, log = run_step("train", [*TRAIN, *model_args, *COMMON, *overrides], out, step_timeout)
    plan, train.note = check_train(rc, out / "train", log)
    train.plan_gib = plan["total"]
    checkpoint = check_checkpoint(out / "train")
    size = _size_gib(checkpoint)
    saved = Step("checkpoint", 0.0, note=f"{checkpoint.name} complete (seal_state.json, weights), {size:.2f} GiB")
    if not keep:
        saved.note += f"; removed with the final model afterwards ({remove_weights(out / 'train'):.2f} GiB; --keep " \
                      "keeps them)"

    rate = throughput_step([*model_args, *overrides])
    steps = [build, sanity, train, saved, rate]
    summary = {
        "backbone": backbone, "tiny": tiny, "cuda": cuda, "dtype": bb["dtype"], "model": model,
        "vocab_size": model["vocab_size"], "published_vocab_size": bb["arch"]["vocab_size"], "plan_gib": plan,
        "checkpoint": str(checkpoint), "checkpoint_gib": size, "kept": keep,
        "steps": [vars(s) for s in steps], "seconds": time.perf_counter() - started,
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    print_table(steps, cuda, plan)
    goal = " (the goal on one H100: under 8 min)" if cuda and not tiny else ""
    print(f"gpu_check: passed in {summary['seconds'] / 60:.1f} min{goal}; figures in {out / 'gpu_check.json'}",
          flush=True)
    return summary


def build_step(bb: dict[str, Any], tiny: bool, out: Path) -> tuple[dict[str, Any], Step]:
    """The model (built in a child process, or reused) and its step, whose note says what was built."""
    model = _build_in_a_child(bb["arch"], int(bb["context_length"]), tiny, bb["dtype"], str(out / "models"))
    model["vocab_size"] = json.loads((Path(model["path"]) / "config.json").read_text())["vocab_size"]
    model["embedding"] = embedding_note(bb["arch"], model["vocab_size"], tiny)
    size = _size_gib(Path(model["path"]))
    step = Step("build", model["seconds"], model["peak"], note=f"{model['parameters'] / 1e9:.3f}B parameters "
                f"({'built' if model['built'] else 'reused'}, {size:.2f} GiB) in {model['path']}")
    print(f"step build: {step.note}; {model['embedding']}", flush=True)
    return model, step


def remove_weights(run_dir: Path) -> float:
    """Delete a train run's checkpoints and final model; the GiB they held."""
    folders = [p for p in (run_dir / "checkpoints", run_dir / "final_model") if p.exists()]
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
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="python -m experiments.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="qwen2.5-3b", help="conf/backbone/<name>.yaml with an `arch`")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: outputs/gpu_check/<backbone>)")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape even with CUDA (always without it)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' checkpoints and final model")
    parser.add_argument("--step-timeout", type=float, default=600, help="seconds one run may take")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    out = args.out or Path("outputs") / "gpu_check" / args.backbone
    try:
        preflight(args.backbone, out, tiny=True if args.tiny else None, overrides=overrides, keep=args.keep,
                  step_timeout=args.step_timeout)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Failure as exc:
        print(f"gpu_check failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
