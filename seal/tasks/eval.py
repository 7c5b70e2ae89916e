"""task=eval: a backbone on a benchmark under the unmodified benchmark interface.

    python run.py task=eval backbone=smollm2-135m split=seal_release budget=smoke
    python run.py task=eval backbone=qwen2.5-7b budget=paper eval_part=test
    python run.py task=eval benchmark=bfcl_v4_memory backbone=qwen2.5-7b budget=paper

BFCL V3 multi-turn (benchmark=bfcl_v3, the default, whose entries are the split's; seal.evaluation.evaluate) or
an out-of-domain benchmark, played category by category (seal.evaluation.out_of_domain). Greedy decoding and the plain
interface; writes `metrics.json`, `trajectories.jsonl` and `report.md` into the run directory. BFCL V3 is
played under both protocols of `eval.protocols`: the release's (`trajectories_release.jsonl`, "comparable
to the paper") and BFCL's ("comparable to the BFCL leaderboard"); out-of-domain benchmarks keep their own
BFCL protocols.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from seal.budget import Budget
from seal.env.benchmarks.bfcl_v3 import category_summary
from seal.env.episode import check_step_limit
from seal.env.splits import PARTS
from seal.errors import UserError
from seal.evaluation.evaluate import RELEASE_SUFFIX, check_protocols, evaluate_entries, select_entries, summary_table
from seal.evaluation.out_of_domain import evaluate_benchmark
from seal.io import markdown_table, write_json

log = logging.getLogger(__name__)


def load_engine(cfg: DictConfig, budget: Budget) -> tuple[Any, Any]:
    """The configured backbone, loaded, and the rollout engine that plays it within `budget`."""
    from seal.policy.rollout import RolloutEngine

    backbone = instantiate(cfg.backbone)
    engine = RolloutEngine.for_backbone(backbone, backbone.load(), budget, tool_rendering=cfg.rendering.tools)
    return backbone, engine


def evaluate(cfg: DictConfig, out_dir: Path) -> None:
    budget = Budget.from_config(cfg.budget)
    gold_user_for_the_oracle(cfg)
    benchmark = instantiate(cfg.benchmark)
    if not benchmark.from_split:
        return evaluate_ood(cfg, benchmark, budget, out_dir)

    if cfg.eval_part not in PARTS:
        raise UserError(f"eval_part={cfg.eval_part!r}: choose one of {', '.join(PARTS)}")
    split = instantiate(cfg.split)
    ids = split.part(cfg.eval_part)
    if not ids:
        raise UserError(
            f"split={split.name} has no {cfg.eval_part!r} part; choose eval_part=test, or carve a "
            "validation part with split.val_scenarios=<n>"
        )
    step_limit = check_step_limit(cfg.eval.step_limit, "eval.step_limit")
    protocols = check_protocols(cfg.eval.protocols)
    backbone, engine = load_engine(cfg, budget)
    entries = select_entries(engine, ids, budget.eval_entries_per_category)
    if not entries:
        raise UserError(f"no entry of split={split.name} part {cfg.eval_part} fits backbone {backbone.name}'s context")
    write_json(out_dir / "leakage.json", split.leakage())
    log.info("evaluating %s on %d entries of %s/%s", backbone.describe(), len(entries), split.name, cfg.eval_part)
    metrics, _ = evaluate_entries(engine, entries, out_dir, progress=f"eval {cfg.eval_part}", step_limit=step_limit,
                                  protocols=protocols)
    metrics.update({"backbone": backbone.describe(), "split": split.name, "part": cfg.eval_part,
                    "ids": [e.id for e in entries]})
    write_json(out_dir / "metrics.json", metrics)
    sections = [protocol_section(out_dir, metrics, name) for name in ("release", "bfcl") if name in protocols]
    write_report(out_dir, f"Evaluation: {backbone.describe()}", backbone,
                 f"Split `{split.name}`, part `{cfg.eval_part}`, budget `{budget.name}` ({len(entries)} entries), greedy "
                 f"decoding, plain benchmark interface, tool format `{engine.format.name}`, tools rendered "
                 f"`{engine.format.tools}`.", "\n".join(sections))
    print("\n\n".join(sections))
    log.info("outputs in %s", out_dir)


def gold_user_for_the_oracle(cfg: DictConfig) -> None:
    """backbone=oracle replays the gold calls: on a benchmark with a user simulator (tau2) and none chosen, its
    user replays the gold too (benchmark.user.script=gold), so `task=eval benchmark=tau2 backbone=oracle` checks
    an install offline."""
    user = cfg.benchmark.get("user")
    if user is None or any(user.get(k) for k in ("url", "backbone", "script")):
        return
    if getattr(instantiate(cfg.backbone), "oracle", False):
        log.info("backbone=oracle: the user is the gold replay's script (benchmark.user.script=gold)")
        user.script = "gold"


# how the report names each protocol's numbers
LABELS = {"release": "comparable to the paper", "bfcl": "comparable to the BFCL leaderboard"}


def protocol_section(out_dir: Path, metrics: dict[str, Any], name: str) -> str:
    """One protocol's part of report.md: its rule, accuracy table, outcomes and timing."""
    import json

    suffix = "" if name == "bfcl" else RELEASE_SUFFIX
    with (out_dir / f"trajectories{suffix}.jsonl").open() as fh:
        records = [json.loads(line) for line in fh]
    described = metrics["protocol"][name]
    t = metrics[f"timing{suffix}"]
    return (
        f"## Protocol `{name}` ({LABELS[name]})\n\n"
        f"Step limit `{described['step_limit']}`: {described['step_rule']}.\n\n"
        f"{summary_table(category_summary([(r['id'], r['valid']) for r in records]))}\n\n"
        f"### Outcomes\n\n{outcomes_table(records)}\n\n"
        f"### Timing\n\n{markdown_table(['seconds', 'episodes/min', 'model tokens/s', 'model tokens', 'context overflows'], [[t['seconds'], t['episodes_per_minute'], t['model_tokens_per_second'], t['model_tokens'], t['context_overflows']]])}\n"
    )


def evaluate_ood(cfg: DictConfig, benchmark: Any, budget: Budget, out_dir: Path) -> None:
    step_limit = check_step_limit(cfg.eval.step_limit, "eval.step_limit")
    benchmark.prepare()
    backbone, engine = load_engine(cfg, budget)
    name = benchmark.name
    log.info("evaluating %s on %s", backbone.describe(), name)
    metrics, records = evaluate_benchmark(engine, benchmark, out_dir, budget.eval_entries_per_category,
                                          step_limit, progress="eval")
    metrics.update({"backbone": backbone.describe(), "benchmark": name,
                    "protocol": {"step_limit": step_limit, "tool_format": engine.format.name, "interface": "plain"}})
    write_json(out_dir / "metrics.json", metrics)
    counts, prereqs = metrics["counts"], metrics["prerequisite_conversations"]
    table = summary_table({
        "by_category": {c: {**n, "accuracy": metrics[f"{benchmark.metric_prefix}/{c}"]} for c, n in counts.items()},
        "passed": sum(n["passed"] for n in counts.values()), "total": sum(n["total"] for n in counts.values()),
        "accuracy_mean": metrics[f"{benchmark.metric_prefix}/avg"],
    })
    write_report(out_dir, f"Evaluation on {name}: {backbone.describe()}", backbone,
                 f"Budget `{budget.name}`, greedy decoding, plain benchmark interface, tool format `{engine.format.name}`"
                 + (f"; task split `{metrics['split']}` ("
                    + ", ".join(f"{c} {n} tasks" for c, n in metrics["split_tasks"].items()) + ")"
                    if "split" in metrics else "")
                 + (f"; {prereqs} memory prerequisite conversations played first." if prereqs else "."),
                 f"{table}\n\n## Outcomes\n\n{outcomes_table(records)}\n")
    print(table)
    log.info("outputs in %s", out_dir)


def outcomes_table(records: list[dict[str, Any]]) -> str:
    """Entries per official verdict (pass or the checker's error type)."""
    return markdown_table(["verdict", "entries"], sorted(Counter(r["error_type"] or "pass" for r in records).items()))


def write_report(out_dir: Path, title: str, backbone: Any, settings: str, body: str) -> None:
    """report.md of an evaluation: title, a note when the policy is the scripted oracle, the settings, the body."""
    oracle = ("\n> **Scripted oracle, not a model**: it replays the gold calls (its benchmark's script where it has "
              "one); a harness self-check and an upper bound.\n" if not getattr(backbone, "trainable", True) else "")
    (out_dir / "report.md").write_text(f"# {title}\n{oracle}\n{settings}\n\n{body}")
