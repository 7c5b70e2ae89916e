"""Benchmark splits and their leakage report.

The four categories are perturbations of one set of 200 scenarios (the id's number), so a split is
leak-free only when every scenario sits on one side for all four categories. Every split built here
is scenario-disjoint; `leakage_report` measures any split, including the per-category random split in the authors'
release's data/bfcl_400_split.json (seed 0; 173 of 200 scenarios on both sides), which its environment service
lists tasks from but none of its five arms trains on (they load the parquet files whose ids are the release split).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib.resources import files
from itertools import combinations

from seal.env.benchmarks.bfcl_v3 import (CATEGORIES, DUPLICATE_SCENARIO_GROUPS, DUPLICATE_SCENARIOS, NUM_SCENARIOS,
                                         id_of, scenario_of)

PARTS = ("train", "val", "test")


@dataclass
class Split:
    name: str
    train: list[str] = field(default_factory=list)
    val: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    # why this split is used as it is, added to a leakage report's note (the authors' split: kept as released)
    provenance: str = ""

    def part(self, name: str) -> list[str]:
        if name not in PARTS:
            raise ValueError(f"unknown split part {name!r}; choose one of {', '.join(PARTS)}")
        return getattr(self, name)

    def all_ids(self) -> list[str]:
        return self.train + self.val + self.test

    def leakage(self) -> dict:
        report = leakage_report({p: self.part(p) for p in PARTS if self.part(p)})
        if "note" in report and self.provenance:
            report["note"] += f" {self.provenance}"
        return report


def leakage_report(parts: dict[str, list[str]]) -> dict:
    """Scenarios shared by each pair of parts.

    `shared_scenarios` counts scenario numbers present on both sides; `shared_duplicate_groups`
    counts duplicate-scenario groups (DESIGN: same initial config or first turn under different
    numbers) that have members on both sides, a subtler leak. A split that is not leak-free gets a
    `note` saying why, in words (report.md repeats it).
    """
    group_of = {s: g for g in DUPLICATE_SCENARIO_GROUPS for s in g}
    scenarios = {name: {scenario_of(i) for i in ids} for name, ids in parts.items()}
    groups = {name: {group_of[s] for s in ss if s in group_of} for name, ss in scenarios.items()}
    pairs = {}
    for a, b in combinations(parts, 2):
        shared = sorted(scenarios[a] & scenarios[b])
        split_groups = sorted(g for g in groups[a] & groups[b] if not set(g) <= (scenarios[a] & scenarios[b]))
        pairs[f"{a}-{b}"] = {
            "shared_scenarios": len(shared),
            "examples": shared[:10],
            "shared_duplicate_groups": [list(g) for g in split_groups],
        }
    report = {
        "sizes": {name: len(ids) for name, ids in parts.items()},
        "scenarios": {name: len(s) for name, s in scenarios.items()},
        "overlap": pairs,
        "leak_free": all(p["shared_scenarios"] == 0 and not p["shared_duplicate_groups"] for p in pairs.values()),
    }
    if not report["leak_free"]:
        report["note"] = leakage_note(pairs, scenarios)
    return report


def leakage_note(pairs: dict[str, dict], scenarios: dict[str, set[int]]) -> str:
    """Why a split is not leak-free, in words: the scenarios and the duplicate-scenario groups on two sides."""
    said = []
    for pair, overlap in pairs.items():
        a, b = pair.split("-")
        if overlap["shared_scenarios"]:
            said.append(f"{a} and {b} share {overlap['shared_scenarios']} scenarios (e.g. "
                        f"{', '.join(map(str, overlap['examples'][:3]))}), the same tasks on both sides")
        for group in overlap["shared_duplicate_groups"]:
            sides = "; ".join(f"{part} has {', '.join(str(s) for s in group if s in scenarios[part])}" for part in (a, b))
            said.append(f"{a} and {b} split the duplicate scenarios {{{', '.join(map(str, group))}}}, one task under "
                        f"several numbers ({DUPLICATE_SCENARIOS[tuple(group)]}): {sides}")
    return (". ".join(s[0].upper() + s[1:] for s in said) + ". split=scenario_disjoint keeps every scenario and every "
            "duplicate group on one side.")


def _ids(scenarios: list[int]) -> list[str]:
    return [id_of(c, s) for c in CATEGORIES for s in sorted(scenarios)]


def _units() -> list[list[int]]:
    grouped = {s for g in DUPLICATE_SCENARIO_GROUPS for s in g}
    return [list(g) for g in DUPLICATE_SCENARIO_GROUPS] + [[s] for s in range(NUM_SCENARIOS) if s not in grouped]


def _carve(units: list[list[int]], size: int, rng: random.Random) -> tuple[list[int], list[list[int]]]:
    """Take whole units until exactly `size` scenarios are taken; return them and the rest."""
    available = sum(len(u) for u in units)
    if not 0 <= size <= available:
        raise ValueError(f"cannot take {size} scenarios: between 0 and {available} are available")
    units = units[:]
    rng.shuffle(units)
    taken: list[int] = []
    rest: list[list[int]] = []
    for unit in units:
        if len(taken) + len(unit) <= size:
            taken.extend(unit)
        else:
            rest.append(unit)
    if len(taken) != size:
        raise ValueError(f"cannot carve exactly {size} scenarios from whole scenario groups")
    return taken, rest


def _validation_from_train(train: list[str], val_scenarios: int, seed: int) -> tuple[list[str], list[str]]:
    if val_scenarios < 0:
        raise ValueError(f"val_scenarios={val_scenarios}: a number of scenarios cannot be negative (0: no validation part)")
    if val_scenarios == 0:
        return train, []
    present = {scenario_of(i) for i in train}
    # a duplicate group only partly in train (the release split has one) stays together on its side
    units = [sorted(set(u) & present) for u in _units() if set(u) & present]
    val, _ = _carve(units, val_scenarios, random.Random(seed))
    val_set = set(val)
    return [i for i in train if scenario_of(i) not in val_set], [i for i in train if scenario_of(i) in val_set]


def seal_release(val_scenarios: int = 0, seed: int = 0) -> Split:
    """The authors' released 400/400 split; an optional validation part is carved from train."""
    data = json.loads(files("seal.env").joinpath("data/bfcl_v3_seal_release_split.json").read_text())
    train, val = _validation_from_train(list(data["train"]), val_scenarios, seed)
    return Split("seal_release", train=train, val=val, test=list(data["test"]),
                 provenance="This is the authors' split (split=seal_release), kept as they released it so that "
                            "results compare with the paper's.")


def scenario_disjoint(test_scenarios: int = 100, val_scenarios: int = 0, seed: int = 0) -> Split:
    """Seeded split of whole scenarios (all four categories together), duplicate groups kept whole."""
    rng = random.Random(seed)
    test, rest = _carve(_units(), test_scenarios, rng)
    train = [s for unit in rest for s in unit]
    train_ids, val_ids = _validation_from_train(_ids(train), val_scenarios, seed + 1)
    return Split("scenario_disjoint", train=train_ids, val=val_ids, test=_ids(test))


def all_entries() -> Split:
    """All 800 entries, as the test part (for gold replay and full-benchmark scoring)."""
    return Split("all", test=_ids(list(range(NUM_SCENARIOS))))


def old_per_category_split() -> dict[str, list[str]]:
    """The per-category random split of the release's data/bfcl_400_split.json (kept to measure leakage)."""
    data = json.loads(files("seal.env").joinpath("data/bfcl_v3_seal_json_split.json").read_text())
    return {"train": data["train"], "test": data["test"]}
