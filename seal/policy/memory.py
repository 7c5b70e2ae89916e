"""Memory arithmetic from a model's config: parameters, the KV cache, and what training needs per device.

Used to refuse, before anything is loaded, a model that cannot fit, and by `make bench` to print the
plan for the paper's backbones at the paper budget (their architectures are in conf/backbone/*.yaml,
so no weights are needed). The figures are estimates of the large tensors only (weights, gradients,
optimizer state, reference model, KV cache, checkpointed activations); allocator slack comes on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GiB = 2**30
_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def _get(config: Any, key: str, default: Any = None) -> Any:
    return config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)


def head_dim(config: Any) -> int:
    return _get(config, "head_dim") or _get(config, "hidden_size") // _get(config, "num_attention_heads")


def kv_bytes_per_token(config: Any, dtype: str) -> int:
    """Keys and values of one token in every layer."""
    kv_heads = _get(config, "num_key_value_heads") or _get(config, "num_attention_heads")
    return 2 * _get(config, "num_hidden_layers") * kv_heads * head_dim(config) * _BYTES[dtype]


def param_count(config: Any) -> int:
    """Parameters of a Llama/Qwen-style decoder: embeddings, attention (with Qwen2's q/k/v biases and
    Qwen3's q/k norms), gated MLP, norms, and an untied LM head."""
    h, layers, vocab = _get(config, "hidden_size"), _get(config, "num_hidden_layers"), _get(config, "vocab_size")
    heads = _get(config, "num_attention_heads")
    kv_heads = _get(config, "num_key_value_heads") or heads
    d, inter = head_dim(config), _get(config, "intermediate_size")
    model_type = _get(config, "model_type", "llama")
    attention = h * heads * d + 2 * h * kv_heads * d + heads * d * h
    if model_type == "qwen2":
        attention += heads * d + 2 * kv_heads * d
    if model_type == "qwen3":
        attention += 2 * d
    per_layer = attention + 3 * h * inter + 2 * h
    head = 0 if _get(config, "tie_word_embeddings", False) else vocab * h
    return vocab * h + layers * per_layer + h + head


@dataclass
class TrainingMemory:
    """Bytes per device for one data-parallel rank (every rank holds all of it)."""

    weights: int
    gradients: int
    optimizer: int
    reference: int
    autocast_copies: int
    activations: int
    rollout_kv: int

    @property
    def total(self) -> int:
        return sum(vars(self).values())

    def table(self) -> list[tuple[str, float]]:
        return [(k.replace("_", " "), v / GiB) for k, v in vars(self).items()] + [("total", self.total / GiB)]


def training_memory(
    config: Any,
    *,
    compute_dtype: str,
    lora_params: int = 0,
    reference: bool = True,
    episode_tokens: int,
    micro_batch: int = 1,
    gradient_checkpointing: bool = True,
    rollout_kv_bytes: int = 0,
) -> TrainingMemory:
    """What GRPO training of this model needs per device.

    Full fine-tuning keeps fp32 master weights (4 B), fp32 gradients (4 B) and AdamW's two moments
    (8 B) per parameter; forward passes run under autocast, which holds a compute-dtype copy of the
    weights while a pass is alive. The reference model (KL term) is a compute-dtype copy. With LoRA the
    frozen base stays in the compute dtype, the adapters train in fp32, and the reference is the base
    with adapters disabled (no copy). Activations: with checkpointing, each layer's input for every
    token of a micro-batch, plus one layer recomputed in full (attention projections and the MLP's
    three intermediate tensors); without it, every layer's."""
    n = param_count(config)
    c = _BYTES[compute_dtype]
    h, layers = _get(config, "hidden_size"), _get(config, "num_hidden_layers")
    inter = _get(config, "intermediate_size")
    tokens = episode_tokens * micro_batch
    one_layer = tokens * (6 * h + 3 * inter) * c
    if lora_params:
        weights, trainable, ref, casts = n * c, lora_params, 0, 0
    else:
        full = c < 4
        weights, trainable = n * 4, n
        ref = n * c if reference else 0
        casts = n * c if full else 0
    activations = tokens * h * layers * c + one_layer if gradient_checkpointing else layers * one_layer
    return TrainingMemory(
        weights=weights, gradients=trainable * 4, optimizer=trainable * 8, reference=ref,
        autocast_copies=casts, activations=activations, rollout_kv=rollout_kv_bytes,
    )


def lora_param_count(config: Any, r: int, target_modules: Any) -> int:
    """Adapter parameters: r * (in + out) for every targeted projection of every layer."""
    h, layers = _get(config, "hidden_size"), _get(config, "num_hidden_layers")
    heads = _get(config, "num_attention_heads")
    kv_heads = _get(config, "num_key_value_heads") or heads
    d, inter = head_dim(config), _get(config, "intermediate_size")
    shapes = {
        "q_proj": (h, heads * d), "k_proj": (h, kv_heads * d), "v_proj": (h, kv_heads * d), "o_proj": (heads * d, h),
        "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h),
    }
    names = list(shapes) if target_modules in (None, "all-linear") else list(target_modules)
    return layers * sum(r * sum(shapes[m]) for m in names if m in shapes)
