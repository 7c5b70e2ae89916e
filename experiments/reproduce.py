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
backward and the reference model's forward) at --mfu of --gpu-tflops per GPU. Per job the plan prints the
GPUs it holds, the host memory it peaks at (its ranks loading the model at once, plus 8 GiB a rank), the
disk its checkpoints and models take at their peak, the bound in hours on its GPUs, and the requeues that
takes under the launcher's time limit (hydra.launcher.timeout_min, from conf/local/default.yaml or the
command line): every requeued job reads its weights and last checkpoint back (at 0.2 GiB/s, a slow network
file system's rate) and plays again the rounds since that checkpoint (budget.save_every).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from experiments.aggregate import ABLATIONS, MANIFEST, PAPER_BUDGET
from experiments.gpu_check import DISK_GIB_PER_S
from seal.errors import UserError
from seal.io import folder_name

REPO = Path(__file__).resolve().parents[1]
# the paper's three backbones (section 4.1)
TABLE1_BACKBONES = ("qwen2.5-3b", "qwen2.5-7b", "toolace-2-8b")
TABLE1_ARMS = ("vanilla_rl", "seal")
TABLE3_BACKBONE = "qwen2.5-7b"
GiB = 2**30
# host memory a rank takes beyond the model it loads (docs/gpus-and-slurm.md, Host memory: a guess)
RANK_ALLOWANCE_GIB = 8
# bytes a parameter of a saved model takes, by the backbone's dtype
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# conf/local/example.yaml's SLURM settings for a paper job (the docs' figures are planned against them)
EXAMPLE_LAUNCHER = ("hydra.launcher.gpus_per_node=4", "hydra.launcher.mem_gb=256", "hydra.launcher.timeout_min=720",
                    "hydra.launcher.max_num_timeout=5")
# what a user types at the prompt to submit
CONFIRM = "submit"


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
    """Where Hydra puts the job: its overrides as typed, sorted, joined by commas, less the keys
    conf/config.yaml leaves out of a folder's name (task, how the job is launched, the checkpoint cadence,
    the W&B settings) and hydra's own (seal.io.folder_name, as conf/config.yaml's `seal.folder`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    excluded = set(_excluded_keys())
    parsed = OverridesParser.create().parse_overrides(_task_overrides(job, extra))
    return root / folder_name(",".join(sorted(o.input_line for o in parsed if o.key_or_group not in excluded)))


@cache
def _excluded_keys() -> tuple[str, ...]:
    from omegaconf import OmegaConf

    config = OmegaConf.load(REPO / "conf" / "config.yaml")
    return tuple(config.hydra.job.config.override_dirname.exclude_keys)


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


def job_config(job: Job, extra: tuple[str, ...], launcher: str = "basic") -> Any:
    """The job's composed config, with Hydra's own when `launcher` is a SLURM one (its hydra.launcher: the
    settings of conf/local/default.yaml and the command line)."""
    from hydra import compose, initialize_config_dir

    hydra = [o for o in extra if o.startswith(("hydra.launcher.", "hydra/launcher="))] if launcher != "basic" else []
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=[*_task_overrides(job, extra), *(
            [f"hydra/launcher={launcher}", *hydra] if launcher != "basic" else [])], return_hydra_config=launcher != "basic")


def gpu_hours_bound(job: Job, extra: tuple[str, ...], *, gpu_tflops: float, mfu: float, cfg: Any = None) -> float:
    """Upper bound on one job's GPU-hours (module docstring), from the composed config."""
    from seal.budget import Budget

    cfg = cfg if cfg is not None else job_config(job, extra)
    budget = Budget.from_config(cfg.budget)
    train_entries = budget.train_entries or 400
    episodes = budget.rounds_for(train_entries) * budget.episodes
    tokens = episodes * cfg.backbone.context_length
    params = float(cfg.backbone.get("params_b", 0.0)) * 1e9
    flops = (2 + 8) * params * tokens
    return flops / (gpu_tflops * 1e12 * mfu) / 3600


def host_memory_gib(params: float, ranks: int, *, lora: bool) -> float:
    """What a job asks of its node's memory at its peak: every rank loading the model at once, in fp32 for full
    fine-tuning (bf16 under LoRA), plus RANK_ALLOWANCE_GIB a rank (docs/gpus-and-slurm.md, Host memory)."""
    return ranks * params * (2 if lora else 4) / GiB + ranks * RANK_ALLOWANCE_GIB


@dataclass(frozen=True)
class Needs:
    """What one job needs of the cluster, from its composed config (upper bounds where it says so)."""

    # GPUs it holds: one per process of its launch when its budget needs GPUs (budget.allow_cpu false), else 0
    gpus: int
    ranks: int
    host_gib: float
    # its checkpoints and models at their peak
    disk_gib: float
    gpu_hours: float
    rounds: int
    # rounds between two checkpoints (None: no periodic checkpoint: a requeued job starts again)
    save_every: int | None
    # what a requeued job reads back: its weights (once, in the backbone's dtype) and its last checkpoint
    reload_gib: float

    @property
    def hours(self) -> float:
        """The GPU-hour bound on the job's own GPUs (on one device when it needs none)."""
        return self.gpu_hours / max(self.gpus, 1)

    @property
    def reload_minutes(self) -> float:
        return self.reload_gib / DISK_GIB_PER_S / 60

    @property
    def replay_minutes(self) -> float:
        """At most, the rounds a requeued job plays again: those since its last checkpoint."""
        per_round = self.hours * 60 / max(self.rounds, 1)
        return per_round * (self.save_every if self.save_every else self.rounds)

    def requeues(self, timeout_min: float) -> float:
        """The requeues the bound takes under a time limit of `timeout_min` minutes: the first allocation works
        its whole limit, each later one its limit less a reload and a replay of a whole checkpoint interval;
        inf when a later allocation would get no further."""
        work = self.hours * 60
        if work <= timeout_min:
            return 0
        usable = timeout_min - self.reload_minutes - self.replay_minutes
        if usable <= 0:
            return math.inf
        return math.ceil((work - timeout_min) / usable)


def needs_of(cfg: Any, gpu_hours: float) -> Needs:
    """A job's Needs from its composed config and its GPU-hour bound. The disk is the run's own preflight
    figure (seal.rl.checkpoint.run_disk_need, counted here without loading a model or the trainer):
    its checkpoints at their peak, 12 bytes a parameter each (fp32 weights and AdamW's two moments; keep + 1 on
    disk while one is written), and its saved models in the backbone's dtype (final, and best when it
    validates). Under LoRA the adapters are small: the figures are then upper bounds."""
    from seal.budget import Budget, validated_after

    budget = Budget.from_config(cfg.budget)
    ranks = int(cfg.launch.get("processes") or 1)
    params = float(cfg.backbone.get("params_b", 0.0)) * 1e9
    lora = bool(cfg.backbone.get("lora"))
    num_train = budget.train_entries or len(_train_part(cfg))
    rounds = budget.rounds_for(num_train)
    save_every, keep = cfg.trainer.get("save_every"), cfg.trainer.get("keep_checkpoints")
    saves = rounds // save_every if save_every else 0
    at_once = saves if keep is None else min(keep + 1, saves)
    validated = sum(validated_after(r, budget.val_every, rounds) for r in range(rounds))
    models = 1 + min(validated, 1) + (validated if cfg.get("eval_all_checkpoints_on_test") else 0)
    trained = params
    if cfg.backbone.get("arch") is not None:
        # the preflight's own count, from the published architecture (params_b is its rounding)
        from omegaconf import OmegaConf

        from seal.policy.memory import param_count

        trained = param_count(OmegaConf.to_container(cfg.backbone.arch))
    checkpoint, model = 12 * trained, DTYPE_BYTES.get(str(cfg.backbone.dtype), 4) * trained
    return Needs(gpus=0 if budget.allow_cpu else ranks, ranks=ranks, host_gib=host_memory_gib(params, ranks, lora=lora),
                 disk_gib=(checkpoint * at_once + model * models) / GiB, gpu_hours=gpu_hours, rounds=rounds,
                 save_every=int(save_every) if save_every else None, reload_gib=(checkpoint + model) / GiB)


def _train_part(cfg: Any) -> list[str]:
    from hydra.utils import instantiate

    return list(instantiate(cfg.split).train)


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
    """What hydra-submitit-launcher's settings ask SLURM for: gres (gpu[:type][:n]), gpus_per_node (n or
    type:n), gpus_per_task x tasks_per_node, or the same under additional_parameters; the constraint when it
    is a single feature (an expression is left to SLURM)."""
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


def slurm_ids(procs: list[tuple[Job, subprocess.Popen]], root: Path, timeout: float = 300) -> dict[Job, str | None]:
    """The SLURM job id of each started job, read from the folder submitit makes when sbatch returns it (None:
    the job's process ended first, or none came within `timeout` seconds)."""
    ids: dict[Job, str | None] = {}
    deadline = time.monotonic() + timeout
    while len(ids) < len(procs):
        for job, proc in procs:
            if job in ids:
                continue
            folders = sorted(p.name for p in (root / ".submitit" / label(job)).glob("*") if re.fullmatch(r"\d+(_\d+)?", p.name))
            if folders:
                ids[job] = folders[-1]
            elif proc.poll() is not None or time.monotonic() > deadline:
                ids[job] = None
        time.sleep(0.5)
    return ids


def announce(ids: dict[Job, str | None], root: Path, extra: tuple[str, ...], partition: str) -> None:
    """Every job's SLURM id and run, where the logs go, how to watch and how to cancel them."""
    got = [i for i in ids.values() if i]
    print(f"submitted {len(got)} of {len(ids)} jobs to partition {partition}:")
    for job, slurm_id in ids.items():
        print(f"  {slurm_id or 'not submitted':>12}  {' '.join(_shown(job, extra))}"
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
                print(f"{len(codes)}/{len(procs)} {state}: {' '.join(_shown(job, extra))}", flush=True)
        time.sleep(1)
    return [(job, codes[job]) for job, _ in procs]


def submit(jobs: list[Job], root: Path, extra: tuple[str, ...], launcher: str, partition: str | None = None
           ) -> list[tuple[Job, int]]:
    """Start every job, print what a user needs to follow them, wait; their exit codes."""
    procs = start(jobs, root, extra, launcher)
    if launcher == "basic":
        print(f"running {len(jobs)} jobs on this machine; their logs: {root / '.reproduce'}/<job>.log", flush=True)
    else:
        announce(slurm_ids(procs, root), root, extra, partition or "(default)")
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
        answer = input(f"submit {count} jobs{where}, at most {hours:.1f} GPU-hours? type {CONFIRM} to go on: ")
    except EOFError:
        answer = ""
    return answer.strip() == CONFIRM


def _shown(job: Job, extra: tuple[str, ...]) -> list[str]:
    """A job's overrides as the plan shows them (the hydra.* settings every job shares are shown once)."""
    return [o for o in job.overrides(extra) if not o.startswith(("hydra.", "hydra/"))]


def _launcher_settings(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if "hydra" not in cfg or "launcher" not in cfg.hydra:
        return {}
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    return {k: v for k, v in launcher.items() if not (isinstance(v, str) and "${" in v)}


def _requeue_text(needs: Needs, timeout: float | None) -> str:
    if timeout is None:
        return ""
    n = needs.requeues(timeout)
    return ", never done: each requeue gets no further" if n == math.inf else f", {n} requeue{'s' if n != 1 else ''}"


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
        extra = with_budget(tuple(args.extra))
        jobs = parse_plan(args.backbones, args.seeds, args.ablation_backbone)
        configs = {job: job_config(job, extra, args.launcher) for job in jobs}
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = args.root.resolve()
    todo = [j for j in jobs if not finished(run_dir(root, j, extra))]
    needs = {job: needs_of(cfg, gpu_hours_bound(job, extra, gpu_tflops=args.gpu_tflops, mfu=args.mfu, cfg=cfg))
             for job, cfg in configs.items()}
    launcher = _launcher_settings(configs[jobs[0]]) if jobs else {}
    timeout = launcher.get("timeout_min")
    budget = next(o.split("=", 1)[1] for o in extra if o.split("=", 1)[0].lstrip("+~") == "budget")
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} finished, {len(todo)} to run (under {root})")
    print(f"budget={budget}" + (" (the paper's, conf/budget/paper.yaml)" if budget == PAPER_BUDGET else
                                " (chosen; not the paper's budget: the tables say its runs are not comparable to the "
                                "paper's numbers)"))
    print_plan(jobs, todo, needs, extra, launcher)
    total = sum(needs[j].gpu_hours for j in todo)
    print(f"GPU-hours to run, upper bound: {total:.1f} (context-filling episodes, {args.mfu:.0%} of "
          f"{args.gpu_tflops:.0f} TFLOPS)")
    for line in requeue_lines([needs[j] for j in todo], launcher) + memory_lines([needs[j] for j in todo], launcher):
        print(line)
    if args.dry_run:
        return 0
    partition = launcher.get("partition")
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
    write_manifest(root, jobs, extra)
    failed = [(j, rc) for j, rc in (submit(todo, root, extra, args.launcher, partition) if todo else []) if rc != 0]
    for job, rc in failed:
        print(f"failed to launch (exit {rc}): {' '.join(job.overrides(extra))}; see {root}/.reproduce/")
    tables = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(root), "--out", str(root / "tables")],
                            cwd=REPO)
    return 1 if failed or tables.returncode else 0


def print_plan(jobs: list[Job], todo: list[Job], needs: dict[Job, Needs], extra: tuple[str, ...],
               launcher: Mapping[str, Any]) -> None:
    """One line per job: its state and overrides, its GPU-hour bound, then what it needs of the cluster."""
    timeout = launcher.get("timeout_min")
    shared = [o for o in extra if o.startswith(("hydra.", "hydra/"))]
    print("per job: the GPU-hour bound; the GPUs it holds and the bound in hours on them"
          + (f", with the requeues that takes at hydra.launcher.timeout_min={timeout}" if timeout else "")
          + "; the host memory it peaks at; the disk its checkpoints and models take"
          + (f" (every job also gets {' '.join(shared)})" if shared else ""))
    for job in jobs:
        need = needs[job]
        state = "to run" if job in todo else "finished"
        print(f"  {state:8s} {' '.join(_shown(job, extra))}  <= {need.gpu_hours:.1f} GPU-h | {need.gpus} GPU(s), "
              f"<= {need.hours:.1f} h{_requeue_text(need, timeout)} | {need.host_gib:.1f} GiB RAM, {need.disk_gib:.1f} GiB disk")


def paper_jobs_markdown(launcher_overrides: tuple[str, ...] = EXAMPLE_LAUNCHER, *, gpu_tflops: float = 312.0,
                        mfu: float = 0.3) -> str:
    """One row per paper backbone: what one of its budget=paper jobs needs of a cluster, planned against
    `launcher_overrides` (conf/local/example.yaml's settings), as the dry run prints it per job."""
    extra = with_budget(launcher_overrides)
    settings: Mapping[str, Any] = {}
    rows = ["| backbone | GPUs | host RAM | disk | GPU-hours (bound) | hours (bound) | requeues | a requeue reads back "
            "| and plays again |", "|---|---|---|---|---|---|---|---|---|"]
    for backbone in TABLE1_BACKBONES:
        job = Job(backbone, "seal", 0)
        cfg = job_config(job, extra, "submitit_slurm")
        settings = _launcher_settings(cfg)
        need = needs_of(cfg, gpu_hours_bound(job, extra, gpu_tflops=gpu_tflops, mfu=mfu, cfg=cfg))
        requeues = need.requeues(settings["timeout_min"])
        rows.append(f"| {backbone} | {need.gpus} | {need.host_gib:.1f} GiB | {need.disk_gib:.1f} GiB | "
                    f"{need.gpu_hours:.1f} | {need.hours:.1f} | {requeues} | {need.reload_gib:.1f} GiB, about "
                    f"{need.reload_minutes:.0f} min | up to {need.save_every} rounds, {need.replay_minutes / 60:.1f} h |")
    return (f"Planned against timeout_min={settings['timeout_min']}, max_num_timeout={settings['max_num_timeout']}, "
            f"mem_gb={settings['mem_gb']}, gpus_per_node={settings['gpus_per_node']} (conf/local/example.yaml), "
            f"at {mfu:.0%} of {gpu_tflops:.0f} TFLOPS, reading back at {DISK_GIB_PER_S} GiB/s:\n\n" + "\n".join(rows))


def requeue_lines(needs: list[Needs], launcher: Mapping[str, Any]) -> list[str]:
    """What the time limit means for the planned jobs: the requeues the longest one takes and what each
    costs, and a warning when the limit or the requeues allowed cannot finish it."""
    timeout = launcher.get("timeout_min")
    if not needs or not timeout:
        return []
    worst = max(needs, key=lambda n: n.hours)
    requeues, allowed = worst.requeues(timeout), int(launcher.get("max_num_timeout") or 0)
    if not requeues:
        return [f"requeues: none; every job's bound fits hydra.launcher.timeout_min={timeout}"]
    cost = (f"a requeued job reads {worst.reload_gib:.1f} GiB back, its weights and last checkpoint (about "
            f"{worst.reload_minutes:.0f} min at {DISK_GIB_PER_S} GiB/s, a slow network file system's rate, plus its "
            f"start-up), and plays again the rounds since that checkpoint (up to {worst.save_every or worst.rounds}, "
            f"about {worst.replay_minutes / 60:.1f} h)")
    if requeues == math.inf:
        return [f"warning: at hydra.launcher.timeout_min={timeout} the longest job never finishes: {cost}, more than "
                "its time limit; raise timeout_min, or checkpoint more often (trainer.save_every)"]
    lines = [f"requeues: the longest job ({worst.hours:.1f} h at most) takes {requeues} at "
             f"hydra.launcher.timeout_min={timeout}; {cost}"]
    if requeues > allowed:
        lines.append(f"warning: hydra.launcher.max_num_timeout={allowed} allows {allowed} requeue(s) of the "
                     f"{requeues} it takes: raise it (conf/local/default.yaml) or timeout_min")
    return lines


def memory_lines(needs: list[Needs], launcher: Mapping[str, Any]) -> list[str]:
    """A warning when the host memory a GPU job asks SLURM for is below what it peaks at (the allowance a rank
    takes beyond its model is a GPU process's: a CPU-sized job is not held to it)."""
    mem = launcher.get("mem_gb")
    most = max((n.host_gib for n in needs if n.gpus), default=0.0)
    if mem and float(mem) < most:
        return [f"warning: hydra.launcher.mem_gb={mem} is below the {most:.1f} GiB a job peaks at while its ranks load "
                "the model: raise it (docs/gpus-and-slurm.md, Host memory)"]
    return []


if __name__ == "__main__":
    sys.exit(main())
