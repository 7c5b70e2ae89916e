"""Evaluation on the out-of-domain benchmarks: BFCL V4 memory, BFCL V4 web search, BFCL single turn.

    python run.py task=eval benchmark=bfcl_v4_memory backbone=qwen2.5-7b budget=paper
    python run.py task=eval benchmark=bfcl_v4_web_search benchmark.search_url=http://127.0.0.1:8080/search
    python run.py task=eval benchmark=bfcl_single_turn backbone=oracle

The same engine, tool format, greedy decoding and plain interface as the BFCL V3 evaluation; the entries,
episode rules and checkers are the benchmark's (seal.env.benchmarks: bfcl-eval's own loaders and
checkers). Writes `metrics.json` (per-category accuracy, the benchmark's average over its categories,
counts), `trajectories.jsonl` and `report.md`. With
`budget.eval_entries_per_category=n`, the first n questions of each category in bfcl-eval's order are
evaluated (memory: with the prerequisite conversations of their scenarios only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from seal.env.benchmarks.bfcl_v3 import category_summary
from seal.env.entry import Entry
from seal.evaluation.evaluate import gather_records, summary_metrics
from seal.errors import UserError
from seal.interface.view import PLAIN
from seal.io import CONF_DIR, read_json, write_json

log = logging.getLogger(__name__)


@contextlib.contextmanager
def snapshot_folder(out_dir: Path, main: bool) -> Iterator[Path]:
    """Where this rank's memory backends keep their snapshots: `memory/` of the output folder on the main
    rank (emptied first: snapshots of an earlier run must not leak in), a private temporary folder on
    the others, so that no folder is written by two ranks and only the main rank leaves files."""
    if main:
        folder = out_dir / "memory"
        shutil.rmtree(folder, ignore_errors=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="seal-memory-") as tmp:
        yield Path(tmp)


def waves_of(groups: list[list[Entry]]) -> list[list[Entry]]:
    """The prerequisites in the order they must run: wave k holds the k-th conversation of every group
    (each starts from what the previous one of its group left)."""
    depth = max((len(g) for g in groups), default=0)
    return [[g[k] for g in groups if k < len(g)] for k in range(depth)]


def play_prerequisites(engine: Any, benchmark: Any, prereqs: list[Entry], memory_dir: Path, step_limit: str,
                       dist: Any) -> int:
    """Play the benchmark's prerequisite conversations (memory: a scenario's, to fill its memory); returns
    how many were played on all ranks.

    A group's conversations run in order on one rank (each starts from the memory the previous one
    left); with several ranks the groups are shared out, and the snapshots each rank wrote are then
    copied to every rank's folder, so that any rank can ask any question of any scenario."""
    if not prereqs:
        return 0
    groups = benchmark.prerequisite_groups(prereqs)
    mine = list(groups) if dist is None else dist.shard(list(groups))
    before = _files(memory_dir)
    waves = waves_of([groups[g] for g in groups if g in mine])
    # every rank starts as many plays as the rank with the most waves: the start of a play may gather a
    # sharded model's weights, a collective every rank must join
    plays = len(waves) if dist is None or dist.world == 1 else max(dist.gather([len(waves)]))
    for i in range(plays):
        engine.play(waves[i] if i < len(waves) else [], PLAIN, temperature=0.0, step_limit=step_limit)
    if dist is not None and dist.world > 1:
        written = {str(path.relative_to(memory_dir)): path.read_bytes() for path in _files(memory_dir) - before}
        for files in dist.gather([written]):
            for name, data in files.items():
                (memory_dir / name).parent.mkdir(parents=True, exist_ok=True)
                (memory_dir / name).write_bytes(data)
    return len(prereqs)


def _files(folder: Path) -> set[Path]:
    return {path for path in folder.rglob("*") if path.is_file()}


def record_of(rollout: Any) -> dict[str, Any]:
    verdict = rollout.verdict
    return {
        "id": rollout.entry.id,
        "category": rollout.entry.category,
        "valid": verdict.valid,
        "error_type": verdict.error_type,
        "message": verdict.error_message,
        "ended": rollout.ended,
        "model_tokens": rollout.num_model_tokens,
        "turns": [[{"raw": s.raw, "calls": [c.text for c in s.calls], "observations": [c.observation for c in s.calls]}
                   for s in steps] for steps in rollout.episode.steps],
    }


def metrics_of(benchmark: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """`eval/<benchmark>/<category>` accuracies and `eval/<benchmark>/avg`, their unweighted mean (as
    BFCL averages memory over its backends and web search over its two settings), the counts behind them,
    and the task set they were played on where the benchmark has splits of its own (tau2's `split` and
    `split_tasks`)."""
    summary = category_summary([(r["category"], r["valid"]) for r in records], benchmark.categories, category=str)
    return summary_metrics(summary, benchmark.metric_prefix) | benchmark.task_set()


def selected(benchmark: Any, n: int | None, files_dir: Path) -> Iterator[tuple[str, list[Entry], list[Entry]]]:
    """(category, prerequisite conversations, questions) of each category `benchmark` evaluates, at `n` questions
    per category (None: all), the entries keeping their files under `files_dir` (memory's snapshots)."""
    for category in benchmark.categories:
        prereqs, questions = benchmark.select(benchmark.entries(category, files_dir), n)
        yield category, prereqs, questions


def plays_of(benchmark: Any, n: int | None) -> int:
    """The episodes one evaluation of `benchmark` plays at `n` questions per category: its questions and the
    prerequisite conversations they need, counted before anything is played (a training job's plan)."""
    with tempfile.TemporaryDirectory(prefix="seal-plan-") as folder:
        return sum(len(prereqs) + len(questions) for _, prereqs, questions in selected(benchmark, n, Path(folder)))


def evaluate_benchmark(engine: Any, benchmark: Any, out_dir: Path, n: int | None, step_limit: str = "turn",
                       progress: str | None = None, dist: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Play and score one out-of-domain benchmark (seal.env.benchmarks) with `engine`; returns (metrics,
    records). With `progress` (a label, e.g. "ood after"), each category's questions show a bar
    "<label> · <benchmark> · <category>".

    With several data-parallel ranks (`dist`), each plays its share of every category's questions (and
    of the memory scenarios' prerequisites); the records are gathered in a single process's order, and
    the main rank writes `trajectories.jsonl`."""
    benchmark.prepare()
    records: list[dict[str, Any]] = []
    ids: list[str] = []
    prerequisites = 0
    start = time.perf_counter()
    with snapshot_folder(out_dir, dist is None or dist.main) as memory_dir:
        for category, prereqs, questions in selected(benchmark, n, memory_dir):
            prerequisites += play_prerequisites(engine, benchmark, prereqs, memory_dir, step_limit, dist)
            shard = questions if dist is None else dist.shard(questions)
            bar = f"{progress} · {benchmark.name} · {category}" if progress else False
            rollouts = engine.play(shard, PLAIN, temperature=0.0, step_limit=step_limit, progress=bar)
            records += [record_of(r) for r in rollouts]
            ids += [e.id for e in questions]
    records, seconds = gather_records(dist, records, ids, time.perf_counter() - start)
    metrics = metrics_of(benchmark, records)
    metrics["prerequisite_conversations"] = prerequisites
    metrics["timing"] = {"seconds": seconds, "model_tokens": sum(r["model_tokens"] for r in records)}
    if dist is None or dist.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "trajectories.jsonl").open("w") as fh:
            for r in records:
                fh.write(json.dumps(r, default=str) + "\n")
    benchmark.check_run(records)
    return metrics, records


def out_of_domain_benchmarks(cfg: DictConfig, budget: Any) -> list[Any]:
    """The benchmarks named in budget.ood_benchmarks (seal.env.benchmarks), instantiated from
    conf/benchmark/<name>.yaml (the run's own `benchmark` group when it is one of them, so its overrides
    apply), each prepared now: a missing search key or encoder stops the run before anything is written."""
    from seal.env.benchmarks import REGISTRY

    allowed = [name for name, cls in REGISTRY.items()
               if not cls.from_split and (CONF_DIR / "benchmark" / f"{name}.yaml").exists()]
    benchmarks = []
    for name in budget.ood_benchmarks:
        if name not in allowed:
            raise UserError(f"budget.ood_benchmarks: {name!r} is not an out-of-domain benchmark; choose among "
                            f"{', '.join(allowed)}")
        if cfg.benchmark.name == name:
            node = cfg.benchmark
        else:  # read beside the run's backbone: a benchmark's defaults may follow it (tau2's split)
            node = OmegaConf.create({"backbone": OmegaConf.to_container(cfg.backbone, resolve=True),
                                     "benchmark": OmegaConf.load(CONF_DIR / "benchmark" / f"{name}.yaml")}).benchmark
        benchmark = instantiate(node)
        benchmark.prepare()
        benchmarks.append(benchmark)
    return benchmarks


def evaluate_out_of_domain(engine: Any, benchmarks: list[Any], budget: Any, out_dir: Path, when: str,
                           dist: Any, step_limit: str, clock: Any = None) -> dict[str, Any]:
    """{"ood_<when>": {benchmark: metrics}} for the model as it is now (`when`: before | after training),
    shared out over the ranks (the main rank writes the files); results already on disk (a resumed run)
    are read back."""
    if not benchmarks:
        return {}
    results = {}
    for node in benchmarks:
        folder = out_dir / f"ood_{when}" / node.name
        if (folder / "metrics.json").exists():
            results[node.name] = read_json(folder / "metrics.json")
            if clock is not None:
                clock.ood_left = max(clock.ood_left - 1, 0)
            continue
        started = time.perf_counter()
        metrics, _ = evaluate_benchmark(engine, node, folder, budget.ood_entries_per_category, step_limit, dist=dist,
                                        progress=f"ood {when}" if dist.main else None)
        if dist.main:
            write_json(folder / "metrics.json", metrics)
        if clock is not None:
            clock.ood_done(time.perf_counter() - started)
        results[node.name] = metrics
    return {f"ood_{when}": results}

