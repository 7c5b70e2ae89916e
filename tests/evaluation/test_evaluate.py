"""task=eval: metrics, trajectories and report under the plain benchmark interface."""

import json

import pytest

from seal.env.benchmarks.bfcl_v3 import CATEGORIES, load_benchmark
from seal.env.protocol import BFCL, RELEASE
from seal.tasks import run
from tests.test_configs import compose_with


def evaluate(out_dir, *overrides):
    cfg = compose_with("task=eval", *overrides)
    run(cfg, out_dir)
    return json.loads((out_dir / "metrics.json").read_text())


def test_the_oracle_scores_every_chosen_entry_and_is_labelled_as_such(tmp_path):
    metrics = evaluate(tmp_path, "backbone=oracle", "budget.eval_entries_per_category=3")
    assert metrics["num_entries"] == 12
    assert {k: metrics[f"eval/bfcl_v3/{k}"] for k in (*CATEGORIES, "avg")} == {k: 1.0 for k in (*CATEGORIES, "avg")}
    assert metrics["counts"]["base"] == {"passed": 3, "total": 3}
    assert "not a model" in (tmp_path / "report.md").read_text()
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == metrics["ids"]
    # the oracle plays the gold calls: every turn passes, or abstains where gold is "no call"
    bench = load_benchmark()
    for record in map(json.loads, lines):
        assert record["turn_labels"] == [
            {"outcome": "pass" if gold else "correct_abstention", "cause": None} for gold in bench[record["id"]].gold]


def test_a_model_writes_raw_text_calls_and_verdicts_per_entry(tmp_path):
    metrics = evaluate(tmp_path, "backbone=tiny-random", "budget.max_new_tokens=4")
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 4 == metrics["num_entries"]  # smoke: one entry per category
    for record in records:
        assert record["valid"] is False and record["turns"] and "raw" in record["turns"][0][0]
        assert record["model_tokens"] == sum(s["model_tokens"] for t in record["turns"] for s in t)
    report = (tmp_path / "report.md").read_text()
    assert "| mean of categories |" in report and "episodes/min" in report


def test_the_smoke_choice_is_deterministic_and_the_shortest_that_fit(tmp_path):
    a = evaluate(tmp_path / "a", "backbone=oracle")
    b = evaluate(tmp_path / "b", "backbone=oracle")
    assert a["ids"] == b["ids"] and len(a["ids"]) == 4


def test_an_empty_part_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        evaluate(tmp_path, "backbone=oracle", "eval_part=val")
    assert exc.value.code == 2


def test_evaluation_keeps_bfcls_step_rule_unless_asked_and_reports_the_protocol(tmp_path):
    # a paper arm trains with the per-episode rule and the release rendering; its evaluation keeps BFCL's rule
    metrics = evaluate(tmp_path / "bfcl", "backbone=oracle", "experiment=seal", "budget.max_steps_per_turn=1")
    assert metrics["protocol"]["bfcl"] == {
        "name": "bfcl", "answers": BFCL.describe(),
        "step_limit": "turn", "max_steps": 1, "step_rule": "more than 1 steps in one turn force-quits (BFCL's rule)",
        "tool_format": "qwen_xml", "tool_rendering": "release", "interface": "plain",
    }
    # the release's validation: its answers, one output per trajectory here (budget.max_steps_per_turn=1)
    assert metrics["protocol"]["release"]["answers"] == RELEASE.describe()
    assert metrics["protocol"]["release"]["step_limit"] == "episode"
    assert metrics["counts_release"]["base"]["total"] == metrics["counts"]["base"]["total"]
    # with one output per trajectory no multi-turn entry can pass under the release's rule
    assert metrics["eval/bfcl_v3_release/avg"] == 0.0 and metrics["eval/bfcl_v3/avg"] == 1.0
    assert (tmp_path / "bfcl" / "trajectories_release.jsonl").exists()
    report = (tmp_path / "bfcl" / "report.md").read_text()
    assert "tools rendered `release`" in report and "Step limit `turn`" in report
    records = [json.loads(line) for line in (tmp_path / "bfcl" / "trajectories.jsonl").read_text().splitlines()]
    # the oracle needs two outputs in a turn with gold calls: one per turn is never too many for BFCL's rule
    assert all(r["valid"] for r in records) and any(sum(map(len, r["turns"])) > 1 for r in records)

    metrics = evaluate(tmp_path / "release", "backbone=oracle", "experiment=seal", "budget.max_steps_per_turn=1",
                       "eval.step_limit=episode")
    assert metrics["protocol"]["bfcl"]["step_limit"] == "episode"
    assert "Step limit `episode`: 1 model outputs per episode" in (tmp_path / "release" / "report.md").read_text()
    records = [json.loads(line) for line in (tmp_path / "release" / "trajectories.jsonl").read_text().splitlines()]
    # one model output per episode in all, whatever the entry
    assert [sum(map(len, r["turns"])) for r in records] == [1] * len(records)


def test_a_bad_step_limit_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        evaluate(tmp_path, "backbone=oracle", "eval.step_limit=trajectory")
    assert exc.value.code == 2 and "eval.step_limit='trajectory': choose turn" in capsys.readouterr().err


def test_each_protocol_plays_under_its_own_labelled_progress_bar_with_an_eta(tmp_path, capsys, monkeypatch, bench):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the bars are drawn
    evaluate(tmp_path, "backbone=oracle")
    err = capsys.readouterr().err
    # smoke: one entry per category, four in all, under BFCL's protocol and then the release's; the bar counts
    # their turns (as the benchmark's files have them) and says the episodes done
    ids = [json.loads(line)["id"] for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    turns = sum(len(bench[i].turns) for i in ids)
    for protocol in ("bfcl", "release"):
        final = [line for line in err.replace("\r", "\n").splitlines() if line.startswith(f"eval test · {protocol}: 100%")]
        assert final and f"| {turns}/{turns} [" in final[-1] and "<00:00" in final[-1] and "4/4 episodes" in final[-1], err
