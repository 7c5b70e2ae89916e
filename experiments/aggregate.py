"""Aggregate training runs into the paper's tables, naming every run or comparison that is left out.

    python -m experiments.aggregate multirun/reproduce            # reads <root>/manifest.json when there is one
    python -m experiments.aggregate outputs/train --out outputs/tables --manifest sweep.json

The expected runs come from the manifest experiments.reproduce writes at submission (every run directory
with its arm, backbone and seed); without one, from the run directories found below the root (a run
never created is then named nowhere, and the output says so). With a manifest, a run directory it does
not list is named and used nowhere. Two finished runs with the same backbone, arm and seed are both
named and neither is used. Every expected run that is missing, failed, unfinished, damaged (a file of it cut
short, torn or holding what no run writes, named), not evaluated on test or lacks trajectories is listed with what stopped it, every
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
  split its row is a fraction of: experiments.tables.like_measured); then the paper's reference rows;
- Table 3: the ablation arms and seal per backbone, every column, with the paper's on Qwen2.5-7B;
- differences the paper did not make: seal minus vanilla_rl and minus each ablation, per backbone and
  protocol, paired by seed and entry (paired_bootstrap); a seed either arm lacks is dropped and named, and so
  is each run that lacks entries the others have.

Writes the same as Markdown and CSV (tables.md, tables.csv, table2.csv, table3.csv, differences.csv) and
bar charts (tables.png: Table 1's and Table 3's Avg; table2.png: every column of Table 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.tables.columns import MANIFEST
from experiments.tables.write import OUTPUTS, report, write_outputs
from seal.errors import UserError, cannot_write, unwritable


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
        try:
            write_outputs(args.out, text, tables)
        except OSError as exc:
            if not unwritable(exc):
                raise
            advice = "give --out a folder you can write (the tables above were printed)"
            print(f"error: {cannot_write(exc, advice, args.out)}", file=sys.stderr)
            return 2
        if args.wandb != "disabled":
            from seal.report.wandb_run import log_files_as_artifact

            log_files_as_artifact([args.out / n for n in OUTPUTS if (args.out / n).exists()], mode=args.wandb,
                                  project=args.project, name="seal-tables", kind="tables", out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
