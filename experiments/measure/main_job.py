"""make bench's main_job section: `python run.py` as `make run` runs it, timed and measured.

    python -m experiments.bench main_job
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main_job() -> None:
    """`python run.py` as `make run` runs it: wall time, peak memory and a round's time split."""
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "run.py", "logger.mode=offline", f"hydra.run.dir={out}"],
                              cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit(f"python run.py failed with exit code {proc.returncode}")
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB on Linux
        metrics = json.loads((out / "metrics.json").read_text())
        plan = json.loads((out / "run_config.json").read_text())["training_memory_gib"]
        checkpoint = max((out / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        history = json.loads((checkpoint / "seal_state.json").read_text())["history"]
    split = metrics["round_time_split"]
    total = sum(split.values())
    print(f"\n## main job: `python run.py` (defaults), {metrics['rounds']} rounds, 2-core CPU")
    print(f"wall time {wall / 60:.1f} min (goal < 10), peak resident memory {peak_gib:.2f} GiB = {peak_gib * 1.073741824:.2f} GB (goal < 8 GB)")
    # the run's own memory plan (seal.policy.memory: the large tensors only) beside what the process peaked at
    print(f"memory plan of the run (run_config.json): {plan['total']:.2f} GiB estimated against {peak_gib:.2f} GiB "
          f"measured peak (the process also holds Python, the libraries, the tokenizer and the benchmark)")
    print(f"\n{'part of a round (mean)':28} {'seconds':>9} {'share':>7}")
    for part, seconds in split.items():
        print(f"{part:28} {seconds:9.2f} {seconds / total:7.1%}")
    bookkeeping = sum(split.get(k, 0.0) for k in ("verification", "diagnosis", "interface", "weighting"))
    print(f"{'verification+diagnosis+interface+weighting':44} {bookkeeping / total:7.2%} of a round (goal < 5%)")
    padded, trimmed = padding_cost(history)
    print(f"\ntoken columns scored per round by the old-logprob, reference and training passes (micro-batch 1): "
          f"{padded} padded to the round's longest, {trimmed} trimmed per micro-batch ({1 - trimmed / padded:.0%} saved)")


def padding_cost(history: list[dict]) -> tuple[int, int]:
    """Columns the three scoring passes cover when every episode of a round is padded to the round's longest
    prompt plus longest completion (TRL's layout), and when each micro-batch of one is cut to its own length."""
    padded = trimmed = 0
    for record in history:
        episodes = record["episodes"]
        longest_prompt = max(e["prompt_tokens"] for e in episodes)
        longest_completion = max(e["episode_tokens"] - e["prompt_tokens"] for e in episodes)
        padded += len(episodes) * (longest_prompt + longest_completion)
        trimmed += sum(e["episode_tokens"] for e in episodes)
    return padded, trimmed
