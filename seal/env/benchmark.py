"""BFCL V3 multi-turn entries, gold answers and tool docs, read from the installed bfcl-eval package.

Nothing of the benchmark is copied into this repository: the package's own loaders produce the
entries exactly as the official pipeline sees them (tool docs with the Python-syntax hint, holdout
functions of miss_func entries moved out of the initial tool list).
"""

from __future__ import annotations

import functools
from collections import defaultdict
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")

# Scenarios that are the same task under different ids, and what their entries share: a leak-free split
# keeps each group on one side.
DUPLICATE_SCENARIOS = {(63, 83): "the same initial configuration", (66, 70, 74): "the same initial configuration",
                       (100, 104, 133): "the same initial configuration", (40, 43): "the same first turn"}
DUPLICATE_SCENARIO_GROUPS = tuple(DUPLICATE_SCENARIOS)


def prepare_bfcl_import() -> None:
    # bfcl-eval creates result/score/lock folders under BFCL_PROJECT_ROOT when imported; keep them
    # out of site-packages and out of the repository.
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seal" / "bfcl"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(cache))


@dataclass(frozen=True, eq=False)
class Entry:
    """One benchmark entry. Treat every field as read-only: episodes deep-copy what they mutate."""

    id: str
    category: str
    scenario: int
    # per turn, the benchmark's messages (one user message, or [] for a miss_func holdout turn)
    turns: list[list[dict[str, str]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    # tool docs shown at the start (holdout functions removed)
    functions: list[dict[str, Any]]
    # turn index -> tool docs delivered at that turn (miss_func only)
    holdout: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # per turn, the gold call strings; [] means the correct behaviour is to make no call
    gold: list[list[str]] = field(default_factory=list)
    # how the entry's benchmark checks it (the benchmark's own detail): "multi_turn" (BFCL V3), "agentic"
    # (BFCL V4: the final text answer), "ast" (one reply whose calls are checked unexecuted),
    # "relevance"/"irrelevance" (one reply that must / must not contain a call)
    kind: str = "multi_turn"
    # agentic: the acceptable answers; ast: BFCL's possible answer (per expected call, the acceptable
    # values of every argument)
    answers: list[Any] = field(default_factory=list)
    # the registered benchmark that plays and checks the entry (seal.env.benchmarks)
    benchmark: str = "bfcl_v3"

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def visible_function_names(self, turn: int) -> frozenset[str]:
        """Names of the tools the model has been shown by the start of `turn`."""
        names = {doc["name"] for doc in self.functions}
        for at, docs in self.holdout.items():
            if at <= turn:
                names.update(doc["name"] for doc in docs)
        return frozenset(names)

    def docs_by_name(self) -> dict[str, dict[str, Any]]:
        docs = {doc["name"]: doc for doc in self.functions}
        for extra in self.holdout.values():
            docs.update({doc["name"]: doc for doc in extra})
        return docs

    def to_bfcl(self) -> dict[str, Any]:
        """The entry in the layout the official checker expects."""
        return {
            "id": self.id,
            "initial_config": self.initial_config,
            "involved_classes": self.involved_classes,
        }


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
