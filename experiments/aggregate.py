"""Aggregate finished training runs into the paper's tables.

    python -m experiments.aggregate multirun/train            # every run directory below it
    python -m experiments.aggregate outputs/train --out tables

Reads each run's run_config.json (backbone, experiment, seed) and metrics.json (evaluation of the
initial and the trained model), groups runs by (backbone, experiment), and prints, per table, the
mean over seeds with a 95% confidence interval next to the paper's single-run number. Writes the
same tables as Markdown and CSV.
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
        row["paper_avg"] = paper[0] if paper else None
        rows.append(row)
    return rows


def _fmt(cell) -> str:
    if isinstance(cell, tuple):
        mean, half = cell
        return f"{mean:.2f}" + (f" ± {half:.2f}" if half else "")
    return "-" if cell is None else str(cell)


def to_markdown(rows: list[dict]) -> str:
    header = ["backbone", "arm", "runs", *COLUMNS, "paper_avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(row[h]) for h in header) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="directory holding run directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="write tables.md and tables.csv here")
    args = parser.parse_args()
    runs = load_runs(args.root)
    if not runs:
        raise SystemExit(f"no finished training run (metrics.json with eval_after) under {args.root}")
    rows = main_table(runs)
    text = (
        f"# BFCL V3 multi-turn accuracy (%), mean ± 95% CI over seeds; {len(runs)} runs\n\n"
        + to_markdown(rows)
        + "\n\nPaper ablations on Qwen2.5-7B (Avg %): "
        + ", ".join(f"{k} {v}" for k, v in PAPER_ABLATION.items())
        + "\n"
    )
    missing = missing_runs(args.root)
    if missing:
        text += f"\n## Missing or unfinished runs ({len(missing)})\n\n" + "\n".join(
            f"- {m['dir']}: {m['state']}" for m in missing) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tables.md").write_text(text)
        with (args.out / "tables.csv").open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["backbone", "arm", "runs", *(f"{c}_{s}" for c in COLUMNS for s in ("mean", "ci95")), "paper_avg"])
            for row in rows:
                writer.writerow([row["backbone"], row["arm"], row["runs"],
                                 *(v for c in COLUMNS for v in row[c]), row["paper_avg"]])


if __name__ == "__main__":
    main()
