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
    from seal.policy.memory import GiB, kv_bytes_per_token, param_count

    prompts = sorted(_train_prompt_lengths())
    print(f"\n## memory: paper budget (32 prompts x 8 rollouts, max new tokens 4096, context 16384), per rank, "
          f"from configs")
    print(f"train prompts (SmolLM2 tokens, a proxy): median {prompts[len(prompts) // 2]}, max {prompts[-1]}")
    print(f"rollouts with vLLM colocated at {ENGINE_SHARE} of each GPU (the authors'), asleep while the optimizer runs, "
          f"or (hf) the transformers engine, its KV cache at least one {PREFILL_CHUNK}-token-prefilled episode of the "
          f"context; fits = total under {USABLE / GiB:.1f} GiB")
    for name in BACKBONES:
        cfg = _compose("budget=paper", f"backbone={name}")
        arch = dict(cfg.backbone.arch)
        columns = paper_plans(name)
        print(f"\n### {name}: {param_count(arch) / 1e9:.2f}B parameters, KV cache "
              f"{kv_bytes_per_token(arch, cfg.backbone.dtype) / 1024:.0f} KiB per token ({cfg.backbone.dtype})")
        print(f"{'GiB per rank':22}" + "".join(f"{label:>13}" for label in columns))
        rows = [part for part, _ in next(iter(columns.values())).table()]
        for i, part in enumerate(rows):
            print(f"{part:22}" + "".join(f"{m.table()[i][1]:13.1f}" for m in columns.values()))
        print(f"{'fits 80 GB':22}" + "".join(f"{'yes' if m.total <= USABLE else 'no':>13}" for m in columns.values()))


def paper_plans(name: str) -> dict:
    """The plan (seal.policy.memory.TrainingMemory) of backbone `name` at budget=paper for every launch of
    LAUNCHES, as check_training_fits makes it on an 80 GB GPU."""
    from seal.policy.generation_hf import PREFILL_CHUNK
    from seal.policy.memory import kv_bytes_per_token, lora_param_count, training_memory

    cfg = _compose("budget=paper", f"backbone={name}")
    arch, budget, ctx = dict(cfg.backbone.arch), cfg.budget, cfg.backbone.context_length
    episodes = budget.prompts_per_round * budget.rollouts_per_prompt
    columns = {}
    for label, sharding, world, lora, engine in LAUNCHES:
        columns[label] = training_memory(
            arch, compute_dtype=cfg.backbone.dtype, episode_tokens=ctx, sharding=sharding, ranks=world,
            lora_params=lora_param_count(arch, 16, "all-linear") if lora else 0,
            gradient_checkpointing=cfg.trainer.gradient_checkpointing, reference=cfg.trainer.beta != 0,
            rollout_engine_bytes=int(ENGINE_SHARE * GPU_GIB * 10**9) if engine == "vllm" else None,
            prefill_rows=min(budget.batch_size, episodes // world), prefill_tokens=PREFILL_CHUNK,
            rollout_kv_bytes=2 * ctx * kv_bytes_per_token(arch, cfg.backbone.dtype),
        )
    return columns


# (column label, sharding, ranks, LoRA r=16 all-linear, rollout engine)
LAUNCHES = [("ddp x1 hf", "ddp", 1, False, "hf"), ("ddp x1", "ddp", 1, False, "vllm"),
            ("ddp x4", "ddp", 4, False, "vllm"), ("fsdp2 x2", "fsdp2", 2, False, "vllm"),
            ("fsdp2 x4", "fsdp2", 4, False, "vllm"), ("fsdp2 x4 hf", "fsdp2", 4, False, "hf"),
            ("fsdp2 x8", "fsdp2", 8, False, "vllm"), ("LoRA ddp", "ddp", 1, True, "vllm")]
# the authors' vLLM share of each GPU
ENGINE_SHARE = 0.4
# an 80 GB GPU less the CUDA context and allocator reserve
USABLE = GPU_GIB * 10**9 - 2 * 2**30
