"""Memory arithmetic from a model's config: parameters, the KV cache, and what training needs per device.

Used to refuse, before anything is loaded, a model that cannot fit, and by `make bench` to print the
plan for the paper's backbones at the paper budget (their architectures are in conf/backbone/*.yaml,
so no weights are needed), per rank under the launch's sharding (seal.rl.sharding). The figures are
estimates of the large tensors only (weights, gradients, optimizer state, reference model, weight copies,
activations, logits, the rollouts' weights, prefill and KV cache); allocator slack comes on top.
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


# the sharding choices of a training launch (seal.rl.sharding): ddp replicates the whole training state
# on every rank; fsdp2 divides weights, gradients and optimizer state over the ranks
SHARDINGS = ("ddp", "fsdp2")


@dataclass
class TrainingMemory:
    """Bytes per device for one rank, in three groups.

    resident (held for the whole run): weights, optimizer state, the reference model;
    training (only while the optimizer steps run): gradients, weight copies in the compute dtype
        (autocast's cache of every weight, or FSDP2's gathered layers), activations, logits;
    rollout (only while episodes are played): the generation weights (an unsharded copy when the trained
        model is sharded, or the vLLM engine's share of the GPU), the prefill's activations, the KV cache.
    The peak is the resident part plus the larger of the other two: the rollout KV cache is freed (the
    vLLM engine sleeps) while the optimizer runs, and gradients and activations are freed before a play."""

    weights: int
    optimizer: int
    reference: int
    gradients: int
    weight_copies: int
    activations: int
    logits: int
    rollout_weights: int = 0
    rollout_prefill: int = 0
    rollout_kv: int = 0

    RESIDENT = ("weights", "optimizer", "reference")
    TRAINING = ("gradients", "weight_copies", "activations", "logits")
    ROLLOUT = ("rollout_weights", "rollout_prefill", "rollout_kv")

    def _sum(self, names: tuple[str, ...]) -> int:
        return sum(getattr(self, n) for n in names)

    @property
    def resident(self) -> int:
        return self._sum(self.RESIDENT)

    @property
    def training(self) -> int:
        return self._sum(self.TRAINING)

    @property
    def rollout(self) -> int:
        return self._sum(self.ROLLOUT)

    @property
    def total(self) -> int:
        return self.resident + max(self.training, self.rollout)

    def table(self) -> list[tuple[str, float]]:
        parts = [(n.replace("_", " "), getattr(self, n) / GiB) for n in (*self.RESIDENT, *self.TRAINING, *self.ROLLOUT)]
        return parts + [("total", self.total / GiB)]


def layer_param_count(config: Any) -> int:
    """Parameters of one decoder layer (what FSDP2 gathers at a time under a per-layer wrapping)."""
    h, layers, vocab = _get(config, "hidden_size"), _get(config, "num_hidden_layers"), _get(config, "vocab_size")
    head = 0 if _get(config, "tie_word_embeddings", False) else vocab * h
    return (param_count(config) - vocab * h - head - h) // layers


def training_memory(
    config: Any,
    *,
    compute_dtype: str,
    lora_params: int = 0,
    reference: bool = True,
    episode_tokens: int,
    micro_batch: int = 1,
    gradient_checkpointing: bool = True,
    sharding: str = "ddp",
    shards: int = 1,
    rollout_engine_bytes: int | None = None,
    prefill_rows: int = 1,
    prefill_tokens: int = 1024,
    rollout_kv_bytes: int = 0,
) -> TrainingMemory:
    """What GRPO training of this model needs per device (see TrainingMemory for the three groups).

    Full fine-tuning keeps fp32 master weights (4 B), fp32 gradients (4 B) and AdamW's two moments
    (8 B) per parameter. Under data parallelism (`ddp`) every rank holds all of it; forward passes run
    under autocast, which caches a compute-dtype copy of every weight while a pass is alive, and the
    reference model (KL term) is a compute-dtype copy. Under `fsdp2` over `shards` ranks the masters,
    gradients and optimizer state are divided over the ranks, FSDP2 gathers two layers at a time in the
    compute dtype (one computing, one prefetched) plus the embedding and the head, and the reference is
    sharded per layer with its parameters offloaded to host memory, as the authors ran it. With LoRA the
    frozen base stays in the compute dtype, the adapters train in fp32, and the reference is the base
    with adapters disabled (no copy).

    Activations: with checkpointing, each layer's input for every token of a micro-batch plus one layer
    recomputed in full (attention projections and the MLP's three intermediate tensors); without it,
    every layer's. Under autocast with fp32 masters the residual stream stays fp32 (the embedding
    lookup is not autocast), so the saved layer inputs are 4 bytes each; under FSDP2 the gathered
    weights are already in the compute dtype. Logits: every token of a micro-batch over the vocabulary,
    in the compute dtype, divided by the temperature (a second tensor), and one fp32 copy while the
    log-softmax is taken.

    Rollouts: the transformers engine generates with the trained model itself, except under fsdp2, where
    it uses an unsharded compute-dtype copy refreshed from the shards at every play; a vLLM engine
    (`rollout_engine_bytes`: its share of the GPU, its own prefill included) replaces that copy. Prefill: `prefill_rows` episodes
    forward `prefill_tokens` new tokens at a time (seal.policy.generation_hf.PREFILL_CHUNK) with their
    projections and MLP intermediates alive (attention scores are not materialised by CUDA's SDPA kernels)."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    if sharding == "fsdp2" and lora_params:
        raise ValueError("LoRA adapters are trained with ddp only")
    shards = shards if sharding == "fsdp2" else 1
    n = param_count(config)
    c = _BYTES[compute_dtype]
    h, layers = _get(config, "hidden_size"), _get(config, "num_hidden_layers")
    inter, vocab = _get(config, "intermediate_size"), _get(config, "vocab_size")
    tokens = episode_tokens * micro_batch
    one_layer = tokens * (6 * h + 3 * inter) * c
    masters = not lora_params and c < 4
    if lora_params:
        weights, trainable, ref, copies = n * c + 4 * lora_params, lora_params, 0, 0
    elif sharding == "fsdp2":
        weights, trainable = n * 4 // shards, n // shards
        ref = 0
        embeddings = vocab * h * (1 if _get(config, "tie_word_embeddings", False) else 2)
        copies = (2 * layer_param_count(config) + embeddings) * c
    else:
        weights, trainable = n * 4, n
        ref = n * c if reference else 0
        copies = n * c if masters else 0
    # the residual stream is fp32 under autocast over fp32 masters (ddp); in the compute dtype otherwise
    stream = 4 if masters and sharding == "ddp" else c
    saved = tokens * h * layers * stream + one_layer if gradient_checkpointing else layers * one_layer
    logits = tokens * vocab * (2 * c + 4)
    prefill = prefill_rows * prefill_tokens * (6 * h + 3 * inter) * c
    if rollout_engine_bytes is not None:
        # a vLLM engine's share holds its weights, its prefill and its KV cache
        generation, prefill = rollout_engine_bytes, 0
    else:
        generation = n * c if sharding == "fsdp2" else 0
    return TrainingMemory(
        weights=weights, optimizer=trainable * 8, reference=ref, gradients=trainable * 4, weight_copies=copies,
        activations=saved, logits=logits, rollout_weights=generation, rollout_prefill=prefill,
        rollout_kv=rollout_kv_bytes,
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
