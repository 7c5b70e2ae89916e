"""How long a training job should take, from rates already measured: the rates an earlier attempt of the same
run left in its folder, and those of a like run beside it (`similar_run`). seal.report.clock turns them into the
plan line's estimate and the per-round estimates; `time_it_takes` words the plan line's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from seal.io import DamagedFile, read_json, read_json_object, read_jsonl
from seal.policy.progress import duration
from seal.report.clock import not_timed, round_seconds


def time_it_takes(found: tuple[float, list[str]] | None, earlier: tuple[float, list[str]] | None,
                  beside: Path | None) -> str:
    """The plan line's estimate: JobClock.left() `found` with the earlier attempt's rates and those of the run
    `beside` (`earlier`: what the earlier attempt's rates alone gave), and whose rates they are."""
    if found is None:
        return "estimated once the first evaluation or round is timed"
    rates = ("the earlier attempt's rates" if found == earlier or beside is None else
             f"the rates of {beside} (the same backbone, budget, launch and evaluation on this kind of machine)" if earlier is None else
             f"the earlier attempt's rates and those of {beside}")
    return f"about {duration(found[0])} at {rates}{not_timed(found[1])}"


# what a run's rates depend on, beside the code: run_config.json's keys that two runs must share for one's rates
# to estimate the other's time (the model, the episodes and their lengths, the launch, the machine), and of the
# trainer's values those that change a step's work; an arm's choices and a learning rate change it far less
PACE_KEYS = ("backbone", "budget", "launch", "eval", "benchmark", "protocol", "split", "rendering", "world_size",
             "sharding", "machine")
PACE_TRAINER_KEYS = ("beta", "gradient_checkpointing", "loss_type")


def pace_of(config: dict[str, Any]) -> Any:
    """What of a run_config.json its rates depend on (PACE_KEYS), as JSON reads it back."""
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    pace = {**{k: config.get(k) for k in PACE_KEYS}, "trainer": {k: trainer.get(k) for k in PACE_TRAINER_KEYS}}
    if isinstance(pace["split"], dict):  # the split's seed is the run's (which scenarios validate, not how many)
        pace["split"] = {k: v for k, v in pace["split"].items() if k != "seed"}
    return json.loads(json.dumps(pace, default=str))


def similar_run(out_dir: Path, config: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The run folder beside `out_dir` (in the same parent folder: outputs/train/, a sweep's folder) that a machine
    like this one ran with the same pace (pace_of) and that timed a round or an evaluation, the most recently
    written first, with its rates (its rounds' times in metrics.jsonl, its evaluation before training); None when
    there is none. A folder whose files cannot be read, or hold what a run does not write, is passed over: it is
    another run's problem, not this one's."""
    pace = pace_of(config)
    found = []
    try:
        others = [p for p in sorted(out_dir.parent.iterdir()) if p != out_dir and (p / "run_config.json").is_file()]
    except OSError:
        return None
    for other in others:
        try:
            if pace_of(read_json_object(other / "run_config.json")) != pace:
                continue
            rates = _measured(other)
            written = max(p.stat().st_mtime for p in other.iterdir())
        except (DamagedFile, OSError, ValueError, TypeError, AttributeError):
            continue
        if rates["round_seconds"] or rates["eval_seconds"]:
            found.append((written, other.name, rates))
    if not found:
        return None
    _, name, rates = max(found)
    return out_dir.parent / name, rates


def _measured(run_dir: Path) -> dict[str, Any]:
    """A finished or running run's rates: its rounds' seconds (those timed) and its evaluation before training."""
    rounds = read_jsonl(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    seconds = [round_seconds({k: float(v) for k, v in r.items() if k.startswith("time/")}) for r in rounds]
    evaluation = evaluation_rate(run_dir / "eval_before.json")
    if not evaluation["eval_seconds"] > 0:
        evaluation = {"eval_episodes": 0, "eval_seconds": 0.0}
    return {"round_seconds": [s for s in seconds if s > 0], **evaluation}


def evaluation_rate(path: Path) -> dict[str, float]:
    """The episodes and seconds of an evaluation file an earlier attempt wrote (none when there is none)."""
    if not path.exists():
        return {"eval_episodes": 0, "eval_seconds": 0.0}
    metrics = read_json(path)
    timings = [metrics[k] for k in ("timing", "timing_release") if isinstance(metrics.get(k), dict)]
    entries = int(metrics.get("num_entries") or 0)
    return {"eval_episodes": entries * len(timings), "eval_seconds": sum(float(t.get("seconds", 0.0)) for t in timings)}

