"""task=train: SEAL's co-evolution loop (paper Algorithm 1) on TRL's GRPOTrainer.

    python run.py                                   # full SEAL, SmolLM2-135M, smoke budget
    python run.py backbone=qwen2.5-3b reweighting=off
    python run.py -m experiment=vanilla_rl,seal seed=0,1,2

`train` reads top to bottom, one named step per line: start (seed, ranks, round plan), check every
choice of the config, build the pieces, say what the job will do (`announce`), evaluate the initial model
on a held-out slice, fit (resuming from the run directory's last complete round if there is one), evaluate
again, write the report. The steps share one `TrainingRun`. Ctrl-C ends the job with one sentence saying
what was kept and that the same command resumes (`interrupted`).
"""

from __future__ import annotations

import gc
import json
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from seal.errors import Interrupted, UserError
from seal.io import claim_run_dir, code_version, config_fingerprint, fingerprint_matches, read_json, write_json
from seal.report.clock import round_seconds
from seal.report.pace import evaluation_rate, similar_run, time_it_takes
from seal.rl.distributed import cuda_devices, local_world, machine_kind
from seal.tasks.run_folder import checkpointed_rounds, interrupted

log = logging.getLogger(__name__)


def _check_run_dir(out_dir: Path, fingerprint: str) -> None:
    if not fingerprint_matches(out_dir, fingerprint):
        raise UserError(
            f"{out_dir} holds a run with a different configuration; resume it with its original settings, "
            "or start this one elsewhere with hydra.run.dir=<new directory>"
        )


def return_freed_memory_to_the_os() -> None:
    """glibc raises its mmap threshold after large frees, so later multi-megabyte tensors land on
    the heap and are never given back: resident memory creeps up round after round on a CPU. A
    fixed threshold keeps large tensors mmapped (returned on free). No-op off glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: 1 MiB, fixed
            libc.mallopt(-1, 1 << 20)  # M_TRIM_THRESHOLD
    except OSError:
        pass


@dataclass
class Entries:
    """The entries a run plays, and how many of the train part were left out and why."""

    train: list[Any]
    # the before/after slice: the validation part when the split has one (model selection never touches
    # test), else a few test entries (reported only; nothing is selected on them)
    heldout: list[Any]
    heldout_part: str
    # the test entries the model selection scores (the initial, final and best-on-validation models)
    test: list[Any]
    pool: int
    fit: int
    over_long: list[str]


@dataclass
class TrainingRun:
    """One training run's pieces, filled in by the steps of `train` in order."""

    cfg: DictConfig
    out_dir: Path
    dist: Any
    budget: Any
    fingerprint: str
    started: float
    # the checked choices (check_config)
    protocol: Any = None
    eval_step_limit: str = "turn"
    eval_protocols: list[str] = field(default_factory=list)
    ood_benchmarks: list[Any] = field(default_factory=list)
    split: Any = None
    backbone: Any = None
    diagnoser: Any = None
    reweighting: Any = None
    interface_cfg: Any = None
    layout: str = "ddp"
    memory: Any = None
    # what build makes
    policy: Any = None
    engine: Any = None
    # under fsdp2, the transformers engine's unsharded compute-dtype copy of the policy (seal.rl.sharding)
    rollout_copy: Any = None
    entries: Entries | None = None
    coevolution: Any = None
    run_config: dict[str, Any] = field(default_factory=dict)
    wandb: Any = None
    selection: Any = None
    # what the evaluations give: {"before"|"after"|test_*: metrics}, {"ood_before"|"ood_after": ...}
    evals: dict[str, Any] = field(default_factory=dict)
    ood: dict[str, Any] = field(default_factory=dict)
    # the job's plan and clock (announce), and when the last round ended (or training started)
    clock: Any = None
    round_started: float = 0.0

    def evaluate(self, entries: list[Any], folder: Path | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Greedy episodes of `entries` under the plain interface and both evaluation protocols; the main rank
        shows a progress bar per protocol named after the folder (eval_before: "eval before · bfcl"), except
        for the validation rounds (val/round_*), which keep the console to one line per round."""
        from seal.evaluation.evaluate import evaluate_entries

        shown = folder is not None and folder.name.startswith("eval") and self.dist.main
        started = time.perf_counter()
        found = evaluate_entries(self.engine, entries, folder, dist=self.dist, step_limit=self.eval_step_limit,
                                 protocols=self.eval_protocols, progress=folder.name.replace("_", " ") if shown else None)
        # the validations are timed inside their rounds
        if self.clock is not None and shown:
            episodes, seconds = len(entries) * len(self.eval_protocols), time.perf_counter() - started
            self.clock.evaluated(episodes, seconds)
            log.info("%s: %d episodes in %s; the job: %s", folder.name.replace("_", " "), episodes, _duration(seconds),
                     self.clock.estimate())
        return found


def train(cfg: DictConfig, out_dir: Path) -> None:
    run = start(cfg, out_dir)
    try:
        check_config(run)
        build(run)
        announce(run)
        evaluate_before(run)
        fit(run)
        evaluate_after(run)
        if run.dist.main:
            report(run)
    except KeyboardInterrupt:
        raise Interrupted(interrupted(run) if run.dist.main else "") from None


def start(cfg: DictConfig, out_dir: Path) -> TrainingRun:
    """The process set up for a run: memory returned to the OS, the ranks, the seed, the round plan."""
    from transformers import set_seed

    from seal.budget import Budget
    from seal.rl import distributed, sharding

    started = time.perf_counter()
    return_freed_memory_to_the_os()
    dist = distributed.current(cfg.launch.timeout_minutes, sharded=sharding.requested(cfg.launch.sharding) == "fsdp2")
    fingerprint = config_fingerprint(cfg)
    # the main rank owns the run directory (the other ranks run the same command line)
    if dist.main:
        _check_run_dir(out_dir, fingerprint)
    set_seed(cfg.seed)
    # every rank plays its share of a round; the round's size does not depend on the world size
    budget = Budget.from_config(cfg.budget, dist.world)
    budget.check_device(cuda_devices())
    return TrainingRun(cfg=cfg, out_dir=out_dir, dist=dist, budget=budget, fingerprint=fingerprint, started=started)


def check_config(run: TrainingRun) -> None:
    """Every named choice read later, checked before anything is written or loaded; then the run
    directory is claimed."""
    from seal.env.episode import check_step_limit
    from seal.env.protocol import Protocol
    from seal.evaluation.evaluate import check_protocols
    from seal.evaluation.out_of_domain import out_of_domain_benchmarks
    from seal.rl import sharding
    from seal.rl.config import check_hardware
    from seal.report.wandb_run import check_mode

    cfg = run.cfg
    run.eval_step_limit = check_step_limit(cfg.eval.step_limit, "eval.step_limit")
    run.eval_protocols = check_protocols(cfg.eval.protocols)
    run.protocol = Protocol.from_config(cfg.protocol)
    check_hardware(cfg)
    check_mode(cfg.logger.mode)
    run.ood_benchmarks = out_of_domain_benchmarks(cfg, run.budget)
    run.split = instantiate(cfg.split)
    run.backbone = instantiate(cfg.backbone)
    if not run.backbone.trainable:
        raise UserError(f"backbone={run.backbone.name} is a scripted policy and cannot be trained; pick a model backbone")
    run.diagnoser = instantiate(cfg.diagnoser)
    run.reweighting = instantiate(cfg.reweighting)
    run.interface_cfg = instantiate(cfg.env_interface)
    run.layout = sharding.resolve(cfg.launch.sharding, run.dist.world)
    sharding.check_devices(local_world(run.dist), cuda_devices())
    sharding.check_combination(run.layout, lora=bool(run.backbone.lora))
    # weights that are not on this machine (and cannot be downloaded) are named before any memory plan
    run.backbone.check_weights()
    check_resources(run)
    if run.dist.main:
        # once every component has accepted its config: a run refused for a typo leaves nothing that
        # would block the corrected command
        claim_run_dir(run.out_dir, run.fingerprint)


def check_resources(run: TrainingRun) -> None:
    """The model must fit the devices' memory and the checkpoints the run's disk (one sentence if not)."""
    from seal.policy.backbones import check_host_fits, check_training_fits, host_available_bytes
    from seal.rl.checkpoint import check_run_disk_space

    cfg, budget, backbone, dist = run.cfg, run.budget, run.backbone, run.dist
    run.memory = check_training_fits(
        backbone, episode_tokens=backbone.context_length, micro_batch=budget.plan.micro_batch,
        reference=cfg.trainer.beta != 0, gradient_checkpointing=cfg.trainer.gradient_checkpointing,
        sharding=run.layout, world=dist.world, rollout_engine_fraction=_engine_fraction(backbone),
        prefill_rows=min(budget.batch_size, budget.plan.episodes_per_rank),
    )
    if run.memory is not None and cuda_devices():
        # on GPUs the host holds what the plan keeps off the devices (without CUDA the devices' memory is the
        # host's, which check_training_fits has checked). Every rank measures before any rank loads (the gather
        # waits for all), and all judge the least figure: one verdict, which no rank's early load has shrunk
        available = min(dist.gather([host_available_bytes()]))
        check_host_fits(run.memory, local_world(dist), name=backbone.name, sharding=run.layout, available=available)
    if dist.main:
        # its rounds come from at most this many train entries; under fsdp2 each rank writes its own part
        # of a checkpoint: this node's ranks write their share
        check_run_disk_space(backbone, cfg, budget, run.out_dir, budget.train_entries or len(run.split.train),
                             shards=dist.world // local_world(dist) if run.layout == "fsdp2" else 1)


def build(run: TrainingRun) -> None:
    """The model, the rollout engine, the entries, the co-evolution state, the run's records and logs."""
    from seal.interface import initial_interface
    from seal.policy.rollout import RolloutEngine
    from seal.rl.coevolution import CoEvolution

    cfg, budget = run.cfg, run.budget
    # under fsdp2 the fp32 masters stay in host memory until the trainer shards them onto the GPUs
    run.policy = run.backbone.load(training=True, host=run.layout == "fsdp2")
    run.engine = RolloutEngine.for_backbone(run.backbone, run.policy, budget, tool_rendering=cfg.rendering.tools,
                                            protocol=run.protocol)
    run.rollout_copy = generate_with_the_loaded_model(run)
    run.entries = choose_entries(run)
    # rho's statistics window restarts every epoch; the release drops an epoch's last partial batch
    run.reweighting.rounds_per_epoch = budget.rounds_per_epoch(len(run.entries.train))
    run.coevolution = CoEvolution(
        engine=run.engine, entries={e.id: e for e in run.entries.train}, omega=initial_interface(run.interface_cfg),
        interface_cfg=run.interface_cfg, diagnoser=run.diagnoser, reweighting=run.reweighting,
        temperature=budget.temperature, seed=cfg.seed, group_size=budget.rollouts_per_prompt,
        max_train_tokens=budget.max_train_tokens, dist=run.dist, progress=run.dist.main,
    )
    run.run_config = run_config(run)
    if run.dist.main:
        write_json(run.out_dir / "leakage.json", run.split.leakage())
        (run.out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        write_json(run.out_dir / "run_config.json", run.run_config)
    start_logging(run)


def announce(run: TrainingRun) -> None:
    """Say what the job will do (the evaluations with their episodes under each protocol, the rounds left,
    the validations, the out-of-domain benchmarks with their episodes), and start its clock (seal.report.clock)."""
    from seal.budget import validated_after
    from seal.evaluation.out_of_domain import plays_of
    from seal.report.clock import Evaluation, JobClock, JobPlan, saves_after

    entries, selection, protocols, out_dir = run.entries, run.selection, tuple(run.eval_protocols), run.out_dir
    planned = run.budget.rounds_for(len(entries.train))
    history = checkpointed_rounds(out_dir)[0]
    first = len(history)
    before, after = [], []
    if entries.heldout and not (out_dir / "eval_before.json").exists():
        before.append(Evaluation(f"evaluate ({entries.heldout_part} part)", len(entries.heldout), protocols))
    if selection.active and not (out_dir / "eval_test_before.json").exists():
        before.append(Evaluation("test the initial model", len(entries.test), protocols))
    if entries.heldout:
        after.append(Evaluation(f"evaluate ({entries.heldout_part} part)", len(entries.heldout), protocols))
    if selection.active:
        after += [Evaluation("test the final model", len(entries.test), protocols),
                  Evaluation("test the model best on validation", len(entries.test), protocols)]
    validated = tuple(r for r in range(first, planned) if selection.active and validated_after(r, selection.every, planned))
    plan = JobPlan(before=tuple(before), rounds=max(planned - first, 0), planned_rounds=planned,
                   episodes_per_round=run.budget.episodes, prompts=run.budget.prompts_per_round,
                   rollouts=run.budget.rollouts_per_prompt, steps_per_round=run.budget.steps_per_round,
                   validated=validated, validation=Evaluation("validation", len(selection.val_entries), protocols),
                   after=tuple(after), first_round=first,
                   ood=tuple((b.name, plays_of(b, run.budget.ood_entries_per_category)) for b in run.ood_benchmarks),
                   saves_after=saves_after(max(planned - first, 0), bool(run.cfg.trainer.save_every)))
    run.clock = clock = JobClock(plan, clock=time.perf_counter, started=run.started)
    # a resumed run starts from the earlier attempt's rates: its rounds' times and its evaluation's
    clock.earlier(round_seconds=[round_seconds(r.get("metrics", {})) for r in history],
                  **evaluation_rate(out_dir / "eval_before.json"))
    earlier = clock.left()
    beside = similar_run(out_dir, run.run_config) if run.dist.main else None
    if beside:
        clock.beside(**beside[1])
    if run.dist.main:
        log.info("%s; the time it takes: %s%s", plan.describe(),
                 time_it_takes(clock.left(), earlier, beside[0] if beside else None),
                 ", then on every round line" if plan.rounds else "")


def _duration(seconds: float) -> str:
    from seal.policy.progress import duration

    return duration(seconds)


def generate_with_the_loaded_model(run: TrainingRun) -> Any:
    """How the engine generates until the trainer exists (the evaluations before training): with the loaded
    weights, which do not change before the first optimizer step (version 0). Under fsdp2 the loaded model is
    in host memory, so the transformers engine generates with an unsharded copy in the compute dtype on this
    rank's device (returned: training refreshes it from the shards); a vLLM engine takes the loaded weights
    whenever a sleep discarded its own, instead of reading the checkpoint from disk again. The copy a vLLM run
    gathers after training (the final model the engine syncs from, evaluates and writes) is built in host memory:
    the engine reads host tensors as it reads the loaded model's before training, and beside the woken engine's
    share of the GPU it would hold a whole model in the compute dtype that the memory plan does not count."""
    from seal.rl.sharding import RolloutCopy

    engine, policy, generation = run.engine, run.policy, run.backbone.generation
    if generation == "vllm":
        engine.model = policy.model
        engine.generator.version = lambda: 0
    if run.layout != "fsdp2":
        return None
    device = "cpu" if generation == "vllm" else policy.device
    copy = RolloutCopy(policy.model, dtype=policy.compute_dtype, device=device, version=lambda: 0)
    if generation == "transformers":
        engine.generator.refresh = copy.refresh
    return copy


def choose_entries(run: TrainingRun) -> Entries:
    """Train entries whose prompt leaves room to generate under the widest interface this run can show
    (and, under the release's protocol, within its prompt limit), the held-out slice and the test entries."""
    from seal.evaluation.evaluate import fits, prompt_tokens, select_entries
    from seal.interface import apply, widest_interface

    engine, budget, protocol, split = run.engine, run.budget, run.protocol, run.split
    widest = apply(widest_interface(run.interface_cfg), engine.format.call_example, run.interface_cfg)
    pool = select_entries(engine, split.train, None)
    fitting = [e for e in pool if fits(engine, e, widest)]
    over_long = [] if protocol.max_prompt_tokens is None else [
        e.id for e in fitting if not protocol.prompt_fits(prompt_tokens(engine, e, widest))]
    if protocol.over_long_prompt == "skip":
        skipped = set(over_long)
        fitting = [e for e in fitting if e.id not in skipped]
    train_entries = select_entries(engine, [e.id for e in fitting], budget.train_entries, per_category=False)
    check_prompt_lengths(protocol, [e.id for e in train_entries], over_long)
    heldout_part = "val" if split.val else "test"
    heldout = select_entries(engine, split.part(heldout_part), budget.heldout_entries_per_category)
    if not train_entries:
        raise UserError(f"no train entry of split={split.name} fits backbone {run.backbone.name}'s context "
                        f"({run.backbone.context_length} tokens with budget.max_new_tokens={budget.max_new_tokens})")
    return Entries(train=train_entries, heldout=heldout, heldout_part=heldout_part,
                   test=select_entries(engine, split.test, budget.eval_entries_per_category),
                   pool=len(pool), fit=len(fitting), over_long=over_long)


def run_config(run: TrainingRun) -> dict[str, Any]:
    """run_config.json: the resolved config and everything else a result depends on, the arm's name and
    choices (seal.tasks.arm) among them; experiment_name is the user's label, else the arm."""
    from seal.tasks.arm import arm_of

    cfg, backbone, budget, entries, protocol = run.cfg, run.backbone, run.budget, run.entries, run.protocol
    arm, choices = arm_of(cfg)
    return {
        **OmegaConf.to_container(cfg, resolve=True), "experiment_name": cfg.experiment_name or arm,
        "arm": arm, "arm_choices": choices,
        "base_checkpoint": backbone.describe(), "code_version": code_version(), "fingerprint": run.fingerprint,
        "overrides": _overrides(), "train_ids": [e.id for e in entries.train],
        "heldout_part": entries.heldout_part, "heldout_ids": [e.id for e in entries.heldout],
        "precision": precision(backbone, run.layout), "machine": machine_kind(run.dist.world),
        "world_size": run.dist.world, "sharding": run.layout,
        "training_memory_gib": {k: round(v, 2) for k, v in run.memory.table()} if run.memory else None,
        "round_plan": vars(budget.plan) | {"episodes_per_step": budget.plan.episodes_per_step},
        "train_filter": {"train_part": entries.pool, "fit": entries.fit, "left_out_unfit": entries.pool - entries.fit,
                         "context_length": backbone.context_length, "max_new_tokens": budget.max_new_tokens,
                         "max_prompt_tokens": protocol.max_prompt_tokens,
                         "left_out_over_long": len(entries.over_long) if protocol.over_long_prompt == "skip" else 0},
        "protocol": {"answers": protocol.name, "eval_protocols": "+".join(run.eval_protocols),
                     "tool_rendering": cfg.rendering.tools, "schema_style": run.interface_cfg.schema_style,
                     "train_step_limit": run.engine.step_limit, "eval_step_limit": run.eval_step_limit,
                     "max_steps": run.engine.max_steps_per_turn, "rounds_per_epoch": run.reweighting.rounds_per_epoch,
                     "max_train_tokens": budget.max_train_tokens, "dual_clip": cfg.trainer.dual_clip,
                     "weight_decay": cfg.trainer.weight_decay, "std_epsilon": cfg.trainer.std_epsilon},
    }


def precision(backbone: Any, layout: str) -> dict[str, Any]:
    """run_config.json's precision: the weights', the compute's and the KV cache's dtypes, accelerate's mixed
    precision, and under fsdp2 the policy FSDP2 gathers, reduces and outputs in (seal.rl.sharding)."""
    from seal.policy.backbones import param_dtype
    from seal.rl.sharding import mixed_precision, mixed_precision_policy

    record: dict[str, Any] = {
        "param_dtype": param_dtype(backbone.dtype, training=True, lora=bool(backbone.lora)),
        "compute_dtype": backbone.dtype, "kv_cache_dtype": backbone.dtype,
        "mixed_precision": mixed_precision(backbone.dtype),
    }
    if layout == "fsdp2":
        policy = mixed_precision_policy(backbone.dtype)
        # output_dtype None: no cast of what a unit returns
        record["fsdp2"] = {name: None if getattr(policy, name) is None else str(getattr(policy, name)).removeprefix("torch.")
                           for name in ("param_dtype", "reduce_dtype", "output_dtype")}
    return record


def start_logging(run: TrainingRun) -> None:
    """W&B, the model selection, and what every round leaves behind (metrics.jsonl, the round line, the
    interface state). Only the main rank logs to W&B and writes the per-round files; with several ranks
    each also appends its own rho and Omega per round to ranks/ (they must agree, and are checked to)."""
    from seal.env.benchmarks.bfcl_v3 import get_entries
    from seal.policy.progress import say
    from seal.report.train_report import round_line, write_metrics_log
    from seal.report.wandb_run import WandbRun, run_identity
    from seal.rl.selection import ModelSelection

    cfg, out_dir, dist, coevolution = run.cfg, run.out_dir, run.dist, run.coevolution
    logger_cfg = OmegaConf.to_container(cfg.logger, resolve=True)
    if not dist.main:
        logger_cfg["mode"] = "disabled"
    identity = run_identity(out_dir=out_dir, fingerprint=run.fingerprint, experiment=run.run_config["arm"],
                            backbone=run.backbone.name, seed=cfg.seed, tags=logger_cfg.pop("tags"),
                            group=logger_cfg.pop("group", None), sweep_dir=_sweep_dir(), label=cfg.experiment_name)
    wandb = run.wandb = WandbRun(out_dir=out_dir, config=run.run_config, **identity, **logger_cfg)
    planned_rounds = run.budget.rounds_for(len(run.entries.train))
    selection = run.selection = ModelSelection(
        every=run.budget.val_every, val_entries=get_entries(run.split.val), out_dir=out_dir, dist=dist,
        keep_all=bool(cfg.get("eval_all_checkpoints_on_test")), evaluate=run.evaluate, dtype=run.backbone.dtype,
        rounds=planned_rounds)

    def on_round_end(record) -> None:
        selection.after_round(record, run.engine.model)
        if dist.world > 1:
            (out_dir / "ranks").mkdir(exist_ok=True)
            with (out_dir / "ranks" / f"rank{dist.rank}.jsonl").open("a") as fh:
                fh.write(json.dumps({"round": record.round, "rho": record.rho, "interface": record.interface}) + "\n")
        if not dist.main:
            return
        write_metrics_log(out_dir / "metrics.jsonl", coevolution.history)
        if selection.model_save_seconds is not None:
            # a kept model's write times the final model's (told before the round is done: not the final one)
            run.clock.saved("model", selection.model_save_seconds)
        now = time.perf_counter()
        run.clock.round_done(now - run.round_started)
        run.round_started = now
        say(round_line(record, planned_rounds, left=run.clock.estimate()))
        wandb.log({**record.metrics, "round": record.round}, step=record.round)
        wandb.table("diag/labels", ["label", "count"], sorted(record.labels.items()), step=record.round)
        write_json(out_dir / "interface" / f"round_{record.round:04d}.json", record.interface)

    coevolution.on_round_end = on_round_end


def evaluate_before(run: TrainingRun) -> None:
    """The initial model on the held-out slice (shared out over the ranks; read back when resuming), on
    test when model selection is on, and on the out-of-domain benchmarks."""
    from seal.evaluation.out_of_domain import evaluate_out_of_domain

    before_path = run.out_dir / "eval_before.json"
    if run.entries.heldout and not before_path.exists():
        metrics, _ = run.evaluate(run.entries.heldout, run.out_dir / "eval_before")
        if run.dist.main:
            write_json(before_path, metrics)
        run.evals["before"] = metrics
    elif run.entries.heldout:
        run.evals["before"] = read_json(before_path)
    # with model selection the before-evaluation is on the validation part: the initial model on test too
    run.evals.update(run.selection.test_initial(run.entries.test))
    run.ood = evaluate_out_of_domain(run.engine, run.ood_benchmarks, run.budget, run.out_dir, "before", run.dist,
                                     run.eval_step_limit, run.clock)


def fit(run: TrainingRun) -> None:
    """TRL's trainer over the co-evolution loop, resumed from the run directory's last complete round;
    leaves the final model in `final_model/` and in the engine, and frees the trainer."""
    from seal.rl.checkpoint import latest_complete_checkpoint, save_final_model
    from seal.rl.trainer import Prepared, make_trainer

    cfg, backbone, engine, policy, out_dir = run.cfg, run.backbone, run.engine, run.policy, run.out_dir
    trainer = make_trainer(
        cfg, budget=run.budget, model=policy.model, tokenizer=policy.tokenizer, coevolution=run.coevolution,
        train_ids=[e.id for e in run.entries.train], out_dir=out_dir, compute_dtype=backbone.dtype,
        peft_config=backbone.peft_config(), sharding=run.layout,
    )
    # TRL's model card (checkpoints/README.md) names config._name_or_path as the base model, and a local
    # folder (the weights' cache) as "[None]"; named only now: TRL built its reference model from the folder
    policy.model.config._name_or_path = backbone.base_model_id
    # rollouts are generated by the model being trained (peft-wrapped when LoRA is on); a sharded one
    # through an unsharded copy, gathered at every play for the transformers engine (vLLM gathers the
    # shards itself) and once at the end for the final model
    engine.model = trainer.model
    if backbone.generation == "vllm":
        # the engine syncs only when the optimizer has stepped since its last sync; assigning engine.model
        # again after training detaches this version (and the trainer it refers to)
        engine.generator.version = lambda: trainer.state.global_step
    copy, run.rollout_copy = run.rollout_copy, None
    if copy is not None:
        # the copy made before training, now refreshed from the shards (the same weights until the first step)
        copy.sharded, copy.version = trainer.model, lambda: trainer.state.global_step
    checkpoint = latest_complete_checkpoint(Path(trainer.args.output_dir))
    if checkpoint is not None:
        resume(run, checkpoint)
    trainer.on_checkpoint = partial(run.clock.saved, "checkpoint")

    def rounds_begin() -> None:
        # round 0's time starts once the trainer has sharded, moved and resumed the model and built its
        # optimizer: a one-off (minutes for a sharded 7B) that would otherwise count in every round's rate
        run.round_started = time.perf_counter()

    trainer.add_callback(Prepared(rounds_begin))
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    started = time.perf_counter()
    if copy is not None:
        # one full state dict in the backbone's dtype, gathered from the shards on every rank
        if backbone.generation == "transformers":
            engine.generator.refresh = None
        engine.model = copy.refresh()
        del copy  # it refers to the trainer, freed below
        if run.dist.main:
            engine.model.save_pretrained(out_dir / "final_model")
            policy.tokenizer.save_pretrained(out_dir / "final_model")
    else:
        if run.dist.main:
            save_final_model(trainer, out_dir / "final_model", backbone.dtype)
        engine.model = trainer.model
    run.clock.saved("model", time.perf_counter() - started)
    # the optimizer state, gradients and reference model are not needed to evaluate: free them
    # before the after-evaluation allocates its caches (it keeps the main job under 8 GB)
    trainer.accelerator.free_memory()
    del trainer
    gc.collect()


def resume(run: TrainingRun, checkpoint: Path) -> None:
    """The co-evolution state (Omega, rho, RNG streams, history) of a complete checkpoint."""
    from seal.rl import sharding
    from seal.rl.checkpoint import read_state
    from seal.report.train_report import write_metrics_log

    sharding.check_checkpoint(checkpoint, run.layout)
    run.coevolution.load_state_dict(read_state(checkpoint))
    if run.dist.main:
        write_metrics_log(run.out_dir / "metrics.jsonl", run.coevolution.history)
    done, planned = len(run.coevolution.history), run.budget.rounds_for(len(run.entries.train))
    after = f"round {done}" if done < planned else "no round left to train: the evaluations after training"
    log.info("resuming from %s: %s done ([%d/%d]); next: %s", checkpoint,
             "round 0" if done == 1 else f"rounds 0-{done - 1}", done, planned, after)


def evaluate_after(run: TrainingRun) -> None:
    """The trained model on the same held-out slice and out-of-domain benchmarks, then the model
    selection's test evaluations (last: it loads the best model's weights over the final ones)."""
    from seal.evaluation.out_of_domain import evaluate_out_of_domain

    if run.entries.heldout:
        metrics, _ = run.evaluate(run.entries.heldout, run.out_dir / "eval_after")
        if run.dist.main:
            write_json(run.out_dir / "eval_after.json", metrics)
        run.evals["after"] = metrics
    run.ood.update(evaluate_out_of_domain(run.engine, run.ood_benchmarks, run.budget, run.out_dir, "after", run.dist,
                                          run.eval_step_limit, run.clock))
    run.evals.update(run.selection.test_evaluations(run.engine.model, run.entries.test))


def report(run: TrainingRun) -> None:
    """metrics.json, report.md (with curves.png) and the W&B summary (main rank)."""
    from seal.report.train_report import write_train_report

    cfg, out_dir, evals, ood, history = run.cfg, run.out_dir, run.evals, run.ood, run.coevolution.history
    timing = _mean_round_timing(history)
    tests = {k: v for k, v in evals.items() if k not in ("before", "after")}
    summary = {
        "arm": run.run_config["arm"], "arm_choices": run.run_config["arm_choices"],
        "rounds": len(history), "planned_rounds": run.budget.rounds_for(len(run.entries.train)),
        "final_rho": run.coevolution.reweighting.rho, "final_interface": run.coevolution.omega.to_dict(),
        "eval_before": evals.get("before"), "eval_after": evals.get("after"), "round_time_split": timing,
        "wall_seconds": time.perf_counter() - run.started, "world_size": run.dist.world,
        "ood_before": ood.get("ood_before"), "ood_after": ood.get("ood_after"), **tests,
    }
    write_json(out_dir / "metrics.json", summary)
    name = f"{run.run_config['arm']} | {run.backbone.name} | seed {cfg.seed}"
    write_train_report(out_dir, title=f"SEAL training run: {name}", header=report_header(run), history=history,
                       rho0=run.reweighting.rho0, evals=evals, timing=timing, ood=ood, leakage=run.split.leakage(),
                       curves_title=name)
    wandb = run.wandb
    wandb.summary({f"{k}/{m}": v for k in evals for m, v in evals[k].items() if m.startswith("eval/")}
                  | {f"{when.removeprefix('ood_')}/{m}": v for when, found in ood.items() for metrics in found.values()
                     for m, v in metrics.items() if m.startswith("eval/")})
    wandb.save_files([out_dir / "report.md", out_dir / "curves.png", out_dir / "metrics.json"])
    wandb.finish()
    log.info("done: %s; report in %s", done_line(len(history), run.clock.plan.first_round,
                                                  time.perf_counter() - run.started), out_dir / "report.md")


def done_line(rounds: int, resumed: int, seconds: float) -> str:
    """The run's last line: its rounds and how long this attempt took (`resumed`: the rounds an earlier attempt
    had trained, which this attempt did not)."""
    from seal.report.clock import count_of

    total = count_of(rounds, "round")
    if not resumed:
        return f"{total} in {_duration(seconds)}"
    here = rounds - resumed
    return f"{total}, {'none' if here == 0 else here} of them in this attempt, which took {_duration(seconds)}"


def report_header(run: TrainingRun) -> dict[str, Any]:
    """The settings report.md opens with."""
    cfg, backbone, budget, engine, entries, config = run.cfg, run.backbone, run.budget, run.engine, run.entries, run.run_config
    return {
        "arm": config["arm"], "backbone": backbone.describe(), "seed": cfg.seed, "interface": run.interface_cfg.name,
        "diagnoser": run.diagnoser.name, "reweighting": run.reweighting.mode, "budget": budget.name,
        "precision": "params {param_dtype}, compute {compute_dtype}".format(**config["precision"]),
        "ranks": run.dist.world, "rendering": cfg.rendering.tools,
        "step limit": f"train {engine.step_limit}, eval {run.eval_step_limit} ({engine.max_steps_per_turn} steps)",
        "protocol": ", ".join(f"{k} {v}" for k, v in config["protocol"].items()),
        "train entries": f"{len(entries.train)} ({entries.pool - entries.fit} of {entries.pool} in the train part "
                         f"left out: their prompt does not fit {backbone.context_length} tokens with "
                         f"{budget.max_new_tokens} to generate)",
        "code version": config["code_version"], "rounds": len(run.coevolution.history),
    }


def check_prompt_lengths(protocol: Any, train_ids: list[str], over_long: list[str]) -> None:
    """Under over_long_prompt=error (the release's), a chosen train entry whose prompt exceeds
    protocol.max_prompt_tokens stops the run before anything is trained, as the release's does."""
    chosen = sorted(set(train_ids) & set(over_long))
    if protocol.over_long_prompt == "error" and chosen:
        raise UserError(f"{len(chosen)} train entries (e.g. {chosen[0]}) have a prompt over protocol.max_prompt_tokens="
                        f"{protocol.max_prompt_tokens} tokens, which the release refuses; leave them out with "
                        "protocol.over_long_prompt=skip, or raise protocol.max_prompt_tokens")


def _engine_fraction(backbone: Any) -> float | None:
    """The share of the GPU a colocated vLLM engine takes (None: no engine on a GPU)."""
    from seal.policy.generation_vllm import DEFAULT_GPU_MEMORY_UTILIZATION

    if backbone.generation != "vllm" or not cuda_devices():
        return None
    fraction = backbone.vllm.get("gpu_memory_utilization")
    return DEFAULT_GPU_MEMORY_UTILIZATION if fraction is None else float(fraction)


def _sweep_dir() -> Path | None:
    """The multirun's sweep directory (None outside a sweep)."""
    from seal.io import in_multirun

    if not in_multirun():
        return None
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().sweep.dir)


def _overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def _mean_round_timing(history) -> dict[str, float]:
    keys = sorted({k for r in history for k in r.metrics if k.startswith("time/")})
    return {k.removeprefix("time/"): sum(r.metrics.get(k, 0.0) for r in history) / len(history) for k in keys} if history else {}
