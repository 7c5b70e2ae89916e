"""Evaluation on the out-of-domain benchmarks: BFCL V4 memory, BFCL V4 web search, BFCL single turn.

    python run.py task=eval benchmark=bfcl_v4_memory backbone=qwen2.5-7b budget=paper
    python run.py task=eval benchmark=bfcl_v4_web_search benchmark.search_url=http://127.0.0.1:8080/search
    python run.py task=eval benchmark=bfcl_single_turn backbone=oracle

The same engine, tool format, greedy decoding and plain interface as the BFCL V3 evaluation; the entries
and checkers are bfcl-eval's (seal.env.ood). Writes `metrics.json` (per-category accuracy, the
benchmark's average over its categories, counts), `trajectories.jsonl` and `report.md`. With
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

from seal.env import ood
from seal.env.benchmark import category_summary
from seal.errors import UserError
from seal.eval.evaluate import gather_records, summary_metrics
from seal.interface.view import PLAIN

log = logging.getLogger(__name__)
BENCHMARKS = ("bfcl_v3", "bfcl_v4_memory", "bfcl_v4_web_search", "bfcl_single_turn")


def categories_of(benchmark: Any) -> list[str]:
    """The bfcl-eval categories a benchmark config selects, with one sentence for a wrong value."""
    name = benchmark.get("name")
    if name == "bfcl_v4_memory":
        backends = list(benchmark.get("memory_backends") or [])
        wrong = [b for b in backends if b not in ood.MEMORY_BACKENDS]
        if wrong or not backends:
            raise UserError(f"benchmark.memory_backends={backends}: choose among {', '.join(ood.MEMORY_BACKENDS)}")
        return [f"memory_{b}" for b in backends]
    allowed = {"bfcl_v4_web_search": ood.WEB_SEARCH_CATEGORIES, "bfcl_single_turn": ood.SINGLE_TURN_CATEGORIES}.get(name)
    if allowed is None:
        raise UserError(f"benchmark={name}: choose one of {', '.join(BENCHMARKS)}")
    categories = list(benchmark.get("categories") or [])
    wrong = [c for c in categories if c not in allowed]
    if wrong or not categories:
        raise UserError(f"benchmark.categories={categories}: choose among {', '.join(allowed)}")
    return categories


def prepare(benchmark: Any) -> list[str]:
    """Check everything a benchmark needs before a model is loaded: its categories, the search engine,
    the vector memory's encoder (loaded now, so a missing one stops the run at once)."""
    categories = categories_of(benchmark)
    if benchmark.get("name") == "bfcl_v4_web_search":
        from seal.env.search import check_search_backend

        check_search_backend(benchmark.get("search_url"))
    if "memory_vector" in categories:
        ood.use_encoder(benchmark.get("encoder_path"))
        ood.vector_memory_class()
    return categories


def select(entries: list[ood.Entry], n: int | None) -> tuple[list[ood.Entry], list[ood.Entry]]:
    """(prerequisite conversations, questions) for the first `n` questions (None: all) of one category."""
    questions = [e for e in entries if not ood.is_prereq(e)]
    if n is not None:
        questions = questions[: max(int(n), 0)]
    scenarios = {ood.memory_scenario(e) for e in questions if e.category in ood.MEMORY_CATEGORIES}
    return [e for e in entries if ood.is_prereq(e) and ood.memory_scenario(e) in scenarios], questions


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


def play_prerequisites(engine: Any, prereqs: list[ood.Entry], memory_dir: Path, step_limit: str, dist: Any) -> int:
    """Play the memory prerequisite conversations; returns how many were played on all ranks.

    A scenario's conversations run in order on one rank (each starts from the memory the previous one
    left); with several ranks the scenarios are shared out, and the snapshots each rank wrote are then
    copied to every rank's folder, so that any rank can ask any question of any scenario."""
    if not prereqs:
        return 0
    scenarios = list(dict.fromkeys(ood.memory_scenario(e) for e in prereqs))
    mine = set(scenarios if dist is None else dist.shard(scenarios))
    before = _files(memory_dir)
    waves = ood.prerequisite_waves([e for e in prereqs if ood.memory_scenario(e) in mine])
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
        "ended": rollout.ended,
        "model_tokens": rollout.num_model_tokens,
        "turns": [[{"raw": s.raw, "calls": [c.text for c in s.calls], "observations": [c.observation for c in s.calls]}
                   for s in steps] for steps in rollout.episode.steps],
    }


def metrics_of(name: str, categories: list[str], records: list[dict[str, Any]]) -> dict[str, Any]:
    """`eval/<benchmark>/<category>` accuracies and `eval/<benchmark>/avg`, their unweighted mean (as
    BFCL averages memory over its backends and web search over its two settings)."""
    summary = category_summary([(r["category"], r["valid"]) for r in records], categories, category=str)
    return summary_metrics(summary, f"eval/{name}")


def evaluate_benchmark(engine: Any, benchmark: Any, out_dir: Path, n: int | None, step_limit: str = "turn",
                       progress: bool = False, dist: Any = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Play and score one out-of-domain benchmark with `engine`; returns (metrics, records).

    With several data-parallel ranks (`dist`), each plays its share of every category's questions (and
    of the memory scenarios' prerequisites); the records are gathered in a single process's order, and
    the main rank writes `trajectories.jsonl`."""
    categories = prepare(benchmark)
    records: list[dict[str, Any]] = []
    ids: list[str] = []
    prerequisites = 0
    start = time.perf_counter()
    with snapshot_folder(out_dir, dist is None or dist.main) as memory_dir:
        for category in categories:
            entries = ood.load_category(category, memory_dir, benchmark.get("search_url"))
            prereqs, questions = select(entries, n)
            prerequisites += play_prerequisites(engine, prereqs, memory_dir, step_limit, dist)
            shard = questions if dist is None else dist.shard(questions)
            rollouts = engine.play(shard, PLAIN, temperature=0.0, step_limit=step_limit, progress=progress)
            records += [record_of(r) for r in rollouts]
            ids += [e.id for e in questions]
    records, seconds = gather_records(dist, records, ids, time.perf_counter() - start)
    metrics = metrics_of(benchmark.name, categories, records)
    metrics["prerequisite_conversations"] = prerequisites
    metrics["timing"] = {"seconds": seconds, "model_tokens": sum(r["model_tokens"] for r in records)}
    if dist is None or dist.main:
        out_dir.mkdir(parents=True, exist_ok=True)
        with (out_dir / "trajectories.jsonl").open("w") as fh:
            for r in records:
                fh.write(json.dumps(r, default=str) + "\n")
    return metrics, records
