"""task=eval: metrics, trajectories and report under the plain benchmark interface."""

import json
from types import SimpleNamespace

import pytest

from seal.env.benchmarks.bfcl_v3 import CATEGORIES, load_benchmark
from seal.env.protocol import BFCL, RELEASE
from seal.evaluation import evaluate as evaluation
from seal.interface.view import PLAIN
from seal.policy.formats import get_format
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


def test_under_the_release_protocol_alone_the_entries_are_counted_all_the_same(tmp_path):
    from seal.report.pace import evaluation_rate

    metrics = evaluate(tmp_path, "backbone=oracle", "eval.protocols=[release]")
    # smoke: one entry per category, played once (the release's protocol only): 4 episodes, for the clock too
    assert metrics["num_entries"] == 4 and "timing" not in metrics and metrics["timing_release"]["seconds"] > 0
    assert evaluation_rate(tmp_path / "metrics.json") == {"eval_episodes": 4,
                                                           "eval_seconds": metrics["timing_release"]["seconds"]}


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


class PromptLengths:
    """An engine whose first prompts have the lengths given (plus a view's `extra`): a context of 100 tokens,
    10 of them to generate."""

    max_new_tokens, context_length = 10, 100

    def __init__(self, lengths, tokenizer="lengths", fmt=None):
        self.lengths, self.asked = lengths, []
        self.tokenizer = SimpleNamespace(name_or_path=tokenizer)
        self.format = fmt or get_format("qwen_xml")

    def prompt_tokens(self, entry, view):
        self.asked.append(entry.id)
        return self.lengths[entry.id] + getattr(view, "extra", 0)


def test_the_choice_is_the_shortest_prompts_that_leave_room_to_generate_ties_by_id(monkeypatch):
    monkeypatch.setattr(evaluation, "_PROMPT_TOKENS", {})
    # base_4 fits exactly (90 + 10 = 100), base_3 by one token too many; no miss_param prompt fits
    lengths = {"base_0": 50, "base_1": 30, "base_2": 30, "base_3": 91, "base_4": 90, "miss_func_0": 20,
               "miss_func_1": 95, "miss_param_0": 99, "long_context_0": 60, "long_context_1": 40}
    engine = PromptLengths({f"multi_turn_{k}": v for k, v in lengths.items()})
    given = ["long_context_0", "base_0", "miss_param_0", "base_4", "miss_func_1", "base_2", "long_context_1",
             "base_3", "miss_func_0", "base_1"]

    def chosen(n, **how):
        return [e.id.removeprefix("multi_turn_") for e in
                evaluation.select_entries(engine, [f"multi_turn_{i}" for i in given], n, **how)]

    assert chosen(None) == given  # every entry, in order: those that do not fit fail as overflow
    assert chosen(0) == [] and chosen(-1) == [] and engine.asked == []  # nothing chosen, nothing measured
    assert chosen(None, keep_unfit=False) == [i for i in given if i not in ("base_3", "miss_func_1", "miss_param_0")]
    # per category, in the benchmark's order of categories: base 30, 30 (ties by id), then 50 and 90
    assert chosen(2) == ["base_1", "base_2", "miss_func_0", "long_context_1", "long_context_0"]
    assert chosen(1) == ["base_1", "miss_func_0", "long_context_1"]
    # in all: one per category round by round, each round in the categories' order, until n are taken
    assert chosen(4, per_category=False) == ["base_1", "miss_func_0", "long_context_1", "base_2"]
    assert chosen(50, per_category=False) == ["base_1", "miss_func_0", "long_context_1", "base_2", "long_context_0",
                                              "base_0", "base_4"]
    # each prompt was rendered and measured once, however often the choice was made
    assert sorted(engine.asked) == sorted(f"multi_turn_{i}" for i in given)


def test_a_prompt_length_is_kept_per_tokenizer_format_view_and_entry(monkeypatch):
    monkeypatch.setattr(evaluation, "_PROMPT_TOKENS", {})
    entry, other = load_benchmark()["multi_turn_base_0"], load_benchmark()["multi_turn_base_1"]

    def length(engine, view=PLAIN, of=entry):
        return evaluation.prompt_tokens(engine, of, view)

    first = PromptLengths({entry.id: 90, other.id: 80}, tokenizer="org/model")
    assert length(first) == 90 and length(first, of=other) == 80 and length(first) == 90
    assert first.asked == [entry.id, other.id]
    # the same tokenizer and format loaded again (new objects) render the same prompt: measured once
    again = PromptLengths({entry.id: 7}, tokenizer="org/model", fmt=get_format("qwen_xml", "chatml", "project"))
    assert length(again) == 90 and again.asked == []
    # another tokenizer, tool rendering, chat or format writes other tokens: each its own length
    for engine in (PromptLengths({entry.id: 7}, tokenizer="org/other"),
                   PromptLengths({entry.id: 7}, "org/model", get_format("qwen_xml", tools="release")),
                   PromptLengths({entry.id: 7}, "org/model", get_format("qwen_xml", chat="llama3")),
                   PromptLengths({entry.id: 7}, "org/model", get_format("bfcl_python"))):
        assert length(engine) == 7 and engine.asked == [entry.id]
    # tokenizers built in memory (no path) are each their own
    built = [PromptLengths({entry.id: n}, tokenizer="") for n in (3, 4)]
    assert [length(e) for e in built] == [3, 4] and [length(e) for e in built] == [3, 4]
    assert [e.asked for e in built] == [[entry.id], [entry.id]]
    # a view is measured under itself: 90 + 5 leaves no room for 10 new tokens in 100, while the plain prompt does
    cued = SimpleNamespace(extra=5, cache_key=("cued",))
    assert length(first, cued) == 95 and length(first, cued) == 95 and first.asked == [entry.id, other.id, entry.id]
    assert evaluation.fits(first, entry) and not evaluation.fits(first, entry, cued)
    # a view that cannot say what it renders is measured every time
    unnamed = SimpleNamespace(extra=3)
    assert length(first, unnamed) == 93 and length(first, unnamed) == 93 and first.asked[3:] == [entry.id] * 2


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
