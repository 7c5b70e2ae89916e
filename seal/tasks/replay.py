"""task=replay: every gold trajectory of the split through the episode protocol and the verifier (no model).

    python run.py task=replay split=all        # 800/800, or an error naming the first entry that fails

Writes `summary.json` (per category) and `leakage.json`; exits non-zero unless every entry passes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig

from seal.env.benchmarks.bfcl_v3 import category_summary, get_entries
from seal.env.calls import parse_call
from seal.env.episode import Episode
from seal.errors import UserError
from seal.evaluation.evaluate import summary_table
from seal.io import write_json

log = logging.getLogger(__name__)


def replay_gold(entry_ids: list[str]) -> list[tuple[str, bool, str | None]]:
    """Play each entry's gold calls through the episode protocol and the verifier."""
    out = []
    for entry in get_entries(entry_ids):
        episode = Episode(entry)
        while (turn := episode.next_turn()) is not None:
            calls = [parse_call(text) for text in entry.gold[turn.index]]
            if calls:
                episode.step(calls, raw="gold")
            episode.step([], raw="")
        verdict = episode.verdict()
        out.append((entry.id, verdict.valid, verdict.error_type))
    return out


def replay(cfg: DictConfig, out_dir: Path) -> None:
    split = instantiate(cfg.split)
    results = replay_gold(split.all_ids())
    summary = category_summary([(i, v) for i, v, _ in results])
    write_json(out_dir / "summary.json", summary)
    write_json(out_dir / "leakage.json", split.leakage())
    print(summary_table(summary))
    failed = [(i, e) for i, v, e in results if not v]
    if failed:
        raise UserError(
            f"gold replay failed on {len(failed)} of {len(results)} entries (first: {failed[0][0]}, "
            f"{failed[0][1]}); the environment or verifier disagrees with the benchmark"
        )
    log.info("gold replay: %d/%d passed; outputs in %s", summary["passed"], summary["total"], out_dir)
