"""Aggregate training runs into the paper's tables, naming every run or comparison that is left out.

    python -m experiments.aggregate multirun/reproduce            # reads <root>/manifest.json when there is one
    python -m experiments.aggregate outputs/train --out tables --manifest sweep.json

The expected runs come from the manifest experiments.reproduce writes at submission (every run directory
with its arm, backbone and seed); without one, from the run directories found below the root (a run
never created is then named nowhere, and the output says so). Every expected run that is missing,
failed, unfinished, not evaluated on test or lacks trajectories is listed with what stopped it.

Each run's run_config.json gives backbone, arm (experiment_name), seed and the part its before/after
evaluation used; metrics.json its evaluations. Runs with a validation part are scored on test only:
the initial model on `test_before`, the final model on `test_final`, the model chosen on validation on
`test_best_on_val`, and the release's test-selected checkpoint on `test_selected_diagnostic` (optimistic,
a diagnostic); runs without one on `eval_before`/`eval_after` (the test part). Every table says which
model each row is, and shows two protocols: "comparable to the paper" (the release protocol,
`eval/bfcl_v3_release/*`, with the paper's number beside it) and "comparable to the BFCL leaderboard"
(the official protocol, `eval/bfcl_v3/*`). A run without an evaluation under a protocol shows "—"
(runs made before the release protocol have none); a cell over fewer runs than its row says so (n=k of N).

- Table 1: per backbone, the base model and every trained arm, mean ± 95% t-interval over seeds;
- Table 2: out of domain (budget.ood_benchmarks; the final model): BFCL V4 memory, web search and their
  mean beside the paper's number, and tau2-bench (benchmark=tau2) beside the paper's;
- Table 3: the ablation arms and seal per backbone, Avg, with the paper's on Qwen2.5-7B;
- differences the paper did not make: seal minus vanilla_rl and minus each ablation, per backbone and
  protocol, paired by seed and entry (paired_bootstrap); a seed either arm lacks is dropped and named.

Writes the same as Markdown and CSV (tables.md, tables.csv, table2.csv, table3.csv, differences.csv) and
a bar chart (tables.png).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from seal.env.benchmark import CATEGORIES

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
MANIFEST = "manifest.json"

# Paper Table 1 (BFCL V3 multi-turn, 400 held-out entries, accuracy %): Avg, Base, MissFunc, MissParam, LongCtx
PAPER_MAIN = {
    ("qwen2.5-3b", "base model"): (5.75, 11, 6, 3, 3),
    ("qwen2.5-3b", "vanilla_rl"): (9.25, 16, 9, 6, 6),
    ("qwen2.5-3b", "seal"): (14.00, 19, 15, 12, 10),
    ("qwen2.5-7b", "base model"): (14.00, 22, 14, 10, 10),
    ("qwen2.5-7b", "vanilla_rl"): (30.75, 46, 27, 27, 23),
    ("qwen2.5-7b", "seal"): (40.25, 58, 36, 34, 33),
    ("toolace-2-8b", "base model"): (32.00, 45, 26, 35, 22),
    ("toolace-2-8b", "vanilla_rl"): (38.50, 52, 30, 40, 32),
    ("toolace-2-8b", "seal"): (46.75, 58, 46, 44, 39),
}
# Paper Table 2 (out of domain, Avg %): BFCL V4 agentic (web search + memory) and tau2-bench
PAPER_OOD = {
    ("qwen2.5-3b", "vanilla_rl"): {"bfcl_v4": 4.69, "tau2": 9.64},
    ("qwen2.5-3b", "seal"): {"bfcl_v4": 8.63, "tau2": 11.76},
    ("qwen2.5-7b", "vanilla_rl"): {"bfcl_v4": 9.17, "tau2": 16.11},
    ("qwen2.5-7b", "seal"): {"bfcl_v4": 12.71, "tau2": 20.79},
}
# BFCL V4's agentic pair (the paper's "BFCL V4" column is their mean) and tau2-bench (benchmark=tau2)
BFCL_V4 = ("bfcl_v4_memory", "bfcl_v4_web_search")
OOD_COLUMNS = (*BFCL_V4, "tau2")
# Paper ablations on Qwen2.5-7B (Avg %)
PAPER_ABLATION = {"wo_env_adaptation": 35.75, "wo_reweighting": 32.75, "wo_closed_loop": 33.00, "seal": 40.25}
# two-sided 95% Student t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_ci(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% t-interval (None for a single run: no spread to estimate)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, _T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


# -- which runs there are, and what became of each ------------------------------------------------------

def read_manifest(path: Path) -> list[dict]:
    """The expected runs experiments.reproduce wrote: [{"dir", "backbone", "experiment", "seed"}]."""
    return json.loads(path.read_text())["runs"]


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


def read_run(run_dir: Path, name: str) -> dict:
    """A finished run: its identity, and per model (MODELS) the evaluation on test and its folder."""
    config = json.loads((run_dir / "run_config.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    part = config.get("heldout_part", "test")
    evals, folders = {}, {}
    for model, (_label, key, folder, without_val) in MODELS.items():
        if metrics.get(key):
            evals[model] = metrics[key]
            if folder:
                folders[model] = folder
        elif without_val and part == "test" and metrics.get(without_val[0]):
            # no validation part: the before/after evaluation is the test evaluation
            evals[model], folders[model] = metrics[without_val[0]], without_val[1]
    return {"dir": str(run_dir), "name": name, "backbone": config["backbone"]["name"],
            "experiment": config["experiment_name"], "seed": config["seed"], "part": part,
            "entries": (evals.get("final") or {}).get("num_entries"), "evals": evals, "folders": folders,
            "ood_before": metrics.get("ood_before") or {}, "ood_after": metrics.get("ood_after") or {}}


def survey(root: Path, manifest: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
    """The finished runs, and every expected run that is not usable with why ({"dir", "state", ...}).
    Expected: the manifest's runs, plus every job directory found below `root` (Hydra's .hydra/ or a
    metrics.json)."""
    expected = {m["dir"]: m for m in manifest or []}
    found = {p.parent for p in root.rglob(".hydra")} | {p.parent for p in root.rglob("run_config.json")}
    for run_dir in found:
        expected.setdefault(str(run_dir.relative_to(root)), {"dir": str(run_dir.relative_to(root))})
    runs, problems = [], []
    for name, entry in sorted(expected.items()):
        run_dir = root / name
        state = run_state(run_dir)
        if state != "finished":
            problems.append({**entry, "state": state})
            continue
        run = read_run(run_dir, name)
        if "final" not in run["evals"]:
            problems.append({**entry, "state": f"finished, not evaluated on test (held-out part {run['part']} and no "
                                                "test_final: budget.val_every was off)"})
        runs.append(run)
    # the differences pair the headline model's trajectories: a run evaluated without them is named
    model = headline_model(runs)
    for run in runs:
        folder = run["folders"].get(model)
        for prefix, file, _ in PROTOCOLS.values():
            if folder and f"{prefix}/avg" in run["evals"][model] and not (Path(run["dir"]) / folder / file).exists():
                problems.append({**expected[run["name"]], "state": f"no trajectories: {folder}/{file}"})
    return runs, problems


# -- cells: mean ± 95% interval over the runs that have a value --------------------------------------------

def cell(values: list[float], of: int) -> dict | None:
    """A table cell over `of` runs: None when no run has a value."""
    if not values:
        return None
    mean, half = mean_ci(values)
    return {"mean": mean, "half": half, "n": len(values), "of": of}


def _value(metrics: dict | None, protocol: str, column: str) -> float | None:
    key = f"{PROTOCOLS[protocol][0]}/{column}"
    return 100.0 * metrics[key] if metrics and metrics.get(key) is not None else None


def _fmt(c) -> str:
    """"—" for no value; a zero spread prints as 0; a cell over fewer runs than its row says so."""
    if c is None:
        return "—"
    if isinstance(c, tuple):  # (mean, half) of Table 2
        c = {"mean": c[0], "half": c[1], "n": 1, "of": 1}
    text = f"{c['mean']:.2f}" + (f" ± {c['half']:.2f}" if c["half"] is not None else "")
    return text + (f" (n={c['n']} of {c['of']})" if c["n"] != c["of"] else "")


def _groups(runs: list[dict], model: str) -> dict[tuple[str, str], list[dict | None]]:
    """(backbone, arm) -> one evaluation per run of that model; the initial model once per (backbone,
    seed) as the arm "base model" (the arms of one seed start from the same model)."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    if model == "initial":
        by_seed: dict[tuple[str, int], list] = defaultdict(list)
        for run in runs:
            by_seed[(run["backbone"], run["seed"])].append(run["evals"].get("initial"))
        for (backbone, _seed), evals in sorted(by_seed.items()):
            groups[(backbone, "base model")].append(_mean_eval([e for e in evals if e]))
        return groups
    for run in runs:
        groups[(run["backbone"], run["experiment"])].append(run["evals"].get(model))
    return groups


def _mean_eval(evals: list[dict]) -> dict | None:
    if not evals:
        return None
    keys = {k for e in evals for k, v in e.items() if k.startswith("eval/") and isinstance(v, (int, float))}
    return {k: statistics.fmean(e[k] for e in evals if k in e) for k in keys}


def headline_model(runs: list[dict]) -> str:
    """The model the per-category tables, the differences and the plot use: best on validation where a
    run has it, else the final model."""
    return "best_on_val" if any("best_on_val" in r["evals"] for r in runs) else "final"


def main_table(runs: list[dict], models: tuple[str, ...] | None = None) -> list[dict]:
    """Table 1: per backbone, arm and model, every column under both protocols (and the paper's numbers)."""
    models = models or ("initial", "final", "best_on_val", "test_selected")
    rows = []
    for model in models:
        for (backbone, arm), evals in sorted(_groups(runs, model).items()):
            if model in ("best_on_val", "test_selected") and not any(evals):
                continue  # the runs did not select (budget.val_every off / eval_all_checkpoints_on_test off)
            row = {"backbone": backbone, "arm": arm, "model": MODELS[model][0], "key": model, "runs": len(evals)}
            for protocol in PROTOCOLS:
                for column in COLUMNS:
                    values = [v for e in evals if (v := _value(e, protocol, column)) is not None]
                    row[(protocol, column)] = cell(values, len(evals))
            paper = PAPER_MAIN.get((backbone, arm))
            row["paper"] = dict(zip(COLUMNS, paper)) if paper else None
            rows.append(row)
    return rows


def ood_table(runs: list[dict]) -> list[dict]:
    """Table 2: per backbone and arm with an out-of-domain evaluation, the memory, web-search and tau2-bench
    averages (%), and the mean of the first two where a run has both (BFCL's agentic score), beside the
    paper's numbers."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    before: dict[tuple[str, int], dict] = {}
    for run in runs:
        if run["ood_after"]:
            groups[(run["backbone"], run["experiment"])].append(run["ood_after"])
        if run["ood_before"]:  # one evaluation of the initial model per seed, whatever the arm
            before.setdefault((run["backbone"], run["seed"]), run["ood_before"])
    for (backbone, _seed), found in before.items():
        groups[(backbone, "base model")].append(found)
    rows = []
    for (backbone, arm), evals in sorted(groups.items()):
        row = {"backbone": backbone, "arm": arm, "runs": len(evals)}
        for name in OOD_COLUMNS:
            row[name] = cell([100.0 * e[name][f"eval/{name}/avg"] for e in evals if name in e], len(evals))
        both = [50.0 * (e[BFCL_V4[0]][f"eval/{BFCL_V4[0]}/avg"] + e[BFCL_V4[1]][f"eval/{BFCL_V4[1]}/avg"])
                for e in evals if all(n in e for n in BFCL_V4)]
        row["bfcl_v4"] = cell(both, len(evals))
        paper = PAPER_OOD.get((backbone, arm), {})
        row["paper_bfcl_v4"], row["paper_tau2"] = paper.get("bfcl_v4"), paper.get("tau2")
        rows.append(row)
    return rows


ABLATIONS = ("wo_env_adaptation", "wo_reweighting", "wo_closed_loop")


def ablation_table(runs: list[dict], model: str = "final") -> list[dict]:
    """Table 3: per backbone that has an ablation run, each ablation arm and seal (Avg, both protocols)."""
    rows = []
    for backbone in sorted({r["backbone"] for r in runs if r["experiment"] in ABLATIONS}):
        for arm in (*ABLATIONS, "seal"):
            evals = [r["evals"].get(model) for r in runs if r["backbone"] == backbone and r["experiment"] == arm]
            if evals:
                row = {"backbone": backbone, "arm": arm, "model": MODELS[model][0], "runs": len(evals),
                       "paper_avg": PAPER_ABLATION.get(arm) if backbone == "qwen2.5-7b" else None}
                for protocol in PROTOCOLS:
                    row[protocol] = cell([v for e in evals if (v := _value(e, protocol, "avg")) is not None], len(evals))
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
    return {t["id"]: float(bool(t["valid"])) for t in map(json.loads, path.read_text().splitlines())}


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


def differences(runs: list[dict], problems: list[dict] | None = None, *, model: str = "final",
                n: int = 10000) -> list[dict]:
    """seal minus vanilla_rl and seal minus each ablation, per backbone and protocol. Every seed either arm
    has (or the manifest expects) is used or named in the row's notes with why it was dropped."""
    by_arm: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for run in runs:
        by_arm[(run["backbone"], run["experiment"])][run["seed"]] = run
    absent: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for problem in problems or []:
        if "backbone" in problem:
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
    for seed in seeds:
        for arm, rewards in zip(pair, sides):
            run = by_arm[(backbone, arm)].get(seed)
            found = entry_rewards(run, model, protocol) if run else None
            if found is not None:
                rewards[seed] = found
            elif run is None:
                notes.append(f"seed {seed} dropped: {arm} run {absent[(backbone, arm)].get(seed, 'absent')}")
            else:
                notes.append(f"seed {seed} dropped: {arm} run {run['name']} has no {MODELS[model][0]} "
                             f"{PROTOCOLS[protocol][1]}")
    result = paired_bootstrap(*sides, n=n)
    if result is None:
        notes.append("no seed with trajectories of both arms")
    else:
        paired = [set(side[seed]) for side in sides for seed in set(sides[0]) & set(sides[1])]
        common, every = set.intersection(*paired), set().union(*paired)
        if len(every) > len(common):
            notes.append(f"{len(every) - len(common)} entries not in every paired run left out")
    return {"backbone": backbone, "comparison": f"{pair[0]} - {pair[1]}", "protocol": protocol,
            "model": MODELS[model][0], "notes": "; ".join(dict.fromkeys(notes)), **(result or {})}


# -- output ------------------------------------------------------------------------------------------------

def to_markdown(rows: list[dict], header: list[str], cells=None) -> str:
    """Rows as a Markdown table; `cells(row, h)` renders a column (default: _fmt of row[h])."""
    cells = cells or (lambda row, h: _fmt(row[h]) if isinstance(row[h], (dict, tuple)) or row[h] is None else str(row[h]))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells(row, h) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def summary_markdown(rows: list[dict]) -> str:
    """Table 1's Avg: each model under both protocols, the paper's number beside the release column."""
    header = ["backbone", "arm", "model", "runs", PROTOCOLS["release"][2] + ": Avg", "paper",
              PROTOCOLS["official"][2] + ": Avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        paper = f"{r['paper']['avg']:g}" if r["paper"] else "—"
        lines.append(f"| {r['backbone']} | {r['arm']} | {r['model']} | {r['runs']} | "
                     f"{_fmt(r[('release', 'avg')])} | {paper} | {_fmt(r[('official', 'avg')])} |")
    return "\n".join(lines)


def category_markdown(rows: list[dict], protocol: str) -> str:
    """Every column of one protocol; under the release protocol each cell has the paper's in parentheses."""
    header = ["backbone", "arm", "runs", *COLUMNS]

    def render(row, h):
        if h not in COLUMNS:
            return str(row[h])
        paper = row["paper"] if protocol == "release" else None
        return _fmt(row[(protocol, h)]) + (f" ({paper[h]:g})" if paper else "")

    return to_markdown(rows, header, render)


def differences_markdown(diffs: list[dict]) -> str:
    lines = ["| backbone | comparison | protocol | difference | 95% CI | p | seeds | entries | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in diffs:
        values = (f"{d['diff']:+.2f} | [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}] | {d['p']:.3f} | {d['seeds']} | "
                  f"{d['entries']}" if "diff" in d else "— | — | — | 0 | 0")
        lines.append(f"| {d['backbone']} | {d['comparison']} | {PROTOCOLS[d['protocol']][2]} | {values} | "
                     f"{d['notes'] or '-'} |")
    return "\n".join(lines)


def evaluated_on(runs: list[dict]) -> str:
    """How many test entries the models were evaluated on, and whether that matches the paper's 400."""
    sizes = sorted({r["entries"] for r in runs if r["entries"] is not None})
    text = ", ".join(f"{n} test entries" for n in sizes) or "no test evaluation"
    if sizes != [400]:
        text += " (the paper's tables are on the 400-entry test part: these numbers are not comparable to them)"
    return text


def figure(rows: list[dict], protocol: str, model_label: str):
    """Bars grouped by backbone (one per arm) with symmetric 95% error bars (never clipped at zero), the
    paper's number as a black dash on each bar that has one, and n=<runs> above each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backbones = sorted({r["backbone"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in sorted(rows, key=lambda r: r["arm"] != "base model")))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(rows) + len(backbones)), 3.8))
    width = 0.8 / max(1, len(arms))
    lows, highs = [0.0], [5.0]
    for i, arm in enumerate(arms):
        xs, means, halves = [], [], []
        for j, backbone in enumerate(backbones):
            row = next((r for r in rows if (r["backbone"], r["arm"]) == (backbone, arm)), None)
            if row is None:
                continue
            x = j + (i - (len(arms) - 1) / 2) * width
            c = row[(protocol, "avg")]
            if c is None:
                ax.text(x, 0.5, "not evaluated", rotation=90, ha="center", va="bottom", fontsize=6)
                continue
            half = c["half"] or 0.0
            xs.append(x), means.append(c["mean"]), halves.append(half)
            lows.append(c["mean"] - half), highs.append(c["mean"] + half)
            ax.text(x, c["mean"] + half, f"n={c['n']}", ha="center", va="bottom", fontsize=6)
            if row["paper"] and protocol == "release":
                ax.plot([x], [row["paper"]["avg"]], marker="_", markersize=14, color="black", linestyle="none",
                        gid="paper")
                highs.append(row["paper"]["avg"])
        if xs:
            ax.bar(xs, means, width=width, yerr=halves, capsize=3, label=arm)
    ax.set_xticks(range(len(backbones)), backbones, fontsize=8)
    span = max(highs) - min(lows)
    ax.set_ylim(min(lows) - 0.05 * span if min(lows) < 0 else 0, max(highs) + 0.12 * span)
    ax.set_ylabel("BFCL V3 multi-turn Avg (%)")
    ax.set_title(f"{model_label}, {PROTOCOLS[protocol][2]}\nmean ± 95% CI over seeds"
                 + ("; black dash: the paper" if protocol == "release" else ""), fontsize=8)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def plot(rows: list[dict], path: Path, protocol: str, model_label: str) -> None:
    import matplotlib.pyplot as plt

    fig = figure(rows, protocol, model_label)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def _csv_cell(c) -> list:
    return [None, None, 0] if c is None else [c["mean"], c["half"], c["n"]]


def report(root: Path, manifest_path: Path | None, n: int) -> tuple[str, dict]:
    """The Markdown text and the tables behind it."""
    manifest = read_manifest(manifest_path) if manifest_path and manifest_path.exists() else None
    runs, problems = survey(root, manifest)
    model = headline_model(runs)
    rows, diffs = main_table(runs), differences(runs, problems, model=model, n=n)
    headline_rows = [r for r in rows if r["key"] in ("initial", model)]
    table2, table3 = ood_table(runs), ablation_table(runs, model)
    text = (f"# BFCL V3 multi-turn accuracy (%), mean ± 95% t-interval over seeds; {len(runs)} finished runs\n\n"
            f"Evaluated on: {evaluated_on(runs)}. Expected runs: "
            + (f"{len(manifest)} from {manifest_path}" if manifest is not None else
               "no manifest (runs never created cannot be named; experiments.reproduce writes one)") + "\n\n"
            "## Table 1: Avg of every model under both protocols\n\n" + summary_markdown(rows) + "\n")
    for protocol in PROTOCOLS:
        text += (f"\n## Table 1, every column: {MODELS[model][0]} (trained arms), {PROTOCOLS[protocol][2]}"
                 + (" (the paper's number in parentheses)" if protocol == "release" else "") + "\n\n"
                 + category_markdown(headline_rows, protocol) + "\n")
    if table2:
        text += ("\n## Table 2: out of domain, final model (%; BFCL V4 = mean of memory and web search; tau2 = "
                 "tau2-bench's average over its domains)\n\n" + to_markdown(
                     table2, ["backbone", "arm", "runs", *BFCL_V4, "bfcl_v4", "paper_bfcl_v4", "tau2", "paper_tau2"]) + "\n")
    if table3:
        text += (f"\n## Table 3: ablations, {MODELS[model][0]} (Avg; the paper's on Qwen2.5-7B)\n\n"
                 + to_markdown(table3, ["backbone", "arm", "runs", "release", "paper_avg", "official"]) + "\n")
    else:
        text += ("\nPaper ablations on Qwen2.5-7B (Avg %): "
                 + ", ".join(f"{k} {v}" for k, v in PAPER_ABLATION.items()) + "\n")
    if diffs:
        text += (f"\n## Differences (accuracy points), {MODELS[model][0]}, paired bootstrap over seeds and entries "
                 "(experiments.aggregate.bootstrap_replicates)\n\n" + differences_markdown(diffs) + "\n")
    if problems:
        text += f"\n## Runs missing, failed, unfinished or incomplete ({len(problems)})\n\n" + "\n".join(
            f"- {p['dir']}: {p['state']}" for p in problems) + "\n"
    return text, {"rows": rows, "headline": headline_rows, "table2": table2, "table3": table3, "diffs": diffs,
                  "model": model}


def write_outputs(out: Path, text: str, t: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text)
    _write_csv(out / "tables.csv",
               ["backbone", "arm", "model", "protocol", "runs",
                *(f"{c}_{s}" for c in COLUMNS for s in ("mean", "ci95", "n", "paper"))],
               [[r["backbone"], r["arm"], r["model"], protocol, r["runs"],
                 *(v for c in COLUMNS for v in (*_csv_cell(r[(protocol, c)]),
                                                (r["paper"] or {}).get(c) if protocol == "release" else None))]
                for r in t["rows"] for protocol in PROTOCOLS])
    _write_csv(out / "table2.csv",
               ["backbone", "arm", "runs", *(f"{c}_{s}" for c in (*OOD_COLUMNS, "bfcl_v4") for s in ("mean", "ci95", "n")),
                "paper_bfcl_v4", "paper_tau2"],
               [[r["backbone"], r["arm"], r["runs"], *(v for c in (*OOD_COLUMNS, "bfcl_v4") for v in _csv_cell(r[c])),
                 r["paper_bfcl_v4"], r["paper_tau2"]] for r in t["table2"]])
    _write_csv(out / "table3.csv",
               ["backbone", "arm", "model", "runs", *(f"{p}_{s}" for p in PROTOCOLS for s in ("mean", "ci95", "n")),
                "paper_avg"],
               [[r["backbone"], r["arm"], r["model"], r["runs"], *(v for p in PROTOCOLS for v in _csv_cell(r[p])),
                 r["paper_avg"]] for r in t["table3"]])
    keys = ("backbone", "comparison", "protocol", "model", "diff", "ci_low", "ci_high", "p", "seeds", "entries", "notes")
    _write_csv(out / "differences.csv", list(keys), [[d.get(k) for k in keys] for d in t["diffs"]])
    has_release = any(r[("release", "avg")] for r in t["headline"])
    plot(t["headline"], out / "tables.png", "release" if has_release else "official", MODELS[t["model"]][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="directory holding run directories (searched recursively)")
    parser.add_argument("--manifest", type=Path, default=None,
                        help=f"the expected runs (default: <root>/{MANIFEST}, written by experiments.reproduce)")
    parser.add_argument("--out", type=Path, default=None, help="write tables.md, the CSVs and tables.png here")
    parser.add_argument("--bootstrap", type=int, default=10000, help="bootstrap replicates (default 10000)")
    parser.add_argument("--wandb", default="disabled", choices=["disabled", "offline", "online"],
                        help="with --out, also log the tables and the plot as a W&B artifact `seal-tables`")
    parser.add_argument("--project", default="seal", help="W&B project for --wandb (default seal)")
    args = parser.parse_args()
    if not args.root.is_dir():
        parser.exit(2, f"error: {args.root} is not a folder; give the folder holding the runs (e.g. multirun/train)\n")
    if args.manifest is not None and not args.manifest.exists():
        parser.error(f"--manifest {args.manifest} does not exist; give the manifest.json experiments.reproduce wrote")
    text, tables = report(args.root, args.manifest or args.root / MANIFEST, args.bootstrap)
    if not tables["rows"] and not tables["diffs"]:
        print(text)
        raise SystemExit(f"no finished training run (run_config.json and metrics.json) under {args.root}")
    print(text)
    if args.out:
        write_outputs(args.out, text, tables)
        if args.wandb != "disabled":
            from seal.report.wandb_run import log_files_as_artifact

            names = ("tables.md", "tables.csv", "table2.csv", "table3.csv", "differences.csv", "tables.png")
            log_files_as_artifact([args.out / n for n in names], mode=args.wandb, project=args.project,
                                  name="seal-tables", kind="tables", out_dir=args.out)


if __name__ == "__main__":
    main()
