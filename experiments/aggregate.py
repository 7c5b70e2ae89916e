"""Aggregate training runs into the paper's tables, naming every run or comparison that is left out.

    python -m experiments.aggregate multirun/reproduce            # reads <root>/manifest.json when there is one
    python -m experiments.aggregate outputs/train --out tables --manifest sweep.json

The expected runs come from the manifest experiments.reproduce writes at submission (every run directory
with its arm, backbone and seed); without one, from the run directories found below the root (a run
never created is then named nowhere, and the output says so). With a manifest, a run directory it does
not list is named and used nowhere. Two finished runs with the same backbone, arm and seed are both
named and neither is used. Every expected run that is missing, failed, unfinished, damaged (a file of it cut
short or torn, named), not evaluated on test or lacks trajectories is listed with what stopped it, every
table is built from the others, and every row and cell says how many of its
expected runs it holds ("2 of 3"; a cell over fewer runs than its row: "n=1 of 3").

Each run's run_config.json gives backbone, arm (`arm`: what the run selects, never its label alone), seed,
budget and the part its before/after evaluation used; metrics.json its evaluations. Runs with a validation
part are scored on test only: the initial model on `test_before`, the final model on `test_final`, the model chosen on
validation on `test_best_on_val`, and the release's test-selected checkpoint on `test_selected_diagnostic`
(optimistic, a diagnostic); runs without one on `eval_before`/`eval_after` (the test part). The headline
model of a run, which the per-column tables, the differences and the plot use, is its best-on-validation
model when it validated and its final model otherwise; the run list names each run's. Every table shows
two protocols: "comparable to the paper" (the release protocol, `eval/bfcl_v3_release/*`, with the
paper's number beside it) and "comparable to the BFCL leaderboard" (the official protocol,
`eval/bfcl_v3/*`). A run without an evaluation under a protocol shows "—". Every row names its runs'
budget: the paper's numbers come from the paper's own (budget=paper).

- Table 1: per backbone, the base model and every trained arm, mean ± 95% t-interval over seeds, then the
  paper's reference rows (models no run here trains: their numbers, no run beside them);
- Table 2: out of domain (budget.ood_benchmarks; the initial and the final model): BFCL V4 (the mean of
  web search and memory) and tau2-bench with its domains, each beside the paper's number, and the tau2 task
  set of the row's evaluations (a tau2 number of the paper only beside runs that played every task of the
  split its row is a fraction of: experiments.like_measured); then the paper's reference rows;
- Table 3: the ablation arms and seal per backbone, every column, with the paper's on Qwen2.5-7B;
- differences the paper did not make: seal minus vanilla_rl and minus each ablation, per backbone and
  protocol, paired by seed and entry (paired_bootstrap); a seed either arm lacks is dropped and named, and so
  is each run that lacks entries the others have.

Writes the same as Markdown and CSV (tables.md, tables.csv, table2.csv, table3.csv, differences.csv) and
bar charts (tables.png: Table 1's and Table 3's Avg; table2.png: every column of Table 2).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

from experiments.like_measured import tau2_label, tau2_measured, unlike_paper
from experiments.paper_numbers import (BASE, PRINTED_AS_IS, REFERENCE, REFERENCE_BASE_ROWS, REFERENCE_NOTES,
                                      REFERENCE_ROWS, TABLE2_COLUMNS, TABLES, paper_row, tau2_tasks_of_row)
from seal.env.benchmark import CATEGORIES
from seal.errors import UserError
from seal.io import DamagedFile, markdown_table, read_json, read_jsonl

COLUMNS = ("avg",) + CATEGORIES
# protocol: (metric prefix, trajectory file, what it is comparable to)
PROTOCOLS = {
    "release": ("eval/bfcl_v3_release", "trajectories_release.jsonl", "comparable to the paper (release protocol)"),
    "official": ("eval/bfcl_v3", "trajectories.jsonl", "comparable to the BFCL leaderboard (official protocol)"),
}
# model: (label, metrics.json key with a validation part, its evaluation folder, the same without one)
MODELS = {
    "initial": ("base model (initial)", "test_before", "eval_test_before", ("eval_before", "eval_before")),
    "final": ("final model", "test_final", "eval_test_final", ("eval_after", "eval_after")),
    "best_on_val": ("best on validation", "test_best_on_val", "eval_test_best", None),
    "test_selected": ("test-selected (diagnostic: chosen on test, optimistic)", "test_selected_diagnostic", None, None),
}
# each run's headline model: best on validation where the run validated, else final
HEADLINE = "headline"
HEADLINE_LABEL = "headline model (best on validation where the run validated, else final)"
MANIFEST = "manifest.json"
PAPER_BUDGET = "paper"
ABLATIONS = ("wo_env_adaptation", "wo_reweighting", "wo_closed_loop")
# Table 2's columns from the out-of-domain evaluations (metrics.json's ood_before/ood_after): column ->
# (benchmark, metric); bfcl_v4 is each run's mean of web search and memory
OOD_SOURCES = {"bfcl_v4_web_search": ("bfcl_v4_web_search", "avg"), "bfcl_v4_memory": ("bfcl_v4_memory", "avg"),
               "tau2": ("tau2", "avg"), "tau2_retail": ("tau2", "retail"), "tau2_airline": ("tau2", "airline"),
               "tau2_telecom": ("tau2", "telecom")}
BFCL_V4 = ("bfcl_v4_web_search", "bfcl_v4_memory")
TABLE2_HEADER = ("BFCL V4 Avg", "Web Search", "Memory", "tau2 Avg", "Retail", "Airline", "Telecom")


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


# -- which runs there are, and what became of each ------------------------------------------------------

def read_manifest(path: Path) -> list[dict]:
    """The expected runs experiments.reproduce wrote: [{"dir", "backbone", "experiment", "seed"}]."""
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        runs = None
    if not isinstance(runs, list) or not all(isinstance(run, dict) and "dir" in run for run in runs):
        raise UserError(f"{path} is not a manifest experiments.reproduce wrote (JSON with a list \"runs\" of run "
                        "directories): give that file with --manifest, or move it away")
    return runs


def run_state(run_dir: Path) -> str:
    """finished, or what stopped the run: never created, failed (error.txt's last line), unfinished, not started."""
    if not run_dir.is_dir():
        return "missing: the run directory was never created"
    if (run_dir / "metrics.json").exists() and (run_dir / "run_config.json").exists():
        return "finished"
    error = run_dir / "error.txt"
    if error.exists():
        lines = [line for line in error.read_text().splitlines() if line.strip()]
        return "failed: " + (lines[-1].strip() if lines else "see error.txt")
    if (run_dir / "run_config.json").exists():
        done = (run_dir / "metrics.jsonl").read_text().count("\n") if (run_dir / "metrics.jsonl").exists() else 0
        return f"unfinished: {done} round(s) done"
    return "not started"


def _run_config(run_dir: Path) -> dict | None:
    """The run's configuration: run_config.json, else the one Hydra wrote when the job started."""
    for path, load in ((run_dir / "run_config.json", json.loads), (run_dir / ".hydra" / "config.yaml", _yaml)):
        try:
            found = load(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            return found
    return None


def _yaml(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None


def identity(run_dir: Path) -> dict:
    """{"backbone", "experiment", "seed"} of a run directory from its configuration; {} when it has none."""
    config = _run_config(run_dir) or {}
    try:
        return {"backbone": config["backbone"]["name"], "experiment": arm(config), "seed": config["seed"]}
    except (KeyError, TypeError):
        return {}


def arm(config: dict) -> str:
    """The run's arm, which follows from what it selects (seal.tasks.arm): recorded by the run, or worked out
    from its resolved config (runs made before the arm was recorded, or a config Hydra wrote for a run that
    failed early). Never the run's label alone: `experiment_name` is a user's label, and a preset's name kept
    under an override would pool an ablation with the method. Only a config that names no arm group falls
    back to the label."""
    if config.get("arm"):
        return config["arm"]
    from seal.tasks.arm import ARM_GROUPS, arm_of

    if all(isinstance(config.get(group), dict) for group in (*ARM_GROUPS, "budget")):
        return arm_of(config)[0]
    return config["experiment_name"]


def budget_label(config: dict) -> str:
    """The run's budget: its name, with the budget.* overrides it was started with."""
    name = (config.get("budget") or {}).get("name", "unknown")
    changed = [o for o in config.get("overrides") or [] if o.lstrip("+~").startswith("budget.")]
    return name + (f" with {' '.join(changed)}" if changed else "")


def _no_test_evaluation(config: dict, metrics: dict) -> str:
    """Why a finished run has no evaluation of its final model on test, from what its config says."""
    budget = config.get("budget") or {}
    if config.get("heldout_part", "test") == "val":
        if budget.get("val_every") is None:
            return ("finished, not evaluated on test: its before/after evaluation is on the validation part "
                    "and budget.val_every was null, so no model was scored on test")
        return (f"finished, not evaluated on test: budget.val_every={budget['val_every']} but metrics.json has "
                "no test_final")
    if not metrics.get("eval_after") and budget.get("heldout_entries_per_category") == 0:
        return "finished, not evaluated on test: budget.heldout_entries_per_category was 0 (no before/after evaluation)"
    return "finished, not evaluated on test: metrics.json has no eval_after"


def _test_selected(metrics: dict) -> dict | None:
    """The test-selected diagnostic, its score under the key of the protocol that produced it. Runs made
    before seal.rl.selection stored it so put the score under the official key whatever the protocol; the
    selection scores with the official key when the evaluation has it, so a run whose final test
    evaluation has only the release protocol's was scored under the release protocol."""
    found = metrics.get("test_selected_diagnostic")
    official, release = f"{PROTOCOLS['official'][0]}/avg", f"{PROTOCOLS['release'][0]}/avg"
    final = metrics.get("test_final") or {}
    if found and official in found and release not in found and official not in final and release in final:
        found = {k: v for k, v in found.items() if k != official} | {release: found[official]}
    return found or None


def read_run(run_dir: Path, name: str) -> dict:
    """A finished run: its identity and budget, and per model (MODELS) the evaluation on test and its folder."""
    config = read_json(run_dir / "run_config.json")
    metrics = read_json(run_dir / "metrics.json")
    part = config.get("heldout_part", "test")
    evals, folders = {}, {}
    for model, (_label, key, folder, without_val) in MODELS.items():
        found = _test_selected(metrics) if model == "test_selected" else metrics.get(key)
        if found:
            evals[model] = found
            if folder:
                folders[model] = folder
        elif without_val and part == "test" and metrics.get(without_val[0]):
            # no validation part: the before/after evaluation is the test evaluation
            evals[model], folders[model] = metrics[without_val[0]], without_val[1]
    headline = "best_on_val" if "best_on_val" in evals else "final"
    if headline in evals:
        evals[HEADLINE] = evals[headline]
        if headline in folders:
            folders[HEADLINE] = folders[headline]
    return {"dir": str(run_dir), "name": name, "backbone": config["backbone"]["name"],
            "experiment": arm(config), "seed": config["seed"], "part": part,
            "budget": budget_label(config), "headline": headline,
            "selected_round": (metrics.get("test_best_on_val") or {}).get("selected", {}).get("round"),
            "no_test": None if "final" in evals else _no_test_evaluation(config, metrics),
            "entries": {m: e.get("num_entries") for m, e in evals.items() if m != HEADLINE}, "evals": evals,
            "folders": folders,
            "ood_before": metrics.get("ood_before") or {}, "ood_after": metrics.get("ood_after") or {}}


def _who(found: dict) -> str:
    return f"{found['backbone']} {found['experiment']} seed {found['seed']}" if found else "no configuration"


def survey(root: Path, manifest: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
    """The runs the tables use, and every run that is not used or not complete, with why: {"dir",
    "state", "kind"} (kind: unlisted, absent, damaged, duplicate, no test, no trajectories) and the run's backbone,
    experiment and seed where they are known. Expected: the manifest's runs, else every job directory
    found below `root` (Hydra's .hydra/ or a run_config.json)."""
    found = sorted({str(p.parent.relative_to(root)) for name in (".hydra", "run_config.json") for p in root.rglob(name)})
    problems: list[dict] = []
    if manifest is None:
        expected = {name: {"dir": name} for name in found}
    else:
        expected = {entry["dir"]: entry for entry in manifest}
        for name in found:
            if name not in expected:
                problems.append({"dir": name, "kind": "unlisted", "state": f"not in the manifest ({_who(identity(root / name))}): "
                                                                          "used in no table"})
    runs = []
    for name, entry in sorted(expected.items()):
        state = run_state(root / name)
        if state != "finished":
            problems.append({**identity(root / name), **entry, "kind": "absent", "state": state})
            continue
        try:
            runs.append(read_run(root / name, name))
        except DamagedFile as exc:
            # a file cut short or torn: the run is named, every table is built from the others
            problems.append({**identity(root / name), **entry, "kind": "damaged", "state": f"damaged: {exc}"})
    runs = _without_duplicates(runs, problems)
    for run in runs:
        if run["no_test"]:
            problems.append({**_key(run), "kind": "no test", "state": run["no_test"]})
    # the differences pair the headline model's trajectories: a run evaluated without them is named
    damaged = set()
    for run in runs:
        folder = run["folders"].get(HEADLINE)
        for prefix, file, _ in PROTOCOLS.values():
            path = Path(run["dir"]) / folder / file if folder else None
            if not folder or f"{prefix}/avg" not in run["evals"][HEADLINE]:
                continue
            if not path.exists():
                problems.append({**_key(run), "kind": "no trajectories", "state": f"no trajectories: {folder}/{file}"})
                continue
            try:
                read_jsonl(path)
            except DamagedFile as exc:
                problems.append({**_key(run), "kind": "damaged", "state": f"damaged: {exc}"})
                damaged.add(run["name"])
    return [r for r in runs if r["name"] not in damaged], problems


def _key(run: dict) -> dict:
    return {"dir": run["name"], "backbone": run["backbone"], "experiment": run["experiment"], "seed": run["seed"]}


def _without_duplicates(runs: list[dict], problems: list[dict]) -> list[dict]:
    """The runs whose backbone, arm and seed no other finished run has; each of the others is named."""
    same = defaultdict(list)
    for run in runs:
        same[(run["backbone"], run["experiment"], run["seed"])].append(run["name"])
    for (backbone, arm, seed), names in same.items():
        for name in names if len(names) > 1 else ():
            others = ", ".join(n for n in names if n != name)
            problems.append({"dir": name, "backbone": backbone, "experiment": arm, "seed": seed, "kind": "duplicate",
                             "state": f"duplicate: {backbone} {arm} seed {seed} is also {others}; neither is used "
                                      "(remove one, or aggregate with a manifest that lists one)"})
    return [r for r in runs if len(same[(r["backbone"], r["experiment"], r["seed"])]) == 1]


def expected_seeds(runs: list[dict], problems: list[dict]) -> dict[tuple[str, str], set]:
    """(backbone, arm) -> the seeds expected: those of the runs used and of every run named with its
    identity (not one the manifest does not list); the base-model row expects every seed of its backbone."""
    seeds: dict[tuple[str, str], set] = defaultdict(set)
    for item in [*runs, *(p for p in problems if p["kind"] != "unlisted" and "backbone" in p)]:
        seeds[(item["backbone"], item["experiment"])].add(item["seed"])
        seeds[(item["backbone"], BASE)].add(item["seed"])
    return seeds


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


def _fmt(c: dict | None) -> str:
    """"—" for no value; a zero spread prints as 0; a cell over fewer runs than expected says so."""
    if c is None:
        return "—"
    text = f"{c['mean']:.2f}" + (f" ± {c['half']:.2f}" if c["half"] is not None else "")
    return text + (f" (n={c['n']} of {c['of']})" if c["n"] != c["of"] else "")


def _paper_fmt(value: float | None, column: str, table: str) -> str:
    """A paper number as the paper prints it: averages and Table 2 with two decimals, Table 1/3's
    categories as whole numbers (a reference row's half point with two decimals)."""
    if value is None:
        return "—"
    whole = column not in ("avg", "bfcl_v4", "tau2") and table != "table2" and float(value).is_integer()
    return f"{value:g}" if whole else f"{value:.2f}"


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
            row["paper"] = paper_row("table1", backbone, arm) or paper_row("table3", backbone, arm)
            rows.append(row)
    return rows


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
                   "expected": of, "budget": _budgets(members), "paper": paper_row("table3", backbone, arm)}
            for protocol in PROTOCOLS:
                for column in COLUMNS:
                    row[(protocol, column)] = cell([v for e in evals if (v := _value(e, protocol, column)) is not None], of)
            rows.append(row)
    return rows


# -- differences: paired by seed and entry -----------------------------------------------------------------

def entry_rewards(run: dict, model: str, protocol: str) -> dict[str, float] | None:
    """Per test entry, 1.0 if the model's trajectory passed, else 0.0; None when the file is absent."""
    folder = run["folders"].get(model)
    if folder is None:
        return None
    path = Path(run["dir"]) / folder / PROTOCOLS[protocol][1]
    if not path.exists():
        return None
    return {t["id"]: float(bool(t["valid"])) for t in read_jsonl(path)}


def bootstrap_replicates(d, *, n: int, seed: int = 0):
    """The n bootstrap means of the seeds x entries matrix of paired differences `d`. One replicate draws
    len(seeds) seed rows and len(entries) entry columns, each uniformly with replacement, and averages
    d over that grid: the same entry resample is applied to every drawn seed (entries crossed with
    seeds, not resampled afresh within each seed). numpy's default_rng(seed) draws every replicate's
    seed rows first (an n x seeds integers call), then every replicate's entry columns (n x entries)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, d.shape[0], size=(n, d.shape[0]))
    cols = rng.integers(0, d.shape[1], size=(n, d.shape[1]))
    return np.array([d[r][:, c].mean() for r, c in zip(rows, cols)])


def paired_bootstrap(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], *, n: int = 10000,
                     seed: int = 0) -> dict | None:
    """Arm a minus arm b (accuracy points) over the seeds both have and the entries every one of those
    runs has, each seed's entry paired with the same seed's entry; replicates from bootstrap_replicates.
    The interval is the 2.5/97.5 percentile of the replicates (numpy's linear interpolation), the p-value
    2 min(P(d* <= 0), P(d* >= 0)) capped at 1."""
    import numpy as np

    seeds = sorted(set(a) & set(b))
    ids = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds))) if seeds else []
    if not ids:
        return None
    d = np.array([[a[s][i] - b[s][i] for i in ids] for s in seeds]) * 100.0
    reps = bootstrap_replicates(d, n=n, seed=seed)
    low, high = np.percentile(reps, [2.5, 97.5])
    p = min(1.0, 2 * min(float((reps <= 0).mean()), float((reps >= 0).mean())))
    return {"diff": float(d.mean()), "ci_low": float(low), "ci_high": float(high), "p": p,
            "seeds": len(seeds), "entries": len(ids)}


def differences(runs: list[dict], problems: list[dict] | None = None, *, model: str = HEADLINE,
                n: int = 10000) -> list[dict]:
    """seal minus vanilla_rl and seal minus each ablation, per backbone and protocol. Every seed either arm
    has (or the manifest expects) is used or named in the row's notes with why it was dropped."""
    by_arm: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for run in runs:
        by_arm[(run["backbone"], run["experiment"])][run["seed"]] = run
    absent: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for problem in problems or []:
        if "backbone" in problem and problem["kind"] != "unlisted":
            absent[(problem["backbone"], problem["experiment"])].setdefault(problem["seed"], problem["state"])
    arms = set(by_arm) | set(absent)
    rows = []
    for backbone in sorted({b for b, _ in arms}):
        for other in ("vanilla_rl", *ABLATIONS):
            if (backbone, "seal") not in arms or (backbone, other) not in arms:
                continue
            for protocol in PROTOCOLS:
                rows.append(_difference(backbone, ("seal", other), protocol, model, by_arm, absent, n))
    return rows


def _difference(backbone, pair, protocol, model, by_arm, absent, n) -> dict:
    sides, notes = ({}, {}), []
    seeds = sorted(set().union(*(set(by_arm[(backbone, arm)]) | set(absent[(backbone, arm)]) for arm in pair)))
    label = HEADLINE_LABEL if model == HEADLINE else MODELS[model][0]
    for seed in seeds:
        for arm, rewards in zip(pair, sides):
            run = by_arm[(backbone, arm)].get(seed)
            found = entry_rewards(run, model, protocol) if run else None
            if found is not None:
                rewards[seed] = found
            elif run is None:
                notes.append(f"seed {seed} dropped: {arm} run {absent[(backbone, arm)].get(seed, 'absent')}")
            else:
                notes.append(f"seed {seed} dropped: {arm} run {run['name']} has no "
                             f"{MODELS[run['headline'] if model == HEADLINE else model][0]} {PROTOCOLS[protocol][1]}")
        both = [by_arm[(backbone, arm)][seed] for arm in pair if seed in sides[pair.index(arm)]]
        if model == HEADLINE and len(both) == 2 and both[0]["headline"] != both[1]["headline"]:
            notes.append(f"seed {seed} pairs {pair[0]}'s {MODELS[both[0]['headline']][0]} with {pair[1]}'s "
                         f"{MODELS[both[1]['headline']][0]}")
    result = paired_bootstrap(*sides, n=n)
    if result is None:
        notes.append("no seed with trajectories of both arms")
    else:
        notes += _short_runs({by_arm[(backbone, arm)][seed]["name"]: set(side[seed]) for arm, side in zip(pair, sides)
                              for seed in sorted(set(sides[0]) & set(sides[1]))})
    return {"backbone": backbone, "comparison": f"{pair[0]} - {pair[1]}", "protocol": protocol,
            "model": label, "notes": "; ".join(dict.fromkeys(notes)), **(result or {})}


def _short_runs(entries: dict[str, set]) -> list[str]:
    """The note on the entries a paired comparison leaves out (those not in every paired run), naming each run
    that lacks some and how many it has of all the runs' entries."""
    common, every = set.intersection(*entries.values()), set().union(*entries.values())
    if len(every) == len(common):
        return []
    short = [f"{name} has {len(found)} of {len(every)}" for name, found in entries.items() if len(found) < len(every)]
    return [f"{len(every) - len(common)} entries not in every paired run left out ({'; '.join(short)})"]


# -- output ------------------------------------------------------------------------------------------------

def _runs(row: dict) -> str:
    """"k of N": the row's runs of those expected ("no run": a row of the paper's that no run was expected for)."""
    return f"{row['runs']} of {row['expected']}" if row["expected"] else "no run"


def table1_notes(protocol: str) -> list[str]:
    """The notes under Table 1's release-protocol table: each number kept as printed, what the reference rows are."""
    if protocol != "release":
        return []
    return ([f"\\* {backbone} {arm}, {column}: {why}" for (table, (backbone, arm), column), why in PRINTED_AS_IS.items()
             if table == "table1"] + [_sentence(REFERENCE_NOTES["table1"])])


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:]


def summary_markdown(rows: list[dict]) -> str:
    """Table 1's Avg: each model under both protocols, the paper's number beside the release column."""
    header = ["backbone", "arm", "model", "runs", "budget", PROTOCOLS["release"][2] + ": Avg", "paper",
              PROTOCOLS["official"][2] + ": Avg"]
    return markdown_table(header, [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                                    _fmt(r[("release", "avg")]), _paper_fmt((r["paper"] or {}).get("avg"), "avg", "table1"),
                                    _fmt(r[("official", "avg")])] for r in rows])


def category_markdown(rows: list[dict], protocol: str, table: str = "table1") -> str:
    """Every column of one protocol; under the release protocol each cell has the paper's in parentheses
    (a star: kept as printed, PRINTED_AS_IS)."""
    header = ["backbone", "arm", "model", "runs", "budget", *COLUMNS]

    def render(row, column):
        star = "*" if (table, (row["backbone"], row["arm"]), column) in PRINTED_AS_IS else ""
        paper = (f" ({_paper_fmt(row['paper'][column], column, table)}{star})" if row["paper"] and protocol == "release"
                 else "")
        return _fmt(row[(protocol, column)]) + paper

    return markdown_table(header, [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                                    *(render(r, c) for c in COLUMNS)] for r in rows])


def table2_markdown(rows: list[dict]) -> str:
    """Every column of Table 2, the paper's number in parentheses (* where it is kept as printed), and the tau2
    task set of the runs with the paper's row's in parentheses. A tau2 column whose runs were measured on
    another task set than the paper's row shows "(≠)" instead of the paper's number, and a note says why."""
    def render(row, column):
        if not row["paper"]:
            return _fmt(row[column])
        if column in row["unlike"]:
            return f"{_fmt(row[column])} (≠)"
        star = "*" if ("table2", (row["backbone"], row["arm"]), column) in PRINTED_AS_IS else ""
        return f"{_fmt(row[column])} ({_paper_fmt(row['paper'][column], column, 'table2')}{star})"

    def tasks(row):
        paper = tau2_tasks_of_row(row["backbone"], row["arm"])
        return row["tau2_tasks"] + (f" ({paper})" if paper else "")

    text = markdown_table(["backbone", "arm", "model", "runs", "budget", *TABLE2_HEADER, "tau2 tasks"],
                          [[r["backbone"], r["arm"], r["model"], _runs(r), r["budget"],
                            *(render(r, c) for c in TABLE2_COLUMNS), tasks(r)] for r in rows])
    present = {(r["backbone"], r["arm"]) for r in rows}
    notes = [f"\\* {backbone} {arm}, {column}: {why}" for (table, (backbone, arm), column), why in PRINTED_AS_IS.items()
             if table == "table2" and (backbone, arm) in present]
    notes += [f"≠ {r['backbone']} {r['arm']}: tau2 {reason}; the paper's numbers there are not shown beside it"
              for r in rows for reason in dict.fromkeys(r["unlike"].values())]
    notes += [f"{backbone} {BASE}: {why}" for (table, backbone), why in REFERENCE_BASE_ROWS.items()
              if table == "table2" and (backbone, BASE) in present]
    notes += [_sentence(REFERENCE_NOTES["table2"])] if any(r.get("reference") for r in rows) else []
    return text + "".join("\n\n" + note for note in notes)


def differences_markdown(diffs: list[dict]) -> str:
    rows = []
    for d in diffs:
        values = ([f"{d['diff']:+.2f}", f"[{d['ci_low']:+.2f}, {d['ci_high']:+.2f}]", f"{d['p']:.3f}", str(d["seeds"]),
                   str(d["entries"])] if "diff" in d else ["—", "—", "—", "0", "0"])
        rows.append([d["backbone"], d["comparison"], PROTOCOLS[d["protocol"]][2], *values, d["notes"] or "-"])
    return markdown_table(["backbone", "comparison", "protocol", "difference", "95% CI", "p", "seeds", "entries", "notes"], rows)


def evaluated_on(runs: list[dict]) -> str:
    """How many test entries each model of each run was evaluated on; every evaluation on another number than the
    paper's 400 is named with its run and model."""
    by_size: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for model, size in run["entries"].items():
            if size is not None:
                by_size[size][run["name"]].append(MODELS[model][0])
    parts = []
    for size, found in sorted(by_size.items()):
        if size == 400:
            evaluations = sum(len(models) for models in found.values())
            parts.append(f"400 test entries ({evaluations} evaluation{'s' * (evaluations != 1)} in {len(found)} "
                         f"run{'s' * (len(found) != 1)})")
        else:
            named = ", ".join(f"{name} ({', '.join(models)})" for name, models in found.items())
            parts.append(f"{size} test entries ({named}: not the 400-entry test part of the paper's tables, so not "
                         "comparable to them)")
    return "; ".join(parts) or "no test evaluation"


def budgets_line(runs: list[dict]) -> str:
    """Which budgets the runs used, and that rows under another than the paper's are not comparable to it."""
    counts = Counter(r["budget"] for r in runs)
    text = ", ".join(f"{name} ({n} run{'s' * (n != 1)})" for name, n in sorted(counts.items())) or "no run"
    others = sorted(name for name in counts if name != PAPER_BUDGET)
    if others:
        text += (f". The paper's numbers come from its own budget (budget={PAPER_BUDGET}); rows under "
                 f"{', '.join(others)} are not comparable to them")
    return text


def _entries(run: dict) -> str:
    """The test entries of a run's evaluations: one number when every model had as many, else each model's."""
    sizes = {MODELS[model][0]: n for model, n in run["entries"].items() if n is not None}
    if len(set(sizes.values())) == 1:
        return str(next(iter(sizes.values())))
    return ", ".join(f"{label} {n}" for label, n in sizes.items()) or "none"


def runs_markdown(runs: list[dict]) -> str:
    """One line per run the tables use: identity, budget, and the model its headline numbers come from."""
    lines = []
    for run in runs:
        model = MODELS[run["headline"]][0] if run["headline"] in run["evals"] else "none (not evaluated on test)"
        if run["headline"] == "best_on_val" and run["selected_round"] is not None:
            model += f" (round {run['selected_round']})"
        lines.append(f"- {run['name']}: {run['backbone']} {run['experiment']} seed {run['seed']}, budget {run['budget']}, "
                     f"headline model: {model}, test entries: {_entries(run)}")
    return "\n".join(lines)


def report(root: Path, manifest_path: Path | None, n: int) -> tuple[str, dict]:
    """The Markdown text and the tables behind it."""
    manifest = read_manifest(manifest_path) if manifest_path and manifest_path.exists() else None
    runs, problems = survey(root, manifest)
    expected = expected_seeds(runs, problems)
    rows, diffs = main_table(runs, expected=expected), differences(runs, problems, n=n)
    headline_rows = main_table(runs, ("initial", HEADLINE), expected)
    table2, table3 = ood_table(runs, expected), ablation_table(runs, HEADLINE, expected)
    references = reference_rows("table1")
    expected_runs = len({(b, a, s) for (b, a), seeds in expected.items() if a != BASE for s in seeds})
    text = (f"# BFCL V3 multi-turn accuracy (%), mean ± 95% t-interval over seeds; {len(runs)} of {expected_runs} "
            f"expected runs used\n\n"
            f"Evaluated on: {evaluated_on(runs)}. Budgets: {budgets_line(runs)}. Expected runs: "
            + (f"{len(manifest)} from {manifest_path}" if manifest is not None else
               "no manifest (runs never created cannot be named; experiments.reproduce writes one)") + "\n\n"
            "## Table 1: Avg of every model under both protocols\n\n" + summary_markdown(rows + references) + "\n")
    for protocol in PROTOCOLS:
        text += (f"\n## Table 1, every column: {HEADLINE_LABEL}, {PROTOCOLS[protocol][2]}"
                 + (" (the paper's number in parentheses)" if protocol == "release" else "") + "\n\n"
                 + category_markdown(headline_rows + (references if protocol == "release" else []), protocol) + "\n")
        text += "".join(f"\n{note}\n" for note in table1_notes(protocol))
    if any(not r.get("reference") for r in table2):
        text += ("\n## Table 2: out of domain, the base model before and every arm after training (%; BFCL V4 = mean "
                 "of web search and memory; tau2 = tau2-bench's mean over its domains; the paper's number in "
                 "parentheses)\n\n" + table2_markdown(table2) + "\n")
    else:
        text += "\n## Table 2: no run has an out-of-domain evaluation (budget.ood_benchmarks)\n"
    if table3:
        for protocol in PROTOCOLS:
            text += (f"\n## Table 3: ablations, {HEADLINE_LABEL}, {PROTOCOLS[protocol][2]}"
                     + (" (the paper's number in parentheses, Qwen2.5-7B)" if protocol == "release" else "") + "\n\n"
                     + category_markdown(table3, protocol, "table3") + "\n")
    if diffs:
        text += (f"\n## Differences (accuracy points), {HEADLINE_LABEL}, paired bootstrap over seeds and entries "
                 "(experiments.aggregate.bootstrap_replicates)\n\n" + differences_markdown(diffs) + "\n")
    if runs:
        text += f"\n## Runs used ({len(runs)})\n\n" + runs_markdown(runs) + "\n"
    if problems:
        text += f"\n## Runs not used, missing, failed, unfinished, damaged or incomplete ({len(problems)})\n\n" + "\n".join(
            f"- {p['dir']}: {p['state']}" for p in problems) + "\n"
    return text, {"rows": rows, "headline": headline_rows, "table2": table2, "table3": table3, "diffs": diffs,
                  "references": references}


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def _csv_cell(c) -> list:
    return [None, None, 0] if c is None else [c["mean"], c["half"], c["n"]]


def _protocol_rows(rows: list[dict]) -> list[list]:
    """Table 1 or 3 rows, one line per protocol (a reference row of the paper's: the release protocol's only):
    identity, runs of expected, budget, then per column the mean, 95% half-width, runs with a value and
    (release protocol) the paper's number."""
    return [[r["backbone"], r["arm"], r["model"], protocol, r["runs"], r["expected"], r["budget"],
             *(v for c in COLUMNS for v in (*_csv_cell(r[(protocol, c)]),
                                            (r["paper"] or {}).get(c) if protocol == "release" else None))]
            for r in rows for protocol in PROTOCOLS if protocol == "release" or not r.get("reference")]


def write_outputs(out: Path, text: str, t: dict) -> None:
    from experiments.tables_figure import plot, plot_table2

    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text)
    identity_header = ["backbone", "arm", "model", "protocol", "runs", "expected", "budget"]
    per_column = [f"{c}_{s}" for c in COLUMNS for s in ("mean", "ci95", "n", "paper")]
    _write_csv(out / "tables.csv", identity_header + per_column, _protocol_rows(t["rows"] + t["references"]))
    _write_csv(out / "table3.csv", identity_header + per_column, _protocol_rows(t["table3"]))
    # the paper's number only where the runs were measured as it was (a tau2 column: on its row's task set)
    _write_csv(out / "table2.csv",
               ["backbone", "arm", "model", "runs", "expected", "budget",
                *(f"{c}_{s}" for c in TABLE2_COLUMNS for s in ("mean", "ci95", "n", "paper")), "tau2_tasks",
                "tau2_tasks_paper"],
               [[r["backbone"], r["arm"], r["model"], r["runs"], r["expected"], r["budget"],
                 *(v for c in TABLE2_COLUMNS
                   for v in (*_csv_cell(r[c]), None if c in r["unlike"] else (r["paper"] or {}).get(c))),
                 r["tau2_tasks"], tau2_tasks_of_row(r["backbone"], r["arm"])] for r in t["table2"]])
    keys = ("backbone", "comparison", "protocol", "model", "diff", "ci_low", "ci_high", "p", "seeds", "entries", "notes")
    _write_csv(out / "differences.csv", list(keys), [[d.get(k) for k in keys] for d in t["diffs"]])
    has_release = any(r[("release", "avg")] for r in t["headline"])
    plot(t["headline"] + (t["references"] if has_release else []), out / "tables.png",
         "release" if has_release else "official", HEADLINE_LABEL)
    if any(not r.get("reference") for r in t["table2"]):
        plot_table2(t["table2"], out / "table2.png")


OUTPUTS = ("tables.md", "tables.csv", "table2.csv", "table3.csv", "differences.csv", "tables.png", "table2.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.aggregate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="directory holding run directories (searched recursively)")
    parser.add_argument("--manifest", type=Path, default=None,
                        help=f"the expected runs (default: <root>/{MANIFEST}, written by experiments.reproduce)")
    parser.add_argument("--out", type=Path, default=None, help="write tables.md, the CSVs and the plots here")
    parser.add_argument("--bootstrap", type=int, default=10000, help="bootstrap replicates (default 10000)")
    parser.add_argument("--wandb", default="disabled", choices=["disabled", "offline", "online"],
                        help="with --out, also log the tables and the plots as a W&B artifact `seal-tables`")
    parser.add_argument("--project", default="seal", help="W&B project for --wandb (default seal)")
    args = parser.parse_args(argv)
    try:
        if not args.root.is_dir():
            raise UserError(f"{args.root} is not a directory: give the folder that holds the run directories")
        if args.manifest is not None and not args.manifest.exists():
            raise UserError(f"--manifest {args.manifest} does not exist; give the manifest.json experiments.reproduce wrote")
        if args.bootstrap < 1:
            raise UserError(f"--bootstrap {args.bootstrap}: give a number of replicates of at least 1")
        text, tables = report(args.root, args.manifest or args.root / MANIFEST, args.bootstrap)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    if not any(r["runs"] for r in tables["rows"]):
        print(f"no finished training run (run_config.json and metrics.json) under {args.root}", file=sys.stderr)
        return 1
    if args.out:
        write_outputs(args.out, text, tables)
        if args.wandb != "disabled":
            from seal.report.wandb_run import log_files_as_artifact

            log_files_as_artifact([args.out / n for n in OUTPUTS if (args.out / n).exists()], mode=args.wandb,
                                  project=args.project, name="seal-tables", kind="tables", out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
