"""`task=` dispatch: one module per task in this package, each a plain function `(cfg, out_dir) -> None`.

Task modules import torch, transformers and TRL inside their functions, so that light tasks (replay,
score, show_prompt) do not pay for them."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
import sys
import traceback
from pathlib import Path

from omegaconf import DictConfig

from seal.errors import FULL, Interrupted, UserError, cannot_write, unwritable
from seal.io import DamagedFile, in_multirun
from seal.policy.progress import end_bars
from seal.rl import distributed
from seal.tasks import eval as eval_task
from seal.tasks import command_line, replay, run_folder, sanity, score, show_prompt, train, validate_diagnoser
from seal.tasks.launch import relaunch

log = logging.getLogger(__name__)

TASKS = {
    "train": train.train,
    "eval": eval_task.evaluate,
    "replay": replay.replay,
    "score": score.score,
    "validate_diagnoser": validate_diagnoser.validate_diagnoser,
    "sanity": sanity.sanity,
    "show_prompt": show_prompt.show_prompt,
}


def output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def resolve(name: str):
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}: choose one of {', '.join(TASKS)} (e.g. task=eval)")
    return TASKS[name]


class ConsoleFilter(logging.Filter):
    """What the console shows of a run: the project's own lines (INFO and up) and anyone's errors. The
    libraries' info and warnings (and Python warnings) still reach run.log, which has every record; so do
    the progress lines of a step whose bar is live on a terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "seal.progress" and sys.stderr.isatty():
            return False  # a live bar shows the same on the terminal (seal.policy.progress)
        own = record.name == "__main__" or record.name == "seal" or record.name.startswith("seal.")
        return own or record.levelno >= logging.ERROR


# what the libraries say on every run that is expected here and tells a user nothing (logger, the message's
# opening words)
KNOWN_NOISE = (
    # seal passes model_init_kwargs for the reference model, which TRL does build from them (seal/rl/config.py)
    ("trl.trainer.grpo_trainer", "You passed `model_init_kwargs`"),
    # the tokenizer's special tokens are the ones the model is trained and evaluated with: transformers aligns
    # the model's config to them, as intended
    ("transformers.trainer_utils", "The tokenizer has new PAD/BOS/EOS tokens"),
    ("transformers.tokenization_utils_tokenizers", "Ignoring clean_up_tokenization_spaces"),
    # vLLM's import on a machine without a GPU
    ("vllm.triton_utils.importing", "Triton not installed"),
)


class KnownNoise(logging.Filter):
    """Leaves out of the console and run.log the library messages of KNOWN_NOISE, expected on every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(record.name == name and start in record.getMessage()[:120] for name, start in KNOWN_NOISE)


def quiet_console() -> None:
    """Keep the console to the project's lines (run.py calls this once Hydra has set up logging): the
    filter on every console handler, Python warnings routed through logging, and the libraries' own
    console handlers and progress bars replaced by records that reach run.log; the libraries' messages
    that are expected on every run (KNOWN_NOISE) reach neither."""
    logging.captureWarnings(True)
    for handler in logging.getLogger().handlers:
        handler.addFilter(KnownNoise())
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.addFilter(ConsoleFilter())
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("WANDB_SILENT", "true")  # W&B's own terminal lines (the run id is logged by seal)
    try:
        import transformers.utils.logging as hf_logging
    except ImportError:  # pragma: no cover
        return
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_logging.disable_progress_bar()
    if os.environ.get("WANDB_MODE") == "offline" and WANDB_INTEGRATION not in sys.modules:
        # transformers' W&B integration prints this line when imported under WANDB_MODE=offline (a bare print,
        # outside its logging): imported here, the line goes, anything else it prints stays
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            importlib.import_module(WANDB_INTEGRATION)
        sys.stdout.write(printed.getvalue().replace(WANDB_OFFLINE_LINE, "", 1))


# the module of transformers that prints WANDB_OFFLINE_LINE on import
WANDB_INTEGRATION = "transformers.integrations.integration_utils"
WANDB_OFFLINE_LINE = "[INFO] Running in WANDB offline mode\n"


def run(cfg: DictConfig, out_dir: Path | None = None) -> None:
    """Run `cfg.task`. A UserError ends a single run with its one-line message and exit code 2; a run
    directory Hydra made for it alone (nothing of an earlier run in it) is removed, so a refused command
    leaves nothing behind.

    In a multirun sweep, a job that fails (for any reason) is logged, leaves `error.txt` in its own
    directory, and the sweep goes on with the next job.
    """
    command_line.composed()
    made_by_hydra = out_dir is None
    out_dir = out_dir or output_dir()
    fresh = made_by_hydra and _holds_only_hydras_files(out_dir)
    try:
        try:
            check_seed(cfg.seed)
            # a finished training run (the same command again, a sweep run again) is not launched or evaluated again
            if cfg.task == "train" and (finished := run_folder.finished_already(cfg, out_dir)):
                log.info(finished)
                return
            if not relaunch(cfg, out_dir):
                resolve(cfg.task)(cfg, out_dir)
            distributed.close()
        except Exception as exc:
            raise config_error(exc) or exc
    except (Interrupted, KeyboardInterrupt) as exc:
        # Ctrl-C: one sentence of what was kept (the task's own, else this), no traceback; a sweep stops too
        sentence = str(exc) if isinstance(exc, Interrupted) else (
            f"nothing of this task={cfg.task} run was kept; the same command starts it again")
        if sentence:
            _last_sentence(f"interrupted: {sentence}")
        # a folder the task already wrote into (a checkpoint, an evaluation) is what was kept
        if fresh and _holds_only_hydras_files(out_dir):
            command_line.remove_folder(out_dir)
        sys.exit(130)
    except Exception as exc:
        if in_multirun():
            log.exception("job failed; the sweep continues")
            (out_dir / "error.txt").write_text(traceback.format_exc())
            return
        exc = _damaged(exc, out_dir) or exc
        if isinstance(exc, UserError):
            _last_sentence(f"error: {exc}")
            if fresh and not run_folder.keeps_work(out_dir):
                command_line.remove_folder(out_dir)
            sys.exit(2)
        raise


# the way on from a disk that filled during a run (what the run kept stays: seal.tasks.run_folder.keeps_work)
FULL_DISK_ADVICE = "make room on it and run the same command again, which goes on from what the run kept"


def _damaged(exc: BaseException, out_dir: Path) -> UserError | None:
    """A file the run could not read back or could not write, as one sentence naming it (the run's folder when a
    full disk's error names no file; None otherwise)."""
    if isinstance(exc, DamagedFile):
        return UserError(f"{exc}; move it away (or restore it) and run the same command again")
    if unwritable(exc):
        advice = FULL_DISK_ADVICE if exc.errno in FULL else command_line.RUN_FOLDER_ADVICE
        return UserError(cannot_write(exc, advice, out_dir))
    return None


def check_seed(seed: object) -> None:
    """A seed is a whole number numpy can seed with, 0 to 2**32 - 1 (its seeding would otherwise fail deep in the run)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UserError(f"seed={seed}: give a whole number from 0 to {2**32 - 1} (e.g. seed=0)")


# what Hydra writes into a run directory before the task starts (its job log is named after run.py)
HYDRA_FILES = {".hydra", "run.log"}




def _holds_only_hydras_files(out_dir: Path) -> bool:
    return out_dir.is_dir() and {p.name for p in out_dir.iterdir()} <= HYDRA_FILES


def config_error(exc: Exception) -> UserError | None:
    """A value a config group's class refused (Hydra wraps the ValueError or TypeError of the
    constructor) as one sentence naming the group; None for anything else."""
    from hydra.errors import InstantiationException

    cause = exc.__cause__
    if not isinstance(exc, InstantiationException):
        return None
    if isinstance(cause, UserError):
        return cause  # already one sentence that names the key
    if not isinstance(cause, (ValueError, TypeError)):
        return None
    key = re.search(r"full_key: (\S+)", str(exc))
    group = key.group(1) if key else "config"
    return UserError(f"{group}: {cause}")


def _last_sentence(message: str) -> None:
    """A run's last line (what Ctrl-C kept, a user error): into run.log, then on the console's stderr below any
    progress bar the stop left drawn (printed once, not through the console's log handler)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(logging.LogRecord(__name__, logging.ERROR, __file__, 0, message, None, None))
    end_bars()
    print(message, file=sys.stderr)
