"""Submitting the jobs to SLURM and waiting for them: what the jobs ask for (gpus_asked) against what the
partition has (sinfo's GRES and features: check_partition), the typed confirmation, the submission through
Hydra's launcher with every SLURM job id printed, where the logs go and how to watch and cancel them, and
each job named as it returns."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from experiments.cluster.jobs import REPO, Job, shown_overrides
from seal.errors import UserError

# what a user types at the prompt to submit
CONFIRM = "submit"


# -- what the jobs ask SLURM for, and what the partition has ------------------------------------------------

@dataclass(frozen=True)
class GpuAsk:
    """The GPUs a job asks SLURM for on its node: how many, of which type (gres gpu:<type>:<n>; None: any),
    on nodes with which feature (constraint; None: any)."""

    count: int
    kind: str | None = None
    feature: str | None = None

    def __str__(self) -> str:
        what = f"{self.count} {self.kind} GPU(s)" if self.kind else f"{self.count} GPU(s)"
        return what + (f" on nodes with feature {self.feature}" if self.feature else "")


def gpus_asked(launcher: Mapping[str, Any]) -> GpuAsk:
    """What hydra-submitit-launcher's settings ask SLURM for: gres (gpu[:type][:n]), gpus_per_node (n; type:n
    under additional_parameters, since the launcher's own key is an integer), gpus_per_task x tasks_per_node, or
    the same under additional_parameters; the constraint when it is a single feature (an expression is left to
    SLURM)."""
    extra = dict(launcher.get("additional_parameters") or {})
    count, kind = 0, None
    gres = launcher.get("gres") or extra.get("gres")
    for item in str(gres or "").split(","):
        found = parse_gres(item)
        for k, n in found.items():
            count, kind = count + n, k or kind
    for per_node in (launcher.get("gpus_per_node"), extra.get("gpus_per_node"), extra.get("gpus")):
        if per_node:
            k, _, n = str(per_node).rpartition(":")
            count, kind = max(count, int(n)), k or kind
    per_task = launcher.get("gpus_per_task") or extra.get("gpus_per_task")
    if per_task:
        k, _, n = str(per_task).rpartition(":")
        count, kind = max(count, int(n) * int(launcher.get("tasks_per_node") or 1)), k or kind
    constraint = str(launcher.get("constraint") or extra.get("constraint") or "")
    return GpuAsk(count, kind, constraint if re.fullmatch(r"[\w.-]+", constraint) else None)


def parse_gres(text: str) -> dict[str | None, int]:
    """{GPU type or None: count} of one node's GRES as sinfo prints it (`gpu:a100:4(S:0-1)`, `gpu:2`,
    `gpu:a100:4,gpu:v100:2`, `(null)`); other resources are not GPUs."""
    found: dict[str | None, int] = {}
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        kind, count = None, "1"
        if len(parts) == 2:
            kind, count = (None, parts[1]) if parts[1].isdigit() else (parts[1], "1")
        elif len(parts) >= 3:
            kind, count = parts[1], parts[2]
        digits = re.match(r"\d+", count)
        found[kind] = found.get(kind, 0) + (int(digits.group()) if digits else 1)
    return found


def sinfo(*args: str) -> list[str]:
    """sinfo's lines (-h, no header); UserError when this machine has no sinfo."""
    if shutil.which("sinfo") is None:
        raise UserError("sinfo is not on this machine's PATH, so nothing can be submitted to SLURM from here: run this "
                        "on a machine of the cluster (a login node), or run the jobs here with --launcher basic")
    proc = subprocess.run(["sinfo", "-h", *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise UserError(f"sinfo failed ({proc.stderr.strip() or f'exit {proc.returncode}'}): is the cluster up?")
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def check_partition(partition: str | None, ask: GpuAsk, needed: int, processes: int) -> str:
    """The partition the jobs go to (the cluster's default when `partition` is None), after checking that it
    exists, that the jobs ask SLURM for the GPUs their launch uses (`needed`), and that it has nodes with
    that many GPUs of the kind asked for; UserError naming the fix otherwise."""
    names = [line.split()[0] for line in sinfo("-o", "%P")]
    if partition is None:
        default = [n.rstrip("*") for n in names if n.endswith("*")]
        if not default:
            raise UserError("this cluster has no default partition: name one with hydra.launcher.partition=<name> "
                            f"(one of {', '.join(sorted(set(names)))})")
        partition = default[0]
    known = sorted({n.rstrip("*") for n in names})
    if partition not in known:
        raise UserError(f"partition {partition} is not one of this cluster's ({', '.join(known)}): set "
                        "hydra.launcher.partition=<name>")
    if needed > ask.count:
        raise UserError(f"each job runs {processes} process(es), one per GPU, but asks SLURM for {ask.count} GPU(s): set "
                        f"hydra.launcher.gpus_per_node={needed} (in conf/local/default.yaml, as conf/local/example.yaml "
                        "shows, or after --)")
    if ask.count == 0:
        return partition
    nodes = [line.split("|") for line in sinfo("-p", partition, "-o", "%G|%f")]
    for gres, features in ((n[0], n[1] if len(n) > 1 else "") for n in nodes):
        have = parse_gres(gres)
        count = sum(c for k, c in have.items() if ask.kind is None or k == ask.kind)
        if count >= ask.count and (ask.feature is None or ask.feature in features.split(",")):
            return partition
    offered = "; ".join(sorted({n[0] for n in nodes})) or "nothing"
    has = "has no GPUs" if not any(parse_gres(n[0]) for n in nodes) else "has no node with them"
    raise UserError(f"partition {partition} {has} (sinfo's GRES: {offered}) but each job asks for {ask}: choose a "
                    "partition that has them with hydra.launcher.partition=<name> (`sinfo -o \"%P %G %f\"` lists "
                    "each partition's GPUs and features)")


# -- submitting and waiting ---------------------------------------------------------------------------------

def label(job: Job) -> str:
    """A job's short name, for its log and its submitit folder."""
    return f"{job.backbone}-{job.experiment}-seed{job.seed}"


def start(jobs: list[Job], root: Path, extra: tuple[str, ...], launcher: str) -> list[tuple[Job, subprocess.Popen]]:
    """Start one `run.py -m` per job (each submits its SLURM job and waits for it); its own output goes to
    <root>/.reproduce/<job>.log and submitit's folder for the job is <root>/.submitit/<job>/<SLURM id>/."""
    from seal.tasks.command_line import quoted

    procs = []
    for job in jobs:
        args = [sys.executable, str(REPO / "run.py"), "-m", *job.overrides(extra), f"hydra.sweep.dir={quoted(str(root))}"]
        if launcher != "basic":
            args.insert(3, f"hydra/launcher={launcher}")
            args.append(f"hydra.launcher.submitit_folder={quoted(str(root / '.submitit' / label(job)) + '/%j')}")
        log = root / ".reproduce" / f"{label(job)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as fh:
            procs.append((job, subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)))
    return procs


def submitit_folders(root: Path, job: Job) -> set[str]:
    """The folders submitit has made for a job so far, one per SLURM job id (`<id>` or `<id>_<array index>`)."""
    folder = root / ".submitit" / label(job)
    return {p.name for p in folder.glob("*") if re.fullmatch(r"\d+(_\d+)?", p.name)} if folder.is_dir() else set()


def slurm_ids(procs: list[tuple[Job, subprocess.Popen]], root: Path, before: dict[Job, set[str]] | None = None,
              timeout: float = 300) -> dict[Job, str | None]:
    """The SLURM job id of each started job, read from the folder submitit makes when sbatch returns it: a folder
    that was not there `before` this submission (an earlier submission of the same run leaves its own), the
    highest id if several (None: the job's process ended first, or none came within `timeout` seconds)."""
    before = before or {}
    ids: dict[Job, str | None] = {}
    deadline = time.monotonic() + timeout
    while len(ids) < len(procs):
        for job, proc in procs:
            if job in ids:
                continue
            new = submitit_folders(root, job) - before.get(job, set())
            if new:
                ids[job] = max(new, key=lambda name: tuple(int(part) for part in name.split("_")))
            elif proc.poll() is not None or time.monotonic() > deadline:
                ids[job] = None
        time.sleep(0.5)
    return ids


def announce(ids: dict[Job, str | None], root: Path, extra: tuple[str, ...], partition: str) -> None:
    """Every job's SLURM id and run, where the logs go, how to watch and how to cancel them."""
    got = [i for i in ids.values() if i]
    print(f"submitted {len(got)} of {len(ids)} jobs to partition {partition}:")
    for job, slurm_id in ids.items():
        print(f"  {slurm_id or 'not submitted':>12}  {' '.join(shown_overrides(job, extra))}"
              + ("" if slurm_id else f"  (see {root / '.reproduce' / label(job)}.log)"))
    if got:
        print(f"logs: SLURM's in {root}/.submitit/<job>/<id>/, each run's run.log in its directory under {root}")
        print(f"watch: squeue -j {','.join(got)}")
        print(f"cancel: scancel {' '.join(got)}")
    print(f"waiting for them, then the tables go to {root / 'tables'}; Ctrl-C stops only this wait (the jobs go on: "
          f"python -m experiments.aggregate {root} --out {root / 'tables'} builds the tables later)", flush=True)


def wait(procs: list[tuple[Job, subprocess.Popen]], extra: tuple[str, ...], root: Path) -> list[tuple[Job, int]]:
    """Wait for every job's process, naming each as it returns; their exit codes."""
    codes: dict[Job, int] = {}
    while len(codes) < len(procs):
        for job, proc in procs:
            if job not in codes and proc.poll() is not None:
                codes[job] = proc.returncode
                state = "returned" if proc.returncode == 0 else f"failed to launch (exit {proc.returncode}; see {root}/.reproduce/)"
                print(f"{len(codes)}/{len(procs)} {state}: {' '.join(shown_overrides(job, extra))}", flush=True)
        time.sleep(1)
    return [(job, codes[job]) for job, _ in procs]


def submit(jobs: list[Job], root: Path, extra: tuple[str, ...], launcher: str, partition: str | None = None
           ) -> list[tuple[Job, int]]:
    """Start every job, print what a user needs to follow them, wait; their exit codes."""
    before = {job: submitit_folders(root, job) for job in jobs}
    procs = start(jobs, root, extra, launcher)
    if launcher == "basic":
        print(f"running {len(jobs)} jobs on this machine; their logs: {root / '.reproduce'}/<job>.log", flush=True)
    else:
        announce(slurm_ids(procs, root, before), root, extra, partition or "(default)")
    try:
        return wait(procs, extra, root)
    except KeyboardInterrupt:
        print(f"stopped waiting; the submitted jobs go on (squeue shows them); python -m experiments.aggregate {root} "
              f"--out {root / 'tables'} builds the tables when they are done", file=sys.stderr)
        raise SystemExit(130) from None


def confirm(count: int, hours: float, partition: str | None) -> bool:
    """Whether a user at a terminal types CONFIRM to submit; UserError anywhere else (no terminal)."""
    where = f" to partition {partition}" if partition else ""
    if not sys.stdin.isatty():
        raise UserError(f"nothing submitted: add --submit to submit these {count} jobs{where} (or run it at a terminal, "
                        "which asks)")
    try:
        answer = input(f"submit {count} jobs{where}, at most {hours:.1f} GPU-hours of training? type {CONFIRM} to go on: ")
    except (EOFError, KeyboardInterrupt):  # Ctrl-D or Ctrl-C at the question: a no, on a line of its own
        print()
        answer = ""
    return answer.strip() == CONFIRM


