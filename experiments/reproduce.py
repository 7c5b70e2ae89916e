"""Every training run behind the paper's Tables 1 and 3, submitted, then aggregated, at the paper's budget.

    python -m experiments.reproduce --dry-run                     # the job list and a GPU-hour bound
    python -m experiments.reproduce                               # submit what has not finished, wait, aggregate
    python -m experiments.reproduce --launcher basic --backbones tiny-random --seeds 0 -- budget=smoke budget.rounds=1

Every job runs at budget=paper (conf/budget/paper.yaml: Table 4 and the release's config) unless the overrides after
`--` choose another budget (`budget=smoke`): a smaller budget is always an explicit choice, and the
tables name each run's budget beside the paper's numbers. At the paper's budget every job also gets the
authors' launch, launch=paper (conf/launch/paper.yaml: 4 GPUs, FSDP2, vLLM colocated at 0.4 of each GPU),
unless the overrides choose another (`launch=default`, or keys such as `launch.processes=8`).

Table 1 is every backbone x {vanilla_rl, seal} x seed; Table 3 adds the three ablation arms on its
backbone (seal is shared with Table 1). Each job is `run.py -m` with the launcher of your choice
(hydra/launcher=submitit_slurm by default: settings in conf/local/default.yaml), its run directory
under --root named by its overrides as Hydra names it. Finished runs (metrics.json with eval_after)
are skipped; unfinished ones resume from their last complete round. At submission <root>/manifest.json
lists every run directory of the plan with its arm, backbone and seed; when every job has returned the
tables are built with experiments.aggregate into <root>/tables, naming each planned run that is missing,
failed or unfinished and each comparison seed it drops.

Table 2's BFCL V4 memory column comes from the runs themselves (budget=paper evaluates
budget.ood_benchmarks=[bfcl_v4_memory] before and after training); for the web-search column, export
SERPAPI_API_KEY and pass `-- budget.ood_benchmarks=[bfcl_v4_memory,bfcl_v4_web_search]`. The bound below
counts training only.

The GPU-hour figure is an upper bound from arithmetic, not a measurement: every episode is taken to
fill the backbone's context, and its tokens cost 2 N FLOPs to generate and 8 N to train (forward,
backward and the reference model's forward) at --mfu of --gpu-tflops per GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.aggregate import ABLATIONS, MANIFEST, PAPER_BUDGET
from seal.errors import UserError

REPO = Path(__file__).resolve().parents[1]
# the paper's three backbones (section 4.1)
TABLE1_BACKBONES = ("qwen2.5-3b", "qwen2.5-7b", "toolace-2-8b")
TABLE1_ARMS = ("vanilla_rl", "seal")
TABLE3_BACKBONE = "qwen2.5-7b"


@dataclass(frozen=True)
class Job:
    backbone: str
    experiment: str
    seed: int

    def overrides(self, extra: tuple[str, ...] = ()) -> list[str]:
        return [f"backbone={self.backbone}", f"experiment={self.experiment}", f"seed={self.seed}", *extra]


def plan(backbones=TABLE1_BACKBONES, seeds=(0, 1, 2), ablation_backbone: str | None = TABLE3_BACKBONE) -> list[Job]:
    """Table 1's jobs, then Table 3's that Table 1 does not already have."""
    jobs = [Job(b, arm, s) for b in backbones for arm in TABLE1_ARMS for s in seeds]
    if ablation_backbone:
        jobs += [Job(ablation_backbone, arm, s) for arm in (*ABLATIONS, "seal") for s in seeds]
    return list(dict.fromkeys(jobs))


def _chosen(extra: tuple[str, ...], group: str) -> list[str]:
    """The values `extra` gives the config group `group` (budget=..., launch=...), each checked to exist."""
    chosen = [o.split("=", 1)[1] for o in extra if o.split("=", 1)[0].lstrip("+~") == group]
    for name in chosen:
        if not (REPO / "conf" / group / f"{name}.yaml").exists():
            known = ", ".join(sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")))
            raise UserError(f"{group}={name}: there is no conf/{group}/{name}.yaml; choose one of {known}")
    return chosen


def with_budget(extra: tuple[str, ...]) -> tuple[str, ...]:
    """The overrides every job gets: budget=paper first unless `extra` chooses a budget itself, and with the
    paper's budget the authors' launch (conf/launch/paper.yaml: 4 GPUs, fsdp2, vLLM at 0.4) unless `extra`
    chooses a launch."""
    budgets, launches = _chosen(extra, "budget"), _chosen(extra, "launch")
    budget = budgets[-1] if budgets else PAPER_BUDGET
    ours = ([] if budgets else [f"budget={PAPER_BUDGET}"]) + (
        [f"launch={PAPER_BUDGET}"] if budget == PAPER_BUDGET and not launches else [])
    return (*ours, *extra)


def parse_plan(backbones: str, seeds: str, ablation_backbone: str) -> list[Job]:
    """The jobs of the command line's --backbones, --seeds and --ablation-backbone."""
    names = [b for b in backbones.split(",") if b] + ([ablation_backbone] if ablation_backbone else [])
    for name in names:
        if not (REPO / "conf" / "backbone" / f"{name}.yaml").exists():
            raise UserError(f"backbone {name}: there is no conf/backbone/{name}.yaml; the paper's are "
                            f"{', '.join(TABLE1_BACKBONES)}")
    try:
        seed_list = tuple(int(s) for s in seeds.split(","))
    except ValueError:
        raise UserError(f"--seeds {seeds}: give whole numbers separated by commas, e.g. 0,1,2") from None
    return plan(tuple(b for b in backbones.split(",") if b), seed_list, ablation_backbone or None)


def run_dir(root: Path, job: Job, extra: tuple[str, ...] = ()) -> Path:
    """Where Hydra puts the job: its overrides, sorted, as key=value joined by commas (conf/config.yaml);
    hydra's own overrides, task= and how the job is launched (launch.*) are not part of the name."""
    return root / ",".join(sorted(o for o in _task_overrides(job, extra) if not o.startswith("launch.")))


def _task_overrides(job: Job, extra: tuple[str, ...]) -> list[str]:
    return [o for o in job.overrides(extra) if not o.startswith(("hydra.", "hydra/", "task="))]


def finished(path: Path) -> bool:
    """The run wrote its metrics.json (its last file, after every evaluation)."""
    return (path / "metrics.json").exists()


def write_manifest(root: Path, jobs: list[Job], extra: tuple[str, ...]) -> Path:
    """<root>/manifest.json: every planned run directory (relative to root) with its arm, backbone and seed,
    for experiments.aggregate to name the ones that never came back."""
    runs = [{"dir": run_dir(root, job, extra).name, "backbone": job.backbone, "experiment": job.experiment,
             "seed": job.seed} for job in jobs]
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST
    path.write_text(json.dumps({"overrides": list(extra), "runs": runs}, indent=2))
    return path


def gpu_hours_bound(job: Job, extra: tuple[str, ...], *, gpu_tflops: float, mfu: float) -> float:
    """Upper bound on one job's GPU-hours (module docstring), from the composed config."""
    from hydra import compose, initialize_config_dir

    from seal.budget import Budget

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=_task_overrides(job, extra))
    budget = Budget.from_config(cfg.budget)
    train_entries = budget.train_entries or 400
    episodes = budget.rounds_for(train_entries) * budget.episodes
    tokens = episodes * cfg.backbone.context_length
    params = float(cfg.backbone.get("params_b", 0.0)) * 1e9
    flops = (2 + 8) * params * tokens
    return flops / (gpu_tflops * 1e12 * mfu) / 3600


def submit(jobs: list[Job], root: Path, extra: tuple[str, ...], launcher: str) -> list[tuple[Job, int]]:
    """Start one `run.py -m` per job (each waits for its own SLURM job); return their exit codes."""
    procs = []
    for job in jobs:
        args = [sys.executable, str(REPO / "run.py"), "-m", *job.overrides(extra), f"hydra.sweep.dir={root}"]
        if launcher != "basic":
            args.insert(3, f"hydra/launcher={launcher}")
        log = root / ".reproduce" / f"{job.backbone}-{job.experiment}-seed{job.seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as fh:
            procs.append((job, subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)))
    return [(job, proc.wait()) for job, proc in procs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("extra", nargs="*", help=f"overrides for every job, after --; budget={PAPER_BUDGET} unless "
                                                 "one chooses another, e.g. -- budget=smoke")
    parser.add_argument("--root", type=Path, default=Path("multirun/reproduce"), help="where the run directories go")
    parser.add_argument("--backbones", default=",".join(TABLE1_BACKBONES), help="Table 1's backbones")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--ablation-backbone", default=TABLE3_BACKBONE, help="Table 3's backbone ('' for none)")
    parser.add_argument("--launcher", default="submitit_slurm", help="hydra/launcher choice, or basic (this machine)")
    parser.add_argument("--dry-run", action="store_true", help="print the jobs and the GPU-hour bound; submit nothing")
    parser.add_argument("--gpu-tflops", type=float, default=312.0, help="peak bf16 TFLOPS per GPU (A100: 312)")
    parser.add_argument("--mfu", type=float, default=0.3, help="fraction of the peak reached (default 0.3)")
    args = parser.parse_args(argv)
    try:
        extra = with_budget(tuple(args.extra))
        jobs = parse_plan(args.backbones, args.seeds, args.ablation_backbone)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = args.root.resolve()
    todo = [j for j in jobs if not finished(run_dir(root, j, extra))]
    total = 0.0
    budget = next(o.split("=", 1)[1] for o in extra if o.split("=", 1)[0].lstrip("+~") == "budget")
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} finished, {len(todo)} to run (under {root})")
    print(f"budget={budget}" + (" (the paper's, conf/budget/paper.yaml)" if budget == PAPER_BUDGET else
                                " (chosen; not the paper's budget: the tables say its runs are not comparable to the "
                                "paper's numbers)"))
    for job in jobs:
        hours = gpu_hours_bound(job, extra, gpu_tflops=args.gpu_tflops, mfu=args.mfu)
        state = "to run" if job in todo else "finished"
        total += hours if job in todo else 0.0
        print(f"  {state:8s} {' '.join(job.overrides(extra))}  <= {hours:.1f} GPU-h")
    print(f"GPU-hours to run, upper bound: {total:.1f} (context-filling episodes, {args.mfu:.0%} of "
          f"{args.gpu_tflops:.0f} TFLOPS)")
    if args.dry_run:
        return 0
    write_manifest(root, jobs, extra)
    failed = [(j, rc) for j, rc in submit(todo, root, extra, args.launcher) if rc != 0]
    for job, rc in failed:
        print(f"failed to launch (exit {rc}): {' '.join(job.overrides(extra))}; see {root}/.reproduce/")
    tables = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(root), "--out", str(root / "tables")],
                            cwd=REPO)
    return 1 if failed or tables.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
