"""Memory arithmetic from a model's config: parameters, the KV cache, and what training needs per device.

Used to refuse, before anything is loaded, a model that cannot fit, and by `make bench` to print the
plan for the paper's backbones at the paper budget (their architectures are in conf/backbone/*.yaml,
so no weights are needed), per rank under the launch's sharding (seal.rl.sharding). Each term is the
size of the tensors that the code which trains (TRL 1.16's GRPOTrainer, transformers 5.17's decoder
layers, accelerate 1.15, torch's DDP and FSDP2) allocates, worked out from the model's config; vectors of
one number per token and allocator slack come on top. `make bench` also measures a small model's
training step on the CPU against the plan (experiments/measure/memory.py).
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

# TRL 1.16's fused LM head (trl/trainer/utils.py add_fused_lm_head, trl/kernels/chunked_logprob.py
# ChunkedLogProbFunction) projects the hidden states through the head in tiles of this many tokens
# (TOKEN_CHUNK_SIZE) by this many vocabulary rows (_CHUNKED_LOGPROB_CHUNK_SIZE); the full logits are never held
HEAD_TOKEN_TILE = 4096
HEAD_VOCAB_TILE = 32768


@dataclass
class TrainingMemory:
    """Bytes per device for one rank, in three groups.

    resident (held for the whole run): the weights, the optimizer state, the reference model, DDP's
        gradient buckets (more than one rank: a second copy of the gradients, torch's default
        gradient_as_bucket_view=False), and under fsdp2 the transformers engine's unsharded copy of the
        policy (seal.rl.sharding.RolloutCopy, built at the first play and kept);
    training (while the optimizer steps run): the gradients (all of them from the second micro-batch of an
        accumulation on) and the checkpointed activations, plus the largest of three moments of a micro-batch:
        the forward (autocast's cache of every weight or FSDP2's gathered units, with a layer's forward or
        the final norm and LM head's working set), the LM head's backward (its working set and its fp32
        gradients) and a recomputed layer's backward;
    rollout (while episodes are played): the generation weights (autocast's cache when the transformers
        engine generates with fp32 masters, or the vLLM engine's share of the GPU), the prefill's
        activations, the KV cache.
    Under fsdp2 a decoder layer's backward also holds the gradients FSDP2 has not reduced yet (`reduce_scatter`,
    see fsdp2_unreduced), every micro-batch (sync_each_batch: no unsharded gradient outlives its unit's
    backward). accelerate gathers the head with the final norm as one unit kept from its forward to its backward
    (with a tied head the embedding is in it: gathered all step, in the weight copies); an untied head's unit
    is resharded after its backward, so only its forward and its backward hold it (`head_copy`).
    The peak in training is the resident part plus the larger of the other two: the rollout KV cache is
    freed (the vLLM engine sleeps) while the optimizer runs, and gradients and activations are freed before
    a play. Before training (the evaluations before the trainer exists) the device holds only the loaded
    weights (`loaded`: the fp32 masters under ddp; nothing under fsdp2, which keeps them in host memory
    until they are sharded) and the rollout terms: no optimizer state, reference or gradients yet.

    Host memory per rank (`host_*`): under fsdp2 the whole fp32 model is loaded there and stays until the
    trainer shards it, which is after TRL has loaded the whole reference model beside it (in the compute
    dtype, `host_reference_loaded`) and sharded that; the reference's shard then stays there for the run
    (CPU offload). Under ddp the loaded model moves to the device before the reference loads: not counted
    here (the cluster's plan counts every rank's load, experiments.cluster.needs)."""

    weights: int
    optimizer: int
    reference: int
    gradients: int
    activations: int
    recomputed_layer: int
    forward_copies: int
    backward_copies: int
    lm_head: int
    lm_head_grads: int
    ddp_buckets: int = 0
    rollout_copy: int = 0
    rollout_weights: int = 0
    rollout_prefill: int = 0
    rollout_kv: int = 0
    reduce_scatter: int = 0
    head_copy: int = 0
    loaded: int = 0
    host_loaded: int = 0
    host_reference_loaded: int = 0
    host_reference: int = 0

    RESIDENT = ("weights", "optimizer", "reference", "ddp_buckets", "rollout_copy")
    TRAINING = ("gradients", "activations", "recomputed_layer", "forward_copies", "backward_copies", "head_copy",
                "lm_head", "lm_head_grads", "reduce_scatter")
    ROLLOUT = ("rollout_weights", "rollout_prefill", "rollout_kv")

    def _sum(self, names: tuple[str, ...]) -> int:
        return sum(getattr(self, n) for n in names)

    @property
    def resident(self) -> int:
        return self._sum(self.RESIDENT)

    def moments(self) -> dict[str, int]:
        """A micro-batch's three peaks above the gradients: its forward (a layer's forward is bounded by what
        its recompute holds), the LM head's backward, a recomputed layer's backward."""
        return {
            "forward": self.activations + self.forward_copies + max(self.recomputed_layer, self.lm_head),
            "head backward": self.activations + self.backward_copies + self.head_copy + self.lm_head +
                             self.lm_head_grads,
            "layer backward": self.activations + self.backward_copies + self.recomputed_layer + self.reduce_scatter,
        }

    @property
    def training(self) -> int:
        return self.gradients + max(self.moments().values())

    @property
    def rollout(self) -> int:
        return self._sum(self.ROLLOUT)

    @property
    def before_training(self) -> int:
        """The device's peak while the evaluations before training play: the loaded weights, the rollout copy
        (built at the first play) and the rollout terms."""
        return self.loaded + self.rollout_copy + self.rollout

    @property
    def total(self) -> int:
        return max(self.before_training, self.resident + max(self.training, self.rollout))

    @property
    def host(self) -> int:
        """Host memory of one rank at its peak: the loaded model and the whole reference beside it while TRL
        builds the trainer, or the reference's shard after."""
        return max(self.host_loaded + self.host_reference_loaded, self.host_reference)

    def parts(self) -> list[tuple[str, float]]:
        """(name, GiB) of every term."""
        names = (*self.RESIDENT, *self.TRAINING, *self.ROLLOUT)
        return [(n.replace("_", " "), getattr(self, n) / GiB) for n in names]

    def table(self) -> list[tuple[str, float]]:
        """Every term, the phases and the total, in GiB, and the host memory per rank."""
        return self.parts() + [("training phase", self.training / GiB), ("rollout phase", self.rollout / GiB),
                               ("before training", self.before_training / GiB), ("total", self.total / GiB),
                               ("host per rank", self.host / GiB)]


def layer_param_count(config: Any) -> int:
    """Parameters of one decoder layer (what FSDP2 gathers at a time under a per-layer wrapping)."""
    h, layers, vocab = _get(config, "hidden_size"), _get(config, "num_hidden_layers"), _get(config, "vocab_size")
    head = 0 if _get(config, "tie_word_embeddings", False) else vocab * h
    return (param_count(config) - vocab * h - head - h) // layers


def projection_param_count(config: Any) -> int:
    """Parameters of one decoder layer's projections (weights and biases; its two norms left out): what autocast
    casts, since F.linear is on its list and the norms' multiplications and the embedding lookup are not."""
    return layer_param_count(config) - 2 * _get(config, "hidden_size")


def layer_saved_bytes_per_token(config: Any, stream: int, compute: int) -> int:
    """What one decoder layer (transformers' Qwen2/Llama) saves for its backward per token, beyond its input,
    when the residual stream is `stream` bytes per value and the matmuls run in `compute` bytes.

    Each RMSNorm upcasts its input to fp32 and saves it (the stream tensor itself when it is fp32: the
    layer's input, already held, and the attention's residual sum) and saves its normalized output in the
    stream dtype; every projection saves its input in the compute dtype (with an fp32 stream under autocast,
    q/k/v and gate/up each cast the norm's output again: five copies; otherwise the two norm outputs are
    shared); SDPA saves q, k, v, its output (also o_proj's input) and one fp32 log-sum-exp per head; the MLP
    saves gate, up, silu(gate) and their product. Rotary cos/sin are shared by every layer."""
    h, inter = _get(config, "hidden_size"), _get(config, "intermediate_size")
    heads = _get(config, "num_attention_heads")
    kv_heads = _get(config, "num_key_value_heads") or heads
    d = head_dim(config)
    norm_inputs = (0 if stream == 4 else 4 * h) + 4 * h
    normalized = 2 * stream * h
    projection_inputs = (5 if stream > compute else 2) * compute * h
    attention = 2 * heads * d * compute + 2 * kv_heads * d * compute + 4 * heads
    mlp = 4 * inter * compute
    return norm_inputs + normalized + projection_inputs + attention + mlp


def activation_bytes(config: Any, tokens: int, stream: int, compute: int, checkpointing: bool) -> tuple[int, int]:
    """(what a micro-batch of `tokens` keeps from its forward to its backward, what a recomputed layer's
    backward adds). With gradient checkpointing (transformers' non-reentrant torch.utils.checkpoint around
    every decoder layer) each layer keeps only its input (the last layer's output is the final norm's, see
    lm_head_bytes); the backward
    recomputes one layer at a time (layer_saved_bytes_per_token) and holds two MLP-sized gradients and the
    stream's gradient while it runs. Without it every layer keeps its saved set (and its fp32 input, which
    its first norm saves). The rotary cos/sin (in the stream dtype) are shared by every layer."""
    h, layers = _get(config, "hidden_size"), _get(config, "num_hidden_layers")
    inter = _get(config, "intermediate_size")
    layer = layer_saved_bytes_per_token(config, stream, compute)
    rotary = 2 * head_dim(config) * stream
    backward = 2 * inter * compute + stream * h
    if checkpointing:
        return tokens * (layers * stream * h + rotary), tokens * (layer + backward)
    kept = layers * (layer + (stream * h if stream == 4 else 0))
    return tokens * (kept + rotary), tokens * backward


def lm_head_bytes(config: Any, tokens: int, *, stream: int, compute: int, head_bytes: int,
                  trainable: bool) -> tuple[int, int]:
    """The final norm and TRL's fused LM head (HEAD_TOKEN_TILE, HEAD_VOCAB_TILE) over `tokens` scored positions:
    (what the head's forward and backward both hold, what its backward adds). Both hold what the final norm
    saves (its fp32 input and its normalized output), the scored hidden states the head saves (a copy in
    the stream dtype), one tile of logits in the compute dtype (a buffer HEAD_VOCAB_TILE wide whatever the
    vocabulary), one vocabulary slice of the head cast to the compute dtype (when the head is stored in
    another: fp32 masters) and one tile of hidden states cast to it (when the stream is another dtype). The
    backward adds the fp32 gradient of the hidden states and, when the head trains, the fp32 gradient of
    the whole head, each also cast back to its tensor's dtype when that differs."""
    h, vocab = _get(config, "hidden_size"), _get(config, "vocab_size")
    rows = min(tokens, HEAD_TOKEN_TILE)
    # the final norm's fp32 input (the last layer's output itself when the stream is fp32) and normalized output
    final_norm = tokens * h * (4 + stream)
    tile = rows * HEAD_VOCAB_TILE * compute
    head_slice = min(vocab, HEAD_VOCAB_TILE) * h * compute if head_bytes != compute else 0
    hidden_tile = rows * h * compute if stream != compute else 0
    both = final_norm + tokens * h * stream + tile + head_slice + hidden_tile
    grads = tokens * h * (4 + (stream if stream != 4 else 0))
    if trainable:
        grads += vocab * h * (4 + (head_bytes if head_bytes != 4 else 0))
    return both, grads


def fsdp2_unreduced(config: Any, compute: int, shards: int) -> int:
    """The gradients a decoder layer's backward holds under fsdp2 before FSDP2 has reduced them. torch's
    foreach_reduce copies a unit's unsharded gradients (compute dtype) into an fp32 reduce-scatter input and frees
    them, then makes the fp32 output shard; the input is kept until the next unit reduces
    (FSDPCommContext.reduce_scatter_states, one buffer). So a layer's backward holds its own gradients beside the
    input kept from the unit reduced before it (the untied head's unit, head and final norm, before the last
    layer's backward), and a tied head's gradient, which waits for the embedding's to the end of the backward."""
    layer = layer_param_count(config)
    head_unit = _get(config, "vocab_size") * _get(config, "hidden_size") + _get(config, "hidden_size")
    tied = _get(config, "tie_word_embeddings")
    held = layer if tied else max(layer, head_unit)
    return 4 * held + max(layer * compute, -(-layer * 4 // shards)) + (head_unit * compute if tied else 0)


def _rollout(n: int, c: int, *, sharded: bool, cached: int, engine_bytes: int | None, prefill: int,
             kv: int) -> dict[str, int]:
    """The rollout terms and the resident rollout copy (see TrainingMemory)."""
    if engine_bytes is not None:
        # a vLLM engine's share holds its weights, its prefill and its KV cache; it sleeps while training
        return {"rollout_weights": engine_bytes, "rollout_prefill": 0, "rollout_kv": 0}
    if sharded:
        # seal.rl.sharding.RolloutCopy: an unsharded compute-dtype copy, kept between plays
        return {"rollout_copy": n * c, "rollout_prefill": prefill, "rollout_kv": kv}
    # the trained model generates under autocast (seal.policy.generation_hf), which caches a compute-dtype copy
    # of the fp32 weights it casts for the whole generate call (`cached`: with masters; the adapters with LoRA)
    return {"rollout_weights": cached, "rollout_prefill": prefill, "rollout_kv": kv}


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
    ranks: int = 1,
    rollout_engine_bytes: int | None = None,
    prefill_rows: int = 1,
    prefill_tokens: int = 1024,
    rollout_kv_bytes: int = 0,
) -> TrainingMemory:
    """What GRPO training of this model needs per device, on one of `ranks` ranks (see TrainingMemory).

    Full fine-tuning keeps fp32 master weights (4 B), fp32 gradients (4 B) and AdamW's two fp32 moments
    (8 B; transformers' default adamw_torch_fused keeps no other full-size buffer) per parameter. Under
    `ddp` every rank holds all of it; forward passes run under autocast, whose cache holds a compute-dtype
    copy of every projection until the forward's autocast context exits (the backward recomputes one layer
    at a time and re-casts only its projections), and the residual stream stays fp32 (the embedding lookup
    is not autocast); the reference model (TRL builds it with model_init_kwargs' dtype) is a compute-dtype copy.
    Under `fsdp2` the masters, gradients and optimizer state are divided over the ranks and accelerate
    gathers units in the compute dtype: two decoder layers (one computing, one prefetched) and the unit
    holding the LM head and the final norm (with the tied embedding), kept from its forward through its
    backward (`head_copy` when untied); every micro-batch's gradients are reduce-scattered in fp32 into the
    sharded fp32 gradients (seal.rl.sharding: the authors' reduce dtype, and sync_each_batch), a unit at a time
    (`reduce_scatter`; see TrainingMemory);
    the reference is sharded per layer with its parameters in host memory (seal.rl.sharding.shard_reference),
    so it holds no GPU memory outside its scoring pass. With LoRA the frozen base stays in the compute dtype,
    the adapters train in fp32, and the reference is the base with adapters disabled (no copy).

    Rollouts: the transformers engine generates with the trained model itself, except under fsdp2, where
    it uses the resident unsharded copy; a vLLM engine (`rollout_engine_bytes`: its share of the GPU, its
    own prefill and KV cache included) replaces both. Prefill: `prefill_rows` episodes forward
    `prefill_tokens` new tokens at a time (seal.policy.generation_hf.PREFILL_CHUNK) with their projections and
    MLP intermediates alive. `rollout_kv_bytes`: the transformers engine's KV-cache budget."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r}: choose one of {', '.join(SHARDINGS)}")
    if sharding == "fsdp2" and lora_params:
        raise ValueError("LoRA adapters are trained with ddp only")
    sharded = sharding == "fsdp2"
    shards = ranks if sharded else 1
    n, c = param_count(config), _BYTES[compute_dtype]
    h, vocab, layers = _get(config, "hidden_size"), _get(config, "vocab_size"), _get(config, "num_hidden_layers")
    masters = not lora_params and c < 4
    # the unit accelerate's FSDP2 makes of the head and the final norm (with the tied embedding: the same tensor)
    tied, head_unit = _get(config, "tie_word_embeddings"), vocab * h + h
    trainable = lora_params or n // shards
    if lora_params:
        weights, ref, forward, backward, head = n * c + 4 * lora_params, 0, lora_params * c, 0, c
    elif sharded:
        weights, ref, head = n * 4 // shards, 0, c
        # two decoder layers (one computing, one gathered ahead) and the unit holding the head (the head and the
        # final norm, with the embedding when it is tied); the forward also holds the untied embedding's unit
        # (as large as the head's) while it embeds
        forward = (2 * layer_param_count(config) + head_unit) * c
        backward = (2 * layer_param_count(config) + (head_unit if tied else 0)) * c
    else:
        weights, ref, head = n * 4, n * c if reference else 0, 4
        # autocast's cache: every layer's projections in the forward, one recomputed layer's in the backward
        # (the fused head casts its own slices, see lm_head_bytes)
        projections = projection_param_count(config)
        forward, backward = (layers * projections * c, projections * c) if masters else (0, 0)
    # the residual stream is fp32 under autocast over fp32 masters (ddp); in the compute dtype otherwise (under
    # fsdp2 every unit computes in it and its policy casts no output: seal.rl.sharding.mixed_precision_policy)
    stream = 4 if masters and not sharded else c
    tokens = episode_tokens * micro_batch
    both, grads = lm_head_bytes(config, tokens, stream=stream, compute=c, head_bytes=head,
                                trainable=not lora_params)
    # the head's reduction: lm_head_bytes counts its fp32 gradient and the compute-dtype cast; once the fp32 one is
    # freed the reduction's fp32 input takes its place (see fsdp2_unreduced), and the output shard comes on top
    reduce_scatter = fsdp2_unreduced(config, c, shards) if sharded else 0
    if sharded:
        grads += -(-vocab * h * 4 // shards)
    kept, recomputed = activation_bytes(config, tokens, stream, c, gradient_checkpointing)
    inter = _get(config, "intermediate_size")
    prefill = prefill_rows * prefill_tokens * (6 * h + 3 * inter) * c
    # generating under autocast caches the layers' projections and the head (the embedding lookup is not cast)
    cached = (layers * projection_param_count(config) + vocab * h) * c if masters else lora_params * c
    rollout = _rollout(n, c, sharded=sharded, cached=cached, engine_bytes=rollout_engine_bytes, prefill=prefill,
                       kv=rollout_kv_bytes)
    return TrainingMemory(
        weights=weights, optimizer=trainable * 8, reference=ref, gradients=trainable * 4,
        activations=kept, recomputed_layer=recomputed, forward_copies=forward, backward_copies=backward,
        lm_head=both, lm_head_grads=grads, reduce_scatter=reduce_scatter,
        ddp_buckets=trainable * 4 if sharding == "ddp" and ranks > 1 else 0, **rollout,
        head_copy=head_unit * c if sharded and not tied else 0,
        # before training: the loaded model on the device (ddp), or in host memory until it is sharded (fsdp2)
        loaded=0 if sharded else weights,
        host_loaded=n * 4 if sharded else 0,
        host_reference_loaded=n * c if sharded and reference else 0,
        host_reference=-(-n * c // shards) if sharded and reference else 0,
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
