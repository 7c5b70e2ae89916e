"""What a training run's folder holds, read before and after the run: finished already (its metrics.json, written
last), the rounds its last complete checkpoint holds, the work the same command goes on from, and the one
sentence a stopped run ends with.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seal.io import DamagedFile, config_fingerprint, fingerprint_matches, read_json, read_json_object
from seal.report.clock import count_of

log = logging.getLogger(__name__)


def finished_already(cfg: DictConfig, out_dir: Path) -> str | None:
    """The sentence for a run of this configuration that has finished in `out_dir` (its metrics.json, written last,
    after every evaluation, is there): nothing is loaded or evaluated again. None for a new run or one to resume.

    A damaged metrics.json (cut short, not an object) does not finish a run: it is kept beside as
    metrics.json.damaged (-2, -3, ... when that name is taken), said in one sentence with what the resume will
    play again, and the run resumes to write it again."""
    metrics = out_dir / "metrics.json"
    if not metrics.is_file() or not fingerprint_matches(out_dir, config_fingerprint(cfg)):
        return None
    try:
        read_json_object(metrics)
    except DamagedFile as exc:
        aside, n = metrics.with_name("metrics.json.damaged"), 1
        while aside.exists():
            n += 1
            aside = metrics.with_name(f"metrics.json.damaged-{n}")
        try:  # every rank of a launch may look; the first moves it
            metrics.replace(aside)
        except FileNotFoundError:
            return None
        done, checkpoint = rounds_done(out_dir)
        resume = (f"the run resumes from checkpoints/{checkpoint.name} ({count_of(done, 'round')} done) to write it again"
                  if checkpoint else "no checkpoint is left, so the run trains again from round 0")
        log.warning("%s; kept as %s, and %s", exc, aside.name, resume)
        return None
    except FileNotFoundError:  # another rank moved it aside meanwhile
        return None
    return (f"{out_dir} holds this run, finished (metrics.json, report.md): nothing to do; to train it again, "
            "remove that folder or choose another with hydra.run.dir=<directory> (a sweep: hydra.sweep.dir=<directory>)")


def checkpointed_rounds(out_dir: Path) -> tuple[list[dict[str, Any]], Path | None]:
    """The round records the run directory's last complete checkpoint holds, and that checkpoint ([], None:
    none); a damaged state file is named in one sentence (seal.io.DamagedFile)."""
    from seal.rl.checkpoint import SEAL_STATE, latest_complete_checkpoint

    checkpoint = latest_complete_checkpoint(out_dir / "checkpoints")
    if checkpoint is None:
        return [], None
    return list(read_json(checkpoint / SEAL_STATE)["history"]), checkpoint


def rounds_done(out_dir: Path) -> tuple[int, Path | None]:
    """The rounds the run directory's last complete checkpoint holds, and that checkpoint (0, None: none)."""
    history, checkpoint = checkpointed_rounds(out_dir)
    return len(history), checkpoint


# what a stopped run keeps besides its checkpoints, and the same command goes on from
KEPT_FILES = (("eval_before.json", "the evaluation before training"),
              ("eval_test_before.json", "the initial model's test evaluation"),
              ("final_model", "the trained model (final_model/)"))


def keeps_work(out_dir: Path) -> bool:
    """Whether a run's folder holds something the same command goes on from (a complete checkpoint, an evaluation,
    the trained model): a run that stops with an error after that keeps its folder, though the run made it."""
    from seal.rl.checkpoint import latest_complete_checkpoint

    return (latest_complete_checkpoint(out_dir / "checkpoints") is not None
            or any((out_dir / name).exists() for name, _ in KEPT_FILES))


def interrupted(run: Any) -> str:
    """The one sentence a stopped run ends with: what it kept (its last complete checkpoint's rounds, numbered
    as the per-round lines number them, and its evaluations) and that the same command resumes."""
    out_dir = run.out_dir
    done, checkpoint = rounds_done(out_dir)
    planned = run.budget.rounds_for(len(run.entries.train)) if run.entries else None
    of = f" of {planned}" if planned else ""
    kept = []
    if checkpoint is not None:
        which = "round 0" if done == 1 else f"rounds 0-{done - 1}"
        kept.append(f"{which} ({done}{of}) in {checkpoint.relative_to(out_dir)}")
    kept += [what for name, what in KEPT_FILES if (out_dir / name).exists()]
    if not kept:
        return f"nothing of this run was complete yet; the same command starts it again in {out_dir}"
    go_on = f"resumes after round {done - 1}" if checkpoint is not None else "goes on from there"
    return f"{out_dir} keeps {_and(kept)}; the same command {go_on}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

