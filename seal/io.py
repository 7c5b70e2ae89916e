"""The bottom layer: run files and the run directory's identity. Imports nothing of the project.

- `write_json` (atomic) and `markdown_table`: every report, metrics file and table goes through them;
- `read_json`, `read_json_object` and `read_jsonl`: a file a run wrote, read back; a damaged one is named in one
  sentence;
- `config_fingerprint` and `code_version`: what a run directory records to resume only the same run;
- `folder_name`: a run's or a sweep's folder, from the overrides of its command line;
- `short_hash`: short stable ids (W&B run ids, cache keys).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import subprocess
from pathlib import Path
from typing import Any

# the config groups (conf/), found from the package, whatever the working directory
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
FINGERPRINT_FILE = "fingerprint.txt"
# config keys (under trainer and budget) that say how often a run saves, not what it computes
CHECKPOINT_CADENCE = ("save_every", "keep_checkpoints")
# the folder of a command line that changes nothing: the default run sits beside the others, not above them
DEFAULT_FOLDER = "defaults"
# file systems take 255 bytes a name; a longer name keeps its start and ends in a hash of the whole
MAX_FOLDER_NAME = 200


class DamagedFile(ValueError):
    """A file a run wrote that cannot be read back (truncated, torn or not JSON). Its message is one sentence
    naming the file and what is wrong with it; seal.tasks reports it as a user's error."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it in a notebook: the sentence alone."""
        return [f"error: {self}"]


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The JSON in `path`; DamagedFile naming it when it is not JSON (a run stopped while a tool wrote it,
    a copy cut short). A missing file raises FileNotFoundError, as open() does."""
    path = Path(path)
    text = path.read_text(errors="replace")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DamagedFile(f"{path} is damaged: {_what_is_wrong(exc, text)}") from None


# what a JSON value is, in a sentence naming a damaged file
JSON_KINDS = {type(None): "null", bool: "true/false", int: "a number", float: "a number", str: "a string",
              list: "a list", dict: "an object"}


def read_json_object(path: Path) -> dict[str, Any]:
    """read_json of a file a run writes as one object (metrics.json, run_config.json); DamagedFile naming it when
    it holds anything else."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise DamagedFile(f"{path} is damaged: it holds {JSON_KINDS[type(data)]} where a run writes an object")
    return data


def read_jsonl(path: Path) -> list[Any]:
    """One JSON value per non-empty line of `path`; DamagedFile naming the file and the first bad line."""
    path = Path(path)
    values = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except ValueError as exc:
            raise DamagedFile(f"{path} is damaged at line {number}: {_what_is_wrong(exc, line)}") from None
    return values


def _what_is_wrong(exc: ValueError, text: str) -> str:
    """What a JSON parser's error means for a file a run wrote, in a few words."""
    if not text.strip():
        return "it is empty"
    # the text ran out inside a value: at its last character (a number cut after its point), or inside a string
    # that never closes; "extra data" is a whole value followed by more
    if isinstance(exc, json.JSONDecodeError) and not exc.msg.startswith("Extra data") and (
            exc.pos >= len(text.rstrip()) - 1 or exc.msg.startswith("Unterminated")):
        return f"it ends in the middle of a value after {len(text.encode())} bytes (cut short while it was written?)"
    if isinstance(exc, json.JSONDecodeError):
        return f"it is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    return f"it is not JSON ({exc})"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def short_hash(text: str, length: int = 12) -> str:
    """The first `length` hex digits of the text's SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def folder_name(override_dirname: str, sort: bool = True) -> str:
    """The folder of a run or of a sweep, from Hydra's `override_dirname` (its overrides as typed, sorted,
    joined by commas; conf/config.yaml's `seal.folder` resolver): `defaults` when the command line has none;
    a sweep's values in one order whatever the order typed (`seed=1,0` is `seed=0,1`: the same jobs, so the
    same folder); and a name over MAX_FOLDER_NAME bytes cut, ending in a hash of the whole, so that it stays
    one name a file system takes and the same command still finds it. `sort=False`: the values as typed, as a
    sweep's folder was named before 2026-12-03."""
    if not override_dirname:
        return DEFAULT_FOLDER
    name = _values_sorted(override_dirname) if sort else override_dirname
    raw = name.encode()
    if len(raw) <= MAX_FOLDER_NAME:
        return name
    return raw[: MAX_FOLDER_NAME - 17].decode(errors="ignore") + "-" + short_hash(name, 16)


# where an override of Hydra's override_dirname starts: `key=`, `+key=`, `++key=`, `~key=` or a bare `~key`
_OVERRIDE_START = re.compile(r"(\+\+|\+)?[\w.@/-]+=|~[\w.@/-]+(=|$)")


def _values_sorted(override_dirname: str) -> str:
    """`override_dirname` with each key's sweep values sorted (numbers by value). A comma inside brackets,
    parentheses or quotes belongs to its value (`[a,b]`, `range(0,3)`), which is sorted whole, and so does an
    escaped one (`a\\,b`); text this does not read as Hydra does (an unclosed bracket or quote) is left as typed."""
    items: list[str] = []
    depth, quote, start, escaped = 0, "", 0, False
    for at, char in enumerate(override_dirname):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return override_dirname
        elif char == "," and depth == 0:
            items.append(override_dirname[start:at])
            start = at + 1
    if depth or quote or escaped:
        return override_dirname
    items.append(override_dirname[start:])
    groups: list[list[str]] = []
    for item in items:
        if _OVERRIDE_START.match(item) or not groups:
            key, equals, value = item.partition("=")
            groups.append([key + equals, value] if equals else [item])
        else:
            groups[-1].append(item)

    def order(value: str) -> tuple:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        return (0, number, value) if math.isfinite(number) else (1, 0.0, value)

    return ",".join(head + ",".join(sorted(values, key=order)) for head, *values in groups)


def config_fingerprint(cfg: Any) -> str:
    """Hash of everything in a (Hydra) config that changes a training run's results: not the logger, not
    the `benchmark` group (read by task=eval only, whose run directory names it), not how the launch
    spreads the run over its ranks (`launch`: the rounds are the same on any number of ranks), and not the
    checkpoint cadence (a run short of disk resumes with fewer or rarer checkpoints)."""
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(cfg, resolve=True)
    for key in ("logger", "benchmark", "launch"):
        resolved.pop(key, None)
    for group in ("trainer", "budget"):
        for key in CHECKPOINT_CADENCE:
            (resolved.get(group) or {}).pop(key, None)
    return short_hash(json.dumps(resolved, sort_keys=True, default=str), 16)


def fingerprint_matches(out_dir: Path, fingerprint: str) -> bool:
    """False when `out_dir` already holds a run of another configuration."""
    marker = out_dir / FINGERPRINT_FILE
    return not marker.exists() or marker.read_text().strip() == fingerprint


def claim_run_dir(out_dir: Path, fingerprint: str) -> None:
    """Mark the directory as this configuration's."""
    (out_dir / FINGERPRINT_FILE).write_text(fingerprint + "\n")


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def code_version() -> str:
    """The checkout's commit, `+dirty` with uncommitted changes; "unknown" outside git."""
    try:
        repo = Path(__file__).resolve().parents[1]
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
        return sha.strip() + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def rng_state(rng: random.Random) -> list[Any]:
    """A `random.Random`'s state as JSON-ready lists (checkpoints store it in seal_state.json)."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def restore_rng(rng: random.Random, state: list[Any]) -> None:
    """Set `rng` to a state written by `rng_state` (JSON turned its tuple into a list)."""
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))
