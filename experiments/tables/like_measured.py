"""Whether a run was measured the way a paper number beside it was: Table 1 and 3's BFCL V3 columns (the
authors' 400 test entries) and Table 2's tau2 columns.

Tables 1 and 3 are measured on the test part of the authors' released split (split=seal_release); a run records
the split it was evaluated on (run_config.json: split's _target_), and experiments.aggregate shows the paper's
BFCL V3 numbers only beside rows whose runs all played that part (unlike_paper_split).

The paper's tau2 numbers are fractions of one task set per row (experiments.tables.paper_numbers.TAU2_SPLIT_OF_ROW:
tau2's base split for the Qwen2.5 rows and Qwen3-30B-A3B's, its test split for ToolACE-2's, BitAgent-8B's and
watt-tool-8B's); each tau2 evaluation records the split it played (null: every task) and the tasks of each
domain (metrics.json: split, counts). experiments.aggregate shows a paper number only beside runs that played
every task of its row's split and, under the Avg, no domain beyond the paper's three; it names the others with
these functions' words.
"""

from __future__ import annotations

from collections import Counter

from experiments.tables.paper_numbers import TAU2_DOMAINS, TAU2_SPLIT_OF_ROW, TAU2_TASKS, tau2_tasks

# the BFCL V3 split whose test part Tables 1 and 3 were measured on (conf/split/seal_release.yaml)
PAPER_SPLIT = "seal_release"

TAU2_COLUMNS = {"tau2": TAU2_DOMAINS, "tau2_retail": ("retail",), "tau2_airline": ("airline",),
                "tau2_telecom": ("telecom",)}


# the split of an evaluation made before tau2's split was recorded (metrics.json has no "split")
UNRECORDED = "(not recorded)"


def unlike_paper_split(runs: list[dict]) -> str | None:
    """Why a Table 1/3 row's runs were not all evaluated on the test part of the paper's split (each run's
    "split": the name of the split it was evaluated on, None where its configuration records none), in words;
    None when they all were."""
    others = Counter(r["split"] for r in runs if r["split"] != PAPER_SPLIT)
    if not others:
        return None
    found = [f"{n} run{'s' * (n != 1)} on " + (f"split {name}" if name else "a split its configuration does not record")
             for name, n in sorted(others.items(), key=lambda item: (item[0] is None, item[0] or ""))]
    return (f"evaluated on other test entries than the paper's ({', '.join(found)}; the paper's: the test part of "
            f"the authors' split, {PAPER_SPLIT})")


def tau2_measured(found: dict) -> tuple[str | None, dict[str, int]] | None:
    """(split, tasks played per domain) of a run's tau2 evaluation as its metrics record them (split None: every
    task; UNRECORDED: an evaluation made before the split was recorded); None without a tau2 evaluation."""
    tau2 = found.get("tau2")
    if not tau2:
        return None
    return tau2.get("split", UNRECORDED), {d: n["total"] for d, n in (tau2.get("counts") or {}).items()}


def _beyond(played: dict[str, int]) -> list[str]:
    """The domains played beyond the paper's three (mock), which the run's tau2 Avg averages in."""
    return sorted(d for d, n in played.items() if n and d not in TAU2_DOMAINS)


def tau2_label(measured: tuple[str | None, dict[str, int]]) -> str:
    """"base 114/50/114" for every task of a split, "base 1/1/1 of 114/50/114" for some, "split not recorded:
    40/20/40 tasks", "every task: 114/50/2285" (tasks of retail, airline, telecom); " + mock 9" for each domain
    played beyond those three."""
    split, played = measured
    counts = "/".join(str(played.get(d, 0)) for d in TAU2_DOMAINS)
    beyond = "".join(f" + {d} {played[d]}" for d in _beyond(played))
    if split is None:
        return f"every task: {counts}{beyond}"
    if split == UNRECORDED:
        return f"split not recorded: {counts} tasks{beyond}"
    full = tau2_tasks(split)
    if split not in TAU2_TASKS:
        return f"{full}: {counts} tasks{beyond}"
    return (full if full == f"{split} {counts}" else f"{split} {counts} of {full.removeprefix(split + ' ')}") + beyond


def unlike_paper(measured: list[tuple[str | None, dict[str, int]]], row: tuple[str, str]) -> dict[str, str]:
    """Table 2's tau2 columns whose runs were not all measured on every task of the set the paper's `row` fits
    (experiments.tables.paper_numbers.TAU2_SPLIT_OF_ROW), each with why; the Avg also where a run averaged in a
    domain beyond the paper's three; a run that played none of a column's domains has no value there and is
    not counted."""
    split = TAU2_SPLIT_OF_ROW.get(row)
    if split is None:
        return {}
    unlike = {}
    for column, domains in TAU2_COLUMNS.items():
        for found in measured:
            played, beyond = found[1], _beyond(found[1]) if column == "tau2" else []
            if not (beyond or any(played.get(d) for d in domains)):
                continue
            if beyond or found[0] != split or any(played.get(d) != TAU2_TASKS[split][d] for d in domains):
                unlike[column] = f"measured on {tau2_label(found)}, the paper's row on {tau2_tasks(split)}"
                break
    return unlike
