"""task=train: SEAL's co-evolution loop (paper Algorithm 1) on TRL's GRPOTrainer.

    python run.py                                   # full SEAL, SmolLM2-135M, smoke budget
    python run.py backbone=qwen2.5-3b reweighting=off
    python run.py -m experiment=vanilla_rl,seal seed=0,1,2

Reads top to bottom: build the pieces from the config, evaluate the initial model on a held-out
slice, train (resuming from the run directory's last complete round if there is one), evaluate
again, write the report.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from seal.errors import UserError
from seal.io import claim_run_dir, code_version, config_fingerprint, fingerprint_matches, write_json

if TYPE_CHECKING:
    from seal.budget import Budget

log = logging.getLogger(__name__)
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


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


def train(cfg: DictConfig, out_dir: Path) -> None:
    from transformers import set_seed

    from seal.budget import Budget
    from seal.env.benchmark import get_entries
    from seal.env.episode import check_step_limit
    from seal.env.protocol import Protocol
    from seal.eval.evaluate import check_protocols, evaluate_entries, fits, select_entries
    from seal.interface import apply, initial_interface, widest_interface
    from seal.policy.backbones import check_training_fits, param_dtype
    from seal.policy.rollout import RolloutEngine
    from seal.rl import distributed, sharding
    from seal.rl.checkpoint import check_run_disk_space, latest_complete_checkpoint, read_state, save_final_model
    from seal.rl.coevolution import CoEvolution
    from seal.rl.selection import ModelSelection
    from seal.rl.config import check_hardware
    from seal.rl.trainer import make_trainer
    from seal.report.train_report import round_line, write_metrics_log, write_train_report
    from seal.report.wandb_run import WandbRun, check_mode, run_identity

    started = time.perf_counter()
    return_freed_memory_to_the_os()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    dist = distributed.current(cfg.launch.timeout_minutes)
    fingerprint = config_fingerprint(cfg)
    # the main rank owns the run directory (the other ranks run the same command line)
    if dist.main:
        _check_run_dir(out_dir, fingerprint)
    set_seed(cfg.seed)
    # every rank plays its share of a round; the round's size does not depend on the world size
    budget = Budget.from_config(cfg.budget, dist.world)
    plan = budget.plan

    # -- the pieces, from the config -------------------------------------------------------------
    # every named choice read later is checked now, before anything is written or loaded
    eval_step_limit = check_step_limit(cfg.eval.step_limit, "eval.step_limit")
    eval_protocols = check_protocols(cfg.eval.protocols)
    protocol = Protocol.from_config(cfg.protocol)
    check_hardware(cfg)
    check_mode(cfg.logger.mode)
    ood_benchmarks = out_of_domain_benchmarks(cfg, budget)
    split = instantiate(cfg.split)
    backbone = instantiate(cfg.backbone)
    if not backbone.trainable:
        raise UserError(f"backbone={backbone.name} is a scripted policy and cannot be trained; pick a model backbone")
    diagnoser = instantiate(cfg.diagnoser)
    reweighting = instantiate(cfg.reweighting)
    interface_cfg = instantiate(cfg.env_interface)
    layout = sharding.resolve(cfg.launch.sharding, dist.world)
    sharding.check_devices(int(os.environ.get("LOCAL_WORLD_SIZE", dist.world)), _cuda_devices())
    sharding.check_combination(layout, lora=bool(backbone.lora))
    memory = check_training_fits(
        backbone, episode_tokens=backbone.context_length, micro_batch=plan.micro_batch,
        reference=cfg.trainer.beta != 0, gradient_checkpointing=cfg.trainer.gradient_checkpointing,
        sharding=layout, world=dist.world, rollout_engine_fraction=_engine_fraction(backbone),
        prefill_rows=min(budget.batch_size, plan.episodes_per_rank),
    )
    if dist.main:
        # the checkpoints and models the run writes must fit its disk (its rounds come from at most this
        # many train entries)
        # under fsdp2 each rank writes its own part of a checkpoint: this node's ranks write their share
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", dist.world))
        check_run_disk_space(backbone, cfg, budget, out_dir, budget.train_entries or len(split.train),
                             shards=dist.world // local_world if layout == "fsdp2" else 1)
        # once every component has accepted its config: a run refused for a typo leaves nothing that
        # would block the corrected command
        claim_run_dir(out_dir, fingerprint)
    policy = backbone.load(training=True)
    engine = RolloutEngine.for_backbone(backbone, policy, budget, tool_rendering=cfg.rendering.tools, protocol=protocol)
    # no episode may start without room to generate: the prompts are measured under the widest
    # interface this run can show, and those that cannot fit are left out (and counted)
    widest = apply(widest_interface(interface_cfg), engine.format.call_example, interface_cfg)
    pool = select_entries(engine, split.train, None)
    fitting = [e for e in pool if fits(engine, e, widest)]
    over_long = [] if protocol.max_prompt_tokens is None else [
        e.id for e in fitting if not protocol.prompt_fits(engine.prompt_tokens(e, widest))]
    if protocol.over_long_prompt == "skip":
        fitting = [e for e in fitting if e.id not in set(over_long)]
    train_entries = select_entries(engine, [e.id for e in fitting], budget.train_entries, per_category=False)
    check_prompt_lengths(protocol, [e.id for e in train_entries], over_long)
    # the before/after slice: the validation part when the split has one (model selection never
    # touches test), else a few test entries (reported only; nothing is selected on them)
    heldout_part = "val" if split.val else "test"
    heldout = select_entries(engine, split.part(heldout_part), budget.heldout_entries_per_category)
    if not train_entries:
        raise UserError(f"no train entry of split={split.name} fits backbone {backbone.name}'s context "
                        f"({backbone.context_length} tokens with budget.max_new_tokens={budget.max_new_tokens})")
    # rho's statistics window restarts every epoch; the release drops an epoch's last partial batch
    reweighting.rounds_per_epoch = budget.rounds_per_epoch(len(train_entries))
    coevolution = CoEvolution(
        engine=engine, entries={e.id: e for e in train_entries}, omega=initial_interface(interface_cfg),
        interface_cfg=interface_cfg, diagnoser=diagnoser, reweighting=reweighting,
        temperature=budget.temperature, seed=cfg.seed, group_size=budget.rollouts_per_prompt,
        max_train_tokens=budget.max_train_tokens, dist=dist,
    )

    run_config = {
        **OmegaConf.to_container(cfg, resolve=True),
        "base_checkpoint": backbone.describe(), "code_version": code_version(), "fingerprint": fingerprint,
        "overrides": _overrides(), "train_ids": [e.id for e in train_entries],
        "heldout_part": heldout_part, "heldout_ids": [e.id for e in heldout],
        "precision": {
            "param_dtype": param_dtype(backbone.dtype, training=True, lora=bool(backbone.lora)),
            "compute_dtype": backbone.dtype, "kv_cache_dtype": backbone.dtype,
        },
        "world_size": dist.world, "sharding": layout,
        "training_memory_gib": {k: round(v, 2) for k, v in memory.table()} if memory else None,
        "round_plan": vars(plan) | {"episodes_per_step": plan.episodes_per_step},
        "train_filter": {"train_part": len(pool), "fit": len(fitting), "left_out_unfit": len(pool) - len(fitting),
                         "context_length": backbone.context_length, "max_new_tokens": budget.max_new_tokens,
                         "max_prompt_tokens": protocol.max_prompt_tokens,
                         "left_out_over_long": len(over_long) if protocol.over_long_prompt == "skip" else 0},
        "protocol": {"answers": protocol.name, "eval_protocols": "+".join(eval_protocols),
                     "tool_rendering": cfg.rendering.tools, "schema_style": interface_cfg.schema_style,
                     "train_step_limit": engine.step_limit, "eval_step_limit": eval_step_limit,
                     "max_steps": engine.max_steps_per_turn, "rounds_per_epoch": reweighting.rounds_per_epoch,
                     "max_train_tokens": budget.max_train_tokens, "dual_clip": cfg.trainer.dual_clip,
                     "weight_decay": cfg.trainer.weight_decay, "std_epsilon": cfg.trainer.std_epsilon},
    }
    if dist.main:
        write_json(out_dir / "leakage.json", split.leakage())
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        write_json(out_dir / "run_config.json", run_config)
    # only the main rank logs to W&B and writes the per-round files; with several ranks each also
    # appends its own rho and Omega per round to ranks/ (they must agree, and are checked to)
    logger_cfg = OmegaConf.to_container(cfg.logger, resolve=True)
    if not dist.main:
        logger_cfg["mode"] = "disabled"
    identity = run_identity(out_dir=out_dir, fingerprint=fingerprint, experiment=cfg.experiment_name,
                            backbone=backbone.name, seed=cfg.seed, tags=logger_cfg.pop("tags"),
                            group=logger_cfg.pop("group", None), sweep_dir=_sweep_dir())
    wandb = WandbRun(out_dir=out_dir, config=run_config, **identity, **logger_cfg)

    planned_rounds = budget.rounds_for(len(train_entries))

    def on_round_end(record) -> None:
        selection.after_round(record, engine.model)
        if dist.world > 1:
            (out_dir / "ranks").mkdir(exist_ok=True)
            with (out_dir / "ranks" / f"rank{dist.rank}.jsonl").open("a") as fh:
                fh.write(json.dumps({"round": record.round, "rho": record.rho, "interface": record.interface}) + "\n")
        if not dist.main:
            return
        write_metrics_log(out_dir / "metrics.jsonl", coevolution.history)
        print(round_line(record, planned_rounds), flush=True)
        wandb.log({**record.metrics, "round": record.round}, step=record.round)
        wandb.table("diag/labels", ["label", "count"], sorted(record.labels.items()), step=record.round)
        write_json(out_dir / "interface" / f"round_{record.round:04d}.json", record.interface)

    coevolution.on_round_end = on_round_end

    def evaluate(entries, folder):
        return evaluate_entries(engine, entries, folder, dist=dist, step_limit=eval_step_limit, protocols=eval_protocols)

    selection = ModelSelection(every=budget.val_every, val_entries=get_entries(split.val), out_dir=out_dir,
                               dist=dist, keep_all=bool(cfg.get("eval_all_checkpoints_on_test")), evaluate=evaluate,
                               dtype=backbone.dtype)

    # -- before: the initial model on the held-out slice (shared out over the ranks) ---------------
    evals = {}
    before_path = out_dir / "eval_before.json"
    if heldout and not before_path.exists():
        metrics, _ = evaluate_entries(engine, heldout, out_dir / "eval_before", dist=dist, step_limit=eval_step_limit,
                                      protocols=eval_protocols)
        if dist.main:
            write_json(before_path, metrics)
        evals["before"] = metrics
    elif heldout:
        evals["before"] = json.loads(before_path.read_text())

    # with model selection the before-evaluation is on the validation part: the initial model on test too
    test_entries = select_entries(engine, split.test, budget.eval_entries_per_category)
    initial_on_test = selection.test_initial(test_entries)

    ood = evaluate_out_of_domain(engine, ood_benchmarks, budget, out_dir, "before", dist, eval_step_limit)

    # -- train, resuming from the last complete round ---------------------------------------------
    trainer = make_trainer(
        cfg, budget=budget, model=policy.model, tokenizer=policy.tokenizer, coevolution=coevolution,
        train_ids=[e.id for e in train_entries], out_dir=out_dir, compute_dtype=backbone.dtype,
        peft_config=backbone.peft_config(), sharding=layout,
    )
    # rollouts are generated by the model being trained (peft-wrapped when LoRA is on); a sharded one
    # through an unsharded copy refreshed at every play (vLLM gathers the shards itself)
    engine.model = trainer.model
    # a sharded model is gathered into an unsharded copy: for the transformers engine at every play, and
    # once at the end for the final model
    copy = None
    if layout == "fsdp2":
        copy = sharding.RolloutCopy(trainer.model, dtype=policy.compute_dtype, device=policy.device,
                                    version=lambda: trainer.state.global_step)
    if copy is not None and backbone.generation == "transformers":
        engine.generator.refresh = copy.refresh
    checkpoint = latest_complete_checkpoint(Path(trainer.args.output_dir))
    if checkpoint is not None:
        sharding.check_checkpoint(checkpoint, layout)
        coevolution.load_state_dict(read_state(checkpoint))
        if dist.main:
            write_metrics_log(out_dir / "metrics.jsonl", coevolution.history)
        log.info("resuming from %s (round %d done)", checkpoint, len(coevolution.history))
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if copy is not None:
        # one full state dict in the backbone's dtype, gathered from the shards on every rank
        if backbone.generation == "transformers":
            engine.generator.refresh = None
        engine.model = copy.refresh()
        del copy  # it refers to the trainer, freed below
        if dist.main:
            engine.model.save_pretrained(out_dir / "final_model")
            policy.tokenizer.save_pretrained(out_dir / "final_model")
    else:
        if dist.main:
            save_final_model(trainer, out_dir / "final_model", backbone.dtype)
        engine.model = trainer.model
    # the optimizer state, gradients and reference model are not needed to evaluate: free them
    # before the after-evaluation allocates its caches (it keeps the main job under 8 GB)
    trainer.accelerator.free_memory()
    del trainer
    gc.collect()

    # -- after: the trained model on the same held-out slice --------------------------------------
    if heldout:
        metrics, _ = evaluate_entries(engine, heldout, out_dir / "eval_after", dist=dist, step_limit=eval_step_limit,
                                      protocols=eval_protocols)
        if dist.main:
            write_json(out_dir / "eval_after.json", metrics)
        evals["after"] = metrics
    ood.update(evaluate_out_of_domain(engine, ood_benchmarks, budget, out_dir, "after", dist, eval_step_limit))
    # model selection on validation: the best-on-val and the final model on test (last: it loads weights over)
    tests = {**initial_on_test, **selection.test_evaluations(engine.model, test_entries)}
    if not dist.main:
        return
    evals.update(tests)

    timing = _mean_round_timing(coevolution.history)
    summary = {
        "rounds": len(coevolution.history), "planned_rounds": budget.rounds_for(len(train_entries)),
        "final_rho": coevolution.reweighting.rho, "final_interface": coevolution.omega.to_dict(),
        "eval_before": evals.get("before"), "eval_after": evals.get("after"), "round_time_split": timing,
        "wall_seconds": time.perf_counter() - started, "world_size": dist.world,
        "ood_before": ood.get("ood_before"), "ood_after": ood.get("ood_after"),
        **{k: v for k, v in tests.items()},
    }
    write_json(out_dir / "metrics.json", summary)
    write_train_report(
        out_dir, title=f"SEAL training run: {out_dir.name or 'default'}",
        header={"backbone": backbone.describe(), "seed": cfg.seed, "interface": interface_cfg.name,
                "diagnoser": diagnoser.name, "reweighting": reweighting.mode, "budget": budget.name,
                "precision": "params {param_dtype}, compute {compute_dtype}".format(**run_config["precision"]),
                "ranks": dist.world, "rendering": cfg.rendering.tools,
                "step limit": f"train {engine.step_limit}, eval {eval_step_limit} ({engine.max_steps_per_turn} steps)",
                "protocol": ", ".join(f"{k} {v}" for k, v in run_config["protocol"].items()),
                "train entries": f"{len(train_entries)} ({len(pool) - len(fitting)} of {len(pool)} in the train part "
                                 f"left out: their prompt does not fit {backbone.context_length} tokens with "
                                 f"{budget.max_new_tokens} to generate)",
                "code version": run_config["code_version"], "rounds": len(coevolution.history)},
        history=coevolution.history, rho0=reweighting.rho0, evals=evals, timing=timing, ood=ood,
    )
    wandb.summary({f"{k}/{m}": v for k in evals for m, v in evals[k].items() if m.startswith("eval/")}
                  | {f"{when.removeprefix('ood_')}/{m}": v for when, found in ood.items() for metrics in found.values()
                     for m, v in metrics.items() if m.startswith("eval/")})
    wandb.save_files([out_dir / "report.md", out_dir / "curves.png", out_dir / "metrics.json"])
    wandb.finish()
    log.info("done: %d rounds; report in %s", len(coevolution.history), out_dir / "report.md")


def check_prompt_lengths(protocol: Any, train_ids: list[str], over_long: list[str]) -> None:
    """Under over_long_prompt=error (the release's), a chosen train entry whose prompt exceeds
    protocol.max_prompt_tokens stops the run before anything is trained, as the release's does."""
    chosen = sorted(set(train_ids) & set(over_long))
    if protocol.over_long_prompt == "error" and chosen:
        raise UserError(f"{len(chosen)} train entries (e.g. {chosen[0]}) have a prompt over protocol.max_prompt_tokens="
                        f"{protocol.max_prompt_tokens} tokens, which the release refuses; leave them out with "
                        "protocol.over_long_prompt=skip, or raise protocol.max_prompt_tokens")


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _engine_fraction(backbone: Any) -> float | None:
    """The share of the GPU a colocated vLLM engine takes (None: no engine on a GPU)."""
    from seal.policy.generation_vllm import DEFAULT_GPU_MEMORY_UTILIZATION

    if backbone.generation != "vllm" or not _cuda_devices():
        return None
    fraction = backbone.vllm.get("gpu_memory_utilization")
    return DEFAULT_GPU_MEMORY_UTILIZATION if fraction is None else float(fraction)


def out_of_domain_benchmarks(cfg: DictConfig, budget: Budget) -> list[Any]:
    """The benchmarks named in budget.ood_benchmarks (seal.env.benchmarks), instantiated from
    conf/benchmark/<name>.yaml (the run's own `benchmark` group when it is one of them, so its overrides
    apply), each prepared now: a missing search key or encoder stops the run before anything is written."""
    from seal.env.benchmarks import REGISTRY

    allowed = [name for name, cls in REGISTRY.items()
               if not cls.from_split and (CONF_DIR / "benchmark" / f"{name}.yaml").exists()]
    benchmarks = []
    for name in budget.ood_benchmarks:
        if name not in allowed:
            raise UserError(f"budget.ood_benchmarks: {name!r} is not an out-of-domain benchmark; choose among "
                            f"{', '.join(allowed)}")
        node = cfg.benchmark if cfg.benchmark.name == name else OmegaConf.load(CONF_DIR / "benchmark" / f"{name}.yaml")
        benchmark = instantiate(node)
        benchmark.prepare()
        benchmarks.append(benchmark)
    return benchmarks


def evaluate_out_of_domain(engine: Any, benchmarks: list[Any], budget: Budget, out_dir: Path, when: str,
                           dist: Any, step_limit: str) -> dict[str, Any]:
    """{"ood_<when>": {benchmark: metrics}} for the model as it is now (`when`: before | after training),
    shared out over the ranks (the main rank writes the files); results already on disk (a resumed run)
    are read back."""
    from seal.eval.ood import evaluate_benchmark

    if not benchmarks:
        return {}
    results = {}
    for node in benchmarks:
        folder = out_dir / f"ood_{when}" / node.name
        if (folder / "metrics.json").exists():
            results[node.name] = json.loads((folder / "metrics.json").read_text())
            continue
        metrics, _ = evaluate_benchmark(engine, node, folder, budget.ood_entries_per_category, step_limit, dist=dist)
        if dist.main:
            write_json(folder / "metrics.json", metrics)
        results[node.name] = metrics
    return {f"ood_{when}": results}


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
