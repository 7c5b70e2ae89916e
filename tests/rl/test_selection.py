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


@pytest.mark.parametrize("every, rounds, validated", [
    # the release: test_freq 10 over 72 rounds validates after rounds 10, 20, ..., 70 and the last, 72
    (10, 72, [10, 20, 30, 40, 50, 60, 70, 72]),
    # budget=paper: 66 rounds (a validation part carved from train): 10, ..., 60 and the last, 66
    (10, 66, [10, 20, 30, 40, 50, 60, 66]),
    # the last round is a multiple: validated once
    (2, 8, [2, 4, 6, 8]),
    # the number of rounds unknown: only the multiples
    (3, None, [3, 6]),
])
def test_the_model_is_validated_every_val_every_rounds_and_after_the_last(tmp_path, monkeypatch, every, rounds, validated):
    import seal.rl.selection as selection_module

    monkeypatch.setattr(selection_module, "save_final_model", lambda model, folder, dtype, write=True: None)
    seen = []

    def evaluate(entries, folder):
        seen.append(int(folder.name.removeprefix("round_")) + 1)  # 1-based, as the release counts its steps
        return {AVG: 0.0}, []

    selection = ModelSelection(every=every, val_entries="val", out_dir=tmp_path, dist=Dist(), evaluate=evaluate,
                               rounds=rounds)
    for round_ in range(rounds or 7):
        selection.after_round(SimpleNamespace(round=round_, global_step=4 * (round_ + 1), metrics={}), None)
    assert seen == validated


def test_a_validated_round_counts_its_validation_and_the_models_it_kept_in_its_time(tmp_path, monkeypatch):
    # the one-GPU preflight's round lines said 5.6 s for a round that took 27 s: its validation and the best
    # model's 5.7 GiB write were not in the round's time split (seal.report.clock.round_seconds)
    import seal.rl.selection as selection_module
    from seal.report.clock import round_seconds

    now = [0.0]
    monkeypatch.setattr(selection_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    writes = {"best_model": 3.0, "round_0001": 2.0, "round_0003": 2.5}

    def save(model, folder, dtype, write=True):
        now[0] += writes[folder.name]

    def evaluate(entries, folder):
        now[0] += 7.0
        return {AVG: {"round_0001": 0.2, "round_0003": 0.2}[folder.name]}, []

    monkeypatch.setattr(selection_module, "save_final_model", save)
    selection = ModelSelection(every=2, val_entries="val", out_dir=tmp_path, dist=Dist(), evaluate=evaluate,
                               keep_all=True, rounds=4)
    split = {"time/generation": 4.0, "time/optimisation": 1.6}
    records = [SimpleNamespace(round=r, global_step=r + 1, metrics=dict(split)) for r in range(4)]
    assert selection.model_save_seconds is None
    for record in records:
        selection.after_round(record, None)
    # round 0 not validated; round 1 validated (7 s), the best so far (3 s) and kept with every validated one (2 s)
    assert records[0].metrics == split
    assert {k: records[1].metrics[k] for k in ("time/validation", "time/model_save")} == {
        "time/validation": 7.0, "time/model_save": 5.0}
    assert round_seconds(records[1].metrics) == 4.0 + 1.6 + 7.0 + 5.0
    # round 3 ties (not the best: only the validated copy, 2.5 s); the latest single write times the final model's
    assert records[3].metrics["time/model_save"] == 2.5 and selection.model_save_seconds == 2.5
    # without keep_all a round that keeps nothing has no write in its split
    (tmp_path / "plain").mkdir()
    plain = ModelSelection(every=1, val_entries="val", out_dir=tmp_path / "plain", dist=Dist(), rounds=2,
                           evaluate=lambda entries, folder: ({AVG: 0.2}, []))
    writes["best_model"] = 3.0
    first, second = (SimpleNamespace(round=r, global_step=r + 1, metrics={}) for r in range(2))
    plain.after_round(first, None)
    plain.after_round(second, None)
    assert first.metrics["time/model_save"] == 3.0 and "time/model_save" not in second.metrics
    assert second.metrics["time/validation"] == 0.0 and plain.model_save_seconds == 3.0


def test_the_test_selected_score_is_stored_under_the_protocol_that_produced_it(tmp_path, monkeypatch):
    import seal.rl.selection as selection_module
    from seal.rl.selection import RELEASE_AVG

    monkeypatch.setattr(selection_module, "save_final_model", lambda model, folder, dtype, write=True: folder.mkdir(parents=True, exist_ok=True))
    monkeypatch.setattr(selection_module, "_load", lambda model, folder: None)
    # the release protocol played alone: its key is the only one the evaluations have
    scores = iter([0.2, 0.4, 0.1, 0.3, 0.35, 0.25])
    selection = ModelSelection(every=1, val_entries="val", out_dir=tmp_path, dist=Dist(), keep_all=True, rounds=2,
                               evaluate=lambda entries, folder: ({RELEASE_AVG: next(scores)}, []))
    for round_ in range(2):  # validated 0.2 and 0.4
        selection.after_round(SimpleNamespace(round=round_, global_step=round_ + 1, metrics={}), None)
    # final 0.1, best on validation (round 1) 0.3, then the validated ones on test: 0.35, 0.25
    out = selection.test_evaluations(None, "test")
    diagnostic = out["test_selected_diagnostic"]
    assert (diagnostic["round"], diagnostic[RELEASE_AVG]) == ("round_0000", 0.35) and AVG not in diagnostic


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


@pytest.fixture()
def recorded(monkeypatch):
    """ModelSelection with its model writes and loads recorded instead of done."""
    import seal.rl.selection as selection_module

    seen = []
    monkeypatch.setattr(selection_module, "save_final_model",
                        lambda model, folder, dtype, write: seen.append(("save", model, folder, dtype, write)))
    monkeypatch.setattr(selection_module, "_load", lambda model, folder: seen.append(("load", model, folder)))
    return seen


@pytest.mark.parametrize("rank", [0, 1])
def test_each_validation_and_test_evaluation_reads_and_writes_its_own_folder(tmp_path, recorded, rank):
    calls = []
    scores = iter([0.2, 0.4, 0.3, 0.6, 0.5, 0.1, 0.7])

    def evaluate(entries, folder):
        calls.append((entries, folder))
        return {AVG: next(scores)}, []

    selection = ModelSelection(every=2, val_entries="val", out_dir=tmp_path, dist=Dist(rank=rank, world=2),
                               keep_all=True, evaluate=evaluate, dtype="bfloat16", rounds=4)
    records = [SimpleNamespace(round=r, global_step=r + 1, metrics={}) for r in range(4)]
    for record in records:
        selection.after_round(record, "model")
    assert calls == [("val", tmp_path / "val" / "round_0001"), ("val", tmp_path / "val" / "round_0003")]
    assert [{k: v for k, v in r.metrics.items() if not k.startswith("time/")} for r in records] == [
        {}, {"val/bfcl_v3/avg": 0.2}, {}, {"val/bfcl_v3/avg": 0.4}]
    # the validated rounds' time split counts the validation and the writes (every rank times its part)
    assert [sorted(k for k in r.metrics if k.startswith("time/")) for r in records] == [
        [], ["time/model_save", "time/validation"], [], ["time/model_save", "time/validation"]]
    best = {"round": 3, "global_step": 4, "score": 0.4, "metric": "val eval/bfcl_v3/avg", "entries": 3}
    # every rank saves (a sharded model is gathered by all of them); only the main one writes
    write = rank == 0
    assert recorded == [("save", "model", tmp_path / "best_model", "bfloat16", write),
                        ("save", "model", tmp_path / "validated" / "round_0001", "bfloat16", write),
                        ("save", "model", tmp_path / "best_model", "bfloat16", write),
                        ("save", "model", tmp_path / "validated" / "round_0003", "bfloat16", write)]
    assert (json.loads((tmp_path / "best.json").read_text()) == best) if write else not (tmp_path / "best.json").exists()
    if write:  # a resumed run reads the best so far back
        assert ModelSelection(every=2, val_entries="val", out_dir=tmp_path, dist=Dist(), evaluate=None).best == best
    selection.best = best
    recorded.clear(), calls.clear()
    for name in ("round_0001", "round_0003"):
        (tmp_path / "validated" / name).mkdir(parents=True)
    out = selection.test_evaluations("model", "test")
    assert calls == [("test", tmp_path / "eval_test_final"), ("test", tmp_path / "eval_test_best"),
                     ("test", None), ("test", None)]
    assert recorded == [("load", "model", tmp_path / "best_model"),
                        ("load", "model", tmp_path / "validated" / "round_0001"),
                        ("load", "model", tmp_path / "validated" / "round_0003")]
    assert out == {"test_final": {AVG: 0.3}, "test_best_on_val": {AVG: 0.6, "selected": best},
                   "test_selected_diagnostic": {
                       "note": "selected on TEST, as the authors' release did: optimistic, never use for a claim",
                       "by_round": {"round_0001": 0.5, "round_0003": 0.1}, "round": "round_0001", AVG: 0.5}}


def test_the_initial_test_score_is_kept_in_eval_test_before_json(tmp_path):
    selection = ModelSelection(every=1, val_entries="val", out_dir=tmp_path, dist=Dist(), rounds=1,
                               evaluate=lambda entries, folder: ({AVG: 0.125, "entries": entries}, []))
    selection.test_initial("test")
    assert json.loads((tmp_path / "eval_test_before.json").read_text()) == {AVG: 0.125, "entries": "test"}
    other = ModelSelection(every=1, val_entries="val", out_dir=tmp_path / "other", dist=Dist(rank=1, world=2),
                           rounds=1, evaluate=lambda entries, folder: ({AVG: 0.5}, []))
    (tmp_path / "other").mkdir()
    assert other.test_initial("test") == {"test_before": {AVG: 0.5}}
    assert not (tmp_path / "other" / "eval_test_before.json").exists()  # the main rank writes it


def _saved(folder, state):
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(2, 2, bias=False)
        self.lm_head = torch.nn.Linear(2, 2, bias=False)


def test_a_kept_model_is_loaded_into_the_model_or_its_ddp_wrapper_and_a_mismatch_is_named(tmp_path, monkeypatch):
    from seal.rl import selection as selection_module

    model = _Tied()
    # a tied head is saved once: the embedding alone loads, into the module a DDP wrapper holds
    folder = _saved(tmp_path / "best_model", {"embed.weight": torch.full((2, 2), 3.0)})
    selection_module._load(SimpleNamespace(module=model), folder)
    assert torch.equal(model.embed.weight, torch.full((2, 2), 3.0))
    # anything else missing, or unexpected, does not match
    with pytest.raises(RuntimeError) as caught:
        selection_module._load(model, _saved(tmp_path / "head_only", {"lm_head.weight": torch.zeros(2, 2)}))
    assert str(caught.value) == f"{tmp_path / 'head_only'} does not match the model (missing ['embed.weight'], unexpected [])"
    many = torch.nn.Sequential(*[torch.nn.Linear(1, 1, bias=False) for _ in range(5)])
    with pytest.raises(RuntimeError) as caught:  # the first three names of each kind
        selection_module._load(many, _saved(tmp_path / "other", {"a.weight": torch.zeros(1, 1), "b.weight": torch.zeros(1, 1),
                                                                 "c.weight": torch.zeros(1, 1), "d.weight": torch.zeros(1, 1)}))
    assert str(caught.value).endswith("(missing ['0.weight', '1.weight', '2.weight'], unexpected ['a.weight', "
                                      "'b.weight', 'c.weight'])")
    with pytest.raises(RuntimeError, match=r"unexpected \['other.weight'\]"):
        selection_module._load(model, _saved(tmp_path / "extra", {"embed.weight": torch.zeros(2, 2),
                                                                   "other.weight": torch.zeros(2, 2)}))
    # a sharded model is refused naming the folder
    import seal.rl.sharding as sharding_module

    monkeypatch.setattr(sharding_module, "is_sharded", lambda m: True)
    with pytest.raises(ValueError, match=f"^loading {tmp_path / 'best_model'} needs whole tensors"):
        selection_module._load(model, folder)


def test_lora_adapters_are_loaded_as_peft_loads_them(tmp_path, monkeypatch):
    import peft

    from seal.rl import selection as selection_module

    loaded = []
    monkeypatch.setattr(peft, "set_peft_model_state_dict", lambda target, state: loaded.append((target, state)))
    adapters = SimpleNamespace(get_base_model=lambda: None, parameters=lambda: iter(()))
    folder = _saved(tmp_path / "best_model", {"lora_A.weight": torch.ones(1, 2)})
    (folder / "adapter_config.json").write_text("{}")
    selection_module._load(adapters, folder)
    assert [(t, sorted(s)) for t, s in loaded] == [(adapters, ["lora_A.weight"])]
    # a full model's folder (no adapter_config.json) loads as a state dict even into a peft model
    model = _Tied()
    model.get_base_model = lambda: model
    selection_module._load(model, _saved(tmp_path / "full", {"embed.weight": torch.ones(2, 2)}))
    assert len(loaded) == 1 and torch.equal(model.embed.weight, torch.ones(2, 2))


@pytest.mark.parametrize("kwargs, sentence", [
    ({"every": 0, "val_entries": ["x"]}, "budget.val_every=0: give a number of rounds (at least 1) or null"),
    ({"every": 2, "val_entries": []}, "budget.val_every needs a validation part carved from train: set "
                                      "split.val_scenarios=<n> (model selection never touches test)"),
    ({"every": None, "val_entries": ["x"], "keep_all": True},
     "eval_all_checkpoints_on_test=true scores the validated models: set budget.val_every too"),
])
def test_a_selection_that_cannot_work_is_one_sentence_naming_the_setting(tmp_path, kwargs, sentence):
    with pytest.raises(UserError) as caught:
        ModelSelection(out_dir=tmp_path, dist=Dist(), evaluate=None, **kwargs)
    assert str(caught.value) == sentence


def test_validation_every_round_is_allowed_and_no_schedule_means_no_selection(tmp_path):
    assert ModelSelection(every=1, val_entries=["x"], out_dir=tmp_path, dist=Dist(), evaluate=None).active
    idle = ModelSelection(every=None, val_entries=[], out_dir=tmp_path, dist=Dist(), evaluate=None)
    assert not idle.active and idle.test_evaluations(None, "test") == {}
