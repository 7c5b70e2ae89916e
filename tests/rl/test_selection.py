"""Model selection on the validation part (never on test), and the release's test-selected column as a diagnostic."""

import json

import pytest
import torch
from types import SimpleNamespace

from seal.errors import UserError
from seal.rl.distributed import Dist
from seal.rl.selection import AVG, ModelSelection
from tests.rl.test_loop import train


def _checksum(model):
    return round(float(sum(p.double().sum() for p in model.parameters())), 6)


def test_the_best_validated_model_is_kept_and_scored_on_test_after_the_final_one(tmp_path):
    from seal.policy.backbones import TinyRandomBackbone

    model = TinyRandomBackbone().load().model
    val_scores = iter([0.1, 0.3, 0.3, 0.2])
    calls = []

    def evaluate(entries, folder):
        calls.append((entries, _checksum(model)))
        score = next(val_scores) if entries == "val" else 0.5
        return {AVG: score}, []

    selection = ModelSelection(every=2, val_entries="val", out_dir=tmp_path, dist=Dist(), keep_all=True,
                               evaluate=evaluate)
    sums = {}
    for round_ in range(8):
        with torch.no_grad():
            next(model.parameters()).add_(1.0)  # the model changes every round
        record = SimpleNamespace(round=round_, global_step=round_ + 1, metrics={})
        selection.after_round(record, model)
        sums[round_] = _checksum(model)
        assert ("val/bfcl_v3/avg" in record.metrics) == (round_ % 2 == 1)
    # validated after rounds 1, 3, 5, 7 with 0.1, 0.3, 0.3, 0.2: round 3 is best (a tie keeps the earlier)
    assert json.loads((tmp_path / "best.json").read_text())["round"] == 3
    assert sorted(p.name for p in (tmp_path / "validated").iterdir()) == [f"round_000{i}" for i in (1, 3, 5, 7)]
    calls.clear()
    out = selection.test_evaluations(model, "test")
    # final model first, then the best-on-validation one, then every validated one (diagnostic)
    assert [c[1] for c in calls] == [sums[7], sums[3], sums[1], sums[3], sums[5], sums[7]]
    assert out["test_best_on_val"]["selected"]["round"] == 3
    assert "TEST" in out["test_selected_diagnostic"]["note"]


def test_selection_needs_a_validation_part_and_a_schedule(tmp_path):
    with pytest.raises(UserError, match="split.val_scenarios"):
        ModelSelection(every=1, val_entries=[], out_dir=tmp_path, dist=Dist(), evaluate=None)
    with pytest.raises(UserError, match="budget.val_every"):
        ModelSelection(every=None, val_entries=["x"], out_dir=tmp_path, dist=Dist(), keep_all=True, evaluate=None)


def test_a_run_with_validation_reports_the_final_and_the_best_model_on_test(tmp_path):
    metrics = train(tmp_path, "split.val_scenarios=1", "budget.val_every=1", "eval_all_checkpoints_on_test=true",
                    "budget.eval_entries_per_category=1", "logger.mode=disabled")
    run_config = json.loads((tmp_path / "run_config.json").read_text())
    assert run_config["heldout_part"] == "val"
    test_ids = [json.loads(line)["id"] for line in (tmp_path / "eval_test_final" / "trajectories.jsonl").open()]
    assert len(test_ids) == 4 and not set(test_ids) & set(run_config["train_ids"])
    assert {"test_before", "test_final", "test_best_on_val", "test_selected_diagnostic"} <= set(metrics)
    # the initial model on the same test entries as the final one (the tables' base-model row)
    before_ids = [json.loads(line)["id"] for line in (tmp_path / "eval_test_before" / "trajectories.jsonl").open()]
    assert before_ids == test_ids and metrics["test_before"]["num_entries"] == 4
    rounds = [json.loads(line) for line in (tmp_path / "metrics.jsonl").open()]
    assert all("val/bfcl_v3/avg" in r for r in rounds)
    assert "test-selected" in (tmp_path / "report.md").read_text() or "test_selected" in (tmp_path / "report.md").read_text()


def test_the_initial_model_is_scored_on_test_once_and_read_back_on_resume(tmp_path):
    calls = []

    def evaluate(entries, folder):
        calls.append((entries, folder.name))
        return {AVG: 0.25}, []

    make = lambda every: ModelSelection(every=every, val_entries="val", out_dir=tmp_path, dist=Dist(), evaluate=evaluate)
    assert make(None).test_initial("test") == {} and calls == []  # no selection: the before-evaluation is on test
    assert make(2).test_initial("test") == {"test_before": {AVG: 0.25}}
    assert calls == [("test", "eval_test_before")]
    # a resumed run reads the file back instead of evaluating again
    assert make(2).test_initial("test") == {"test_before": {AVG: 0.25}} and len(calls) == 1
