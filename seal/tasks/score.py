"""task=score: official verdicts and per-turn labels for decoded trajectories (no model).

    python run.py task=score input=trajectories.jsonl

Reads JSON Lines, one {"id": ..., "result": [[[call, ...], ...], ...]} per line, and writes one line per
input line to verdicts.jsonl: the official verdict (id, valid, error_type) and `turn_labels`, one
{"outcome", "cause"} per turn of the entry (seal.diagnosis); `summary.json` per category.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from omegaconf import DictConfig

from seal.env.benchmarks.bfcl_v3 import category_summary, load_benchmark
from seal.env.verifier import verify
from seal.errors import UserError
from seal.evaluation.evaluate import summary_table
from seal.io import write_json

log = logging.getLogger(__name__)
MALFORMED = "seal:malformed_input"


def _read_trajectory(line_no: int, raw: bytes) -> tuple[str, list]:
    """Validate one input line; raise ValueError naming what is wrong with it."""
    try:
        item = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {line_no}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(item, dict) or "id" not in item or "result" not in item:
        raise ValueError(f"line {line_no}: expected an object with keys 'id' and 'result'")
    entry_id, result = item["id"], item["result"]
    if not isinstance(entry_id, str) or entry_id not in load_benchmark():
        raise ValueError(f"line {line_no}: {entry_id!r} is not a BFCL V3 multi-turn id")
    ok = isinstance(result, list) and all(
        isinstance(turn, list)
        and all(isinstance(step, list) and all(isinstance(c, str) for c in step) for step in turn)
        for turn in result
    )
    if not ok:
        raise ValueError(f"line {line_no}: 'result' must be a list (turns) of lists (steps) of call strings")
    return entry_id, result


def _entry_id_of(raw: bytes) -> str | None:
    """The benchmark id a malformed line names, when it names one."""
    try:
        item = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    entry_id = item.get("id") if isinstance(item, dict) else None
    return entry_id if isinstance(entry_id, str) and entry_id in load_benchmark() else None


def score(cfg: DictConfig, out_dir: Path) -> None:
    """Official verdict and the (outcome, cause) of every turn, per line of a JSON Lines file."""
    from seal.diagnosis import TurnLabel, diagnose_result
    from seal.diagnosis.labels import CHECKER_ERROR

    if not cfg.get("input"):
        raise UserError("task=score needs an input file: add input=path/to/trajectories.jsonl")
    path = Path(cfg.input).expanduser()
    if not path.is_absolute():
        from hydra.utils import get_original_cwd

        path = Path(get_original_cwd()) / path
    if not path.is_file():
        raise UserError(f"input file {path} does not exist; pass input=<path to a JSON Lines file>")
    bench = load_benchmark()
    verdicts, results, problems = [], [], []
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                entry_id, trajectory = _read_trajectory(line_no, raw)
            except ValueError as exc:
                problems.append(str(exc))
                # a line the checker cannot read: checker_error on every turn of the entry it names
                named = _entry_id_of(raw)
                turns = bench[named].num_turns if named else 0
                unread = [TurnLabel(CHECKER_ERROR, CHECKER_ERROR).to_dict()] * turns
                verdicts.append({"id": named, "valid": False, "error_type": MALFORMED, "error": str(exc),
                                 "turn_labels": unread})
                continue
            verdict = verify(bench[entry_id], trajectory)
            labels = diagnose_result(bench[entry_id], trajectory, verdict)
            verdicts.append({**verdict.summary(), "turn_labels": [t.to_dict() for t in labels]})
            results.append((entry_id, verdict.valid))
    with (out_dir / "verdicts.jsonl").open("w") as fh:
        for v in verdicts:
            fh.write(json.dumps(v) + "\n")
    summary = category_summary(results)
    summary["malformed_lines"] = len(problems)
    write_json(out_dir / "summary.json", summary)
    print(summary_table(summary))
    for problem in problems:
        log.error("skipped malformed input, %s", problem)
    log.info("scored %d trajectories (%d malformed lines); outputs in %s", len(results), len(problems), out_dir)
