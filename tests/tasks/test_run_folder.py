"""What a run's folder holds (seal.tasks.run_folder): the rounds its last complete checkpoint keeps, whether the
same command has something to go on from, and the one sentence a stopped run ends with. The folders are made by
hand here, the sentences worked out from them (a whole interrupted run: tests/tasks/test_interrupt.py)."""

import json
from types import SimpleNamespace

from seal.tasks.run_folder import checkpointed_rounds, interrupted, keeps_work, rounds_done


def checkpoint(out_dir, step, rounds=None):
    """checkpoints/checkpoint-<step>: complete (seal_state.json with `rounds` round records) when rounds is given."""
    path = out_dir / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"")
    if rounds is not None:
        (path / "seal_state.json").write_text(json.dumps({"history": [{"round": r} for r in range(rounds)]}))
    return path


def stopped(out_dir, planned=5, entries=True):
    return SimpleNamespace(out_dir=out_dir, budget=SimpleNamespace(rounds_for=lambda n: {3: planned}[n]),
                           entries=SimpleNamespace(train=[1, 2, 3]) if entries else None)


def test_the_rounds_kept_are_the_last_complete_checkpoints(tmp_path):
    assert checkpointed_rounds(tmp_path) == ([], None) and rounds_done(tmp_path) == (0, None)
    checkpoint(tmp_path, 9, rounds=1)
    ten = checkpoint(tmp_path, 10, rounds=2)  # 10 after 9: by number, not by name
    checkpoint(tmp_path, 20)  # its seal_state.json was never written: not complete
    assert checkpointed_rounds(tmp_path) == ([{"round": 0}, {"round": 1}], ten)
    assert rounds_done(tmp_path) == (2, ten)


def test_a_stopped_run_says_what_it_kept_with_rounds_numbered_as_the_round_lines_number_them(tmp_path):
    assert interrupted(stopped(tmp_path)) == (
        f"nothing of this run was complete yet; the same command starts it again in {tmp_path}")
    checkpoint(tmp_path, 10, rounds=1)
    assert interrupted(stopped(tmp_path)) == (
        f"{tmp_path} keeps round 0 (1 of 5) in checkpoints/checkpoint-10; the same command resumes after round 0")
    checkpoint(tmp_path, 30, rounds=3)
    (tmp_path / "eval_before.json").write_text("{}")
    assert interrupted(stopped(tmp_path)) == (
        f"{tmp_path} keeps rounds 0-2 (3 of 5) in checkpoints/checkpoint-30 and the evaluation before training; the "
        "same command resumes after round 2")
    # stopped before the entries were chosen: the plan's round count is not known
    assert interrupted(stopped(tmp_path, entries=False)).startswith(
        f"{tmp_path} keeps rounds 0-2 (3) in checkpoints/checkpoint-30 and ")


def test_without_a_checkpoint_the_evaluations_and_the_model_kept_are_named(tmp_path):
    (tmp_path / "eval_test_before.json").write_text("{}")
    assert interrupted(stopped(tmp_path)) == (
        f"{tmp_path} keeps the initial model's test evaluation; the same command goes on from there")
    (tmp_path / "eval_before.json").write_text("{}")
    (tmp_path / "final_model").mkdir()
    assert interrupted(stopped(tmp_path)) == (
        f"{tmp_path} keeps the evaluation before training, the initial model's test evaluation and the trained model "
        "(final_model/); the same command goes on from there")


def test_a_folder_keeps_work_once_it_holds_a_complete_checkpoint_an_evaluation_or_the_model(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "run.log").write_text("plan: ...")
    checkpoint(tmp_path, 10)  # incomplete
    assert not keeps_work(tmp_path)
    for kept in ("eval_before.json", "eval_test_before.json", "final_model"):
        folder = tmp_path / kept.split(".")[0]
        folder.mkdir()
        (folder / kept).write_text("{}")
        assert keeps_work(folder), kept
    checkpoint(tmp_path / "resumable", 10, rounds=1)
    assert keeps_work(tmp_path / "resumable")
