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
from seal.io import short_hash

log = logging.getLogger(__name__)
MODES = ("offline", "online", "disabled")
# how much of a long sweep folder name a W&B group keeps (the hash of its path tells two sweeps apart)
GROUP_NAME = 100


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UserError(f"logger.mode={mode!r} is not one of {', '.join(MODES)} (without logger.mode on the command "
                        "line it comes from the environment's WANDB_MODE, else offline)")
    return mode


def run_identity(*, out_dir: Path, fingerprint: str, experiment: str, backbone: str, seed: int,
                 tags: list[str] | tuple = (), group: str | None = None, sweep_dir: Path | None = None,
                 label: str | None = None) -> dict:
    """How a run appears in W&B, so that the UI compares the arms of a sweep the way ablations are read:
    group = the sweep (logger.group, else the sweep directory's name and a hash of its path), job_type =
    the arm (`experiment`), a short name of the arm (or the user's `label`), backbone and seed (the command
    line's overrides stay in the run's config), tags = backbone and seed (after logger.tags), and a run id
    of the configuration and the run directory (two directories never share a W&B run; re-running in one
    directory resumes it)."""
    out_dir = Path(out_dir).resolve()
    if group is None and sweep_dir is not None:
        sweep = Path(sweep_dir).resolve()
        # the sweep folder is named after the sweep's overrides (conf/config.yaml): a long one is cut, the
        # hash of its path keeps two sweeps apart
        group = f"{sweep.name[:GROUP_NAME]}-{short_hash(str(sweep), 8)}"
    return {"run_id": f"seal-{fingerprint}-{short_hash(str(out_dir), 8)}",
            "name": f"{label or experiment} | {backbone} | seed {seed}",
            "group": group, "job_type": experiment, "tags": [*tags, f"backbone={backbone}", f"seed={seed}"]}


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def _check_can_log(mode: str, setting: str) -> None:
    """A known mode, and an API key when it is online; `setting` is how the user chose the mode."""
    check_mode(mode)
    if mode == "online" and not _has_api_key():
        raise UserError(
            f"{setting}=online needs a W&B API key: run `wandb login` (or set WANDB_API_KEY), "
            f"or use {setting}=offline (files under the run directory, for `wandb sync` later)"
        )


class WandbRun:
    def __init__(self, *, mode: str, project: str, entity: str | None, tags: list[str], out_dir: Path,
                 run_id: str, name: str, config: dict[str, Any], group: str | None = None,
                 job_type: str | None = None):
        _check_can_log(mode, "logger.mode")
        self.run = None
        if mode == "disabled":
            return
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=project, entity=entity, tags=list(tags), dir=str(out_dir), id=run_id, name=name,
            group=group, job_type=job_type, resume="allow", mode=mode, config=config,
            settings=wandb.Settings(console="off", silent=True),
        )
        log.info("W&B run '%s'%s (%s; id %s) in %s", name, f" in group {group}" if group else "", mode, run_id,
                 out_dir / "wandb")

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


def log_files_as_artifact(files: list[Path], *, mode: str, project: str, name: str, kind: str, out_dir: Path,
                          group: str | None = None) -> None:
    """Log `files` as one W&B artifact from a short run of job_type `name` (offline: under out_dir/wandb)."""
    _check_can_log(mode, "--wandb")
    if mode == "disabled":
        return
    import wandb

    run = wandb.init(project=project, job_type=name, group=group, dir=str(out_dir), mode=mode,
                     settings=wandb.Settings(console="off", silent=True))
    artifact = wandb.Artifact(name, type=kind)
    for path in files:
        if path.exists():
            artifact.add_file(str(path))
    run.log_artifact(artifact)
    run.finish()
