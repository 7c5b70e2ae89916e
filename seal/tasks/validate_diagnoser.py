"""task=validate_diagnoser: both label layers of a diagnoser against failures injected into gold trajectories.

    python run.py task=validate_diagnoser                  # the rule diagnoser (seal.diagnosis.validate)
    python run.py task=validate_diagnoser diagnoser=random # a control

Writes `diagnoser_validation.json` and `report.md` (per label precision/recall/F1, confusion matrices).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from seal.diagnosis import labels as L
from seal.diagnosis.injections import Case
from seal.diagnosis.validate import AMBIGUITY_NOTES, build_cases, layer_result, layer_value, write_report
from seal.env.benchmarks.bfcl_v3 import CATEGORIES
from seal.io import write_json

log = logging.getLogger(__name__)


def validate_diagnoser(cfg, out_dir: Path) -> dict[str, Any]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    diagnoser = instantiate(cfg.diagnoser)
    seed = int(cfg.get("seed", 0) or 0)
    rejected: list[Case] = []
    cases, tally = build_cases(seed, rejected=rejected)
    predicted_all = diagnoser.label_round([(c.entry, c.verdict, c.steps) for c in cases + rejected])
    unconfirmed: dict[str, Counter] = defaultdict(Counter)
    for case, labels in zip(rejected, predicted_all[len(cases):]):
        got = labels[case.target]
        unconfirmed[case.recipe][f"{got.outcome} / {layer_value(got, 'cause')}"] += 1
    unconfirmed_counts = {name: dict(c.most_common()) for name, c in unconfirmed.items()}
    predicted_all = predicted_all[: len(cases)]
    truth: dict[str, list[str]] = {layer: [] for layer in L.LAYERS}
    predicted: dict[str, list[str]] = {layer: [] for layer in L.LAYERS}
    categories: Counter = Counter()
    for case, labels in zip(cases, predicted_all):
        for turn, label in [(case.target, case.label)] + case.extra:
            for layer in L.LAYERS:
                truth[layer].append(layer_value(label, layer))
                predicted[layer].append(layer_value(labels[turn], layer))
            categories[case.entry.category] += 1
    result: dict[str, Any] = {x: layer_result(truth[x], predicted[x], x) for x in L.LAYERS}
    result.update(
        diagnoser=diagnoser.name,
        seed=seed,
        num_cases=len(truth["outcome"]),
        by_category={c: categories[c] for c in CATEGORIES},
        recipes={name: dict(c) for name, c in tally.items()},
        unconfirmed_injections=unconfirmed_counts,
        ambiguous=AMBIGUITY_NOTES,
    )
    result["goal_met"] = all(result[layer]["goal_met"] for layer in L.LAYERS)
    write_json(out_dir / "diagnoser_validation.json", result)
    table = write_report(out_dir, diagnoser.name, result, tally, unconfirmed_counts)
    print(table)
    print(f"outcome macro-F1 {result['outcome']['macro_f1']:.4f}, "
          f"cause macro-F1 {result['cause']['macro_f1']:.4f} "
          f"over {result['num_cases']} scored turns; outputs in {out_dir}")
    log.info("diagnoser %s: outcome macro-F1 %.4f (min recall %.4f), cause macro-F1 %.4f (min recall %.4f)",
             diagnoser.name, result["outcome"]["macro_f1"], result["outcome"]["min_recall"],
             result["cause"]["macro_f1"], result["cause"]["min_recall"])
    return result
