"""Checkpoints that fit: the disk estimate and its refusal, rotation after the marker, a failed save that
keeps the previous checkpoint, the final model in the backbone's dtype, and each epoch's prompt order."""

import errno
import json
import os
from collections import namedtuple

from datetime import timedelta
from functools import partial

import pytest
import torch

from seal.errors import UserError
from seal.rl.checkpoint import (
    SEAL_STATE, check_disk_space, disk_need, latest_complete_checkpoint, replay_epoch_order, rotate_checkpoints,
    run_disk_need, save_final_model,
)
from tests.marks import slow_except
from tests.rl.test_loop import TINY, rounds
from tests.test_configs import compose_with

GiB = 2**30
# Qwen2.5-3B-Instruct's published config.json, and its model card's parameter count
QWEN25_3B = {"model_type": "qwen2", "hidden_size": 2048, "num_hidden_layers": 36, "num_attention_heads": 16,
             "num_key_value_heads": 2, "intermediate_size": 11008, "vocab_size": 151936, "tie_word_embeddings": True}
QWEN25_3B_PARAMS = 3.09e9
Usage = namedtuple("Usage", "total used free")


def test_a_3b_checkpoint_is_fp32_weights_and_adamw_state():
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=72, models=1)
    # 4 bytes of fp32 weights + 8 of AdamW moments per parameter: 3.09e9 x 12 B = 34.5 GiB (the 35 GB measured)
    assert need.checkpoint == pytest.approx(QWEN25_3B_PARAMS * 12, rel=0.005)
    assert need.checkpoint / GiB == pytest.approx(34.5, abs=0.1)
    # two kept and the next one written before the oldest goes; final_model/ in bf16: 2 bytes a parameter
    assert need.at_once == 3 and need.model == pytest.approx(QWEN25_3B_PARAMS * 2, rel=0.005)
    assert need.total == 3 * need.checkpoint + need.model
    # one rank's share of a checkpoint sharded over 4 ranks; the saved model is gathered whole
    sharded = disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=72, shards=4)
    assert sharded.checkpoint == pytest.approx(need.checkpoint / 4, abs=1) and sharded.model == need.model
    # a run that saves twice never holds three; keep=None keeps every one of its saves
    assert disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=2).at_once == 2
    assert disk_need(QWEN25_3B, dtype="bfloat16", keep=None, saves=12).at_once == 12


def test_a_lora_checkpoint_holds_only_the_adapters():
    # 1M adapter parameters: fp32 + AdamW = 12 MB per checkpoint; the saved model is the fp32 adapters
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=12, models=2, lora_params=10**6)
    assert (need.checkpoint, need.model, need.at_once) == (12 * 10**6, 4 * 10**6, 2)
    assert need.total == 2 * 12 * 10**6 + 2 * 4 * 10**6


def test_a_run_whose_checkpoints_cannot_fit_the_disk_is_refused(tmp_path, monkeypatch):
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=72)
    # the measured disk: 64 GB free, and 3 x 34.5 + 5.8 = 109 GiB needed
    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 10**12 - 64 * 10**9, 64 * 10**9))
    with pytest.raises(UserError) as err:
        check_disk_space(need, tmp_path, keep=2, dtype="bfloat16")
    message = str(err.value)
    assert "\n" not in message and f"{need.total / GiB:.1f} GiB" in message and "59.6 GiB are free" in message
    assert "3 checkpoint(s) of 34.5 GiB" in message
    assert all(fix in message for fix in ("trainer.keep_checkpoints=1", "trainer.save_every=null", "hydra.run.dir"))
    # keep 1 and no periodic checkpoint (the authors' cadence) fit 64 GB; 60 GiB do not hold two 34.5 GiB ones
    check_disk_space(disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=0), tmp_path, keep=1, dtype="bfloat16")
    with pytest.raises(UserError):
        check_disk_space(disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=12), tmp_path, keep=1,
                         dtype="bfloat16")


def test_what_an_earlier_attempt_left_counts_as_room(tmp_path, monkeypatch):
    # a resumed run replaces its old checkpoint: 35 GiB free plus the 40 GiB already there hold the 2 x 34.5 GiB
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=12, models=0)
    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, 35 * GiB))
    with pytest.raises(UserError) as err:
        check_disk_space(need, tmp_path, keep=1, dtype="bfloat16")
    # keeping one already, the sentence does not offer to keep one
    assert "keep_checkpoints=1)" not in str(err.value) and "trainer.keep_checkpoints=1 kept" in str(err.value)
    old = tmp_path / "checkpoints" / "checkpoint-24"
    old.mkdir(parents=True)
    with open(old / "optimizer.pt", "wb") as fh:
        fh.truncate(40 * GiB)  # sparse: its size counts, no disk is used
    check_disk_space(need, tmp_path, keep=1, dtype="bfloat16")


def test_task_train_refuses_before_writing_anything(tmp_path, monkeypatch):
    from seal.tasks.train import train

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**9, 10**9 - 2**20, 2**20))
    with pytest.raises(UserError, match="this run needs about .* GiB on the disk of"):
        train(compose_with(*TINY, "logger.mode=disabled"), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_old_checkpoints_go_only_once_the_new_one_is_complete(tmp_path):
    for step in (1, 2, 3, 4, 5):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (2, 3, 4):
        (tmp_path / f"checkpoint-{step}" / SEAL_STATE).write_text("{}")
    # 5 is being written (no marker yet): 2 and 3 would be deleted by an eager rotation keeping 2
    rotate_checkpoints(tmp_path, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2", "checkpoint-3", "checkpoint-4"]
    rotate_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3", "checkpoint-4"]
    assert latest_complete_checkpoint(tmp_path).name == "checkpoint-4"


def test_the_fingerprint_ignores_the_checkpoint_cadence():
    from seal.io import config_fingerprint

    base = config_fingerprint(compose_with())
    assert config_fingerprint(compose_with("trainer.keep_checkpoints=1", "budget.save_every=3")) == base
    assert config_fingerprint(compose_with("trainer.learning_rate=2e-6")) != base


def test_the_final_model_is_the_masters_in_the_backbones_dtype(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from seal.policy.backbones import TinyRandomBackbone

    model = TinyRandomBackbone(dtype="bfloat16").load(training=True).model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)  # digits bf16 cannot hold
    masters = {k: v.clone() for k, v in model.state_dict().items()}
    assert all(v.dtype == torch.float32 for v in masters.values())
    save_final_model(model, tmp_path / "final_model", "bfloat16")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final_model")
    state = loaded.state_dict()
    assert state.keys() == masters.keys()
    for name, master in masters.items():
        assert state[name].dtype == torch.bfloat16 and torch.equal(state[name], master.to(torch.bfloat16)), name
    # the tied head is written once, as transformers writes it
    assert "lm_head.weight" not in load_file(tmp_path / "final_model" / "model.safetensors")


def _orders(sampler, epochs):
    return [list(sampler) for _ in range(epochs)]


def test_a_resumed_sampler_draws_the_epochs_order_not_epoch_0s():
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, DataLoader
    from trl.trainer.utils import RepeatSampler

    def sampler():
        return RepeatSampler(list(range(7)), mini_repeat_count=2, batch_size=2, repeat_count=3, seed=5)

    uninterrupted = _orders(sampler(), 3)
    # TRL's sampler, built afresh as a resumed process builds it, replays epoch 0 whatever the epoch
    assert list(sampler()) == uninterrupted[0] != uninterrupted[2]
    for epoch in range(3):
        fresh = sampler()
        replay_epoch_order(DataLoader(list(range(7)), sampler=fresh, batch_size=6), epoch)
        assert _orders(fresh, 3 - epoch) == uninterrupted[epoch:]
    # found under accelerate's per-rank split too
    fresh = sampler()
    replay_epoch_order(BatchSamplerShard(BatchSampler(fresh, 6, drop_last=False), num_processes=2), 2)
    assert list(fresh) == uninterrupted[2]


# fp32 in the default suite; bf16 (about 2.5 min on two cores without bf16 instructions) in `make test-slow`,
# and test_the_final_model_is_the_masters_in_the_backbones_dtype converts fp32 masters to bf16 in the default suite
@pytest.fixture(scope="module", params=slow_except(["float32", "bfloat16"], {"float32"}))
def failed_save(tmp_path_factory, request):
    """A tiny-random run whose second checkpoint hits a full disk, then the same command again."""
    from seal.tasks import train

    out = tmp_path_factory.mktemp("failed_save")
    dtype = request.param
    cfg = compose_with(*TINY, f"backbone.dtype={dtype}", "budget.heldout_entries_per_category=0", "logger.mode=disabled")
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if "checkpoint-2" in str(f):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(f))
        return real_save(obj, f, *args, **kwargs)

    torch.save = full_disk
    try:
        with pytest.raises(UserError) as err:
            train.train(cfg, out)
    finally:
        torch.save = real_save
    after_failure = {"message": str(err.value), "rounds": rounds(out),
                     "checkpoints": sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))}
    train.train(cfg, out)
    return out, after_failure, dtype


def test_a_failed_save_stops_in_one_sentence_and_keeps_the_previous_checkpoint(failed_save):
    out, after, _ = failed_save
    message = after["message"]
    assert "\n" not in message and "No space left on device" in message and "checkpoint-2" in message
    assert "checkpoint-1 is intact and the same command resumes from it" in message
    # the partial checkpoint-2 (its weights were written before a torch.save failed) is gone
    assert after["checkpoints"] == ["checkpoint-1"]
    # the same command resumed from checkpoint-1 and replayed round 1 exactly as the failed attempt played it
    assert len(after["rounds"]) == 2 and rounds(out) == after["rounds"]
    assert json.loads((out / "metrics.json").read_text())["rounds"] == 2


def test_the_final_model_of_a_run_is_its_last_masters_in_the_backbones_dtype(failed_save):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out, _, dtype = failed_save
    masters = load_file(out / "checkpoints" / "checkpoint-2" / "model.safetensors")
    assert all(v.dtype == torch.float32 for v in masters.values())
    final = AutoModelForCausalLM.from_pretrained(out / "final_model").state_dict()
    assert json.loads((out / "final_model" / "config.json").read_text())["dtype"] == dtype
    for name, master in masters.items():
        assert final[name].dtype == getattr(torch, dtype) and torch.equal(final[name], master.to(final[name].dtype)), name
    assert (out / "final_model" / "tokenizer.json").is_file()


def test_the_estimate_matches_what_transformers_writes(failed_save):
    from seal.policy.backbones import TinyRandomBackbone

    out, _, dtype = failed_save
    config = TinyRandomBackbone().model_config()
    need = disk_need(config, dtype=dtype, keep=2, saves=2)
    # the weights and AdamW's state as written (the rest, tokenizer and RNG files, is a few MB whatever the model)
    written = out / "checkpoints" / "checkpoint-2"
    assert (written / "model.safetensors").stat().st_size + (written / "optimizer.pt").stat().st_size == pytest.approx(
        need.checkpoint, rel=0.01)
    assert (out / "final_model" / "model.safetensors").stat().st_size == pytest.approx(need.model, rel=0.01)


def test_the_refusal_is_one_sentence_with_the_figures_by_hand(tmp_path, monkeypatch):
    # Qwen2.5-3B: 3,085,938,688 parameters; 12 B each = 34.5 GiB a checkpoint, 2 B each = 5.7 GiB in bf16;
    # 3 x 34.49 + 5.75 = 109.2 GiB against 64e9 B = 59.6 GiB free
    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, 64 * 10**9))
    with pytest.raises(UserError) as err:
        check_disk_space(disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=72), tmp_path, keep=2, dtype="bfloat16")
    assert str(err.value) == (
        f"this run needs about 109.2 GiB on the disk of {tmp_path} but 59.6 GiB are free: 3 checkpoint(s) of "
        "34.5 GiB at once (fp32 weights and AdamW state; trainer.keep_checkpoints=2 kept plus the one being "
        "written) and 1 model(s) of 5.7 GiB (final_model/, best_model/ in bfloat16); keep fewer "
        "(trainer.keep_checkpoints=1), write no periodic checkpoints (trainer.save_every=null: the run cannot "
        "resume) or put the run on a larger disk (hydra.run.dir=<directory>)")
    with pytest.raises(UserError, match=r"\(fp32 weights and AdamW state; every checkpoint kept plus the one"):
        check_disk_space(disk_need(QWEN25_3B, dtype="float32", keep=None, saves=3), tmp_path, keep=None,
                         dtype="float32")


def test_a_run_fits_when_it_needs_exactly_the_room_and_every_left_over_folder_counts(tmp_path, monkeypatch):
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=1, models=1, lora_params=10**6)
    assert need.total == 12 * 10**6 + 4 * 10**6
    seen = []

    def usage(path):
        seen.append(path)
        return Usage(10**12, 0, need.total - 4000)

    monkeypatch.setattr("shutil.disk_usage", usage)
    out = tmp_path / "run"
    with pytest.raises(UserError):
        check_disk_space(need, out / "not" / "made", keep=1, dtype="bfloat16")
    assert seen == [tmp_path]  # the nearest folder that exists
    # 1000 bytes under each of the four folders an earlier attempt leaves, one of them nested: exactly the room
    for name in ("checkpoints/checkpoint-3/sub", "final_model", "best_model", "validated/round_0001"):
        (out / name).mkdir(parents=True)
        (out / name / "weights").write_bytes(b"x" * 1000)
    (out / "elsewhere").mkdir()
    (out / "elsewhere" / "weights").write_bytes(b"x" * 1000)
    check_disk_space(need, out, keep=1, dtype="bfloat16")
    (out / "validated" / "round_0001" / "weights").write_bytes(b"x" * 999)
    with pytest.raises(UserError):
        check_disk_space(need, out, keep=1, dtype="bfloat16")
    # no earlier attempt: the free space alone, one byte short
    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, need.total - 1))
    with pytest.raises(UserError):
        check_disk_space(need, tmp_path / "fresh", keep=1, dtype="bfloat16")


def test_ceil_shares_and_one_model_by_default():
    need = disk_need(QWEN25_3B, dtype="bfloat16", keep=1, saves=1, lora_params=1, shards=5)
    assert (need.checkpoint, need.models) == (3, 1)  # 12 bytes over 5 ranks: 3 on the largest share


def test_the_runs_saves_and_models_from_its_budget(tmp_path, monkeypatch):
    import seal.rl.checkpoint as checkpoint_module
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    needs = []
    monkeypatch.setattr(checkpoint_module, "check_disk_space", lambda need, out, keep, dtype: needs.append(
        (need, out, keep, dtype)))
    backbone = SimpleNamespace(model_config=lambda: QWEN25_3B, lora=None, dtype="bfloat16")
    # a budget of budget=paper's 66 rounds (the release's 6 epochs, each of 11 rounds of 32 once budget=paper carves
    # its validation entries from train, 352 entries left; the release, on all 400, has 12; the paper gives no
    # count), validated every 10 and after the last (7 times), a checkpoint every 10 and two kept (not
    # budget=paper's 6 and 1: numbers whose saves are easy to count by hand)
    budget = SimpleNamespace(rounds_for=lambda n: {200: 66}[n], val_every=10)

    def need_of(**trainer):
        cfg = OmegaConf.create({"trainer": {"save_every": 10, "keep_checkpoints": 2} | trainer})
        checkpoint_module.check_run_disk_space(backbone, cfg, budget, tmp_path, 200, shards=4)
        return needs[-1]

    need, out, keep, dtype = need_of()
    assert (out, keep, dtype) == (tmp_path, 2, "bfloat16")
    # what the preflight and the memory bench ask for: a full fine-tune (no adapters) written by one rank
    full_one_rank = run_disk_need(QWEN25_3B, OmegaConf.create({"trainer": {"save_every": 10, "keep_checkpoints": 2}}),
                                  budget, 200, dtype="bfloat16")
    assert full_one_rank == disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=6, models=2, lora_params=0, shards=1)
    # 6 saves (rounds 10..60), 3 at once; final_model/ and best_model/
    assert need == disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=6, models=2, shards=4)
    assert need_of(keep_checkpoints=None)[0].at_once == 6  # every one of the 6 kept
    assert need_of(save_every=None, keep_checkpoints=None)[0].at_once == 0
    cfg = OmegaConf.create({"trainer": {"save_every": 10, "keep_checkpoints": 2}, "eval_all_checkpoints_on_test": True})
    checkpoint_module.check_run_disk_space(backbone, cfg, budget, tmp_path, 200)
    assert needs[-1][0].models == 2 + 7  # and every validated model
    assert needs[-1][0].checkpoint == disk_need(QWEN25_3B, dtype="bfloat16", keep=2, saves=6).checkpoint  # one rank
    # without validation only final_model/
    budget.val_every = None
    assert need_of()[0].models == 1
    # LoRA: the adapters are what a checkpoint holds
    backbone.lora = {"r": 16}
    from seal.policy.memory import lora_param_count

    assert need_of()[0].checkpoint == -(-lora_param_count(QWEN25_3B, 16, "all-linear") * 12 // 4)


def test_a_failed_save_is_one_sentence_naming_what_the_same_command_does(tmp_path, monkeypatch):
    from seal.rl.checkpoint import failed_save

    asked = []
    monkeypatch.setattr("shutil.disk_usage", lambda path: asked.append(path) or Usage(10**12, 0, 3 * GiB // 2))
    partial = tmp_path / "checkpoint-2"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    error = failed_save(partial, {0: "OSError: [Errno 28] No space left on device"}, full=True)
    # the free space of the disk it was written to, read from the folder holding it: on another rank the folder
    # itself may be gone by then (the main rank removes it), and a free-space read of it would raise instead
    assert asked == [tmp_path]
    assert not partial.exists() and str(error) == (
        f"writing {partial} failed (OSError: [Errno 28] No space left on device) with 1.5 GiB free on its disk; "
        "no earlier checkpoint exists, so the same command starts the training over once there is room (free "
        "space, lower trainer.keep_checkpoints, or set trainer.save_every=null to write no periodic checkpoints)")
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / SEAL_STATE).write_text("{}")
    error = failed_save(tmp_path / "checkpoint-2", {0: "RuntimeError: PytorchStreamWriter failed"}, full=True)
    assert "; checkpoint-1 is intact and the same command resumes from it once there is room" in str(error)


@pytest.mark.parametrize("error, full", [
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
    (RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/7: "
                  "file write failed"), True),
    # DCP's exception wraps each failed rank's error: judged by the OSError's errno, whatever its text
    ("dcp", True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"), False),
    (OSError(errno.EACCES, "Permission denied"), False),
])
def test_a_full_disk_is_told_apart_from_other_failures(error, full):
    from seal.rl.checkpoint import disk_full

    if error == "dcp":
        error = _dcp_failure(OSError(errno.EDQUOT, "write failed"))
        assert "Disk quota" not in str(error)
    assert disk_full(error) is full
    if full:  # the same error wrapped by DCP, on rank 1 of two
        assert disk_full(_dcp_failure(error)) is True
    else:
        assert disk_full(_dcp_failure(error)) is False


def _dcp_failure(error: BaseException, rank: int = 1):
    """The CheckpointException torch.distributed.checkpoint raises (on every rank) when `rank`'s write raised
    `error`: its first line lists the ranks, each rank's error follows with its traceback."""
    import traceback

    from torch.distributed.checkpoint.api import CheckpointException

    return CheckpointException("save failed", {rank: (error, traceback.StackSummary.from_list([]))})


def test_a_sharded_save_failing_on_a_full_disk_is_named_from_the_error_dcp_wraps(tmp_path, monkeypatch):
    """DCP (the sharded save) raises a CheckpointException whose first line is only "CheckpointException
    ranks:dict_keys([1])": the sentence names the wrapped error, and a full disk as one."""
    from types import SimpleNamespace

    from seal.rl.checkpoint import write_checkpoint

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, GiB // 4))
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path), save_total_limit=1),
                              state=SimpleNamespace(global_step=3),
                              accelerator=SimpleNamespace(is_main_process=True, num_processes=1, process_index=0))

    def save(error):
        (tmp_path / "checkpoint-3").mkdir()
        raise _dcp_failure(error)

    with pytest.raises(UserError) as caught:
        write_checkpoint(trainer, lambda: save(OSError(errno.ENOSPC, "No space left on device")))
    assert str(caught.value).startswith(
        f"writing {tmp_path / 'checkpoint-3'} failed (CheckpointException of OSError: [Errno 28] No space left on "
        "device) with 0.2 GiB free on its disk; no earlier checkpoint exists")
    assert not (tmp_path / "checkpoint-3").exists()
    with pytest.raises(UserError) as caught:
        write_checkpoint(trainer, lambda: save(RuntimeError("NCCL error: unhandled system error\nmore")))
    assert str(caught.value) == (
        f"writing {tmp_path / 'checkpoint-3'} failed (CheckpointException of RuntimeError: NCCL error: unhandled "
        "system error), which is not a full disk; no earlier checkpoint exists, so the same command starts the "
        "training over once the cause is fixed (its traceback is in run.log)")


def test_a_failed_save_that_is_not_a_full_disk_is_named_as_what_it_is(tmp_path, monkeypatch):
    from seal.rl.checkpoint import failed_save

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, 900 * GiB))
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / SEAL_STATE).write_text("{}")
    error = failed_save(tmp_path / "checkpoint-2", {1: "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"},
                        full=False, ranks=4)
    assert str(error) == (
        f"writing {tmp_path / 'checkpoint-2'} failed on rank 1 (RuntimeError: CUDA out of memory. Tried to allocate "
        "2.00 GiB), which is not a full disk; checkpoint-1 is intact and the same command resumes from it once the "
        "cause is fixed (its traceback is in run.log)")
    assert "free" not in str(error)
    two = failed_save(tmp_path / "checkpoint-2", {3: "RuntimeError: b", 2: "RuntimeError: a"}, full=False, ranks=4)
    assert " failed on ranks 2, 3 (RuntimeError: a)," in str(two)


def _save_on_two_ranks(rank: int, out, blocked: bool = False) -> None:
    """Rank 1's save fails at once (CUDA out of memory); rank 0 is still writing its part for a second. `blocked`:
    rank 0's save then enters one of the save's collectives (a barrier), which rank 1 never reaches; rank 1 waits
    3 s for its report, stops alone, and its error ends the launch (as torchrun's would: rank 0 ends in the barrier)."""
    import time
    from types import SimpleNamespace

    import torch.distributed
    from accelerate import PartialState

    import seal.rl.checkpoint as checkpoint

    checkpoint.AGREE_SECONDS = 3.0
    # the group's collectives give up after 90 s (accelerate's default: 30 min), so that an agreement through a
    # collective, which would pair with rank 0's barrier, fails this test instead of hanging it
    state = PartialState(cpu=True, timeout=timedelta(seconds=90))
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(out), save_total_limit=1),
                              state=SimpleNamespace(global_step=4),
                              accelerator=SimpleNamespace(is_main_process=state.is_main_process,
                                                          num_processes=state.num_processes,
                                                          process_index=state.process_index))
    folder = out / "checkpoint-4"

    def save():
        folder.mkdir(exist_ok=True)
        if rank == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore")
        time.sleep(1.0)
        (folder / "rank0_part").write_text("written after rank 1 failed")
        if blocked:
            try:
                torch.distributed.barrier()
            except RuntimeError:  # gloo: the peer went; on a GPU node torchrun would stop this rank here
                os._exit(1)

    try:
        checkpoint.write_checkpoint(trainer, save)
    except UserError as exc:
        (out / f"error{rank}.txt").write_text(str(exc))
        if blocked:
            raise


def test_the_ranks_agree_on_every_failure_and_only_the_main_rank_removes_the_folder(tmp_path, monkeypatch):
    """The agreement as each rank sees it, with the store's exchange stubbed as a 3-rank one: this rank (1)
    succeeded, ranks 0 and 2 failed; every rank raises the same sentence, and rank 1 removes nothing."""
    from types import SimpleNamespace

    from seal.rl.checkpoint import AGREE_SECONDS, write_checkpoint
    from seal.rl.distributed import Dist

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, GiB))
    reported = []

    def report(others):
        def exchange(self, key, item, seconds=None):
            reported.append((self.rank, self.world, key, item, seconds))
            return None if others is None else [item if o == "mine" else o for o in others]
        return exchange

    monkeypatch.setattr(Dist, "report", report([["OSError: [Errno 28] No space left on device", True, None], "mine",
                                                ["RuntimeError: other", False, None]]))
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path), save_total_limit=1),
                              state=SimpleNamespace(global_step=6),
                              accelerator=SimpleNamespace(is_main_process=False, num_processes=3, process_index=1))
    folder = tmp_path / "checkpoint-6"
    with pytest.raises(UserError) as caught:
        write_checkpoint(trainer, lambda: folder.mkdir())
    # this rank's save succeeded: it waits as long as the process group would (no bound of its own)
    ((rank, world, key, item, seconds),) = reported
    assert (rank, world, item, seconds) == (1, 3, None, None) and key.startswith("seal/save/6/")
    assert folder.is_dir()  # left to the main rank
    assert str(caught.value).startswith(f"writing {folder} failed on ranks 0, 2 (OSError: [Errno 28] No space left on "
                                        "device) with 1.0 GiB free on its disk; ")
    # of two ranks, this one (rank 1) failed: the sentence names it, from what the exchange returned, and it waited
    # AGREE_SECONDS at most
    def out_of_memory():
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(Dist, "report", report([None, "mine"]))
    trainer.accelerator.num_processes = 2
    with pytest.raises(UserError, match=f"^writing {folder} failed on rank 1 \\(RuntimeError: CUDA out of memory\\), "
                                        "which is not a full disk; "):
        write_checkpoint(trainer, out_of_memory)
    assert reported[-1][:2] + reported[-1][3:] == (1, 2, ["RuntimeError: CUDA out of memory", False, None], AGREE_SECONDS)
    # a second save at the same step exchanges under keys of its own, never reading the first one's
    assert reported[-1][2].startswith("seal/save/6/") and reported[-1][2] != key
    # the others never reported (blocked in a collective of the save that waits for this rank): this rank stops
    # alone, naming itself, and even the main rank leaves the folder (another rank may be writing into it)
    monkeypatch.setattr(Dist, "report", report(None))
    trainer.accelerator.is_main_process, trainer.accelerator.process_index = True, 0
    with pytest.raises(UserError, match=f"^writing {folder} failed on rank 0 \\(RuntimeError: CUDA out of memory\\), "):
        write_checkpoint(trainer, out_of_memory)
    assert folder.is_dir()
    # a rank whose save succeeded but that heard from not every rank within the group's timeout says so
    with pytest.raises(UserError) as caught:
        write_checkpoint(trainer, lambda: None)
    assert str(caught.value) == (
        f"writing {folder} succeeded on rank 0, but not every rank reported its part within the process group's "
        "timeout (launch.timeout_minutes); a rank may have stopped or be stuck (its log says which); the same command "
        "resumes from the last complete checkpoint")
    trainer.accelerator.is_main_process, trainer.accelerator.process_index = False, 1
    # DCP raises the same CheckpointException on every rank: the sentence names the rank whose write failed (2)
    monkeypatch.setattr(Dist, "report", lambda self, key, item, seconds=None: [item] * 3)
    trainer.accelerator.num_processes = 3
    with pytest.raises(UserError, match=f"^writing {folder} failed on rank 2 \\(CheckpointException of OSError: "
                                        "\\[Errno 28\\] No space left on device\\) with 1.0 GiB free on its disk; "):
        write_checkpoint(trainer, lambda: (_ for _ in ()).throw(_dcp_failure(OSError(errno.ENOSPC, "No space left on "
                                                                                    "device"), rank=2)))
    # one process exchanges nothing (Dist.report returns its own item without touching a store)
    monkeypatch.undo()
    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, GiB))
    import torch.distributed.distributed_c10d as c10d

    monkeypatch.setattr(c10d, "_get_default_store", lambda: pytest.fail("a single process used the store"))
    trainer.accelerator.num_processes, trainer.accelerator.process_index = 1, 0
    with pytest.raises(UserError, match=f"^writing {folder} failed \\(RuntimeError: CUDA out of memory\\), which is"):
        write_checkpoint(trainer, out_of_memory)
    trainer.accelerator.num_processes = 3
    # all succeeded: nothing raised, nothing removed
    monkeypatch.setattr(Dist, "report", lambda self, key, item, seconds=None: [None, None, None])
    write_checkpoint(trainer, lambda: None)
    assert folder.is_dir()


@pytest.mark.costly
def test_a_save_failing_on_one_rank_stops_every_rank_and_its_folder_goes_once_all_have_stopped(tmp_path):
    """The ranks agree first (a collective), then the main rank removes the partial folder: a rank that fails early
    must not remove the folder while another is still writing its part into it."""
    from tests.rl.ranks import run_ranks

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / SEAL_STATE).write_text("{}")
    run_ranks(_save_on_two_ranks, 2, tmp_path)
    errors = [(tmp_path / f"error{rank}.txt").read_text() for rank in (0, 1)]
    assert errors[0] == errors[1] == (
        f"writing {tmp_path / 'checkpoint-4'} failed on rank 1 (RuntimeError: CUDA out of memory. Tried to allocate "
        "2.00 GiB), which is not a full disk; checkpoint-2 is intact and the same command resumes from it once the "
        "cause is fixed (its traceback is in run.log)")
    assert not (tmp_path / "checkpoint-4").exists()
    assert (tmp_path / "checkpoint-2" / SEAL_STATE).is_file()


@pytest.mark.costly
def test_a_rank_whose_save_failed_before_a_collective_the_others_wait_in_stops_alone_and_leaves_the_folder(tmp_path):
    """Rank 1 fails before a collective of the save that rank 0 has entered: a collective agreement would pair
    with that one and hang until the group's timeout. Rank 1 hears from no one within AGREE_SECONDS (3 s here),
    raises its own sentence and ends the launch; the partial folder stays (rank 0 was writing into it), for the
    next checkpoint's rotation to remove, and the previous checkpoint is untouched."""
    import time

    from seal.rl.checkpoint import rotate_checkpoints
    from tests.rl.ranks import run_ranks

    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / SEAL_STATE).write_text("{}")
    began = time.monotonic()
    with pytest.raises(Exception, match="process [01] terminated|CUDA out of memory"):  # the launch ends in failure
        run_ranks(partial(_save_on_two_ranks, blocked=True), 2, tmp_path)
    assert time.monotonic() - began < 60  # well inside the group's own timeout (90 s here)
    assert (tmp_path / "error1.txt").read_text() == (
        f"writing {tmp_path / 'checkpoint-4'} failed on rank 1 (RuntimeError: CUDA out of memory. Tried to allocate "
        "2.00 GiB), which is not a full disk; checkpoint-2 is intact and the same command resumes from it once the "
        "cause is fixed (its traceback is in run.log)")
    assert not (tmp_path / "error0.txt").exists()  # rank 0 was in the barrier when the launch ended
    assert (tmp_path / "checkpoint-4" / "rank0_part").is_file()
    rotate_checkpoints(tmp_path, 1)  # the next save's rotation: the incomplete folder goes, the complete stays
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]


def test_the_newest_complete_checkpoint_and_its_state(tmp_path):
    from seal.rl.checkpoint import read_state

    assert latest_complete_checkpoint(tmp_path) is None and latest_complete_checkpoint(tmp_path / "none") is None
    for step in (1, 2, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / SEAL_STATE).write_text(json.dumps({"round": step}))
    (tmp_path / "checkpoint-11").mkdir()  # being written
    assert latest_complete_checkpoint(tmp_path).name == "checkpoint-10"  # by number, not by name
    assert read_state(tmp_path / "checkpoint-2") == {"round": 2}


class _Saving(torch.nn.Module):
    """A model that records what save_pretrained is asked to write (and writes config.json as it would)."""

    def __init__(self, peft=False):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.saved = []
        if peft:
            self.peft_config = {"default": "lora"}

    def save_pretrained(self, folder, state_dict=None):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"dtype": "float32", "model_type": "x"}))
        self.saved.append((folder, None if state_dict is None else {k: v.dtype for k, v in state_dict.items()}))


def test_the_final_model_is_written_from_a_model_its_ddp_wrapper_or_a_trainer(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from transformers import Trainer

    import seal.policy.weights as weights

    # what each call's gathering handed back: the writing rank's whole state, nothing on the others
    gathered, real = [], weights.full_state_dict
    monkeypatch.setattr(weights, "full_state_dict", lambda *a, **k: gathered.append(real(*a, **k)) or gathered[-1])
    model = _Saving()
    save_final_model(SimpleNamespace(module=model), tmp_path / "a", "bfloat16")
    assert model.saved == [(tmp_path / "a", {"layer.weight": torch.bfloat16, "layer.bias": torch.bfloat16})]
    assert json.loads((tmp_path / "a" / "config.json").read_text()) == {"dtype": "bfloat16", "model_type": "x"}
    # dtype None keeps the weights' own, and config.json as save_pretrained wrote it
    save_final_model(model, tmp_path / "b", None)
    assert model.saved[-1][1] == {"layer.weight": torch.float32, "layer.bias": torch.float32}
    assert json.loads((tmp_path / "b" / "config.json").read_text())["dtype"] == "float32"
    # a rank that does not write gathers with the others and leaves the disk alone
    save_final_model(model, tmp_path / "c", "bfloat16", write=False)
    assert len(model.saved) == 2 and not (tmp_path / "c").exists()
    # ... and holds no gathered copy (at 7B, 14 GiB of host memory per rank in bf16)
    assert [sorted(state) for state in gathered] == [["layer.bias", "layer.weight"]] * 2 + [[]]

    class _Trainer(Trainer):
        def __init__(self, model, tokenizer):
            self.model, self.processing_class = model, tokenizer

    written = []
    tokenizer = SimpleNamespace(save_pretrained=written.append)
    save_final_model(_Trainer(SimpleNamespace(module=model), tokenizer), tmp_path / "d", "float32")
    assert model.saved[-1][0] == tmp_path / "d" and written == [tmp_path / "d"]
    save_final_model(_Trainer(model, None), tmp_path / "e", "float32")
    assert model.saved[-1][0] == tmp_path / "e" and written == [tmp_path / "d"]
    save_final_model(_Trainer(model, tokenizer), tmp_path / "f", "float32", write=False)
    assert written == [tmp_path / "d"]


def test_sharded_lora_adapters_are_refused_naming_the_write(tmp_path, monkeypatch):
    import seal.rl.sharding as sharding_module

    monkeypatch.setattr(sharding_module, "is_sharded", lambda model: True)
    with pytest.raises(ValueError, match="^writing LoRA adapters needs whole tensors"):
        save_final_model(_Saving(peft=True), tmp_path / "final_model", "bfloat16")


def test_lora_adapters_are_written_as_peft_writes_them_over_an_old_folder(tmp_path):
    model = _Saving(peft=True)
    (tmp_path / "final_model").mkdir()
    (tmp_path / "final_model" / "stale.bin").write_text("old")
    save_final_model(model, tmp_path / "final_model", "bfloat16")
    assert model.saved == [(tmp_path / "final_model", None)]  # peft's own files, fp32 as trained
    assert not (tmp_path / "final_model" / "stale.bin").exists()


def test_a_checkpoint_is_written_with_the_rotation_held_back_and_a_failed_one_is_one_sentence(tmp_path, monkeypatch,
                                                                                               caplog):
    from types import SimpleNamespace

    from seal.rl.checkpoint import write_checkpoint

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, GiB))
    trainer = SimpleNamespace(args=SimpleNamespace(output_dir=str(tmp_path), save_total_limit=2),
                              state=SimpleNamespace(global_step=6),
                              accelerator=SimpleNamespace(is_main_process=True, num_processes=1, process_index=0))
    limits = []
    write_checkpoint(trainer, lambda: limits.append(trainer.args.save_total_limit))
    assert limits == [None] and trainer.args.save_total_limit == 2

    def full_disk():
        (tmp_path / "checkpoint-6").mkdir()
        raise OSError(28, "No space left on device")

    folder = tmp_path / "checkpoint-6"
    with caplog.at_level("WARNING", logger="trainer.save"):
        with pytest.raises(UserError) as caught:
            write_checkpoint(trainer, full_disk)
    assert str(caught.value) == (
        f"writing {folder} failed (OSError: [Errno 28] No space left on device) with 1.0 GiB free on its disk; no "
        "earlier checkpoint exists, so the same command starts the training over once there is room (free space, "
        "lower trainer.keep_checkpoints, or set trainer.save_every=null to write no periodic checkpoints)")
    assert trainer.args.save_total_limit == 2 and not folder.exists()
    # the traceback goes to run.log (the trainer.save logger), with the exception the sentence names
    (record,) = caplog.records
    assert record.getMessage() == f"writing {folder} failed" and isinstance(record.exc_info[1], OSError)
    assert record.exc_info[1].errno == 28
    # the sentence quotes the error's first line, at most 200 characters of it, and says so when it has none
    for error, quoted in ((RuntimeError("  " + "x" * 250 + "\nsecond line"), "RuntimeError: " + "x" * 200),
                          (RuntimeError(), "RuntimeError: ")):
        def fails(error=error):
            raise error

        with pytest.raises(UserError) as caught:
            write_checkpoint(trainer, fails)
        assert str(caught.value).startswith(f"writing {folder} failed ({quoted}), which is not a full disk; ")


def test_a_round_closes_at_its_last_step_with_its_steps_signals_averaged():
    from types import SimpleNamespace

    from seal.rl.checkpoint import OPTIMIZER_SIGNALS, SealStateCallback

    finished = []
    callback = SealStateCallback(SimpleNamespace(finish_round=lambda step, means: finished.append((step, means))), 2)
    control = object()

    def log(step, **logs):
        return callback.on_log(None, SimpleNamespace(global_step=step), control, logs=logs)

    # the end-of-training summary has neither grad_norm nor loss: not a step
    assert log(2, train_runtime=5.0) is control and finished == []
    assert log(1, loss=0.5, grad_norm=1.0, kl=0.25, learning_rate=1e-6, entropy=None) is control
    log(2, grad_norm=3.0, kl=0.75, learning_rate=1e-6, unrelated=9.0)
    assert finished == [(2, {"train/loss": 0.5, "train/grad_norm": 2.0, "train/kl": 0.5, "train/learning_rate": 1e-6,
                             "train/grad_norm_max": 3.0})]
    log(3, loss=1.0)  # a round without grad_norm has no max either; the next round starts afresh
    log(4, loss=2.0)
    assert finished[-1] == (4, {"train/loss": 1.5})
    assert OPTIMIZER_SIGNALS == ("loss", "grad_norm", "learning_rate", "kl", "entropy", "clip_ratio/low_mean",
                                 "clip_ratio/high_mean", "clip_ratio/region_mean", "logprob_gap")


@pytest.mark.parametrize("epoch, replayed", [(None, 0), (0.0, 0), (1.5, 1), (2.0, 2)])
def test_each_epoch_replays_the_sampler_to_the_epoch_about_to_start(monkeypatch, epoch, replayed):
    from types import SimpleNamespace

    import seal.rl.checkpoint as checkpoint_module

    seen = []
    monkeypatch.setattr(checkpoint_module, "replay_epoch_order", lambda loader, e: seen.append((loader, e)))
    callback = checkpoint_module.SealStateCallback(None, 1)
    control = object()
    assert callback.on_epoch_begin(None, SimpleNamespace(epoch=epoch), control, train_dataloader="loader") is control
    assert seen == [("loader", replayed)]


def test_a_checkpoint_is_marked_complete_last_and_then_the_old_ones_go(tmp_path, monkeypatch, caplog):
    from types import SimpleNamespace

    from seal.rl.checkpoint import SealStateCallback, read_state

    monkeypatch.setattr("shutil.disk_usage", lambda path: Usage(10**12, 0, GiB))
    for step in (2, 4, 6):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (2, 4):
        (tmp_path / f"checkpoint-{step}" / SEAL_STATE).write_text("{}")
    callback = SealStateCallback(SimpleNamespace(state_dict=lambda: {"round": 3}), 2)
    args = SimpleNamespace(output_dir=str(tmp_path), save_total_limit=2)
    control = object()
    # a rank other than 0 writes nothing
    assert callback.on_save(args, SimpleNamespace(global_step=6, is_world_process_zero=False), control) is control
    assert not (tmp_path / "checkpoint-6" / SEAL_STATE).exists()
    callback.on_save(args, SimpleNamespace(global_step=6, is_world_process_zero=True), control)
    assert read_state(tmp_path / "checkpoint-6") == {"round": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-4", "checkpoint-6"]
    assert [p.name for p in (tmp_path / "checkpoint-6").iterdir()] == [SEAL_STATE]  # no .tmp left
    # a marker that cannot be written is the failed save's sentence, and its traceback goes to run.log
    (tmp_path / "checkpoint-8").mkdir()
    (tmp_path / "checkpoint-8" / (SEAL_STATE + ".tmp")).mkdir()  # a folder where the file must go
    with caplog.at_level("WARNING", logger="trainer.save"):
        with pytest.raises(UserError, match=f"^writing {tmp_path / 'checkpoint-8'} failed .*; checkpoint-6 is intact"):
            callback.on_save(args, SimpleNamespace(global_step=8, is_world_process_zero=True), control)
    (record,) = caplog.records
    assert record.getMessage() == f"writing {tmp_path / 'checkpoint-8'} failed" and record.exc_info is not None
    # a marker that cannot be written for want of room is the full disk's sentence, quoting the error
    import seal.rl.checkpoint as checkpoint_module

    def no_room(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module.os, "replace", no_room)
    (tmp_path / "checkpoint-10").mkdir()
    with pytest.raises(UserError) as caught:
        callback.on_save(args, SimpleNamespace(global_step=10, is_world_process_zero=True), control)
    assert str(caught.value).startswith(
        f"writing {tmp_path / 'checkpoint-10'} failed (OSError: [Errno 28] No space left on device) with 1.0 GiB free "
        "on its disk; checkpoint-6 is intact and the same command resumes from it once there is room")


def test_an_old_checkpoint_that_cannot_be_deleted_does_not_stop_the_run(tmp_path, monkeypatch):
    import os as os_module

    for step in (1, 2):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / SEAL_STATE).write_text("{}")

    def unlink(path, *args, **kwargs):
        # rmtree unlinks by the entry's name relative to an open folder (dir_fd), so no path names the checkpoint:
        # every file refuses, and checkpoint-1's are the only ones the rotation deletes
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os_module, "unlink", unlink)
    rotate_checkpoints(tmp_path, 1)
    assert (tmp_path / "checkpoint-1" / SEAL_STATE).is_file()  # it could not go, and the run goes on
    assert latest_complete_checkpoint(tmp_path).name == "checkpoint-2"


def test_no_sampler_under_the_loader_or_an_unshuffled_one_is_left_alone():
    from types import SimpleNamespace

    from trl.trainer.utils import RepeatSampler

    replay_epoch_order(SimpleNamespace(), 3)  # nothing to replay
    ordered = RepeatSampler(list(range(7)), mini_repeat_count=2, batch_size=2, shuffle=False, seed=5)
    replay_epoch_order(SimpleNamespace(sampler=ordered), 3)  # no order to replay (it draws none)
    assert list(ordered) == [i for i in range(6) for _ in range(2)]
