"""Crash-safe checkpoints: TRL's (model, optimizer, scheduler, RNG, data order) plus SEAL's state.

A checkpoint counts as complete only once `seal_state.json` is in it: that file is written last and
atomically, so a run killed mid-save resumes from the previous complete round. Old checkpoints are
deleted only after the new one is complete, a save that fails stops the run in one sentence with the
previous one intact, and a run whose checkpoints cannot fit its disk is refused before the model loads.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from transformers import TrainerCallback

from seal.errors import UserError
from seal.rl.distributed import Dist

SEAL_STATE = "seal_state.json"
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
GiB = 2**30
# AdamW keeps two fp32 moments per trained parameter
_ADAMW_BYTES = 8
# run.log only (the console shows the one-sentence error): the traceback of a failed save
_save_log = logging.getLogger("trainer.save")


def latest_complete_checkpoint(directory: Path) -> Path | None:
    done = _complete(directory)
    return done[-1] if done else None


def _complete(directory: Path) -> list[Path]:
    """The complete checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir()
             if (m := _CHECKPOINT.search(p.name)) and (p / SEAL_STATE).is_file()]
    return [p for _, p in sorted(found)]


def read_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / SEAL_STATE).read_text())


# -- how much disk a run's checkpoints and models take ------------------------------------------------

@dataclass(frozen=True)
class DiskNeed:
    """Bytes a training run writes, at their peak on its disk."""

    # one resumable checkpoint (one rank's part when sharded)
    checkpoint: int
    # checkpoints on disk at once
    at_once: int
    # one saved model (final_model/, best_model/)
    model: int
    models: int

    @property
    def total(self) -> int:
        return self.checkpoint * self.at_once + self.model * self.models


def disk_need(config: Any, *, dtype: str, keep: int | None, saves: int, models: int = 1, lora_params: int = 0,
              shards: int = 1) -> DiskNeed:
    """What the checkpoints and models of a run take on disk, from the architecture alone.

    A checkpoint holds the trained parameters in fp32 (full fine-tuning's master weights, or LoRA's
    adapters) and AdamW's two fp32 moments: 12 bytes per trained parameter (the tokenizer, scheduler,
    RNG and JSON files are a few MB whatever the model). Sharded over `shards` ranks, each rank writes its share. A new checkpoint is
    written whole before the oldest is deleted, so `keep` kept means keep + 1 on disk while one is
    saved (at most the `saves` the run makes; keep=None keeps all). A saved model is the full weights
    in the backbone's dtype, or LoRA's fp32 adapters."""
    from seal.policy.memory import _BYTES, param_count

    trained = lora_params or param_count(config)
    checkpoint = -(-trained * (4 + _ADAMW_BYTES) // shards)
    model = lora_params * 4 if lora_params else param_count(config) * _BYTES[dtype]
    at_once = saves if keep is None else min(keep + 1, saves)
    return DiskNeed(checkpoint=checkpoint, at_once=at_once, model=model, models=models)


def check_disk_space(need: DiskNeed, out_dir: Path, *, keep: int | None, dtype: str) -> None:
    """Refuse, in one sentence naming the figures and the fixes, a run whose outputs cannot fit the disk
    of `out_dir`. What an earlier attempt of the run left there (its checkpoints and models) is replaced
    as the run goes, so it counts as room."""
    free = shutil.disk_usage(_existing(out_dir)).free
    room = free + sum(_bytes_under(out_dir / name) for name in ("checkpoints", "final_model", "best_model", "validated"))
    if need.total <= room:
        return
    kept = "every checkpoint kept" if keep is None else f"trainer.keep_checkpoints={keep} kept"
    fixes = ["keep fewer (trainer.keep_checkpoints=1)"] if keep != 1 else []
    fixes += ["write no periodic checkpoints (trainer.save_every=null: the run cannot resume)",
              "put the run on a larger disk (hydra.run.dir=<directory>)"]
    raise UserError(
        f"this run needs about {need.total / GiB:.1f} GiB on the disk of {out_dir} but {room / GiB:.1f} GiB are free: "
        f"{need.at_once} checkpoint(s) of {need.checkpoint / GiB:.1f} GiB at once (fp32 weights and AdamW state; "
        f"{kept} plus the one being written) and {need.models} model(s) of {need.model / GiB:.1f} GiB "
        f"(final_model/, best_model/ in {dtype}); {', '.join(fixes[:-1])} or {fixes[-1]}"
    )


def run_disk_need(config: Any, cfg: Any, budget: Any, num_train: int, *, dtype: str, lora_params: int = 0,
                  shards: int = 1) -> DiskNeed:
    """disk_need of a task=train run of `cfg` on at most `num_train` train entries (the rounds, hence the saves,
    cannot be more); models: final_model/, best_model/ when validating, and every validated one with
    eval_all_checkpoints_on_test."""
    from seal.budget import validated_after

    tr = cfg.trainer
    rounds = budget.rounds_for(num_train)
    saves = rounds // tr.save_every if tr.save_every else 0
    validated = sum(validated_after(r, budget.val_every, rounds) for r in range(rounds))
    models = 1 + min(validated, 1) + (validated if cfg.get("eval_all_checkpoints_on_test") else 0)
    return disk_need(config, dtype=dtype, keep=tr.keep_checkpoints, saves=saves, models=models,
                     lora_params=lora_params, shards=shards)


def check_run_disk_space(backbone: Any, cfg: Any, budget: Any, out_dir: Path, num_train: int, shards: int = 1) -> None:
    """check_disk_space for task=train (run_disk_need), before the model is loaded."""
    from seal.policy.backbones import adapter_params

    config = backbone.model_config()
    if not config:
        return  # an unknown architecture: nothing to estimate from
    need = run_disk_need(config, cfg, budget, num_train, dtype=backbone.dtype,
                         lora_params=adapter_params(backbone, config), shards=shards)
    check_disk_space(need, out_dir, keep=cfg.trainer.keep_checkpoints, dtype=backbone.dtype)


def _existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def _bytes_under(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0


# -- writing checkpoints --------------------------------------------------------------------------------

# what the writers raise: OSError (ENOSPC, EDQUOT) from Python's own writes, RuntimeError from torch.save's zip
# writer ("PytorchStreamWriter failed writing file"), CUDA ("out of memory"), NCCL or gloo (a peer gone, a
# timeout), SafetensorError from safetensors, and torch.distributed.checkpoint's CheckpointException (a
# BaseException naming every rank's failure)
def _save_errors() -> tuple[type[BaseException], ...]:
    from safetensors import SafetensorError
    from torch.distributed.checkpoint.api import CheckpointException

    return (OSError, RuntimeError, SafetensorError, CheckpointException)


# errno values and messages of a disk that cannot take more
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "File too large",
                    "PytorchStreamWriter failed writing file")


def disk_full(error: BaseException | str) -> bool:
    """Whether a save failed because its disk (or quota) is full: the errno of an OSError, the errors DCP's
    CheckpointException wraps (one per failed rank), else the message (torch's zip writer's)."""
    if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
        return True
    if any(disk_full(inner) for inner in _wrapped(error)):
        return True
    return any(text in str(error) for text in _DISK_FULL_TEXTS)


def _wrapped(error: BaseException | str) -> list[BaseException]:
    """The errors a CheckpointException carries, by rank (torch.distributed.checkpoint: {rank: (error, trace)})."""
    failures = getattr(error, "failures", None)
    return [failures[rank][0] for rank in sorted(failures)] if isinstance(failures, dict) else []


def _summary(error: BaseException) -> str:
    """"Type: first line" of a failed save; for DCP's CheckpointException (whose first line lists only the
    ranks), of the first error it wraps."""
    inner = _wrapped(error)
    if inner:
        return f"{type(error).__name__} of {_summary(inner[0])}"
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {first}"


# how long a rank whose own save failed waits for the others to report theirs (seal.rl.distributed.Dist.report)
# before it stops alone: a rank that failed before one of the save's collectives (CUDA out of memory building its
# state dict, a file of its own) leaves the others blocked in that collective, and its exit ends the launch
# (torchrun stops every rank when one fails) instead of the collective's timeout, hours later
AGREE_SECONDS = 300.0
# this process's saves so far: each exchange of the launch's store gets keys of its own (every rank calls
# write_checkpoint as often, in the same order), so that a second save at one step never reads the first's
_saves = itertools.count()


def write_checkpoint(trainer: Any, save: Callable[[], None]) -> None:
    """TRL's checkpoint save (`save`), with transformers' rotation held back and its failure made one sentence.

    transformers deletes old checkpoints at the end of its save, before SealStateCallback marks the new
    one complete: with keep_checkpoints=1, a kill in between would leave no complete checkpoint. So the
    rotation waits for the marker (SealStateCallback.on_save). A save that raises on any rank stops the run on
    every rank: the ranks first agree on who failed and why (through the process group's store, not a collective,
    which a rank blocked in one of the save's own collectives could not reach), then the main rank alone removes
    the partial folder (its space is freed; the others may have been writing their part of it until then), and the
    previous complete checkpoint stays as it was. A failed rank that does not hear from every other rank within
    AGREE_SECONDS stops alone, naming itself; its partial folder stays (never resumed from, removed with the next
    checkpoint's rotation)."""
    args = trainer.args
    folder = Path(args.output_dir) / f"checkpoint-{trainer.state.global_step}"
    limit, args.save_total_limit = args.save_total_limit, None
    error = None
    try:
        save()
    except _save_errors() as exc:
        error = exc
        _save_log.warning("writing %s failed", folder, exc_info=exc)
    finally:
        args.save_total_limit = limit
    dist = Dist(rank=trainer.accelerator.process_index, world=trainer.accelerator.num_processes)
    failures, agreed = _agree_on_failures(dist, trainer.state.global_step, error)
    if not agreed and error is None:
        raise UserError(f"writing {folder} succeeded on rank {dist.rank}, but not every rank reported its part within "
                        "the process group's timeout (launch.timeout_minutes); a rank may have stopped or be stuck "
                        "(its log says which); the same command resumes from the last complete checkpoint")
    if failures:
        raise failed_save(folder, {rank: text for rank, (text, _) in failures.items()},
                          full=any(full for _, full in failures.values()),
                          remove=agreed and trainer.accelerator.is_main_process, ranks=dist.world)


def _agree_on_failures(dist: Dist, step: int, error: BaseException | None) -> tuple[dict[int, tuple[str, bool]], bool]:
    """{rank: ("Type: first line", whether its disk is full)} of the ranks whose save failed, the same on every
    rank, and whether every rank reported. Each rank judges its own error whole (an errno, a wrapped error, a later
    line), not its summary. DCP raises the same CheckpointException on every rank: the ranks it names are the ones
    that failed. A failed rank waits AGREE_SECONDS for the others; then its failure alone (not agreed)."""
    mine = None
    if error is not None:
        named = sorted(getattr(error, "failures", None) or {}) or None
        mine = [_summary(error), disk_full(error), named]
    gathered = dist.report(f"seal/save/{step}/{next(_saves)}", mine, None if error is None else AGREE_SECONDS)
    agreed = gathered is not None
    failures = {}
    for rank, failure in (enumerate(gathered) if agreed else [(dist.rank, mine)]):
        if failure is not None:
            text, full, named = failure
            failures.update({r: (text, full) for r in (named or [rank])})
    return failures, agreed



def failed_save(folder: Path, failures: dict[int, str], *, full: bool, remove: bool = True, ranks: int = 1) -> UserError:
    """The one sentence for a checkpoint that could not be written (`failures`: {rank: "Type: first line"}),
    once its partial folder is removed (by the rank that `remove`s it). A full disk is named as one, with the
    room left; anything else (CUDA out of memory, a collective that failed) is named as what it is."""
    # the free space of the disk it was written to, read from the folder that holds it: the main rank may be
    # removing the checkpoint folder itself at any moment while another rank writes this sentence
    free = shutil.disk_usage(_existing(folder.parent)).free
    if remove:
        shutil.rmtree(folder, ignore_errors=True)
    previous = latest_complete_checkpoint(folder.parent)
    kept = (f"{previous.name} is intact and the same command resumes from it" if previous is not None
            else "no earlier checkpoint exists, so the same command starts the training over")
    where = "" if ranks == 1 else f" on rank{'s' if len(failures) > 1 else ''} {', '.join(map(str, sorted(failures)))}"
    what = failures[min(failures)]
    if full:
        return UserError(
            f"writing {folder} failed{where} ({what}) with {free / GiB:.1f} GiB free on its disk; {kept} once there "
            f"is room (free space, lower trainer.keep_checkpoints, or set trainer.save_every=null to write no "
            f"periodic checkpoints)"
        )
    return UserError(f"writing {folder} failed{where} ({what}), which is not a full disk; {kept} once the cause is "
                     "fixed (its traceback is in run.log)")


def rotate_checkpoints(directory: Path, keep: int | None) -> None:
    """Delete every checkpoint but the newest `keep` complete ones (None: keep every complete one).
    Incomplete folders (no seal_state.json: a save killed midway) are never resumed from and go too."""
    complete = _complete(directory)
    kept = set(complete if keep is None else complete[-keep:])
    for path in directory.iterdir():
        if _CHECKPOINT.search(path.name) and path not in kept:
            shutil.rmtree(path, ignore_errors=True)


def save_final_model(trainer_or_model: Any, folder: Path, dtype: str | None, *, write: bool = True) -> None:
    """The trained weights as a model transformers loads (AutoModelForCausalLM), in the backbone's dtype.

    Full fine-tuning trains fp32 master weights; the model is run and shipped in the compute dtype, at
    half the disk with bf16. A LoRA model writes its adapters as peft does (fp32, as trained; the frozen
    base is the backbone's own). dtype=None keeps the weights' own dtype. Given a trainer, its tokenizer
    is written beside the weights, as Trainer.save_model does.

    Every rank calls it: an FSDP2-sharded model is gathered into one full state dict collectively
    (seal.policy.weights.full_state_dict), and only the rank with `write` (the main one) keeps and writes it."""
    import torch
    from transformers import Trainer

    from seal.policy.weights import full_state_dict
    from seal.rl.sharding import require_plain

    trainer = trainer_or_model if isinstance(trainer_or_model, Trainer) else None
    model = trainer.model if trainer is not None else trainer_or_model
    model = getattr(model, "module", model)  # a DDP wrapper
    if write and folder.exists():
        shutil.rmtree(folder)
    if getattr(model, "peft_config", None):
        require_plain(model, "writing LoRA adapters")
        if write:
            model.save_pretrained(folder)
    else:
        state = full_state_dict(model, None if dtype is None else getattr(torch, dtype), keep=write)
        if write:
            model.save_pretrained(folder, state_dict=state)
        if write and dtype is not None:
            # save_pretrained records the weights' own dtype (fp32): AutoModelForCausalLM's dtype="auto" reads this
            config = json.loads((folder / "config.json").read_text())
            (folder / "config.json").write_text(json.dumps(config | {"dtype": dtype}, indent=2, sort_keys=True) + "\n")
    if write and trainer is not None and trainer.processing_class is not None:
        trainer.processing_class.save_pretrained(folder)


def replay_epoch_order(loader: Any, epoch: int) -> None:
    """Put TRL's prompt sampler where an uninterrupted run has it at the start of `epoch`.

    TRL's RepeatSampler draws each epoch's prompt order (one randperm) from a generator seeded once, when
    the sampler is built, and has no set_epoch: a process resumed in epoch k would draw epoch 0's order,
    and every later epoch would lag k behind. Re-seeding it and drawing the k orders before makes the
    next order epoch k's (for an uninterrupted run this changes nothing)."""
    import torch

    sampler = _repeat_sampler(loader)
    if sampler is None or not sampler.shuffle or sampler.seed is None:
        return
    sampler.generator.manual_seed(sampler.seed)
    for _ in range(epoch):
        torch.randperm(sampler.num_samples, generator=sampler.generator)


def _repeat_sampler(node: Any) -> Any:
    """The RepeatSampler under a data loader (accelerate wraps the batch sampler once more per rank split)."""
    from trl.trainer.utils import RepeatSampler

    while node is not None and not isinstance(node, RepeatSampler):
        inner = getattr(node, "batch_sampler", None)
        node = inner if inner is not None else getattr(node, "sampler", None)
    return node


def _epoch(state: Any) -> int:
    """The epoch about to start: TrainerState.epoch is whole at an epoch's end (epoch + steps/steps) and
    is restored with a checkpoint (e.g. 1.5 midway through epoch 1)."""
    return int(state.epoch or 0)


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

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs):
        replay_epoch_order(train_dataloader, _epoch(state))
        return control

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
        import torch.distributed as dist

        # every rank has written its part (its RNG state at least) before the checkpoint is marked complete
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            tmp = folder / (SEAL_STATE + ".tmp")
            try:
                tmp.write_text(json.dumps(self.coevolution.state_dict()))
                os.replace(tmp, folder / SEAL_STATE)
            except OSError as exc:
                _save_log.warning("writing %s failed", folder, exc_info=exc)
                raise failed_save(folder, {0: _summary(exc)}, full=disk_full(exc)) from exc
            rotate_checkpoints(folder.parent, args.save_total_limit)
        return control
