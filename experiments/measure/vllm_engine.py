"""`make bench` section: vLLM against the transformers engine on the same SmolLM2-135M episodes.

    python -m experiments.bench vllm

Both play the same whole episodes (the entries and turn cut of the rollout section) through the one
episode protocol of seal.policy.rollout; only "continue these token sequences" differs: the
transformers engine's batched decoding with per-episode KV caches, or seal.policy.generation_vllm
(prefix caching, one request per episode per step).
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf"

EPISODES = 8
MAX_NEW_TOKENS = 24
# vLLM's KV cache on the CPU (GiB): 8 episodes of a few thousand tokens need far less
KV_CACHE_GIB = 1.0


def vllm() -> None:
    """Tokens/s and episodes/minute of the vLLM backend against the transformers engine."""
    import psutil
    import torch
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from experiments.measure.rollout import TURNS, _short_entries
    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    try:
        from seal.policy.generation_vllm import VLLMGenerator, VLLMMemory, _import_vllm

        _import_vllm()
    except Exception as exc:  # noqa: BLE001 - the section reports and moves on
        print(f"\n## vllm: skipped ({exc})")
        return

    busy = round(os.getloadavg()[0])
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) - busy)))
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["backbone=smollm2-135m", "budget=smoke"])
    backbone = instantiate(cfg.backbone)
    policy = backbone.load()
    budget = Budget.from_config(OmegaConf.merge(cfg.budget, {"max_new_tokens": MAX_NEW_TOKENS, "batch_size": EPISODES}))
    hf_engine = RolloutEngine.for_backbone(backbone, policy, budget)
    distinct = _short_entries(hf_engine, EPISODES)
    group = [distinct[0]] * EPISODES

    t0 = time.perf_counter()
    generator = VLLMGenerator(
        backbone.model_path(), dtype=backbone.dtype, context_length=backbone.context_length, seed=0,
        memory=VLLMMemory(kv_cache_gib=KV_CACHE_GIB), enforce_eager=True,
    )
    load_s = time.perf_counter() - t0
    loaded_gib = psutil.Process().memory_info().rss / 2**30
    vllm_engine = RolloutEngine(policy, hf_engine.format, context_length=backbone.context_length,
                                max_new_tokens=MAX_NEW_TOKENS, batch_size=EPISODES, generator=generator)

    prompt = sum(hf_engine.prompt_tokens(e) for e in distinct) / len(distinct)
    print(f"\n## vllm: {backbone.describe()}, {torch.get_num_threads()} torch threads, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{EPISODES} episodes, first {TURNS} turns of the shortest entries (mean prompt {prompt:.0f} "
          f"tokens), max_new_tokens {MAX_NEW_TOKENS}; vLLM engine (eager, KV cache {KV_CACHE_GIB:g} GiB) "
          f"loaded in {load_s:.1f} s")
    for eng in (hf_engine, vllm_engine):  # warm-up: imports, first allocations
        eng.play(distinct[:1], temperature=0.0)

    print(f"\n{'episodes':33} {'temperature':>11} {'backend':>13} {'seconds':>8} {'model tok/s':>12} "
          f"{'episodes/min':>13} {'vLLM / HF':>10}")
    for label, entries, temperature in [
        ("GRPO group (1 entry x 8 samples)", group, 1.0),
        ("8 different entries", distinct, 1.0),
        ("8 different entries", distinct, 0.0),
    ]:
        rates = {}
        for name, eng in [("transformers", hf_engine), ("vllm", vllm_engine)]:
            # what earlier plays left in vLLM's prefix cache would be a head start the other engine lacks
            # (both share prefixes within a play only)
            generator.llm.reset_prefix_cache()
            start = time.perf_counter()
            rollouts = eng.play(entries, temperature=temperature)
            seconds = time.perf_counter() - start
            tokens = sum(r.num_model_tokens for r in rollouts)
            rates[name] = tokens / seconds
            ratio = f"{rates['vllm'] / rates['transformers']:9.2f}x" if name == "vllm" else ""
            print(f"{label:33} {temperature:11.1f} {name:>13} {seconds:8.1f} {tokens / seconds:12.1f} "
                  f"{60 * len(entries) / seconds:13.2f} {ratio:>10}")
    reload_from_disk_or_memory(generator, policy.model)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(f"resident memory with both models and vLLM's KV cache loaded: {loaded_gib:.2f} GiB; peak of this "
          f"process (both engines' plays): {peak:.2f} GiB")
    print(f"load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
          "(other processes on this machine slow every figure)")
    generator.close()


def reload_from_disk_or_memory(generator, model, repeats: int = 3) -> None:
    """What a play before training costs on top of its generation once a level-2 sleep discarded the engine's
    weights: reading the checkpoint from disk again (vLLM's reload_weights from its model path, what the engine
    did before training until seal attached the loaded model), or taking the loaded model's weights from memory
    (seal.tasks.train.generate_with_the_loaded_model; on a GPU under fsdp2 the fp32 masters in host memory)."""
    timings = {}
    for name, source in (("the checkpoint from disk", None), ("the loaded model in memory", model)):
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            generator._load(source)
            seconds.append(time.perf_counter() - start)
        timings[name] = min(seconds)
    size = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    print(f"\nweights into the engine before training (best of {repeats}; {size:.0f} MiB of fp32 weights, the "
          "checkpoint file in the page cache):")
    for name, seconds in timings.items():
        print(f"  {name:28} {seconds:7.2f} s")
