"""Aggregate finished training runs into the paper's tables.

    python -m experiments.aggregate multirun/train            # every run directory below it
    python -m experiments.aggregate outputs/train --out tables

Reads each run's run_config.json (backbone, experiment, seed) and metrics.json (evaluation of the
initial and the trained model), groups runs by (backbone, experiment), and prints, per table, the
mean over seeds with a 95% confidence interval next to the paper's single-run number:

- Table 1: per backbone, the base model and every trained arm, all five columns;
- Table 2: out of domain (budget.ood_benchmarks), per backbone and arm: BFCL V4 memory, web search and
  their mean (the paper's "BFCL V4 (web search + memory) Avg") beside the paper's number; tau2-bench is
  not on the package index, so its columns hold only the paper's numbers;
- Table 3: the ablation arms (and seal) per backbone, Avg, with the paper's Avg on Qwen2.5-7B;
- the comparison the paper did not make: seal minus vanilla_rl and seal minus each ablation, per
  backbone, over the held-out entries and seeds both arms have, with a paired bootstrap (entries and
  seeds resampled) giving the 95% interval of the difference and a two-sided p-value;
- the runs that failed or did not finish.

Writes the same as Markdown and CSV (tables.md, tables.csv, table2.csv, table3.csv, differences.csv) and a bar
chart with the 95% intervals (tables.png).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
COLUMNS = ("avg",) + CATEGORIES

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
OOD_COLUMNS = ("bfcl_v4_memory", "bfcl_v4_web_search")
# Paper ablations on Qwen2.5-7B (Avg %)
PAPER_ABLATION = {"wo_env_adaptation": 35.75, "wo_reweighting": 32.75, "wo_closed_loop": 33.00, "seal": 40.25}
# two-sided 95% Student t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (0 for a single run)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, _T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def load_runs(root: Path) -> list[dict]:
    """Every finished training run below `root` (run_config.json and metrics.json with eval_after)."""
    runs = []
    for metrics_path in sorted(root.rglob("metrics.json")):
        run_dir = metrics_path.parent
        config_path = run_dir / "run_config.json"
        if not config_path.exists():
            continue
        config, metrics = json.loads(config_path.read_text()), json.loads(metrics_path.read_text())
        if "eval_after" not in metrics:
            continue
        runs.append({
            "dir": str(run_dir), "backbone": config["backbone"]["name"], "experiment": config["experiment_name"],
            "seed": config["seed"], "before": metrics["eval_before"], "after": metrics["eval_after"],
            "part": config.get("heldout_part", "?"), "entries": metrics["eval_after"].get("num_entries"),
            "ood_before": metrics.get("ood_before") or {}, "ood_after": metrics.get("ood_after") or {},
        })
    return runs


def missing_runs(root: Path) -> list[dict]:
    """Job directories below `root` (Hydra wrote their .hydra/) without a finished run: what stopped them."""
    finished = {run["dir"] for run in load_runs(root)}
    missing = []
    for hydra_dir in sorted(root.rglob(".hydra")):
        run_dir = hydra_dir.parent
        if str(run_dir) in finished:
            continue
        error = run_dir / "error.txt"
        if error.exists():
            lines = [line for line in error.read_text().splitlines() if line.strip()]
            state = "failed: " + (lines[-1].strip() if lines else "see error.txt")
        elif (run_dir / "run_config.json").exists():
            done = (run_dir / "metrics.jsonl").read_text().count("\n") if (run_dir / "metrics.jsonl").exists() else 0
            state = f"unfinished: {done} round(s) done"
        else:
            state = "not started"
        missing.append({"dir": str(run_dir.relative_to(root)), "state": state})
    return missing


def _pct(metrics: dict, column: str) -> float:
    return 100.0 * metrics[f"eval/bfcl_v3/{column}"]


def main_table(runs: list[dict]) -> list[dict]:
    """Per backbone: the base model (every run's before-evaluation) and each trained arm."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    # the base model is one evaluation per seed, however many arms started from it: the arms of
    # one seed evaluate the same initial model, so they count once (their mean, should they differ)
    before: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for run in runs:
        before[(run["backbone"], run["seed"])].append(run["before"])
        groups[(run["backbone"], run["experiment"])].append(run["after"])
    for (backbone, _seed), evals in before.items():
        keys = [f"eval/bfcl_v3/{c}" for c in COLUMNS]
        groups[(backbone, "base model")].append({k: statistics.fmean(e[k] for e in evals) for k in keys})
    rows = []
    for (backbone, arm), evals in sorted(groups.items()):
        row = {"backbone": backbone, "arm": arm, "runs": len(evals)}
        for column in COLUMNS:
            row[column] = mean_ci([_pct(e, column) for e in evals])
        paper = PAPER_MAIN.get((backbone, arm))
        row["paper"] = dict(zip(COLUMNS, paper)) if paper else None
        row["paper_avg"] = paper[0] if paper else None
        rows.append(row)
    return rows


def ood_table(runs: list[dict]) -> list[dict]:
    """Table 2: per backbone and arm with an out-of-domain evaluation, the memory and web-search averages
    (%), and their mean where a run has both (BFCL's agentic score), beside the paper's numbers."""
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
            values = [100.0 * e[name][f"eval/{name}/avg"] for e in evals if name in e]
            row[name] = mean_ci(values) if values else None
        both = [50.0 * (e[OOD_COLUMNS[0]][f"eval/{OOD_COLUMNS[0]}/avg"] + e[OOD_COLUMNS[1]][f"eval/{OOD_COLUMNS[1]}/avg"])
                for e in evals if all(n in e for n in OOD_COLUMNS)]
        row["bfcl_v4"] = mean_ci(both) if both else None
        paper = PAPER_OOD.get((backbone, arm), {})
        row["paper_bfcl_v4"], row["paper_tau2"] = paper.get("bfcl_v4"), paper.get("tau2")
        rows.append(row)
    return rows


ABLATIONS = ("wo_env_adaptation", "wo_reweighting", "wo_closed_loop")


def ablation_table(runs: list[dict]) -> list[dict]:
    """Table 3: per backbone that has an ablation run, each ablation arm and seal (Avg)."""
    rows = []
    for backbone in sorted({r["backbone"] for r in runs if r["experiment"] in ABLATIONS}):
        for arm in (*ABLATIONS, "seal"):
            evals = [r["after"] for r in runs if r["backbone"] == backbone and r["experiment"] == arm]
            if evals:
                rows.append({"backbone": backbone, "arm": arm, "runs": len(evals),
                             "avg": mean_ci([_pct(e, "avg") for e in evals]),
                             "paper_avg": PAPER_ABLATION.get(arm) if backbone == "qwen2.5-7b" else None})
    return rows


def entry_rewards(run: dict) -> dict[str, float]:
    """Per held-out entry, 1.0 if the trained model's trajectory passed the official check, else 0.0."""
    path = Path(run["dir"]) / "eval_after" / "trajectories.jsonl"
    if not path.exists():
        return {}
    return {t["id"]: float(bool(t["valid"])) for t in map(json.loads, path.read_text().splitlines())}


def paired_bootstrap(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], *, n: int = 10000,
                     seed: int = 0) -> dict | None:
    """Arm a minus arm b (accuracy points) over the seeds and entries both have, each seed's entry
    paired with the same seed's entry. Replicates resample seeds and entries with replacement (two
    levels); the interval is the 2.5/97.5 percentile, the p-value 2 min(P(d* <= 0), P(d* >= 0))."""
    import numpy as np

    seeds = sorted(set(a) & set(b))
    ids = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds))) if seeds else []
    if not ids:
        return None
    d = np.array([[a[s][i] - b[s][i] for i in ids] for s in seeds]) * 100.0
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(seeds), size=(n, len(seeds)))
    cols = rng.integers(0, len(ids), size=(n, len(ids)))
    # mean over the resampled grid = mean over resampled seeds of each seed's mean over resampled entries
    reps = np.array([d[r][:, c].mean() for r, c in zip(rows, cols)])
    low, high = np.percentile(reps, [2.5, 97.5])
    p = min(1.0, 2 * min(float((reps <= 0).mean()), float((reps >= 0).mean())))
    return {"diff": float(d.mean()), "ci_low": float(low), "ci_high": float(high), "p": p,
            "seeds": len(seeds), "entries": len(ids)}


def differences(runs: list[dict], *, n: int = 10000) -> list[dict]:
    """seal minus vanilla_rl and seal minus each ablation, per backbone (paired bootstrap)."""
    by_arm: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(dict)
    for run in runs:
        by_arm[(run["backbone"], run["experiment"])][run["seed"]] = entry_rewards(run)
    rows = []
    for backbone in sorted({r["backbone"] for r in runs}):
        if (backbone, "seal") not in by_arm:
            continue
        for other in ("vanilla_rl", *ABLATIONS):
            if (backbone, other) in by_arm:
                result = paired_bootstrap(by_arm[(backbone, "seal")], by_arm[(backbone, other)], n=n)
                if result:
                    rows.append({"backbone": backbone, "comparison": f"seal - {other}", **result})
    return rows


def _fmt(cell) -> str:
    if isinstance(cell, tuple):
        mean, half = cell
        return f"{mean:.2f}" + (f" ± {half:.2f}" if half else "")
    return "-" if cell is None else str(cell)


def to_markdown(rows: list[dict], header: list[str] | None = None) -> str:
    """Rows as a Markdown table; a row with the paper's numbers shows each beside its cell, in parentheses."""
    header = header or ["backbone", "arm", "runs", *COLUMNS]

    def cell(row: dict, h: str) -> str:
        paper = row.get("paper")
        return _fmt(row[h]) + (f" ({paper[h]:g})" if paper and h in paper else "")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(row, h) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def evaluated_on(runs: list[dict]) -> str:
    """Which split part and how many entries the trained models were evaluated on."""
    sizes = sorted({(r["part"], r["entries"]) for r in runs}, key=str)
    text = "; ".join(f"{part} part, {entries} entries" for part, entries in sizes)
    if any(part != "test" or entries != 400 for part, entries in sizes):
        text += " (the paper's tables are on the 400-entry test part: these numbers are not comparable to them)"
    return text


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(rows)), 3.5))
    labels = [f"{r['backbone']}\n{r['arm']}" for r in rows]
    ax.bar(range(len(rows)), [r["avg"][0] for r in rows], yerr=[r["avg"][1] for r in rows], capsize=4)
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(0, max(5.0, *(r["avg"][0] + r["avg"][1] for r in rows)) * 1.1)
    ax.set_ylabel("BFCL V3 multi-turn Avg (%)")
    ax.set_title("mean ± 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="directory holding run directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="write tables.md, the CSVs and tables.png here")
    parser.add_argument("--bootstrap", type=int, default=10000, help="bootstrap replicates (default 10000)")
    parser.add_argument("--wandb", default="disabled", choices=["disabled", "offline", "online"],
                        help="with --out, also log the tables and the plot as a W&B artifact `seal-tables`")
    parser.add_argument("--project", default="seal", help="W&B project for --wandb (default seal)")
    args = parser.parse_args()
    runs = load_runs(args.root)
    if not runs:
        raise SystemExit(f"no finished training run (metrics.json with eval_after) under {args.root}")
    rows, table3, diffs = main_table(runs), ablation_table(runs), differences(runs, n=args.bootstrap)
    text = (
        f"# BFCL V3 multi-turn accuracy (%), mean ± 95% CI over seeds; {len(runs)} runs\n\n"
        f"Evaluated on: {evaluated_on(runs)}\n\n"
        "## Table 1: base model and trained arms (the paper's number in parentheses)\n\n" + to_markdown(rows) + "\n"
    )
    table2 = ood_table(runs)
    if table2:
        text += ("\n## Table 2: out of domain (%; BFCL V4 = mean of memory and web search; tau2-bench is not "
                 "evaluated here, the paper's number is shown)\n\n" + to_markdown(
                     table2, ["backbone", "arm", "runs", *OOD_COLUMNS, "bfcl_v4", "paper_bfcl_v4", "paper_tau2"]) + "\n")
    if table3:
        text += "\n## Table 3: ablations (Avg; the paper's on Qwen2.5-7B)\n\n" + to_markdown(
            table3, ["backbone", "arm", "runs", "avg", "paper_avg"]) + "\n"
    else:
        text += ("\nPaper ablations on Qwen2.5-7B (Avg %): "
                 + ", ".join(f"{k} {v}" for k, v in PAPER_ABLATION.items()) + "\n")
    if diffs:
        text += ("\n## Differences (accuracy points), paired bootstrap over entries and seeds\n\n"
                 "| backbone | comparison | difference | 95% CI | p | seeds | entries |\n|---|---|---|---|---|---|---|\n"
                 + "\n".join(f"| {d['backbone']} | {d['comparison']} | {d['diff']:+.2f} | "
                              f"[{d['ci_low']:+.2f}, {d['ci_high']:+.2f}] | {d['p']:.3f} | {d['seeds']} | {d['entries']} |"
                              for d in diffs) + "\n")
    missing = missing_runs(args.root)
    if missing:
        text += f"\n## Missing or unfinished runs ({len(missing)})\n\n" + "\n".join(
            f"- {m['dir']}: {m['state']}" for m in missing) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tables.md").write_text(text)
        _write_csv(args.out / "tables.csv",
                   ["backbone", "arm", "runs", *(f"{c}_{s}" for c in COLUMNS for s in ("mean", "ci95", "paper"))],
                   [[r["backbone"], r["arm"], r["runs"],
                     *(v for c in COLUMNS for v in (*r[c], (r["paper"] or {}).get(c)))] for r in rows])
        _write_csv(args.out / "table2.csv",
                   ["backbone", "arm", "runs", *(f"{c}_{s}" for c in (*OOD_COLUMNS, "bfcl_v4") for s in ("mean", "ci95")),
                    "paper_bfcl_v4", "paper_tau2"],
                   [[r["backbone"], r["arm"], r["runs"], *(v for c in (*OOD_COLUMNS, "bfcl_v4") for v in (r[c] or (None, None))),
                     r["paper_bfcl_v4"], r["paper_tau2"]] for r in table2])
        _write_csv(args.out / "table3.csv", ["backbone", "arm", "runs", "avg_mean", "avg_ci95", "paper_avg"],
                   [[r["backbone"], r["arm"], r["runs"], *r["avg"], r["paper_avg"]] for r in table3])
        _write_csv(args.out / "differences.csv",
                   ["backbone", "comparison", "diff", "ci_low", "ci_high", "p", "seeds", "entries"],
                   [[d[k] for k in ("backbone", "comparison", "diff", "ci_low", "ci_high", "p", "seeds", "entries")]
                    for d in diffs])
        plot(rows, args.out / "tables.png")
        if args.wandb != "disabled":
            from seal.report.wandb_run import log_files_as_artifact

            names = ("tables.md", "tables.csv", "table2.csv", "table3.csv", "differences.csv", "tables.png")
            log_files_as_artifact([args.out / n for n in names], mode=args.wandb, project=args.project,
                                  name="seal-tables", kind="tables", out_dir=args.out)


if __name__ == "__main__":
    main()
