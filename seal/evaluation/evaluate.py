"""Evaluation on BFCL V3 multi-turn under the unmodified benchmark interface (task=eval and the training
run's before/after and model-selection evaluations).

Greedy decoding, the plain interface (`PLAIN`: whatever interface a model was trained under, it is
evaluated without it), the official verdict per entry. The tools are shown in the run's rendering
(`rendering=project|release`). Each entry is played under two protocols (`eval.protocols`):
- bfcl, BFCL's official harness ("comparable to the BFCL leaderboard"): `eval/bfcl_v3/...`, `counts`,
  `trajectories.jsonl`; the step limit is BFCL's per-turn rule unless `eval.step_limit=episode`;
- release, the authors' validation ("comparable to the paper"): their environment's answers
  (seal.env.protocol.RELEASE) and 20 model outputs per trajectory: `eval/bfcl_v3_release/...`,
  `counts_release`, `trajectories_release.jsonl`.
Both are described under "protocol" in `metrics.json` and in `report.md`.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from seal.env.benchmarks.bfcl_v3 import CATEGORIES, category_summary, get_entries
from seal.env.entry import Entry
from seal.env.episode import describe_step_limit
from seal.env.protocol import BY_NAME, PROTOCOLS
from seal.interface.view import PLAIN
from seal.io import markdown_table

log = logging.getLogger(__name__)
PREFIX = "eval/bfcl_v3"
# the release protocol's metrics, counts and trajectories carry this suffix (the official ones none)
RELEASE_SUFFIX = "_release"
# rendered prompt lengths, keyed by (tokenizer, tool format with its chat and rendering, view, entry id):
# rendering and tokenising all 800 prompts takes about 10 s on two cores, and a process may select entries many
# times
_PROMPT_TOKENS: dict[tuple[Any, ...], int] = {}


def summary_table(summary: dict[str, Any]) -> str:
    rows = [[c, s["passed"], s["total"], s["accuracy"]] for c, s in summary["by_category"].items()]
    rows.append(["mean of categories", summary["passed"], summary["total"], summary["accuracy_mean"]])
    return markdown_table(["category", "passed", "total", "accuracy"], rows)


def prompt_tokens(engine: Any, entry: Entry, view: Any = PLAIN) -> int:
    """The token length of the entry's first prompt under `view`, rendered and tokenised once per process
    (a view without a `cache_key` every time)."""
    # the plain view adds nothing to the benchmark's prompt: no interface in its key
    view_key = () if view is PLAIN else getattr(view, "cache_key", None)
    if view_key is None:
        return engine.prompt_tokens(entry, view)
    # a tokenizer is known by where it was loaded from (one built in memory, by itself); a format by its
    # chat and tool rendering (its repr)
    tokenizer = engine.tokenizer.name_or_path or id(engine.tokenizer)
    key = (tokenizer, repr(engine.format), view_key, entry.id)
    if key not in _PROMPT_TOKENS:
        _PROMPT_TOKENS[key] = engine.prompt_tokens(entry, view)
    return _PROMPT_TOKENS[key]


def fits(engine: Any, entry: Entry, view: Any = PLAIN) -> bool:
    """Whether the entry's first prompt, under `view`, leaves room for one generation in the context."""
    return prompt_tokens(engine, entry, view) + engine.max_new_tokens <= engine.context_length


def select_entries(engine: Any, ids: list[str], n: int | None, *, per_category: bool = True,
                   keep_unfit: bool = True) -> list[Entry]:
    """A deterministic choice of `n` entries per category (or `n` in all, spread over categories)
    among those whose rendered prompt leaves room in the context: the shortest prompts first, ties
    broken by id. `n=None` keeps every entry, in order; those that do not fit then fail as context
    overflow, which is what the benchmark would score, unless `keep_unfit=False` drops them."""
    entries = get_entries(ids)
    if n is None:
        return entries if keep_unfit else [e for e in entries if fits(engine, e)]
    if n <= 0:
        return []
    by_cat: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        if fits(engine, entry):
            by_cat[entry.category].append(entry)
    ranked = [sorted(by_cat[c], key=lambda e: (prompt_tokens(engine, e), e.id)) for c in CATEGORIES]
    if per_category:
        return [e for shortest in ranked for e in shortest[:n]]
    # round by round over the categories (the shortest left in each), until n are taken
    return [e for level in itertools.zip_longest(*ranked) for e in level if e is not None][:n]


def metrics_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`eval/bfcl_v3/<category>` accuracies, their mean `.../avg`, and the counts behind them."""
    return summary_metrics(category_summary([(r["id"], r["valid"]) for r in records]), PREFIX)


def summary_metrics(summary: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A category summary (seal.env.benchmarks.bfcl_v3.category_summary) as `<prefix>/<category>` accuracies,
    `<prefix>/avg` and the counts behind them."""
    metrics: dict[str, Any] = {f"{prefix}/{c}": s["accuracy"] for c, s in summary["by_category"].items()}
    metrics[f"{prefix}/avg"] = summary["accuracy_mean"]
    metrics["counts"] = {c: {"passed": s["passed"], "total": s["total"]} for c, s in summary["by_category"].items()}
    metrics["num_entries"] = summary["total"]
    return metrics


def trajectory_record(rollout: Any) -> dict[str, Any]:
    """Everything one entry's evaluation produced: raw text per step, calls, observations, verdict,
    and the rule diagnoser's (outcome, cause) per turn."""
    from seal.diagnosis import diagnose

    verdict = rollout.verdict
    turns = []
    for index, steps in enumerate(rollout.episode.steps):
        turns.append([
            {
                "raw": step.raw,
                "calls": [c.text for c in step.calls],
                "observations": [c.observation for c in step.calls],
                "parse_failures": [list(f) for f in step.parse_failures],
                # the release protocol's refusal of the whole output (no call ran), else null
                "error": step.error,
                "model_tokens": step.num_tokens,
            }
            for step in steps
        ])
    return {
        "id": rollout.entry.id,
        "valid": verdict.valid,
        "error_type": verdict.error_type,
        "failed_turn": verdict.failed_turn,
        "ended": rollout.ended,
        "prompt_tokens": len(rollout.prompt_ids),
        "model_tokens": rollout.num_model_tokens,
        "episode_tokens": len(rollout.prompt_ids) + len(rollout.completion_ids),
        "turn_status": [t.status for t in verdict.turns],
        "turn_labels": [t.to_dict() for t in diagnose(rollout.entry, verdict, rollout.episode.steps)],
        "turns": turns,
    }


def protocol(engine: Any, step_limit: str, name: str = "bfcl") -> dict[str, Any]:
    """The evaluation settings that change scores, as reports show them."""
    return {
        "name": name,
        "answers": BY_NAME[name].describe(),
        "step_limit": step_limit,
        "max_steps": engine.max_steps_per_turn,
        "step_rule": describe_step_limit(step_limit, engine.max_steps_per_turn),
        "tool_format": engine.format.name,
        "tool_rendering": getattr(engine.format, "tools", "project"),
        "interface": "plain",
    }


def gather_records(dist: Any, records: list[dict[str, Any]], ids: list[str],
                   seconds: float) -> tuple[list[dict[str, Any]], float]:
    """Every rank's records of its share, in the order of `ids`, and the slowest rank's seconds, on every
    rank (a single process's, as given)."""
    if dist is None or dist.world == 1:
        return records, seconds
    order = {entry_id: i for i, entry_id in enumerate(ids)}
    return sorted(dist.gather(records), key=lambda r: order[r["id"]]), max(dist.gather([seconds]))


def check_protocols(value: Any, key: str = "eval.protocols") -> tuple[str, ...]:
    """`value` as a tuple of protocol names (at least one), else a UserError naming the choices."""
    from seal.errors import UserError

    names = tuple(str(v) for v in ([value] if isinstance(value, str) else value or []))
    if not names or any(n not in PROTOCOLS for n in names) or len(set(names)) < len(names):
        raise UserError(f"{key}={list(names)}: give one or both of bfcl (the official harness) and release "
                        "(the authors'), e.g. eval.protocols=[bfcl,release]")
    return names


def evaluate_entries(engine: Any, entries: list[Entry], out_dir: Path | None = None, *, progress: str | None = None,
                     dist: Any = None, step_limit: str = "turn", protocols: tuple[str, ...] = PROTOCOLS):
    """Greedy episodes under the plain interface, once per protocol in `protocols`: bfcl under
    `step_limit` (BFCL's per-turn rule by default), release under its own 20 outputs per trajectory.
    Returns (metrics, trajectory records): the official metrics and records unchanged when bfcl is
    played (the release's then ride along under their suffixed names), else the release's.

    With several data-parallel ranks (`dist`), each plays its share and the records are gathered, so
    no entry is played twice. With `out_dir`, the main rank writes the trajectories there. With
    `progress` (a label, e.g. "eval before"), each protocol's play shows a bar "<label> · <protocol>"."""
    metrics: dict[str, Any] = {"protocol": {}}
    first = None
    for name in protocols:
        limit = step_limit if name == "bfcl" else "episode"
        played, records = _play(engine, entries, out_dir, name, limit, progress and f"{progress} · {name}", dist)
        suffix = "" if name == "bfcl" else RELEASE_SUFFIX
        for key, value in played.items():
            if key.startswith(PREFIX + "/"):
                key = PREFIX + suffix + key.removeprefix(PREFIX)
            elif key in ("counts", "timing"):
                key += suffix
            elif key == "num_entries" and key in metrics:  # the same entries under every protocol
                continue
            metrics[key] = value
        metrics["protocol"][name] = protocol(engine, limit, name)
        first = records if first is None else first
    return metrics, first


def _play(engine: Any, entries: list[Entry], out_dir: Path | None, name: str, step_limit: str,
          progress: str | None, dist: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One protocol's play of `entries`: its metrics (unsuffixed) and records; writes its trajectories."""
    shard = entries if dist is None else dist.shard(entries)
    start = time.perf_counter()
    rollouts = engine.play(shard, PLAIN, temperature=0.0, progress=progress or False, step_limit=step_limit,
                           protocol=BY_NAME[name])
    seconds = time.perf_counter() - start
    records, seconds = gather_records(dist, [trajectory_record(r) for r in rollouts], [e.id for e in entries], seconds)
    metrics = metrics_of(records)
    model_tokens = sum(r["model_tokens"] for r in records)
    metrics["timing"] = {
        "seconds": seconds,
        "episodes_per_minute": 60.0 * len(records) / seconds if seconds else 0.0,
        "model_tokens_per_second": model_tokens / seconds if seconds else 0.0,
        "model_tokens": model_tokens,
        "context_overflows": sum(r["ended"] == "context_overflow" for r in records),
    }
    if out_dir is not None and (dist is None or dist.main):
        out_dir.mkdir(parents=True, exist_ok=True)
        filename = "trajectories.jsonl" if name == "bfcl" else f"trajectories{RELEASE_SUFFIX}.jsonl"
        with (out_dir / filename).open("w") as fh:
            for r in records:
                fh.write(json.dumps(r, default=str) + "\n")
    return metrics, records
