"""Every training run behind the paper's Tables 1 and 3, submitted, then aggregated, at the paper's budget.

    python -m experiments.reproduce --dry-run          # the jobs, what each needs, a GPU-hour bound; submits nothing
    python -m experiments.reproduce                    # the same, then asks (on a terminal) before it submits
    python -m experiments.reproduce --submit           # submit what has not finished, wait, aggregate
    python -m experiments.reproduce --submit --launcher basic --backbones tiny-random --seeds 0 -- budget=smoke budget.rounds=1

Nothing is submitted by surprise: without --submit the plan is printed and, on a terminal, submission waits
for `submit` typed at the prompt (anywhere else it stops there, exit code 2). Before asking, the SLURM
partition is checked against what the jobs ask for (`sinfo`'s GRES and features): a job that needs GPUs,
on a partition without GPUs of the kind asked for (or asking SLURM for fewer GPUs than its launch runs
processes), is refused in one sentence. After submission it prints every SLURM job id with its run, where
the logs go, and how to watch and cancel the jobs; then it waits and names each job as it returns.

Every job runs at budget=paper (conf/budget/paper.yaml: Table 4 and the release's config) unless the overrides after
`--` choose another budget (`budget=smoke`): a smaller budget is always an explicit choice, and the
tables name each run's budget beside the paper's numbers. At the paper's budget every job also gets the
authors' launch as seal runs it, launch=paper (conf/launch/paper.yaml: the release's 4 GPUs and vLLM colocated at
0.4 of each GPU, sharded with torch's FSDP2 where the release uses FSDP), unless the overrides choose another (`launch=default`, or keys such as `launch.processes=8`).

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
counts training only: a paper job's evaluations (test before and after, the validations, BFCL V4 memory with its
prerequisite conversations: about 4,400 episodes against the training's 16,896, generated only, at 2 N FLOPs a
token against training's 10 N) would add about 5% to it.

The GPU-hour figure is an upper bound from arithmetic, not a measurement: every episode is taken to
fill the backbone's context, and its tokens cost 2 N FLOPs to generate and 8 N to train (forward,
backward and the reference model's forward) at --mfu of --gpu-tflops per GPU. Per job the plan prints the
GPUs it holds, the host memory it peaks at (its ranks loading the model at once, plus 8 GiB a rank), the
disk its checkpoints and models take at their peak, the bound in hours on its GPUs, and the requeues that
takes under the launcher's time limit (hydra.launcher.timeout_min, from conf/local/default.yaml or the
command line): every requeued job reads its weights and last checkpoint back (at 0.2 GiB/s, a slow network
file system's rate) and plays again the rounds since that checkpoint (budget.save_every).
"""

from __future__ import annotations

import argparse
import errno
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from experiments.cluster.jobs import (REPO, TABLE1_BACKBONES, TABLE3_BACKBONE, damaged, finished, job_config,
                                      parse_plan, run_dir, with_budget, write_manifest)
from experiments.cluster.needs import (launcher_settings, gpu_hours_bound, gpu_lines, memory_lines, needs_of,
                                       print_plan, requeue_lines)
from experiments.cluster.slurm import check_partition, confirm, gpus_asked, submit
from experiments.tables.columns import PAPER_BUDGET
from seal.errors import UserError, cannot_write, check_writable, unwritable


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
    parser.add_argument("--dry-run", action="store_true", help="print the jobs and what they need; submit nothing")
    parser.add_argument("--submit", action="store_true", help="submit without asking (without it: the plan, then on a "
                                                              "terminal a typed confirmation)")
    parser.add_argument("--gpu-tflops", type=float, default=312.0, help="peak bf16 TFLOPS per GPU (A100: 312)")
    parser.add_argument("--mfu", type=float, default=0.3, help="fraction of the peak reached (default 0.3)")
    args = parser.parse_args(argv)
    try:
        check_speed(args.gpu_tflops, args.mfu)
        extra = with_budget(tuple(args.extra))
        jobs = parse_plan(args.backbones, args.seeds, args.ablation_backbone)
        configs = {job: job_config(job, extra, args.launcher) for job in jobs}
        needs = {job: needs_of(cfg, gpu_hours_bound(job, extra, gpu_tflops=args.gpu_tflops, mfu=args.mfu, cfg=cfg))
                 for job, cfg in configs.items()}
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = args.root.resolve()
    if not _root_takes(_names_fit, root):  # no file under it could even be looked for, dry run or not
        return 2
    todo = [j for j in jobs if not finished(run_dir(root, j, extra))]
    launcher = launcher_settings(configs[jobs[0]]) if jobs else {}
    timeout = launcher.get("timeout_min")
    budget = next(o.split("=", 1)[1] for o in extra if o.split("=", 1)[0].lstrip("+~") == "budget")
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} finished, {len(todo)} to run (under {root})")
    print(f"budget={budget}" + (" (the paper's, conf/budget/paper.yaml)" if budget == PAPER_BUDGET else
                                " (chosen; not the paper's budget: the tables say its runs are not comparable to the "
                                "paper's numbers)"))
    print_plan(jobs, todo, needs, extra, launcher)
    for fault in filter(None, (damaged(run_dir(root, j, extra)) for j in todo)):
        print(f"to run again: {fault}; its job resumes the run to write it again")
    total = sum(needs[j].gpu_hours for j in todo)
    print(f"GPU-hours of training to run, upper bound: {total:.1f} (context-filling episodes, {args.mfu:.0%} of "
          f"{args.gpu_tflops:.0f} TFLOPS)")
    waiting = [needs[j] for j in todo]
    gpus = gpu_lines(waiting, launcher) if args.launcher != "basic" else []
    for line in requeue_lines(waiting, launcher) + memory_lines(waiting, launcher) + gpus:
        print(line)
    if args.dry_run:
        return 0
    partition = launcher.get("partition")
    if not _root_takes(check_writable, root):  # before the question, not after the user typed the answer
        return 2
    try:
        if todo and args.launcher != "basic":
            ask = gpus_asked(launcher)
            needed = max(needs[j].gpus for j in todo)
            partition = check_partition(partition, ask, needed, max(needs[j].ranks for j in todo))
        if todo and not args.submit and not confirm(len(todo), total, partition):
            print("nothing submitted")
            return 1
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not _root_takes(write_manifest, root, jobs, extra):
        return 2
    failed = [(j, rc) for j, rc in (submit(todo, root, extra, args.launcher, partition) if todo else []) if rc != 0]
    for job, rc in failed:
        print(f"failed to launch (exit {rc}): {' '.join(job.overrides(extra))}; see {root}/.reproduce/")
    tables = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(root), "--out", str(root / "tables")],
                            cwd=REPO)
    return 1 if failed or tables.returncode else 0


def _names_fit(root: Path) -> None:
    """Raise check_writable's error when a name in `root` is longer than its file system takes."""
    try:
        check_writable(root)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise


def check_speed(gpu_tflops: float, mfu: float) -> None:
    """The GPU's speed the hours are estimated from: a peak above 0 TFLOPS and a fraction of it in (0, 1]."""
    if not gpu_tflops > 0:
        raise UserError(f"--gpu-tflops {gpu_tflops:g}: give the GPU's peak bf16 TFLOPS, a number above 0 (A100: 312)")
    if not 0 < mfu <= 1:
        raise UserError(f"--mfu {mfu:g}: give the fraction of the peak reached, above 0 and at most 1 (e.g. 0.3)")


def _root_takes(write: Callable[..., Any], root: Path, *args: Any) -> bool:
    """Whether `write(root, *args)` went through; a root it cannot write is said in one sentence (False)."""
    try:
        write(root, *args)
    except OSError as exc:
        if not unwritable(exc):
            raise
        print(f"error: {cannot_write(exc, 'give --root a folder you can write; nothing was submitted', root)}",
              file=sys.stderr)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
