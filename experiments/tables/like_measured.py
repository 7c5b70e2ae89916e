"""Whether a run was measured the way a paper number beside it was: Table 2's tau2 columns.

The paper's tau2 numbers are fractions of one task set per row (experiments.tables.paper_numbers.TAU2_SPLIT_OF_ROW:
tau2's base split for the Qwen2.5 rows, its test split for the reference rows); each tau2 evaluation records
the split it played and the tasks of each domain (metrics.json: split, counts). experiments.aggregate shows a
paper number only beside runs that played every task of its row's split, and names the others with these
functions' words.
"""

from __future__ import annotations

from experiments.tables.paper_numbers import TAU2_DOMAINS, TAU2_SPLIT_OF_ROW, TAU2_TASKS, tau2_tasks

TAU2_COLUMNS = {"tau2": TAU2_DOMAINS, "tau2_retail": ("retail",), "tau2_airline": ("airline",),
                "tau2_telecom": ("telecom",)}


def tau2_measured(found: dict) -> tuple[str | None, dict[str, int]] | None:
    """(split, tasks played per domain) of a run's tau2 evaluation as its metrics record them (no split: an
    evaluation made before the split was recorded); None without a tau2 evaluation."""
    tau2 = found.get("tau2")
    if not tau2:
        return None
    return tau2.get("split"), {d: n["total"] for d, n in (tau2.get("counts") or {}).items()}


def tau2_label(measured: tuple[str | None, dict[str, int]]) -> str:
    """"base 114/50/114" for every task of a split, "base 1/1/1 of 114/50/114" for some, "split not recorded:
    40/20/40 tasks" (tasks of retail, airline, telecom)."""
    split, played = measured
    counts = "/".join(str(played.get(d, 0)) for d in TAU2_DOMAINS)
    if split not in TAU2_TASKS:
        return f"{tau2_tasks(split)}: {counts} tasks"
    full = tau2_tasks(split)
    return full if full == f"{split} {counts}" else f"{split} {counts} of {full.removeprefix(split + ' ')}"


def unlike_paper(measured: list[tuple[str | None, dict[str, int]]], row: tuple[str, str]) -> dict[str, str]:
    """Table 2's tau2 columns whose runs were not all measured on every task of the set the paper's `row` fits
    (experiments.tables.paper_numbers.TAU2_SPLIT_OF_ROW), each with why; a run that played none of a column's domains
    has no value there and is not counted."""
    split = TAU2_SPLIT_OF_ROW.get(row)
    if split is None:
        return {}
    unlike = {}
    for column, domains in TAU2_COLUMNS.items():
        for found in measured:
            if any(found[1].get(d) for d in domains) and (found[0] != split or any(
                    found[1].get(d) != TAU2_TASKS[split][d] for d in domains)):
                unlike[column] = f"measured on {tau2_label(found)}, the paper's row on {tau2_tasks(split)}"
                break
    return unlike
