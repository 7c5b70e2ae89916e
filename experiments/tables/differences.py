"""The differences the paper did not make: seal minus vanilla_rl and minus each ablation, per backbone and
protocol, paired by seed and test entry, with a paired bootstrap over seeds crossed with entries. Every seed
either arm has (or the manifest expects) is used or named in the row's notes."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from experiments.tables.columns import ABLATIONS, HEADLINE, HEADLINE_LABEL, MODELS, PROTOCOLS
from seal.io import read_jsonl

# -- differences: paired by seed and entry -----------------------------------------------------------------

def entry_rewards(run: dict, model: str, protocol: str) -> dict[str, float] | None:
    """Per test entry, 1.0 if the model's trajectory passed, else 0.0; None when the file is absent."""
    folder = run["folders"].get(model)
    if folder is None:
        return None
    path = Path(run["dir"]) / folder / PROTOCOLS[protocol][1]
    if not path.exists():
        return None
    return {t["id"]: float(bool(t["valid"])) for t in read_jsonl(path)}


def bootstrap_replicates(d, *, n: int, seed: int = 0):
    """The n bootstrap means of the seeds x entries matrix of paired differences `d`. One replicate draws
    len(seeds) seed rows and len(entries) entry columns, each uniformly with replacement, and averages
    d over that grid: the same entry resample is applied to every drawn seed (entries crossed with
    seeds, not resampled afresh within each seed). numpy's default_rng(seed) draws every replicate's
    seed rows first (an n x seeds integers call), then every replicate's entry columns (n x entries)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, d.shape[0], size=(n, d.shape[0]))
    cols = rng.integers(0, d.shape[1], size=(n, d.shape[1]))
    return np.array([d[r][:, c].mean() for r, c in zip(rows, cols)])


def paired_bootstrap(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], *, n: int = 10000,
                     seed: int = 0) -> dict | None:
    """Arm a minus arm b (accuracy points) over the seeds both have and the entries every one of those
    runs has, each seed's entry paired with the same seed's entry; replicates from bootstrap_replicates.
    The interval is the 2.5/97.5 percentile of the replicates (numpy's linear interpolation), the p-value
    2 min(P(d* <= 0), P(d* >= 0)) capped at 1."""
    import numpy as np

    seeds = sorted(set(a) & set(b))
    ids = sorted(set.intersection(*(set(a[s]) & set(b[s]) for s in seeds))) if seeds else []
    if not ids:
        return None
    d = np.array([[a[s][i] - b[s][i] for i in ids] for s in seeds]) * 100.0
    reps = bootstrap_replicates(d, n=n, seed=seed)
    low, high = np.percentile(reps, [2.5, 97.5])
    p = min(1.0, 2 * min(float((reps <= 0).mean()), float((reps >= 0).mean())))
    return {"diff": float(d.mean()), "ci_low": float(low), "ci_high": float(high), "p": p,
            "seeds": len(seeds), "entries": len(ids)}


def differences(runs: list[dict], problems: list[dict] | None = None, *, model: str = HEADLINE,
                n: int = 10000) -> list[dict]:
    """seal minus vanilla_rl and seal minus each ablation, per backbone and protocol. Every seed either arm
    has (or the manifest expects) is used or named in the row's notes with why it was dropped."""
    by_arm: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for run in runs:
        by_arm[(run["backbone"], run["experiment"])][run["seed"]] = run
    absent: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    for problem in problems or []:
        if "backbone" in problem and problem["kind"] != "unlisted":
            absent[(problem["backbone"], problem["experiment"])].setdefault(problem["seed"], problem["state"])
    arms = set(by_arm) | set(absent)
    rows = []
    for backbone in sorted({b for b, _ in arms}):
        for other in ("vanilla_rl", *ABLATIONS):
            if (backbone, "seal") not in arms or (backbone, other) not in arms:
                continue
            for protocol in PROTOCOLS:
                rows.append(_difference(backbone, ("seal", other), protocol, model, by_arm, absent, n))
    return rows


def _difference(backbone, pair, protocol, model, by_arm, absent, n) -> dict:
    sides, notes = ({}, {}), []
    seeds = sorted(set().union(*(set(by_arm[(backbone, arm)]) | set(absent[(backbone, arm)]) for arm in pair)))
    label = HEADLINE_LABEL if model == HEADLINE else MODELS[model][0]
    for seed in seeds:
        for arm, rewards in zip(pair, sides):
            run = by_arm[(backbone, arm)].get(seed)
            found = entry_rewards(run, model, protocol) if run else None
            if found is not None:
                rewards[seed] = found
            elif run is None:
                notes.append(f"seed {seed} dropped: {arm} run {absent[(backbone, arm)].get(seed, 'absent')}")
            else:
                notes.append(f"seed {seed} dropped: {arm} run {run['name']} has no "
                             f"{MODELS[run['headline'] if model == HEADLINE else model][0]} {PROTOCOLS[protocol][1]}")
        both = [by_arm[(backbone, arm)][seed] for arm in pair if seed in sides[pair.index(arm)]]
        if model == HEADLINE and len(both) == 2 and both[0]["headline"] != both[1]["headline"]:
            notes.append(f"seed {seed} pairs {pair[0]}'s {MODELS[both[0]['headline']][0]} with {pair[1]}'s "
                         f"{MODELS[both[1]['headline']][0]}")
    result = paired_bootstrap(*sides, n=n)
    if result is None:
        notes.append("no seed with trajectories of both arms")
    else:
        notes += _short_runs({by_arm[(backbone, arm)][seed]["name"]: set(side[seed]) for arm, side in zip(pair, sides)
                              for seed in sorted(set(sides[0]) & set(sides[1]))})
    return {"backbone": backbone, "comparison": f"{pair[0]} - {pair[1]}", "protocol": protocol,
            "model": label, "notes": "; ".join(dict.fromkeys(notes)), **(result or {})}


def _short_runs(entries: dict[str, set]) -> list[str]:
    """The note on the entries a paired comparison leaves out (those not in every paired run), naming each run
    that lacks some and how many it has of all the runs' entries."""
    common, every = set.intersection(*entries.values()), set().union(*entries.values())
    if len(every) == len(common):
        return []
    short = [f"{name} has {len(found)} of {len(every)}" for name, found in entries.items() if len(found) < len(every)]
    return [f"{len(every) - len(common)} entries not in every paired run left out ({'; '.join(short)})"]

