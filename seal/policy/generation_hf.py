"""Generation with transformers: per-episode KV caches, batched steps, memory-planned chunks.

Each episode keeps its own KV cache between steps, so a step prefills only the tokens appended
since the last one; a batch is assembled by left-padding every episode's cache and its new tokens,
with an explicit attention mask and per-episode position ids. Identical rows (a GRPO group's fresh
prompt) are prefilled once, and the system prompt's cache is shared within a play.

Memory is planned, not assumed: the rows of a step are generated in chunks whose batched cache fits
the KV budget (`memory_bytes`, or a fraction of the free device memory when a play begins), sized by
each chunk's own longest row. When the caches kept between steps leave no room for even one row,
the least recently used ones are dropped and re-prefilled later. Sampling is keyed per episode
(seal.policy.generation), so the chunking never changes a trajectory.

Attention: a decode step reads every key/value head in place. transformers' sdpa copies each KV head
once per query head of its group whenever a mask is given (repeat_kv), i.e. the whole batched cache
several times per layer per token (SmolLM2-135M's shape, 3 query heads per KV head, 8 rows of 2,600
tokens, one CPU thread: 47 ms per layer with the copy, 2.8 ms without; a batched decode step of 8 such
rows took 2 s against 0.13 s for one row alone, so batching was slower). While generating, the model's sdpa is swapped for
`grouped_sdpa`, which folds a group's query heads into the query axis instead (the same sdpa call,
no copy); prefill keeps transformers' own path (there the attention's compute dominates the copy).

Precision: the cache is kept in the compute dtype. When the weights are fp32 masters of a bf16
backbone, generation runs under autocast, which casts every weight once per step and keeps it.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from seal.errors import UserError
from seal.policy.generation import Generated, GenerationRequest, sample
from seal.policy.memory import kv_bytes_per_token

# query positions per prefill forward: bounds the attention and mask memory of long batched prompts
PREFILL_CHUNK = 1024
# system-prompt caches kept per play
MAX_PREFIXES = 8

Cache = list[tuple[torch.Tensor, torch.Tensor]]
# the name `grouped_sdpa` is registered under in transformers' attention registry
GROUPED_SDPA = "seal_grouped_sdpa"


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except that one query position under a mask (a decode step) attends
    with each KV head's query heads stacked as query rows of that head: [B, H, 1, D] -> [B, H_kv, G, D]."""
    groups = getattr(module, "num_key_value_groups", 1)
    b, heads, q_len, dim = query.shape
    if groups == 1 or q_len != 1 or attention_mask is None or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    # query head h uses KV head h // groups, so a reshape puts each group's heads under their KV head
    stacked = query.reshape(b, key.shape[1], groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(
        stacked, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(b, heads, 1, dim).transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)


@contextlib.contextmanager
def _grouped_attention(model: Any):
    """The model's sdpa attention swapped for grouped_sdpa while generating (any other kind kept)."""
    config = model.config
    if config._attn_implementation != "sdpa":
        yield
        return
    config._attn_implementation = GROUPED_SDPA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


def free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # blocks PyTorch's allocator holds but no tensor uses are free for the cache too
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    import psutil

    return int(psutil.virtual_memory().available)


def _fresh_stats() -> dict[str, Any]:
    # decode_s: seconds from a chunk's first sampled tokens (on the host) to its last, the rest of a step is prefill
    return {"chunks": 0, "evictions": 0, "peak_kv_bytes": 0, "decode_s": 0.0}


def _cache_len(cache: Cache | None) -> int:
    return 0 if cache is None else cache[0][0].shape[2]


class TransformersGenerator:
    def __init__(
        self,
        model: Any,
        *,
        pad_id: int,
        compute_dtype: torch.dtype | None = None,
        memory_bytes: int | None = None,
        memory_fraction: float = 0.5,
        kv_cache: bool = True,
    ):
        # settable: the RL loop swaps in the trainer's (possibly peft-wrapped) model
        self.model = model
        # settable: when the trained model is sharded, a callable run at the start of every play that
        # returns the (refreshed, unsharded) model to generate with
        self.refresh: Any = None
        self.pad_id = pad_id
        self.compute_dtype = compute_dtype
        self.memory_bytes, self.memory_fraction = memory_bytes, float(memory_fraction)
        # False: re-prefill the whole sequence at every step (the reference the cache is tested against)
        self.kv_cache = kv_cache
        self._caches: OrderedDict[int, Cache] = OrderedDict()
        self._prefixes: OrderedDict[tuple[int, ...], Cache] = OrderedDict()
        self.budget = 0
        self._kvb: int | None = None
        self.stats = _fresh_stats()

    # -- facts of the model --------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def param_dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def dtype(self) -> torch.dtype:
        """The dtype activations and the KV cache are kept in."""
        return self.compute_dtype or self.param_dtype

    def kv_bytes_per_token(self) -> int:
        if self._kvb is None:
            model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
            self._kvb = kv_bytes_per_token(model.config, str(self.dtype).removeprefix("torch."))
        return self._kvb

    def _autocast(self):
        if self.dtype == self.param_dtype:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # -- a play ---------------------------------------------------------------------------------------
    def begin(self) -> None:
        if self.refresh is not None:
            self.model = self.refresh()
        self._kvb = None
        self._caches.clear()
        self._prefixes.clear()
        self.stats = _fresh_stats()
        if self.memory_bytes is not None:
            self.budget = int(self.memory_bytes)
        else:
            self.budget = int(free_memory_bytes(self.device) * self.memory_fraction)

    def end(self) -> None:
        self._caches.clear()
        self._prefixes.clear()

    def release(self, key: int) -> None:
        self._caches.pop(key, None)

    def capacity_tokens(self) -> int:
        """Tokens whose cache fits the budget twice (kept between steps + a step's batched copy)."""
        return self.budget // (2 * self.kv_bytes_per_token())

    def _stored_bytes(self, exclude: set[int] = frozenset()) -> int:
        """Bytes of the caches kept between steps (each shared cache once), leaving out `exclude`'s."""
        kept = {id(c): c for key, c in self._caches.items() if key not in exclude}
        kept.update({id(c): c for c in self._prefixes.values()})
        return sum(_cache_len(c) for c in kept.values()) * self.kv_bytes_per_token()

    # -- one step for every request -----------------------------------------------------------------
    def generate(
        self, requests: list[GenerationRequest], *, temperature: float, stops: list[tuple[int, ...]]
    ) -> list[Generated]:
        results: dict[int, Generated] = {}
        with torch.no_grad(), self._autocast(), _grouped_attention(self.model):
            if self.kv_cache:
                self._attach_prefixes(requests)
            else:
                for r in requests:
                    self._caches.pop(r.key, None)
            # longest first: a chunk's rows have similar lengths, so little of it is padding
            todo = sorted(requests, key=lambda r: -len(r.ids))
            while todo:
                chunk = self._next_chunk(todo)
                todo = todo[len(chunk):]
                for request, out in zip(chunk, self._generate_chunk(chunk, temperature, stops)):
                    results[request.key] = out
        return [results[r.key] for r in requests]

    def _step_bytes(self, requests: list[GenerationRequest]) -> int:
        """What a step of these rows adds at most: their batched cache (left-padded to the longest kept
        cache plus the longest new part, with room to decode), and as much again for the per-row
        caches cut out of it while the batch is alive."""
        past = [_cache_len(self._caches.get(r.key)) for r in requests]
        width = max(past) + max(len(r.ids) - p for r, p in zip(requests, past)) + max(r.max_new_tokens for r in requests) + 1
        return 2 * len(requests) * width * self.kv_bytes_per_token()

    def _fits(self, requests: list[GenerationRequest]) -> bool:
        return self._stored_bytes(exclude={r.key for r in requests}) + self._step_bytes(requests) <= self.budget

    def _next_chunk(self, todo: list[GenerationRequest]) -> list[GenerationRequest]:
        """The longest run of `todo` whose step fits the budget next to the caches kept; evicts the least
        recently used caches of other episodes when not even one row fits."""
        chunk = [todo[0]]
        while not self._fits(chunk):
            if not self._evict(exclude={chunk[0].key}):
                raise UserError(
                    f"the rollout KV-cache budget ({self.budget / 2**30:.2f} GiB) cannot hold one episode of "
                    f"{len(chunk[0].ids) + chunk[0].max_new_tokens} tokens (it needs "
                    f"{self._step_bytes(chunk) / 2**30:.2f} GiB): raise budget.rollout_memory_gb (or "
                    "budget.rollout_memory_fraction), or lower the context length"
                )
        for request in todo[1:]:
            if not self._fits(chunk + [request]):
                break
            chunk = chunk + [request]
        return chunk

    def _evict(self, exclude: set[int]) -> bool:
        for key in self._caches:
            if key not in exclude:
                del self._caches[key]
                self.stats["evictions"] += 1
                return True
        if self._prefixes:
            self._prefixes.popitem(last=False)
            return True
        return False

    def _attach_prefixes(self, requests: list[GenerationRequest]) -> None:
        """Episodes without a cache start from their shared system prompt's cache; missing ones are
        prefilled together."""
        fresh = [r for r in requests if r.key not in self._caches and r.shared_prefix]
        missing = {}
        for r in fresh:
            key = tuple(r.ids[: r.shared_prefix])
            if key not in self._prefixes:
                missing.setdefault(key, r)
        if missing:
            keys = list(missing)
            cache, _, valid, _ = self._prefill([(None, list(k)) for k in keys], capacity=max(map(len, keys)))
            for row, key in enumerate(keys):
                self._prefixes[key] = _row_cache(cache, row, valid[row])
                while len(self._prefixes) > MAX_PREFIXES:
                    self._prefixes.popitem(last=False)
        for r in fresh:
            prefix = self._prefixes.get(tuple(r.ids[: r.shared_prefix]))
            if prefix is not None:
                self._caches[r.key] = prefix

    def _generate_chunk(
        self, requests: list[GenerationRequest], temperature: float, stops: list[tuple[int, ...]]
    ) -> list[Generated]:
        device = self.device
        self.stats["chunks"] += 1
        caches = [self._caches.get(r.key) for r in requests]
        pendings = [r.ids[_cache_len(c):] for r, c in zip(requests, caches)]
        # rows with the same cache and the same new tokens (a GRPO group's prompt) are prefilled once
        unique: list[int] = []
        slot: dict[Any, int] = {}
        expand = []
        for i, (c, p) in enumerate(zip(caches, pendings)):
            key = (None if c is None else id(c), tuple(p))
            if key not in slot:
                slot[key] = len(unique)
                unique.append(i)
            expand.append(slot[key])
        max_new = max(r.max_new_tokens for r in requests)
        rows = [(caches[i], pendings[i]) for i in unique]
        capacity = max(_cache_len(c) for c, _ in rows) + max(len(p) for _, p in rows) + max_new + 1
        for r in requests:  # the batch holds their content now; the old copies can go
            self._caches.pop(r.key, None)
        cache, logits, valid, next_pos = self._prefill(rows, capacity=capacity)
        if len(unique) < len(requests):
            index = torch.tensor(expand, device=device)
            cache.batch_select_indices(index)
            logits, valid, next_pos = logits[index], valid[index], next_pos[index]
        self._note_peak(cache)

        gen: list[list[int]] = [[] for _ in requests]
        lps: list[list[float]] = [[] for _ in requests]
        ended: list[tuple[int, ...] | None] = [None] * len(requests)
        live = list(range(len(requests)))  # batch row -> request index
        while True:
            seeds = [requests[b].seed for b in live]
            positions = [len(requests[b].ids) + len(gen[b]) for b in live]
            tokens, logprobs = sample(logits, temperature, seeds, positions)
            tok_list, lp_list = tokens.tolist(), logprobs.tolist()
            if not gen[live[0]]:
                decode_start = time.perf_counter()
            keep = []
            for j, b in enumerate(live):
                gen[b].append(tok_list[j])
                lps[b].append(lp_list[j])
                stop = next((s for s in stops if tuple(gen[b][-len(s):]) == s), None)
                if stop is not None or len(gen[b]) >= requests[b].max_new_tokens:
                    ended[b] = stop
                    if self.kv_cache:
                        # the last sampled token is not in the cache yet: the next step prefills it
                        self._caches[requests[b].key] = _row_cache(cache, j, valid[j])
                else:
                    keep.append(j)
            if not keep:
                self._note_peak(cache)
                self.stats["decode_s"] += time.perf_counter() - decode_start
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                valid, next_pos, tokens = valid[index], next_pos[index], tokens[index]
                live = [live[j] for j in keep]
            valid = torch.cat([valid, torch.ones(len(live), 1, dtype=torch.bool, device=device)], dim=1)
            out = self.model(
                input_ids=tokens[:, None], attention_mask=_mask(valid, valid.shape[1] - 1, 1, self.dtype),
                position_ids=next_pos[:, None], past_key_values=cache, use_cache=True, logits_to_keep=1,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1
        return [Generated(gen[b], lps[b], ended[b]) for b in range(len(requests))]

    def _note_peak(self, cache: DynamicCache) -> None:
        batch = sum(layer._k.numel() + layer._v.numel() for layer in cache.layers if hasattr(layer, "_k"))
        batch *= torch.empty((), dtype=self.dtype).element_size()
        self.stats["peak_kv_bytes"] = max(self.stats["peak_kv_bytes"], self._stored_bytes() + batch)

    def _prefill(self, rows: list[tuple[Cache | None, list[int]]], *, capacity: int):
        """Forward the new tokens of every row on top of its cache, left-padded into one batch, in chunks.

        Returns the batched cache, the last position's logits, the valid-column mask and next positions."""
        device, dtype = self.device, self.dtype
        past = [_cache_len(c) for c, _ in rows]
        new = [len(p) for _, p in rows]
        P, N, U = max(past), max(new), len(rows)
        valid = torch.zeros(U, P + N, dtype=torch.bool)
        input_ids = torch.full((U, N), self.pad_id, dtype=torch.long)
        positions = torch.zeros(U, N, dtype=torch.long)
        for i, (_, pending) in enumerate(rows):
            L, n = past[i], new[i]
            valid[i, P - L : P] = True
            valid[i, P + N - n :] = True
            input_ids[i, N - n :] = torch.tensor(pending)
            positions[i, N - n :] = torch.arange(L, L + n)
        cache = _batched_cache([c for c, _ in rows], P, capacity=max(capacity, P + N), dtype=dtype)
        valid, input_ids, positions = valid.to(device), input_ids.to(device), positions.to(device)
        for start in range(0, N, PREFILL_CHUNK):
            end = min(N, start + PREFILL_CHUNK)
            out = self.model(
                input_ids=input_ids[:, start:end], attention_mask=_mask(valid[:, : P + end], P + start, end - start, dtype),
                position_ids=positions[:, start:end], past_key_values=cache, use_cache=True, logits_to_keep=1,
            )
            cache = out.past_key_values
        next_pos = torch.tensor([past[i] + new[i] for i in range(U)], device=device)
        return cache, out.logits[:, -1, :], valid, next_pos


def _row_cache(cache, row: int, valid_row: torch.Tensor) -> Cache:
    """One row of a batched cache, its valid columns only, as per-layer (keys, values) [1, H, L, D]."""
    cols = valid_row.nonzero().squeeze(1)
    return [(layer.keys[row : row + 1, :, cols], layer.values[row : row + 1, :, cols]) for layer in cache.layers]


class _BufferLayer(DynamicLayer):
    """A dynamic cache layer that writes into a preallocated buffer of a fixed dtype instead of
    concatenating: a decode step then costs no copy of the whole cache (DynamicLayer's torch.cat
    copies it every token), and keys computed in fp32 under autocast are stored in the compute dtype."""

    def __init__(self, capacity: int, dtype: torch.dtype | None = None):
        super().__init__()
        self.capacity, self.length, self.store_dtype = capacity, 0, dtype

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype = self.store_dtype or key_states.dtype
        self.device = key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_zeros(b, h, self.capacity, d, dtype=self.dtype)
        self._v = value_states.new_zeros(b, value_states.shape[1], self.capacity, value_states.shape[3], dtype=self.dtype)
        self.is_initialized = True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def _write(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        n = key_states.shape[2]
        if self.length + n > self.capacity:
            self.capacity = max(2 * self.capacity, self.length + n)
            k, v = self._k[:, :, : self.length], self._v[:, :, : self.length]
            self.lazy_initialization(k, v)
            self._k[:, :, : self.length], self._v[:, :, : self.length] = k, v
        self._k[:, :, self.length : self.length + n] = key_states
        self._v[:, :, self.length : self.length + n] = value_states
        self.length += n
        self._views()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._write(key_states, value_states)
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._views()


def _batched_cache(caches: list[Cache | None], P: int, capacity: int, dtype: torch.dtype | None = None) -> DynamicCache:
    """Per-row caches left-padded to P columns, as one cache with room for `capacity` columns."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = lambda: _BufferLayer(capacity, dtype)
    if P == 0:
        return cache
    layers = []
    template = next(c for c in caches if c is not None)
    for layer, (k0, v0) in enumerate(template):
        buffer = _BufferLayer(capacity, dtype)
        buffer.lazy_initialization(k0.expand(len(caches), -1, -1, -1), v0.expand(len(caches), -1, -1, -1))
        for i, c in enumerate(caches):
            if c is not None:
                k, v = c[layer]
                buffer._k[i, :, P - k.shape[2] : P] = k[0]
                buffer._v[i, :, P - v.shape[2] : P] = v[0]
        buffer.length = P
        buffer._views()
        layers.append(buffer)
    cache.layers = layers
    return cache


def _mask(valid: torch.Tensor, q_start: int, q_len: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4D mask [batch, 1, q_len, kv_len]: causal over columns, padding columns hidden.

    Padding queries attend to themselves only, so no row is fully masked (no NaN in the cache)."""
    kv_len = valid.shape[1]
    kpos = torch.arange(kv_len, device=valid.device)
    qpos = q_start + torch.arange(q_len, device=valid.device)
    causal = kpos[None, :] <= qpos[:, None]
    allowed = (valid[:, None, :] & causal[None]) | (kpos[None, :] == qpos[:, None])[None]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]
