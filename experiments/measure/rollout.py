"""`make bench` sections: rollout throughput on this machine.

    python -m experiments.bench throughput                          # the embedded SmolLM2-135M
    python -m experiments.bench throughput backbone=tiny-random     # any backbone (Hydra-style overrides)
    python -m experiments.bench rollout

throughput: aggregate new tokens per second of the transformers backend at 1, 8 and 64 concurrent episodes,
each a distinct entry's prompt continued by one message of a fixed length (no stop sequence), on CUDA when
there is one. Without CUDA each prompt is cut to its last PROMPT_TOKENS_CPU tokens (64 full prompts of about
2,400 tokens would take minutes to prefill on 2 cores), and the message is shorter. The same measurement
runs in the GPU preflight (experiments.gpu_check) at 64 episodes.

rollout:

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

from seal.interface.view import PLAIN

CONF = Path(__file__).resolve().parents[2] / "conf"

TURNS = 3
MAX_NEW_TOKENS = 24
EPISODES = 8
# the naive baseline (a fresh play() per episode) is linear in episodes: timed on this many, rates reported
NAIVE_EPISODES = 2


def _short_entries(engine, n: int):
    from seal.env.benchmarks.bfcl_v3 import load_benchmark

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


# concurrent episodes the throughput section compares
CONCURRENCY = (1, 8, 64)
# new tokens per episode, and the prompt's cut without CUDA: an episode prefills its prompt once, then
# mostly decodes (each later step prefills only the environment's reply), so the CPU figures keep that ratio
NEW_TOKENS = {"cuda": 256, "cpu": 128}
PROMPT_TOKENS_CPU = 256


def _threads() -> None:
    """On a shared machine, more torch threads than idle cores makes every small matmul wait for a time
    slice (measured here: 30x slower decoding with 2 threads while another process held one core)."""
    import torch

    busy = round(os.getloadavg()[0])
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - busy)))


def _load(overrides: list[str] | tuple[str, ...]):
    """The configured backbone (default the embedded SmolLM2-135M) and its policy."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["backbone=smollm2-135m", "budget=smoke", *overrides])
    backbone = instantiate(cfg.backbone)
    return cfg, backbone, backbone.load()


def distinct_requests(engine, n: int, new_tokens: int, prompt_tokens: int | None = None):
    """One request per distinct entry (the n with the shortest prompts), its whole rendered prompt or its
    last `prompt_tokens` ids (the tails differ: they hold each entry's own user turn)."""
    from seal.env.benchmarks.bfcl_v3 import load_benchmark
    from seal.policy.generation import GenerationRequest, derive_seed
    from seal.env.episode import TurnStart

    entries = sorted(load_benchmark().values(), key=engine.prompt_tokens)[:n]
    requests = []
    for i, entry in enumerate(entries):
        _, ids, system_len = engine._prompt(entry, PLAIN, TurnStart.of(entry, 0))
        if prompt_tokens is not None:
            ids, system_len = ids[-prompt_tokens:], 0
        requests.append(GenerationRequest(key=i, ids=ids, seed=derive_seed(0, i), max_new_tokens=new_tokens,
                                          shared_prefix=system_len))
    return requests


def measure_throughput(engine, requests) -> dict:
    """One message for every request at once through the engine's generator (temperature 1, no stop, so
    every episode samples exactly its max_new_tokens): seconds, prefill and decode split, new tokens/s."""
    import torch

    generator = engine.generator
    device = generator.device
    generator.begin()
    try:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        outs = generator.generate(requests, temperature=1.0, stops=[])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
    finally:
        generator.end()
    new = sum(len(o.ids) for o in outs)
    decode = generator.stats["decode_s"]
    return {"episodes": len(requests), "prompt_tokens": sum(len(r.ids) for r in requests), "new_tokens": new,
            "seconds": seconds, "prefill_s": seconds - decode, "decode_s": decode, "tokens_per_s": new / seconds,
            "decode_tokens_per_s": new / decode if decode else float("nan"), "chunks": generator.stats["chunks"],
            "device": str(device)}


def throughput_rows(engine, concurrency=CONCURRENCY, new_tokens: int | None = None,
                    prompt_tokens: int | None = None) -> list[dict]:
    """measure_throughput at each concurrency, after a short warm-up (kernels, allocator)."""
    import torch

    kind = "cuda" if engine.generator.device.type == "cuda" else "cpu"
    new_tokens = new_tokens or NEW_TOKENS[kind]
    if prompt_tokens is None and kind == "cpu":
        prompt_tokens = PROMPT_TOKENS_CPU
    requests = distinct_requests(engine, max(concurrency), new_tokens, prompt_tokens)
    measure_throughput(engine, [dataclasses.replace(requests[0], max_new_tokens=4)])
    rows = []
    for n in concurrency:
        rows.append(measure_throughput(engine, requests[:n]))
        if kind == "cuda":
            rows[-1]["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return rows


def print_throughput(rows: list[dict]) -> None:
    base = rows[0]["tokens_per_s"]
    print(f"{'episodes':>8} {'prompt tok':>10} {'new tok':>8} {'seconds':>8} {'prefill s':>9} {'decode s':>9} "
          f"{'new tok/s':>10} {'decode tok/s':>12} {'per episode':>11} {'vs 1':>6}")
    for r in rows:
        print(f"{r['episodes']:8} {r['prompt_tokens']:10} {r['new_tokens']:8} {r['seconds']:8.1f} {r['prefill_s']:9.1f} "
              f"{r['decode_s']:9.1f} {r['tokens_per_s']:10.1f} {r['decode_tokens_per_s']:12.1f} "
              f"{r['tokens_per_s'] / r['episodes']:11.1f} {r['tokens_per_s'] / base:5.2f}x")


def throughput(overrides: list[str] | tuple[str, ...] = ()) -> None:
    """Aggregate new tokens/s at 1, 8 and 64 concurrent episodes of distinct entries."""
    import torch

    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    _threads()
    cfg, backbone, policy = _load(overrides)
    engine = RolloutEngine.for_backbone(backbone, policy, Budget.from_config(cfg.budget))
    if engine.generator is None or not hasattr(engine.generator, "kv_bytes_per_token"):
        raise SystemExit("the throughput section measures the transformers backend: choose a backbone with "
                         "generation=transformers")
    load = os.getloadavg()
    rows = throughput_rows(engine)
    where = torch.cuda.get_device_name() if rows[0]["device"].startswith("cuda") else \
        f"CPU, {torch.get_num_threads()} torch threads, load average {load[0]:.1f} at the start"
    print(f"\n## throughput: {backbone.describe()}, {engine.generator.dtype}, {where}")
    print(f"distinct entries (the shortest prompts), one message of {rows[0]['new_tokens']} new tokens each, "
          "temperature 1, no stop")
    print_throughput(rows)
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


def rollout(overrides: list[str] | tuple[str, ...] = ()) -> None:
    """Batched vs one-at-a-time episodes, and per-episode KV cache vs full re-prefill, on SmolLM2-135M."""
    import torch
    from omegaconf import OmegaConf

    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    _threads()
    cfg, backbone, policy = _load(overrides)

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
