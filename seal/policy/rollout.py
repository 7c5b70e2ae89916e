"""The rollout engine: plays BFCL multi-turn episodes with a policy, batched, one token sequence each.

Every episode is a single sequence of token ids built by appending: the rendered prompt, then the
model's generated tokens and the environment's tokens (tool results, next user turn, template
markers) in the order they happen. Text pieces are tokenised once when they are appended and model
tokens are kept as sampled; nothing is ever decoded and re-tokenised, so the ids, the mask and the
sampling logprobs are exactly what GRPO needs.

Generation is batched over all active episodes (continuous batching: a finished episode's slot is
refilled from the queue). Each episode keeps its own KV cache between steps, so a step prefills only
the tokens appended since the last one; a batch is assembled by left-padding every episode's cache
and its new tokens, with an explicit attention mask and per-episode position ids. Identical fresh
prompts (a GRPO group) are prefilled once and shared.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from seal.env.benchmark import Entry
from seal.env.calls import parse_call
from seal.env.episode import Episode, TurnStart, check_step_limit
from seal.env.verifier import Verdict
from seal.errors import UserError
from seal.interface.view import PLAIN, View
from seal.policy.formats import ToolFormat, chat_for, get_format

# What the scripted oracle says when it has no (more) calls to make in a turn.
ORACLE_REPLY = "I have completed the requested operations."
# query positions per prefill forward: bounds the attention and mask memory of long batched prompts
PREFILL_CHUNK = 1024


@dataclass
class Segment:
    """One appended piece of an episode's sequence: the text it renders and whether the model wrote it."""

    text: str
    ids: list[int]
    model: bool


@dataclass
class EpisodeRollout:
    entry: Entry
    episode: Episode
    verdict: Verdict
    # initial prompt: system (+tools) + first user turn + assistant header
    prompt_ids: list[int]
    # everything after, model and environment tokens interleaved, never re-tokenised
    completion_ids: list[int]
    # 1 = model-generated token, 0 = environment/user/template token
    completion_mask: list[int]
    # sampled token's logprob under the sampling distribution for model tokens, 0.0 for others
    logprobs: list[float]
    num_model_tokens: int
    # "completed" | "force_terminated" | "context_overflow"
    ended: str
    # seconds attributable to this episode: "generation", "execution", "verification"
    timings: dict[str, float]
    # the appended pieces in order (prompt first): for inspection and the token-accounting tests
    transcript: list[Segment] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return 1.0 if self.verdict.valid else 0.0


class _Run:
    """The mutable state of one episode while it is being played."""

    def __init__(self, entry: Entry, view: View, max_steps: int, step_limit: str = "turn"):
        self.entry, self.view = entry, view
        self.episode = Episode(entry, max_steps, step_limit)
        self.prompt_ids: list[int] = []
        self.system_len = 0
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.segments: list[Segment] = []
        # tokens of the sequence that are not in the KV cache yet
        self.pending: list[int] = []
        # per layer (keys, values), each [1, heads, cached_len, head_dim]; None before the first step
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.timings = {"generation": 0.0, "execution": 0.0, "verification": 0.0}

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.ids)

    @property
    def cache_len(self) -> int:
        return 0 if self.cache is None else self.cache[0][0].shape[2]

    def append(self, text: str, ids: list[int], model: bool, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.mask += [int(model)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.segments.append(Segment(text, ids, model))


class RolloutEngine:
    def __init__(
        self,
        policy: Any,
        fmt: ToolFormat,
        *,
        context_length: int,
        max_new_tokens: int,
        batch_size: int,
        max_steps_per_turn: int = 20,
        # whether max_steps_per_turn caps each turn (BFCL) or the whole episode (the release's training)
        step_limit: str = "turn",
        oracle: bool = False,
        kv_cache: bool = True,
    ):
        self.policy, self.format = policy, fmt
        self.tokenizer = policy.tokenizer
        # settable: the RL loop swaps in the trainer's (possibly peft-wrapped) model
        self.model = policy.model
        self.context_length, self.max_new_tokens = int(context_length), int(max_new_tokens)
        self.batch_size, self.max_steps_per_turn = max(1, int(batch_size)), int(max_steps_per_turn)
        self.step_limit = step_limit
        self.oracle = oracle
        # False: re-prefill the whole sequence at every step (the reference the cache is tested against)
        self.kv_cache = kv_cache
        if not oracle and self.model is None:
            raise UserError("the rollout engine needs a model unless it plays the scripted oracle (oracle=True)")
        self._pieces: dict[str, list[int]] = {}
        self._system_ids: dict[str, list[int]] = {}
        # KV caches of system prompts, shared by the episodes of one play() (the weights may change between plays)
        self._prefixes: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self.eot_ids = self._encode(fmt.chat.end_of_turn)
        self.stops = [self.eot_ids]
        eos = self.tokenizer.eos_token_id
        if eos is not None and [eos] != self.eot_ids:
            self.stops.append([eos])
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    @classmethod
    def for_backbone(cls, backbone: Any, policy: Any, budget: Any, tool_rendering: str = "project") -> "RolloutEngine":
        """The engine for a configured backbone and budget (max_new_tokens, batch_size, max_steps_per_turn),
        showing tools in `tool_rendering` (cfg.rendering.tools: project | release)."""

        def get(key: str, default: Any = None) -> Any:
            return budget.get(key, default) if hasattr(budget, "get") else getattr(budget, key, default)

        backend = get("backend") or getattr(backbone, "backend", "hf")
        if backend == "vllm":
            try:
                import vllm  # noqa: F401
            except ImportError:
                raise UserError(
                    "backend: vllm was asked for but vllm is not installed: install the GPU extra "
                    "(pip install -r requirements-gpu.txt) or use backend: hf"
                ) from None
            raise UserError("backend: vllm is not implemented yet: use backend: hf")
        if backend != "hf":
            raise UserError(f"unknown rollout backend {backend!r}: choose hf (or vllm on a GPU machine)")
        fmt = get_format(backbone.tool_format, chat=chat_for(policy.tokenizer), tools=tool_rendering)
        return cls(
            policy, fmt, context_length=backbone.context_length, max_new_tokens=get("max_new_tokens"),
            batch_size=get("batch_size"), max_steps_per_turn=get("max_steps_per_turn", 20),
            step_limit=check_step_limit(get("step_limit", "turn"), "budget.step_limit"),
            oracle=getattr(backbone, "oracle", False),
        )

    # ------------------------------------------------------------------------------------ rendering

    def _encode(self, text: str) -> list[int]:
        if len(text) <= 256:  # template pieces recur: tokenise each once
            ids = self._pieces.get(text)
            if ids is None:
                ids = self._pieces[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return list(ids)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _turn_text(self, turn: TurnStart, view: View) -> str:
        if turn.new_functions:
            return self.format.holdout_opening(view.delivered_docs(turn.new_functions))
        return self.format.turn_opening(turn.messages)

    def _prompt(self, entry: Entry, view: View, turn: TurnStart) -> tuple[str, list[int], int]:
        """The prompt's text and ids, and how many of them are the system message (shared by every
        entry with the same tools, so its KV cache is computed once per play)."""
        chat = self.format.chat
        system = chat.begin + chat.message("system", self.format.system_prompt(view.tool_docs(entry.functions), view.system_extra()))
        opening = self._turn_text(turn, view)
        system_ids = self._system_ids.get(system)
        if system_ids is None:
            system_ids = self._system_ids[system] = self.tokenizer(system, add_special_tokens=False)["input_ids"]
            if len(self._system_ids) > 64:
                self._system_ids.pop(next(iter(self._system_ids)))
        return system + opening, list(system_ids) + self._encode(opening), len(system_ids)

    def prompt_tokens(self, entry: Entry, view: View = PLAIN) -> int:
        """Token length of the rendered initial prompt."""
        first = TurnStart(0, list(entry.turns[0]), list(entry.holdout.get(0, [])))
        return len(self._prompt(entry, view, first)[1])

    # ------------------------------------------------------------------------------------ playing

    def play(
        self,
        entries: list[Entry],
        view: View = PLAIN,
        *,
        temperature: float,
        generator: torch.Generator | None = None,
        progress: bool = False,
        step_limit: str | None = None,
    ) -> list[EpisodeRollout]:
        """Play every entry to the end; rollouts come back in the order of `entries` (which may repeat).

        `step_limit` overrides the engine's (evaluation keeps its own protocol next to training's)."""
        limit = step_limit or self.step_limit
        runs = [_Run(entry, view, self.max_steps_per_turn, limit) for entry in entries]
        queue, active = deque(runs), []
        model = self.model
        was_training = bool(model is not None and model.training)
        bar = _progress(len(runs)) if progress else None
        if model is not None:
            model.eval()
        self._prefixes.clear()
        try:
            with torch.no_grad():
                while queue or active:
                    while queue and len(active) < self.batch_size:
                        run = queue.popleft()
                        self._start(run)
                        active.append(run)
                    ready = []
                    for run in active:
                        if run.length + self.max_new_tokens > self.context_length:
                            run.episode.abort("context_overflow")
                        else:
                            ready.append(run)
                    if ready:
                        if self.oracle:
                            outputs = [self._oracle_output(run) for run in ready]
                        else:
                            outputs = self._generate(ready, temperature, generator)
                        for run, (ids, logprobs, closed) in zip(ready, outputs):
                            self._consume(run, ids, logprobs, closed)
                    still = []
                    for run in active:
                        if run.episode.done:
                            run.cache, run.pending = None, []
                            if bar is not None:
                                bar.update(1)
                        else:
                            still.append(run)
                    active = still
        finally:
            self._prefixes.clear()
            if model is not None and was_training:
                model.train()
            if bar is not None:
                bar.close()
        return [self._finish(run) for run in runs]

    def _start(self, run: _Run) -> None:
        turn = run.episode.next_turn()
        text, run.prompt_ids, run.system_len = self._prompt(run.entry, run.view, turn)
        run.pending = list(run.prompt_ids)
        run.segments.append(Segment(text, list(run.prompt_ids), False))

    def _consume(self, run: _Run, ids: list[int], logprobs: list[float], closed: bool) -> None:
        """Append one step's model tokens, run its calls, append what the environment answers."""
        t0 = time.perf_counter()
        episode, view, fmt = run.episode, run.view, self.format
        text = self._decode(ids)
        run.append(text, ids, True, logprobs)
        content = text
        for stop in self.stops:
            stop_text = self._decode(stop)
            if content.endswith(stop_text):
                content = content[: -len(stop_text)]
                break
        # a message cut at max_new_tokens (or ended by a bare eos) is closed by the template
        env = "" if closed else fmt.chat.end_of_turn
        env += fmt.after_assistant()
        parsed = fmt.parse(content)
        visible = run.entry.visible_function_names(episode.turn)
        if parsed.calls:
            outcome = episode.step(parsed.calls, content, parsed.failures, len(ids))
            if not outcome.turn_over:
                env += fmt.tool_results([view.tool_response(r, visible) for r in outcome.records])
        else:
            feedback = view.parse_error_feedback(parsed.failures, visible) if parsed.failures else None
            outcome = episode.step([], content, parsed.failures, len(ids), keep_turn=feedback is not None)
            if feedback is not None and not outcome.turn_over:
                env += fmt.tool_results([feedback])
        if outcome.turn_over and not episode.done:
            turn = episode.next_turn()
            if turn is not None:
                env += self._turn_text(turn, view)
        if not episode.done:
            env_ids = self._encode(env)
            run.append(env, env_ids, False)
            run.pending += env_ids
        run.timings["execution"] += time.perf_counter() - t0

    def _oracle_output(self, run: _Run) -> tuple[list[int], list[float], bool]:
        """The scripted step: the turn's gold calls first, then a plain-text reply that ends the turn."""
        episode, entry = run.episode, run.entry
        gold = entry.gold[episode.turn]
        if gold and not episode.steps[-1]:
            calls = [parse_call(c) for c in gold]
            text = self.format.render_calls(calls, entry.docs_by_name())
        else:
            text = ORACLE_REPLY
        ids = self._encode(text) + self.eot_ids
        return ids, [0.0] * len(ids), True

    def _finish(self, run: _Run) -> EpisodeRollout:
        t0 = time.perf_counter()
        verdict = run.episode.verdict()
        run.timings["verification"] += time.perf_counter() - t0
        return EpisodeRollout(
            entry=run.entry, episode=run.episode, verdict=verdict, prompt_ids=run.prompt_ids,
            completion_ids=run.ids, completion_mask=run.mask, logprobs=run.logprobs,
            num_model_tokens=sum(run.mask), ended=run.episode.ended, timings=run.timings,
            transcript=run.segments,
        )

    # ------------------------------------------------------------------------------------ generation

    def _generate(
        self, runs: list[_Run], temperature: float, generator: torch.Generator | None
    ) -> list[tuple[list[int], list[float], bool]]:
        """One assistant message for every run, batched; leaves each run's cache and pending tokens updated."""
        t0 = time.perf_counter()
        model = self.model
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        if not self.kv_cache:
            for run in runs:
                run.cache, run.pending = None, run.prompt_ids + run.ids
        else:
            self._attach_system_prefixes(runs)

        # rows with the same cache and the same new tokens (a GRPO group's prompt) are prefilled once
        unique: list[_Run] = []
        slot: dict[Any, int] = {}
        expand = []
        for run in runs:
            key = (None if run.cache is None else id(run.cache), tuple(run.pending))
            if key not in slot:
                slot[key] = len(unique)
                unique.append(run)
            expand.append(slot[key])
        cache, logits, valid, next_pos = self._prefill([(r.cache, r.pending) for r in unique], device, dtype)
        if len(unique) < len(runs):
            index = torch.tensor(expand, device=device)
            cache.batch_select_indices(index)
            logits, valid, next_pos = logits[index], valid[index], next_pos[index]

        gen: list[list[int]] = [[] for _ in runs]
        lps: list[list[float]] = [[] for _ in runs]
        closed = [False] * len(runs)
        rows = list(range(len(runs)))  # batch row -> run index
        while True:
            tokens, logprobs = _sample(logits, temperature, generator)
            tok_list, lp_list = tokens.tolist(), logprobs.tolist()
            keep = []
            for j, b in enumerate(rows):
                gen[b].append(tok_list[j])
                lps[b].append(lp_list[j])
                stop = next((s for s in self.stops if gen[b][-len(s) :] == s), None)
                if stop is not None or len(gen[b]) >= self.max_new_tokens:
                    closed[b] = stop == self.eot_ids
                    self._store(runs[b], cache, j, valid[j], gen[b][-1])
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(rows):
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                valid, next_pos, tokens = valid[index], next_pos[index], tokens[index]
                rows = [rows[j] for j in keep]
            valid = torch.cat([valid, torch.ones(len(rows), 1, dtype=torch.bool, device=device)], dim=1)
            out = model(
                input_ids=tokens[:, None].to(device), attention_mask=_mask(valid, valid.shape[1] - 1, 1, dtype),
                position_ids=next_pos[:, None], past_key_values=cache, use_cache=True, logits_to_keep=1,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :].float()
            next_pos = next_pos + 1

        share = (time.perf_counter() - t0) / len(runs)
        for run in runs:
            run.timings["generation"] += share
        return [(gen[b], lps[b], closed[b]) for b in range(len(runs))]

    def _attach_system_prefixes(self, runs: list[_Run]) -> None:
        """Fresh episodes start from the cached system prompt; missing ones are prefilled together."""
        fresh = [r for r in runs if r.cache is None and r.system_len and len(r.pending) == len(r.prompt_ids)]
        missing = {}
        for run in fresh:
            key = tuple(run.prompt_ids[: run.system_len])
            if key not in self._prefixes:
                missing.setdefault(key, run)
        if missing:
            model = self.model
            device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
            keys = list(missing)
            cache, _, valid, _ = self._prefill([(None, list(k)) for k in keys], device, dtype)
            for row, key in enumerate(keys):
                self._prefixes[key] = _row_cache(cache, row, valid[row])
                while len(self._prefixes) > 8:
                    self._prefixes.popitem(last=False)
        for run in fresh:
            key = tuple(run.prompt_ids[: run.system_len])
            if key in self._prefixes:
                run.cache, run.pending = self._prefixes[key], run.prompt_ids[run.system_len :]

    def _prefill(self, rows: list[tuple[Any, list[int]]], device, dtype):
        """Forward the new tokens of every row on top of its cache, left-padded into one batch, in chunks.

        Returns the batched cache, the last position's logits, the valid-column mask and next positions."""
        model = self.model
        past = [0 if c is None else c[0][0].shape[2] for c, _ in rows]
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
        cache = _batched_cache([c for c, _ in rows], P, capacity=P + N + self.max_new_tokens + 1)
        valid, input_ids, positions = valid.to(device), input_ids.to(device), positions.to(device)
        for start in range(0, N, PREFILL_CHUNK):
            end = min(N, start + PREFILL_CHUNK)
            out = model(
                input_ids=input_ids[:, start:end], attention_mask=_mask(valid[:, : P + end], P + start, end - start, dtype),
                position_ids=positions[:, start:end], past_key_values=cache, use_cache=True, logits_to_keep=1,
            )
            cache = out.past_key_values
        next_pos = torch.tensor([past[i] + new[i] for i in range(U)], device=device)
        return cache, out.logits[:, -1, :].float(), valid, next_pos

    def _store(self, run: _Run, cache, row: int, valid_row: torch.Tensor, last_token: int) -> None:
        """Keep the run's own cache (its valid columns only); the last sampled token is not in it yet."""
        run.pending = [last_token]
        if not self.kv_cache:
            run.cache = None
            return
        run.cache = _row_cache(cache, row, valid_row)


def _row_cache(cache, row: int, valid_row: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One row of a batched cache, its valid columns only, as per-layer (keys, values) [1, H, L, D]."""
    cols = valid_row.nonzero().squeeze(1)
    return [(layer.keys[row : row + 1, :, cols], layer.values[row : row + 1, :, cols]) for layer in cache.layers]


class _BufferLayer(DynamicLayer):
    """A dynamic cache layer that writes into a preallocated buffer instead of concatenating: a decode
    step then costs no copy of the whole cache (DynamicLayer's torch.cat copies it every token)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_zeros(b, h, self.capacity, d)
        self._v = value_states.new_zeros(b, value_states.shape[1], self.capacity, value_states.shape[3])
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


def _batched_cache(caches: list[Any], P: int, capacity: int) -> DynamicCache:
    """Per-row caches left-padded to P columns, as one cache with room for `capacity` columns."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = lambda: _BufferLayer(capacity)
    if P == 0:
        return cache
    layers = []
    template = next(c for c in caches if c is not None)
    for layer, (k0, v0) in enumerate(template):
        buffer = _BufferLayer(capacity)
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


def _sample(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """Greedy at temperature 0 (logprob under the raw logits), else a draw from softmax(logits / T)."""
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logp.argmax(dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        probs = logp.exp()
        if generator is not None and generator.device != probs.device:
            probs = probs.to(generator.device)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(logits.device)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def _progress(total: int):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc="episodes", unit="ep")
    except ImportError:  # pragma: no cover
        return None
