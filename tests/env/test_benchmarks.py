"""The benchmark interface and registry (seal.env.benchmarks): every configured benchmark instantiates to
its registered class, and a new benchmark (the example of docs/protocols-and-benchmarks.md) is one module and one config file that
the episode, the scripted oracle, the rollout engine and task=eval play and score untouched."""

import json
import sys
import types
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from seal.env import Episode
from seal.env.benchmarks import REGISTRY, base, benchmark_of
from seal.env.benchmarks.bfcl_v3 import BFCLV3
from seal.env.verifier import verify
from seal.tasks import run
from tests.test_configs import compose_with

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf" / "benchmark"
PAGE = ROOT / "docs" / "protocols-and-benchmarks.md"


def page_block(marker):
    """The code block that follows `marker` in the page on adding a benchmark."""
    text = PAGE.read_text()
    block = text[text.index("```", text.index(marker)):]
    body = block[block.index("\n") + 1:]
    return body[: body.index("```")]


@pytest.fixture
def echo(monkeypatch):
    """The page's example module, imported as `echo` (its config's _target_) and registered for this test."""
    monkeypatch.setitem(REGISTRY, "echo", None)  # undone after the test: the registry is as before
    module = types.ModuleType("echo")
    exec(compile(page_block("<!-- example benchmark module -->"), str(PAGE), "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "echo", module)
    return module


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_benchmark_config_instantiates_its_registered_class(path):
    node = compose_with(f"benchmark={path.stem}").benchmark
    benchmark = instantiate(node)
    assert type(benchmark) is REGISTRY[path.stem] and benchmark.name == node.name == path.stem
    assert benchmark.metric_prefix == f"eval/{path.stem}"
    # the categories the file selects (memory: one per backend listed)
    expected = node.get("categories") or node.get("domains") or [f"memory_{b}" for b in node.get("memory_backends", [])] or list(BFCLV3.CATEGORIES)
    assert benchmark.categories == list(expected)


def test_the_name_in_a_config_must_be_the_registered_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        run(compose_with("task=eval", "backbone=oracle", "benchmark=bfcl_single_turn", "benchmark.name=bfcl_v3"), tmp_path)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: benchmark.name=bfcl_v3: this benchmark's class is registered as bfcl_single_turn"]
    assert list(tmp_path.iterdir()) == []


def test_a_multi_turn_entry_is_played_and_checked_by_bfcl_v3(bench):
    entry = bench["multi_turn_base_0"]
    assert entry.benchmark == "bfcl_v3" and type(benchmark_of(entry)) is BFCLV3
    assert [e.id for e in BFCLV3().entries("miss_func")] == [f"multi_turn_miss_func_{i}" for i in range(200)]
    episode = Episode(entry)
    assert episode.turns is entry.turns and not episode.single_reply
    episode.next_turn()
    episode.step([])
    # the official multi-turn verdict of what was played (one empty turn of several)
    assert episode.verdict().summary() == verify(entry, [[]]).summary()
    assert episode.verdict().error_type == "multi_turn:force_terminated"


def test_the_docs_example_is_one_module_played_by_the_episode(echo):
    benchmark = echo.Echo()
    assert REGISTRY["echo"] is echo.Echo and benchmark.categories == ["echo"]
    red, blue = benchmark.entries("echo")
    assert benchmark_of(red) is benchmark_of(blue) and type(benchmark_of(red)) is echo.Echo
    episode = Episode(blue)
    assert episode.next_turn().messages == [{"role": "user", "content": "Say blue."}]
    episode.step([], "It is red.")  # one reply ends the entry
    assert episode.next_turn() is None and episode.ended == "completed"
    assert (episode.verdict().valid, episode.verdict().error_type) == (False, "echo:wrong_colour")
    # the example gives no message; its one turn expected an answer (not an abstention)
    assert episode.verdict().error_message == ""
    assert [(t.index, t.gold_empty, t.status) for t in episode.verdict().turns] == [(0, False, "echo:wrong_colour")]


def test_task_eval_plays_and_scores_the_docs_example_with_the_scripted_oracle(echo, tmp_path):
    cfg = compose_with("task=eval", "backbone=oracle", "budget.eval_entries_per_category=null")
    cfg.benchmark = OmegaConf.create(page_block("<!-- example benchmark config -->"))
    run(cfg, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["counts"] == {"echo": {"passed": 2, "total": 2}}
    assert (metrics["eval/echo/echo"], metrics["eval/echo/avg"]) == (1.0, 1.0)
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [(r["id"], r["turns"][0][0]["raw"]) for r in records] == [("echo_0", "It is red."), ("echo_1", "It is blue.")]


def test_a_scripted_policy_that_always_says_red_scores_half(echo, tmp_path, monkeypatch):
    from seal.budget import Budget
    from seal.evaluation.out_of_domain import evaluate_benchmark
    from seal.tasks.eval import load_engine

    cfg = compose_with("task=eval", "backbone=oracle")
    engine = load_engine(cfg, Budget.from_config(cfg.budget))[1]
    monkeypatch.setattr(echo.Echo, "oracle_message", lambda self, episode, entry, fmt: "It is red.")
    metrics, records = evaluate_benchmark(engine, echo.Echo(), tmp_path, None)
    # echo_0 asks for red (passes), echo_1 for blue (fails): one category at 1/2
    assert [(r["id"], r["valid"], r["error_type"]) for r in records] == [
        ("echo_0", True, None), ("echo_1", False, "echo:wrong_colour")]
    assert (metrics["eval/echo/echo"], metrics["eval/echo/avg"], metrics["counts"]) == (
        0.5, 0.5, {"echo": {"passed": 1, "total": 2}})


def test_base_defaults_are_the_multi_turn_protocol():
    entry = BFCLV3().entries("base")[0]
    defaults = base.Benchmark.__new__(base.Benchmark)
    assert defaults.turns(entry, None) is entry.turns and defaults.single_reply(entry) is False
    assert defaults.oracle_message(None, entry, None) is None and defaults.end(entry, None) is None
    assert defaults.select([entry] * 3, 2) == ([], [entry, entry]) and defaults.select([entry], None) == ([], [entry])
    assert defaults.prerequisite_groups([entry]) == {}
    assert defaults.select([entry] * 3, 0) == ([], []) and defaults.select([entry], -1) == ([], [])
    # a long-context entry's backends load bfcl-eval's long-context scenario (its file system says so)
    long = BFCLV3().entries("long_context")[0]
    assert defaults.backends(long).instances["GorillaFileSystem"].long_context is True
    assert defaults.backends(entry).instances["GorillaFileSystem"].long_context is False


def test_training_evaluates_only_registered_out_of_domain_benchmarks_with_a_config(echo):
    from seal.budget import Budget
    from seal.errors import UserError
    from seal.evaluation.out_of_domain import out_of_domain_benchmarks

    def chosen(*overrides):
        cfg = compose_with(*overrides)
        return out_of_domain_benchmarks(cfg, Budget.from_config(cfg.budget))

    # the run's own benchmark group, with its overrides; another from its config file
    found = chosen("benchmark=bfcl_single_turn",
                   "benchmark.categories=[irrelevance]", "budget.ood_benchmarks=[bfcl_single_turn,bfcl_v4_memory]")
    assert [(b.name, b.categories) for b in found] == [
        ("bfcl_single_turn", ["irrelevance"]), ("bfcl_v4_memory", ["memory_kv", "memory_rec_sum", "memory_vector"])]
    # the benchmark trained on, and one registered (echo, for this test) without a config file, are refused
    for name in ("bfcl_v3", "echo"):
        with pytest.raises(UserError) as refused:
            chosen(f"budget.ood_benchmarks=[{name}]")
        assert str(refused.value) == (f"budget.ood_benchmarks: {name!r} is not an out-of-domain benchmark; choose among "
                                      "bfcl_v4_memory, bfcl_v4_web_search, bfcl_single_turn, tau2, tau2_solo")
    # tau2 comes from the registry and its config file alone (seal/tasks/train.py names no benchmark), and
    # is checked before training starts: without a user simulator it stops with tau2's own sentence
    from seal.env.tau2_user import NO_SIMULATOR

    with pytest.raises(UserError) as refused:
        chosen("budget.ood_benchmarks=[tau2]")
    assert str(refused.value) == NO_SIMULATOR
    # its solo mode needs none: it is built and checked, under its own name
    assert [(b.name, b.categories) for b in chosen("budget.ood_benchmarks=[tau2_solo]")] == [("tau2_solo", ["telecom"])]


def test_tau2_plays_the_split_of_the_backbones_paper_row_unless_told_another(monkeypatch):
    """Table 2's rows are fractions of two tau2 task sets (tests/experiments/test_paper_numbers.py checks them by
    hand): the Qwen2.5 rows of base's 114/50/114 tasks, ToolACE-2's of test's 40/20/40. A run's tau2 evaluation
    plays its backbone's row's set, whether tau2 is evaluated during training (from conf/benchmark/tau2.yaml) or
    alone (task=eval benchmark=tau2); an explicit benchmark.split wins."""
    from hydra.utils import instantiate

    from seal.budget import Budget
    from seal.env.benchmarks.tau2 import Tau2
    from seal.evaluation.out_of_domain import out_of_domain_benchmarks

    monkeypatch.setattr(Tau2, "prepare", lambda self: None)  # no user simulator is needed to read the split

    def trained(*overrides):
        cfg = compose_with("budget.ood_benchmarks=[tau2]", *overrides)
        (tau2,) = out_of_domain_benchmarks(cfg, Budget.from_config(cfg.budget))
        return tau2.split

    def evaluated(*overrides):
        return instantiate(compose_with("task=eval", "benchmark=tau2", *overrides).benchmark).split

    for check in (trained, evaluated):
        assert check("backbone=toolace-2-8b") == "test"
        assert check("backbone=qwen2.5-3b") == check("backbone=qwen2.5-7b") == "base"
        assert check("backbone=tiny-random") == check("backbone=oracle") == "base"  # no paper row: base
    assert trained("backbone=toolace-2-8b", "benchmark=tau2", "benchmark.split=base") == "base"
    assert evaluated("backbone=toolace-2-8b", "benchmark.split=null") is None
