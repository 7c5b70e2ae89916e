"""Crash-safe checkpoints: TRL's (model, optimizer, scheduler, RNG, data order) plus SEAL's state.

A checkpoint counts as complete only once `seal_state.json` is in it: that file is written last and
atomically, so a run killed mid-save resumes from the previous complete round.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

SEAL_STATE = "seal_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def latest_complete_checkpoint(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    done = [
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := _CHECKPOINT.search(p.name)) and (p / SEAL_STATE).is_file()
    ]
    return max(done)[1] if done else None


def read_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / SEAL_STATE).read_text())


# what the optimizer steps report (TRL's names), kept per round as train/<name>
OPTIMIZER_SIGNALS = ("loss", "grad_norm", "learning_rate", "kl", "entropy", "clip_ratio/low_mean",
                     "clip_ratio/high_mean", "clip_ratio/region_mean", "logprob_gap")


class SealStateCallback(TrainerCallback):
    """Closes each round after its optimizer steps, with their averaged signals, and writes the
    co-evolution state into each checkpoint. The Trainer logs every step (logging_steps=1), after
    on_step_end and before it saves, so the round closes at its last step's log."""

    def __init__(self, coevolution: Any, steps_per_round: int):
        self.coevolution = coevolution
        self.steps_per_round = steps_per_round
        self._signals: dict[str, list[float]] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "grad_norm" not in logs and "loss" not in logs:
            return control  # the end-of-training summary, not a step
        for name in OPTIMIZER_SIGNALS:
            if logs.get(name) is not None:
                self._signals.setdefault(name, []).append(float(logs[name]))
        if state.global_step % self.steps_per_round == 0:
            means = {f"train/{k}": sum(v) / len(v) for k, v in self._signals.items()}
            if "grad_norm" in self._signals:
                means["train/grad_norm_max"] = max(self._signals["grad_norm"])
            self._signals = {}
            self.coevolution.finish_round(state.global_step, means)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            tmp = folder / (SEAL_STATE + ".tmp")
            tmp.write_text(json.dumps(self.coevolution.state_dict()))
            os.replace(tmp, folder / SEAL_STATE)
        return control
