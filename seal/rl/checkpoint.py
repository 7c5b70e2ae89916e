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


class SealStateCallback(TrainerCallback):
    """Closes each round after its optimizer steps and writes the co-evolution state into each
    checkpoint TRL has just saved (TRL calls on_step_end before it saves)."""

    def __init__(self, coevolution: Any, steps_per_round: int):
        self.coevolution = coevolution
        self.steps_per_round = steps_per_round

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.steps_per_round == 0:
            self.coevolution.finish_round(state.global_step)
        return control

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            tmp = folder / (SEAL_STATE + ".tmp")
            tmp.write_text(json.dumps(self.coevolution.state_dict()))
            os.replace(tmp, folder / SEAL_STATE)
        return control
