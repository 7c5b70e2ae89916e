"""Weights & Biases logging: offline files under the run directory by default, online when asked.

Everything the paper's appendix C.4 lists goes into the run: seed, base checkpoint, code version,
full config and overrides (W&B config), rollout budget and decoding parameters (inside the config),
per-round failure profile C_t, rho, weights and interface state Omega_t (per-round metrics and
tables), validation/evaluation scores and outputs (summary and files).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from seal.errors import UserError

log = logging.getLogger(__name__)
MODES = ("offline", "online", "disabled")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UserError(f"logger.mode={mode!r} is not one of {', '.join(MODES)}")
    return mode


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


class WandbRun:
    def __init__(self, *, mode: str, project: str, entity: str | None, tags: list[str], out_dir: Path,
                 run_id: str, name: str, config: dict[str, Any]):
        check_mode(mode)
        if mode == "online" and not _has_api_key():
            raise UserError(
                "logger.mode=online needs a W&B API key: run `wandb login` (or set WANDB_API_KEY), "
                "or keep the default logger.mode=offline"
            )
        self.run = None
        if mode == "disabled":
            return
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=project, entity=entity, tags=list(tags), dir=str(out_dir), id=run_id, name=name,
            resume="allow", mode=mode, config=config, settings=wandb.Settings(console="off", silent=True),
        )
        log.info("W&B run %s (%s) in %s", run_id, mode, out_dir / "wandb")

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def table(self, key: str, columns: list[str], rows: list[list[Any]], step: int) -> None:
        if self.run is not None:
            self.run.log({key: self._wandb.Table(columns=columns, data=rows)}, step=step)

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def save_files(self, paths: list[Path]) -> None:
        if self.run is not None:
            for path in paths:
                if path.exists():
                    self.run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
