"""`make bench` section memory: what the paper backbones need at the paper budget, from their configs.

No weights are loaded: the architectures are in conf/backbone/*.yaml (from the models' published
config.json), the batch sizes in conf/budget/paper.yaml. Prompt lengths are those of the 400 train
entries rendered under the plain interface and tokenised with the embedded SmolLM2 tokenizer: a proxy
(Qwen's and Llama-3's larger vocabularies give somewhat fewer tokens for the same text).
"""

from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
BACKBONES = ["qwen2.5-3b", "qwen2.5-7b", "toolace-2-8b"]
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
    from seal.policy.memory import GiB, kv_bytes_per_token, lora_param_count, param_count, training_memory

    prompts = sorted(_train_prompt_lengths())
    print(f"\n## memory: paper budget (32 prompts x 8 rollouts, max new tokens 4096, context 16384), from configs")
    print(f"train prompts (SmolLM2 tokens, a proxy): median {prompts[len(prompts) // 2]}, max {prompts[-1]}")
    for name in BACKBONES:
        cfg = _compose("budget=paper", f"backbone={name}")
        arch, budget, ctx = dict(cfg.backbone.arch), cfg.budget, cfg.backbone.context_length
        kvb = kv_bytes_per_token(arch, cfg.backbone.dtype)
        episodes = budget.prompts_per_round * budget.rollouts_per_prompt
        # the engine before planning: every episode of the round in one batch, each row sized for the
        # longest prompt plus a full generation, at the first decode step
        unplanned = episodes * (min(prompts[-1], ctx) + budget.max_new_tokens + 1) * kvb
        full = training_memory(arch, compute_dtype=cfg.backbone.dtype, episode_tokens=ctx)
        lora = training_memory(arch, compute_dtype=cfg.backbone.dtype, episode_tokens=ctx,
                               lora_params=lora_param_count(arch, 16, "all-linear"))
        print(f"\n### {name}: {param_count(arch) / 1e9:.2f}B parameters, KV cache {kvb / 1024:.0f} KiB per token "
              f"({cfg.backbone.dtype})")
        print(f"{'':34} {'full fine-tuning':>17} {'LoRA r=16 all-linear':>21}")
        for (part, a), (_, b) in zip(full.table(), lora.table()):
            if part != "rollout kv":
                print(f"{part + ' (GiB)':34} {a:17.1f} {b:21.1f}")
        print(f"rollout KV cache, one round in one batch (before planning): {unplanned / GiB:.0f} GiB")
        for label, state in [("full fine-tuning", full.total), ("LoRA", lora.total)]:
            left = GPU_GIB * GiB - state
            if left <= 0:
                print(f"  {label}: does not fit one {GPU_GIB} GiB GPU per rank ({state / GiB:.0f} GiB before any "
                      "KV cache); data parallelism replicates it on every rank")
                continue
            budget_bytes = int(left * 0.7)  # budget.rollout_memory_fraction of what is free
            # the planner keeps each episode's cache between steps and one batched copy of a step's rows
            in_flight = budget_bytes // (2 * kvb * (prompts[len(prompts) // 2] + budget.max_new_tokens))
            print(f"  {label}: planned KV peak <= {budget_bytes / GiB:.1f} GiB on a {GPU_GIB} GiB GPU "
                  f"(0.7 of the {left / GiB:.1f} GiB left), about {min(in_flight, episodes)} median episodes "
                  f"generated at once, the round in chunks")
