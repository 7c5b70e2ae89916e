"""BFCL V3 multi-turn (base, miss_func, miss_param, long_context): what SEAL trains and evaluates on.

Its data: the 800 entries, gold answers and tool docs, read from the installed bfcl-eval package (nothing of
the benchmark is copied into this repository: the package's own loaders produce the entries exactly as the
official pipeline sees them, tool docs with the Python-syntax hint, holdout functions of miss_func entries
moved out of the initial tool list); its categories and the scenarios that are one task under several ids;
the per-category summary that is BFCL's multi-turn number. Its verdict comes from seal.env.verifier (the
official multi-turn checker); the episode protocol is the base class's.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any

from seal.env.benchmarks.base import Benchmark, register
from seal.env.entry import Entry, prepare_bfcl_import
from seal.env.verifier import Verdict, verify

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
# scenarios per category: entry multi_turn_<category>_<n> is scenario n of its category, n in 0..199
NUM_SCENARIOS = 200

# Scenarios that are the same task under different ids, and what their entries share: a leak-free split
# keeps each group on one side.
DUPLICATE_SCENARIOS = {(63, 83): "the same initial configuration", (66, 70, 74): "the same initial configuration",
                       (100, 104, 133): "the same initial configuration", (40, 43): "the same first turn"}
DUPLICATE_SCENARIO_GROUPS = tuple(DUPLICATE_SCENARIOS)


def category_of(entry_id: str) -> str:
    prefix = "multi_turn_"
    if not entry_id.startswith(prefix):
        raise ValueError(f"{entry_id!r} is not a BFCL multi-turn id (multi_turn_<category>_<n>)")
    category, _, number = entry_id[len(prefix) :].rpartition("_")
    if category not in CATEGORIES or not number.isdigit():
        raise ValueError(
            f"{entry_id!r} is not a BFCL V3 multi-turn id; categories are {', '.join(CATEGORIES)}"
        )
    return category


def id_of(category: str, scenario: int) -> str:
    """The id of `scenario`'s entry in `category` (the inverse of category_of and scenario_of)."""
    return f"multi_turn_{category}_{scenario}"


def scenario_of(entry_id: str) -> int:
    category_of(entry_id)
    return int(entry_id.rsplit("_", 1)[1])


@functools.lru_cache(maxsize=1)
def load_benchmark() -> dict[str, Entry]:
    """All 800 entries keyed by id, in the benchmark's order."""
    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries: dict[str, Entry] = {}
    for category in CATEGORIES:
        raw = load_dataset_entry(f"multi_turn_{category}")
        gold = {g["id"]: g["ground_truth"] for g in load_ground_truth_entry(f"multi_turn_{category}")}
        for item in raw:
            holdout = {int(turn): docs for turn, docs in item.get("missed_function", {}).items()}
            entries[item["id"]] = Entry(
                id=item["id"],
                category=category,
                scenario=scenario_of(item["id"]),
                turns=item["question"],
                initial_config=item.get("initial_config", {}),
                involved_classes=list(item["involved_classes"]),
                functions=item["function"],
                holdout=holdout,
                gold=gold[item["id"]],
            )
    return entries


def category_summary(results: list[tuple[str, bool]], categories: tuple[str, ...] | list[str] = CATEGORIES,
                     category: Any = category_of) -> dict[str, Any]:
    """Per-category totals and accuracy, and their unweighted mean (BFCL's multi-turn number; BFCL averages
    its other groups the same way). `results` are (key, valid) pairs; `category(key)` names the category
    (default: the key is a multi-turn id); categories come in the order given, those without results left out."""
    by_cat: dict[str, dict[str, Any]] = defaultdict(lambda: {"total": 0, "passed": 0})
    for key, valid in results:
        cat = by_cat[category(key)]
        cat["total"] += 1
        cat["passed"] += int(valid)
    ordered = {c: by_cat[c] for c in categories if c in by_cat}
    for cat in ordered.values():
        cat["accuracy"] = cat["passed"] / cat["total"]
    mean = sum(c["accuracy"] for c in ordered.values()) / len(ordered) if ordered else 0.0
    return {
        "total": len(results),
        "passed": sum(v for _, v in results),
        "by_category": ordered,
        "accuracy_mean": mean,
    }


def get_entries(ids: list[str]) -> list[Entry]:
    """Entries for `ids`, with one clear error naming every unknown id."""
    bench = load_benchmark()
    unknown = [i for i in ids if i not in bench]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise KeyError(f"{len(unknown)} id(s) are not BFCL V3 multi-turn entries: {shown}")
    return [bench[i] for i in ids]


@register("bfcl_v3")
class BFCLV3(Benchmark):
    CATEGORIES = CATEGORIES
    from_split = True

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        return [e for e in load_benchmark().values() if e.category == category]

    def verdict(self, episode: Any) -> Verdict:
        return verify(episode.entry, episode.result, context_overflow=episode.ended == "context_overflow")
