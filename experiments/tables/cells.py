"""The tables' rows: per backbone, arm and model, each cell the mean ± 95% t-interval over the runs that
have a value (cell, mean_ci); Table 1 (main_table), Table 2 (ood_table) and Table 3 (ablation_table), each row
with the paper's numbers beside it, and the paper's reference rows (reference_rows)."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

from experiments.tables.columns import ABLATIONS, BFCL_V4, COLUMNS, HEADLINE, MODELS, OOD_SOURCES, PROTOCOLS
from experiments.tables.like_measured import tau2_label, tau2_measured, unlike_paper, unlike_paper_split
from experiments.tables.paper_numbers import (BASE, REFERENCE, REFERENCE_BASE_ROWS, REFERENCE_ROWS, TABLE2_COLUMNS,
                                             TABLES, paper_row)

def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (scipy)."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def mean_ci(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% t-interval (None for a single run: no spread to estimate)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


# -- cells: mean ± 95% interval over the runs that have a value --------------------------------------------

def cell(values: list[float], of: int) -> dict | None:
    """A table cell over `of` expected runs: None when no run has a value."""
    if not values:
        return None
    mean, half = mean_ci(values)
    return {"mean": mean, "half": half, "n": len(values), "of": of}


def _value(metrics: dict | None, protocol: str, column: str) -> float | None:
    key = f"{PROTOCOLS[protocol][0]}/{column}"
    return 100.0 * metrics[key] if metrics and metrics.get(key) is not None else None


def _groups(runs: list[dict], model: str) -> dict[tuple[str, str], list[tuple[dict | None, list[dict]]]]:
    """(backbone, arm) -> one (evaluation of that model, its runs) per run; the initial model once per
    (backbone, seed) as the arm "base model" (the arms of one seed start from the same model)."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    if model == "initial":
        by_seed: dict[tuple[str, int], list] = defaultdict(list)
        for run in runs:
            by_seed[(run["backbone"], run["seed"])].append(run)
        for (backbone, _seed), members in sorted(by_seed.items()):
            groups[(backbone, BASE)].append((_mean_eval([r["evals"]["initial"] for r in members if "initial" in r["evals"]]),
                                             members))
        return groups
    for run in runs:
        groups[(run["backbone"], run["experiment"])].append((run["evals"].get(model), [run]))
    return groups


def _mean_eval(evals: list[dict]) -> dict | None:
    if not evals:
        return None
    keys = {k for e in evals for k, v in e.items() if k.startswith("eval/") and isinstance(v, (int, float))}
    return {k: statistics.fmean(e[k] for e in evals if k in e) for k in keys}


def _budgets(runs: list[dict]) -> str:
    """The budgets of a row's runs: "paper", or each with its count when they differ ("—": no run)."""
    counts = Counter(r["budget"] for r in runs)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} ({n})" for name, n in sorted(counts.items())) or "—"


def _model_label(model: str, runs: list[dict]) -> str:
    """A row's model; for the headline model, which one its runs used ("best on validation (2), final model (1)")."""
    if model != HEADLINE:
        return MODELS[model][0]
    counts = Counter(MODELS[r["headline"]][0] for r in runs if r["headline"] in r["evals"])
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{label} ({n})" for label, n in sorted(counts.items())) or "—"


def main_table(runs: list[dict], models: tuple[str, ...] | None = None,
               expected: dict[tuple[str, str], set] | None = None) -> list[dict]:
    """Table 1: per backbone, arm and model, every column under both protocols (and the paper's numbers).
    A row over fewer runs than `expected` says so; an expected arm without a finished run has a row of "—"
    for the initial, final and headline models."""
    models = models or ("initial", "final", "best_on_val", "test_selected")
    expected = expected or {}
    rows = []
    for model in models:
        groups = _groups(runs, model)
        if model in ("initial", "final", HEADLINE):
            for key in expected:
                if (key[1] == BASE) == (model == "initial"):
                    groups.setdefault(key, [])
        for (backbone, arm), members in sorted(groups.items()):
            evals = [e for e, _ in members]
            if model in ("best_on_val", "test_selected") and not any(evals):
                continue  # the runs did not select (budget.val_every off / eval_all_checkpoints_on_test off)
            used = [r for _, found in members for r in found]
            of = max(len(expected.get((backbone, arm), ())), len(members))
            row = {"backbone": backbone, "arm": arm, "model": _model_label(model, used), "key": model,
                   "runs": len(members), "expected": of, "budget": _budgets(used)}
            for protocol in PROTOCOLS:
                for column in COLUMNS:
                    row[(protocol, column)] = cell([v for e in evals if (v := _value(e, protocol, column)) is not None], of)
            # the ablation arms' numbers are in the paper's Table 3, with the same columns
            rows.append(_beside_paper(row, paper_row("table1", backbone, arm) or paper_row("table3", backbone, arm),
                                      [r for e, found in members if e for r in found]))
    return rows


def _beside_paper(row: dict, paper: dict | None, runs: list[dict]) -> dict:
    """A Table 1/3 row with the paper's numbers ("paper"), or, where the runs that gave it its numbers (`runs`) were
    not all evaluated on the paper's test entries, none and why ("withheld")."""
    withheld = unlike_paper_split(runs) if paper else None
    return {**row, "paper": None if withheld else paper, "withheld": withheld}


def _ood_value(found: dict, column: str) -> float | None:
    """A run's Table 2 number (%) in `column` from its out-of-domain evaluations; None when not evaluated."""
    if column == "bfcl_v4":
        both = [_ood_value(found, c) for c in BFCL_V4]
        return None if None in both else statistics.fmean(both)
    benchmark, metric = OOD_SOURCES[column]
    value = (found.get(benchmark) or {}).get(f"eval/{benchmark}/{metric}")
    return None if value is None else 100.0 * value


def ood_table(runs: list[dict], expected: dict[tuple[str, str], set] | None = None) -> list[dict]:
    """Table 2: per backbone and arm, the initial model (base row, once per seed) and the final model of
    every arm on the out-of-domain benchmarks, every column beside the paper's. Rows: the arms with an
    out-of-domain evaluation, and every row of the paper's Table 2 for a backbone that has one."""
    expected = expected or {}
    groups: dict[tuple[str, str], list[tuple[dict, list[dict]]]] = defaultdict(list)
    before: dict[tuple[str, int], tuple[dict, list]] = {}
    for run in runs:
        if run["ood_after"]:
            groups[(run["backbone"], run["experiment"])].append((run["ood_after"], [run]))
        if run["ood_before"]:  # one evaluation of the initial model per seed, whatever the arm
            before.setdefault((run["backbone"], run["seed"]), (run["ood_before"], []))[1].append(run)
    for (backbone, _seed), found in sorted(before.items()):
        groups[(backbone, BASE)].append(found)
    backbones = {b for b, _ in groups}
    for backbone, arm in (k for k in TABLES["table2"] if k[0] in backbones):
        groups.setdefault((backbone, arm), [])
    rows = []
    for (backbone, arm), members in sorted(groups.items()):
        used = [r for _, found in members for r in found]
        of = max(len(expected.get((backbone, arm), ())), len(members))
        measured = [m for found, _ in members if (m := tau2_measured(found)) is not None]
        row = {"backbone": backbone, "arm": arm, "model": MODELS["initial" if arm == BASE else "final"][0],
               "runs": len(members), "expected": of, "budget": _budgets(used),
               "paper": paper_row("table2", backbone, arm), "tau2_tasks": _counted([tau2_label(m) for m in measured]),
               "unlike": unlike_paper(measured, (backbone, arm))}
        for column in TABLE2_COLUMNS:
            row[column] = cell([v for found, _ in members if (v := _ood_value(found, column)) is not None], of)
        rows.append(row)
    return rows + reference_rows("table2", skip=backbones)


def _counted(labels: list[str]) -> str:
    """One label, or each with its count when they differ ("—": none)."""
    counts = Counter(labels)
    if len(counts) == 1:
        return labels[0]
    return ", ".join(f"{label} ({n})" for label, n in sorted(counts.items())) or "—"


def reference_rows(table: str, skip: set[str] = frozenset()) -> list[dict]:
    """The paper's rows of `table` that no run here trains, with no run beside them (their numbers under
    "paper"): its reference rows, and in Table 2 ToolACE-2's, which is also ToolACE's base model, when no
    ToolACE run brought that row in already (`skip`: the backbones that have rows)."""
    rows = [(name, REFERENCE, cells) for name, cells in REFERENCE_ROWS[table].items()]
    rows = [(backbone, BASE, TABLES[table][(backbone, BASE)]) for kept, backbone in REFERENCE_BASE_ROWS
            if kept == table and backbone not in skip] + rows
    keys = list(TABLE2_COLUMNS) if table == "table2" else [(p, c) for p in PROTOCOLS for c in COLUMNS]
    return [{"backbone": name, "arm": arm, "model": "the paper's reference row", "runs": 0, "expected": 0,
             "budget": "—", "paper": cells, "reference": True, "tau2_tasks": "—", "unlike": {}, **dict.fromkeys(keys)}
            for name, arm, cells in rows]


def ablation_table(runs: list[dict], model: str = HEADLINE, expected: dict[tuple[str, str], set] | None = None) -> list[dict]:
    """Table 3: per backbone that has (or expects) an ablation run, each ablation arm and seal, every column
    under both protocols, with the paper's numbers (Qwen2.5-7B)."""
    expected = expected or {}
    rows = []
    backbones = {r["backbone"] for r in runs if r["experiment"] in ABLATIONS} | {b for b, a in expected if a in ABLATIONS}
    for backbone in sorted(backbones):
        for arm in (*ABLATIONS, "seal"):
            members = [r for r in runs if r["backbone"] == backbone and r["experiment"] == arm]
            of = max(len(expected.get((backbone, arm), ())), len(members))
            if not of:
                continue
            evals = [r["evals"].get(model) for r in members]
            row = {"backbone": backbone, "arm": arm, "model": _model_label(model, members), "runs": len(members),
                   "expected": of, "budget": _budgets(members)}
            for protocol in PROTOCOLS:
                for column in COLUMNS:
                    row[(protocol, column)] = cell([v for e in evals if (v := _value(e, protocol, column)) is not None], of)
            rows.append(_beside_paper(row, paper_row("table3", backbone, arm), [r for r, e in zip(members, evals) if e]))
    return rows

