"""`make bench` section: rollout throughput of the embedded SmolLM2-135M on this machine.

    python -m experiments.bench rollout

(a) 8 episodes batched together against the same 8 one at a time, both for a GRPO group (one entry,
8 samples: the prompt is prefilled once and shared) and for 8 different entries; (b) KV cache kept
per episode between steps against re-prefilling the whole sequence at every step. The entries are
those with the fewest prompt tokens, cut to their first turns, with a small max_new_tokens, so the
section runs in a few minutes on 2 cores; the figures are throughput, not accuracy.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"

TURNS = 3
MAX_NEW_TOKENS = 24
EPISODES = 8
# the naive baseline (a fresh play() per episode) is linear in episodes: timed on this many, rates reported
NAIVE_EPISODES = 2


def _short_entries(engine, n: int):
    from seal.env.benchmark import load_benchmark

    entries = sorted(load_benchmark().values(), key=engine.prompt_tokens)
    # the first turns only (a miss_func holdout turn would need its docs; keep plain turns)
    picked = [e for e in entries if not any(t < TURNS for t in e.holdout)][:n]
    return [dataclasses.replace(e, turns=e.turns[:TURNS], gold=e.gold[:TURNS]) for e in picked]


def _timed(engine, entries, separately: bool = False, seed: int = 0):
    """Seconds and model tokens to play `entries` (in one play() call, or one call per entry)."""
    from seal.policy.generation import derive_seed

    start = time.perf_counter()
    batches = [[e] for e in entries] if separately else [entries]
    rollouts = [r for i, batch in enumerate(batches)
                for r in engine.play(batch, temperature=1.0, seeds=[derive_seed(seed, i, j) for j in range(len(batch))])]
    return time.perf_counter() - start, sum(r.num_model_tokens for r in rollouts)


def rollout() -> None:
    """Batched vs one-at-a-time episodes, and per-episode KV cache vs full re-prefill, on SmolLM2-135M."""
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    # On a shared machine, more torch threads than idle cores makes every small matmul wait for a time
    # slice (measured here: 30x slower decoding with 2 threads while another process held one core).
    busy = round(os.getloadavg()[0])
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - busy)))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["backbone=smollm2-135m", "budget=smoke"])
    backbone = instantiate(cfg.backbone)
    policy = backbone.load()

    def engine(batch_size: int, kv_cache: bool = True) -> RolloutEngine:
        budget = Budget.from_config(OmegaConf.merge(cfg.budget, {"max_new_tokens": MAX_NEW_TOKENS, "batch_size": batch_size}))
        eng = RolloutEngine.for_backbone(backbone, policy, budget)
        eng.generator.kv_cache = kv_cache
        return eng

    probe = engine(1)
    distinct = _short_entries(probe, EPISODES)
    group = [distinct[0]] * EPISODES
    prompt = sum(probe.prompt_tokens(e) for e in distinct) / len(distinct)
    print(f"\n## rollout: {backbone.describe()}, {torch.get_num_threads()} CPU threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{EPISODES} episodes, first {TURNS} turns of the shortest entries (mean prompt {prompt:.0f} tokens), "
          f"max_new_tokens {MAX_NEW_TOKENS}, temperature 1.0")
    engine(EPISODES).play(distinct[:1], temperature=0.0)  # warm-up

    print(f"\n(a) {'episodes':33} {'mode':32} {'episodes':>8} {'seconds':>8} {'model tok/s':>12} {'episodes/min':>13} {'speed-up':>9}")
    for label, entries in [("GRPO group (1 entry x 8 samples)", group), ("8 different entries", distinct)]:
        rows = [
            ("one at a time, separate plays", entries[:NAIVE_EPISODES], _timed(engine(1), entries[:NAIVE_EPISODES], separately=True)),
            ("one at a time, one play", entries, _timed(engine(1), entries)),
            (f"batched x{EPISODES}, one play", entries, _timed(engine(EPISODES), entries)),
        ]
        base = NAIVE_EPISODES / rows[0][2][0]
        for mode, played, (s, tok) in rows:
            print(f"    {label:33} {mode:32} {len(played):8} {s:8.1f} {tok / s:12.1f} {60 * len(played) / s:13.2f} "
                  f"{len(played) / s / base:8.2f}x")
    print("    (speed-up = episodes/min over the first row; one play shares the system prompt's KV cache between")
    print("     its episodes, separate plays prefill it every time; the naive row is timed on its first episodes)")

    entries = distinct[:2]
    cached_s, cached_tok = _timed(engine(2), entries)
    full_s, full_tok = _timed(engine(2, kv_cache=False), entries)
    print(f"\n(b) {'2 episodes batched':34} {'mode':14} {'seconds':>8} {'model tok/s':>12}")
    print(f"    {'':34} {'KV cached':14} {cached_s:8.1f} {cached_tok / cached_s:12.1f}")
    print(f"    {'':34} {'re-prefill':14} {full_s:8.1f} {full_tok / full_s:12.1f}")
    print(f"    KV cache speed-up per episode: {full_s / cached_s:.2f}x")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"(other processes on this machine slow every figure)")
