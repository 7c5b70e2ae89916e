"""`make bench` section memory: what the paper backbones need at the paper budget, from their configs.

No weights are loaded: the architectures are in conf/backbone/*.yaml (from the models' published
config.json), the batch sizes in conf/budget/paper.yaml. Prompt lengths are those of the 400 train
entries rendered under the plain interface and tokenised with the embedded SmolLM2 tokenizer: a proxy
(Qwen's and Llama-3's larger vocabularies give somewhat fewer tokens for the same text).
"""

from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
BACKBONES = ["qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b"]
GPU_GIB = 80


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _train_prompt_lengths() -> list[int]:
    from hydra.utils import instantiate

    from seal.budget import Budget
    from seal.env.benchmark import get_entries
    from seal.policy.oracle import OracleBackbone
    from seal.policy.rollout import RolloutEngine

    cfg = _compose("budget=paper")
    engine = RolloutEngine.for_backbone(OracleBackbone(), OracleBackbone().load(), Budget.from_config(cfg.budget))
    return [engine.prompt_tokens(e) for e in get_entries(instantiate(cfg.split).train)]


def memory() -> None:
    from seal.policy.generation_hf import PREFILL_CHUNK
    from seal.policy.memory import GiB, kv_bytes_per_token, lora_param_count, param_count, training_memory

    prompts = sorted(_train_prompt_lengths())
    usable = GPU_GIB * 10**9 - 2 * GiB  # an 80 GB GPU less the CUDA context and allocator reserve
    print(f"\n## memory: paper budget (32 prompts x 8 rollouts, max new tokens 4096, context 16384), per rank, "
          f"from configs")
    print(f"train prompts (SmolLM2 tokens, a proxy): median {prompts[len(prompts) // 2]}, max {prompts[-1]}")
    print(f"rollouts with vLLM colocated at {ENGINE_SHARE} of each GPU (the authors'), asleep while the optimizer runs; "
          f"fits = total under {usable / GiB:.1f} GiB")
    for name in BACKBONES:
        cfg = _compose("budget=paper", f"backbone={name}")
        arch, budget, ctx = dict(cfg.backbone.arch), cfg.budget, cfg.backbone.context_length
        kvb = kv_bytes_per_token(arch, cfg.backbone.dtype)
        episodes = budget.prompts_per_round * budget.rollouts_per_prompt
        columns = {}
        for label, sharding, world, lora in LAUNCHES:
            columns[label] = training_memory(
                arch, compute_dtype=cfg.backbone.dtype, episode_tokens=ctx, sharding=sharding, shards=world,
                lora_params=lora_param_count(arch, 16, "all-linear") if lora else 0,
                rollout_engine_bytes=int(ENGINE_SHARE * GPU_GIB * 10**9),
                prefill_rows=min(budget.batch_size, episodes // world), prefill_tokens=PREFILL_CHUNK,
            )
        print(f"\n### {name}: {param_count(arch) / 1e9:.2f}B parameters, KV cache {kvb / 1024:.0f} KiB per token "
              f"({cfg.backbone.dtype})")
        print(f"{'GiB per rank':22}" + "".join(f"{label:>15}" for label in columns))
        rows = [part for part, _ in next(iter(columns.values())).table()]
        for i, part in enumerate(rows):
            print(f"{part:22}" + "".join(f"{m.table()[i][1]:15.1f}" for m in columns.values()))
        print(f"{'fits 80 GB':22}" + "".join(f"{'yes' if m.total <= usable else 'no':>15}" for m in columns.values()))


# (column label, sharding, ranks, LoRA r=16 all-linear)
LAUNCHES = [("ddp x1", "ddp", 1, False), ("ddp x4", "ddp", 4, False), ("fsdp2 x2", "fsdp2", 2, False),
            ("fsdp2 x4", "fsdp2", 4, False), ("fsdp2 x8", "fsdp2", 8, False), ("LoRA ddp", "ddp", 1, True)]
# the vLLM share of each GPU the authors ran with (release config: gpu_memory_utilization 0.4; the
# paper's Table 4 says 0.6): the release's, as the one behind the paper's numbers
ENGINE_SHARE = 0.4
