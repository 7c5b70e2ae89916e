"""What a job needs of a cluster, from arithmetic on its configuration: an upper bound on its GPU-hours,
the GPUs it holds, the host memory its ranks peak at while they load the model, the disk its checkpoints and
models take, and the requeues its hours take under the launcher's time limit. Printed per job by the dry run
and, per paper backbone, as the docs' table (paper_jobs_markdown)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from experiments.cluster.jobs import HYDRA_OVERRIDES, TABLE1_BACKBONES, Job, shown_overrides, job_config, with_budget
from experiments.measure.preflight.disk import DISK_GIB_PER_S

GiB = 2**30
# host memory a rank takes beyond the model it loads (docs/gpus-and-slurm.md, Host memory: a guess)
RANK_ALLOWANCE_GIB = 8
# a CPU-sized job's process beyond its training state: the libraries (0.5 GiB measured on this project's CPU) and
# a margin; the main job's 4.17 GiB peak is its plan's 3.71 GiB and 0.46 GiB more (docs/results.md)
CPU_RANK_ALLOWANCE_GIB = 1
# a CPU job's episodes' KV cache when budget.rollout_memory_gb leaves it elastic
CPU_KV_GIB = 1.0
# bytes a parameter of a saved model takes, by the backbone's dtype
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# conf/local/example.yaml's SLURM settings for a paper job (the docs' figures are planned against them)
EXAMPLE_LAUNCHER = ("hydra.launcher.gpus_per_node=4", "hydra.launcher.mem_gb=256", "hydra.launcher.timeout_min=720",
                    "hydra.launcher.max_num_timeout=5")


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


def host_memory_gib(params: float, ranks: int, *, lora: bool, reference_beside: int = 0) -> float:
    """What a job asks of its node's memory at its peak: every rank loading the model at once, in fp32 for full
    fine-tuning (bf16 under LoRA), and under fsdp2 the whole reference model TRL loads beside it
    (`reference_beside` bytes a parameter: the backbone's dtype; the policy stays in host memory until the
    trainer shards it, seal.policy.memory.TrainingMemory.host), plus RANK_ALLOWANCE_GIB a rank
    (docs/gpus-and-slurm.md, Host memory)."""
    return ranks * params * ((2 if lora else 4) + reference_beside) / GiB + ranks * RANK_ALLOWANCE_GIB


def cpu_host_memory_gib(params: float, ranks: int, *, lora: bool, dtype_bytes: int, reference: bool,
                        kv_gib: float) -> float:
    """What a CPU-sized job (budget.allow_cpu) asks of its node's memory: on a CPU all of its training is in host
    memory, per rank the fp32 weights, gradients and AdamW's two moments (16 bytes a parameter; under LoRA the
    frozen base in the backbone's dtype), the reference model in the backbone's dtype (with a KL term, not under
    LoRA), its episodes' KV cache (`kv_gib`) and CPU_RANK_ALLOWANCE_GIB. Not a GPU process's allowance: the
    SmolLM2-135M main job comes to 4.5 GiB against its measured 4.17 GiB peak."""
    per_param = dtype_bytes if lora else 16 + (dtype_bytes if reference else 0)
    return ranks * (params * per_param / GiB + kv_gib + CPU_RANK_ALLOWANCE_GIB)


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
    # under fsdp2 with a KL term, TRL loads the whole reference while the policy is still in host memory
    beside = DTYPE_BYTES.get(str(cfg.backbone.dtype), 4) if (
        cfg.launch.get("sharding") == "fsdp2" and not lora and cfg.trainer.get("beta", 0) != 0) else 0
    if budget.allow_cpu:
        host = cpu_host_memory_gib(params, ranks, lora=lora, dtype_bytes=DTYPE_BYTES.get(str(cfg.backbone.dtype), 4),
                                   reference=cfg.trainer.get("beta", 0) != 0,
                                   kv_gib=budget.rollout_memory_gb if budget.rollout_memory_gb is not None else CPU_KV_GIB)
    else:
        host = host_memory_gib(params, ranks, lora=lora, reference_beside=beside)
    return Needs(gpus=0 if budget.allow_cpu else ranks, ranks=ranks, host_gib=host,
                 disk_gib=(checkpoint * at_once + model * models) / GiB, gpu_hours=gpu_hours, rounds=rounds,
                 save_every=int(save_every) if save_every else None, reload_gib=(checkpoint + model) / GiB)


def _train_part(cfg: Any) -> list[str]:
    from hydra.utils import instantiate

    return list(instantiate(cfg.split).train)


def launcher_settings(cfg: Any) -> dict[str, Any]:
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


def print_plan(jobs: list[Job], todo: list[Job], needs: dict[Job, Needs], extra: tuple[str, ...],
               launcher: Mapping[str, Any]) -> None:
    """One line per job: its state and overrides, its GPU-hour bound, then what it needs of the cluster."""
    timeout = launcher.get("timeout_min")
    shared = [o for o in extra if o.startswith(HYDRA_OVERRIDES)]
    print("per job: the GPU-hour bound of its training (its evaluations are not in it); the GPUs it holds and the bound in hours on them"
          + (f", with the requeues that takes at hydra.launcher.timeout_min={timeout}" if timeout else "")
          + "; the host memory it peaks at; the disk its checkpoints and models take"
          + (f" (every job also gets {' '.join(shared)})" if shared else ""))
    for job in jobs:
        need = needs[job]
        state = "to run" if job in todo else "finished"
        print(f"  {state:8s} {' '.join(shown_overrides(job, extra))}  <= {need.gpu_hours:.1f} GPU-h | {need.gpus} GPU(s), "
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
        settings = launcher_settings(cfg)
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


def gpu_lines(needs: list[Needs], launcher: Mapping[str, Any]) -> list[str]:
    """A warning when the jobs ask SLURM for fewer GPUs than they run processes on (submission refuses them:
    the dry run says so first)."""
    from experiments.cluster.slurm import gpus_asked

    needed = max((n.gpus for n in needs), default=0)
    asked = gpus_asked(launcher).count
    if needed > asked:
        return [f"warning: each job runs {needed} process(es), one per GPU, but asks SLURM for {asked} GPU(s), which "
                f"--submit refuses: set hydra.launcher.gpus_per_node={needed} (in conf/local/default.yaml, as "
                "conf/local/example.yaml shows, or after --)"]
    return []


def memory_lines(needs: list[Needs], launcher: Mapping[str, Any]) -> list[str]:
    """A warning when the host memory a job asks SLURM for is below what it peaks at: a GPU job while its ranks
    load the model, a CPU-sized one while it trains (cpu_host_memory_gib). submitit asks for `--mem=<mem_gb>GB`,
    which SLURM reads in binary units: mem_gb is GiB."""
    mem = launcher.get("mem_gb")
    largest = max(needs, key=lambda n: n.host_gib, default=None)
    if mem and largest is not None and float(mem) < largest.host_gib:
        when = "while its ranks load the model" if largest.gpus else "while it trains on the CPU"
        return [f"warning: hydra.launcher.mem_gb={mem} is below the {largest.host_gib:.1f} GiB a job peaks at {when}: "
                "raise it (docs/gpus-and-slurm.md, Host memory)"]
    return []

