"""The seam between the episode protocol and a generation backend: "continue these token sequences".

The rollout engine (seal.policy.rollout) owns everything about an episode: turns, tool execution,
token bookkeeping, masks, context overflow. A backend only answers `generate(requests)`: for every
request (one episode's whole token sequence so far) one assistant message, sampled token by token
until a stop sequence or `max_new_tokens`. Backends: transformers with per-episode KV caches
(seal.policy.generation_hf) and vLLM (seal.policy.generation_vllm).

Sampling is keyed, not streamed: the random number behind the token at position p of an episode
with seed s is `uniform(s, p)`, a pure function. A trajectory therefore does not depend on which
other episodes share its batch, on how a round is chunked to fit memory, on the number of ranks,
or on where a resumed run restarts; and only one number per row crosses from the host to the
device per token (the distribution itself never leaves the model's device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

_MASK64 = (1 << 64) - 1


@dataclass
class GenerationRequest:
    # identifies the episode within one play() (stable across its steps; caches are keyed by it)
    key: int
    # the whole token sequence so far (prompt and everything appended), never re-tokenised
    ids: list[int]
    # the episode's sampling seed; the randomness of each token comes from (seed, its position)
    seed: int
    max_new_tokens: int
    # length of a prefix many requests share (the system prompt): a backend may cache it once
    shared_prefix: int = 0


@dataclass
class Generated:
    # sampled tokens, including the stop sequence when one ended the message
    ids: list[int]
    # logprob of each sampled token under softmax(logits / T) (raw logits when T == 0)
    logprobs: list[float]
    # the stop sequence that ended the message, None when it was cut at max_new_tokens
    stop: tuple[int, ...] | None


class Generator(Protocol):
    def begin(self) -> None: ...
    def generate(self, requests: list[GenerationRequest], *, temperature: float,
                 stops: list[tuple[int, ...]]) -> list[Generated]: ...
    def release(self, key: int) -> None: ...
    def end(self) -> None: ...


# ---------------------------------------------------------------------------------------- keyed randomness


def mix64(x: int) -> int:
    """A 64-bit finaliser (the splitmix64 constants): consecutive inputs give unrelated outputs."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def derive_seed(*parts: int) -> int:
    """One 63-bit seed from several integers (run seed, round, episode index, ...), order-sensitive."""
    h = 0
    for part in parts:
        h = mix64(h ^ (int(part) & _MASK64))
    return h >> 1


def uniform(seed: int, position: int) -> float:
    """The uniform draw in [0, 1) behind the token at `position` of the episode seeded `seed`."""
    return (mix64(mix64(seed & _MASK64) ^ (position & _MASK64)) >> 11) / float(1 << 53)


def sample(logits: torch.Tensor, temperature: float, seeds: list[int], positions: list[int]):
    """Next tokens and their logprobs for a batch of rows [B, V], on the logits' device.

    T == 0: greedy, logprob under the raw logits. T > 0: inverse-CDF sampling of softmax(logits / T)
    with each row's keyed uniform draw; a token of probability zero can never be drawn (the first
    index whose cumulative mass exceeds the draw always carries mass)."""
    logits = logits.float()
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logp.argmax(dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        cdf = torch.cumsum(logp.exp().double(), dim=-1)
        u = torch.tensor([uniform(s, p) for s, p in zip(seeds, positions)], dtype=torch.float64, device=logits.device)
        target = (u * cdf[:, -1]).unsqueeze(1)
        tokens = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=logits.shape[-1] - 1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


# ---------------------------------------------------------------------------------------- stop sequences


def stop_sequences(tokenizer: Any, chat: Any, generation_eos: Any = None) -> tuple[list[tuple[int, ...]], set[tuple[int, ...]]]:
    """What ends an assistant message, derived from the tokenizer and the chat wrapper.

    Returns (stops, closing): every stop sequence, and the subset that closes the message the way
    the chat template does (after another stop, e.g. Qwen's `<|endoftext|>`, the engine appends the
    template's end-of-turn marker itself). Stops are: the chat's message-end markers (Llama-3.1's
    `<|eot_id|>` and `<|eom_id|>`, the latter ending a tool call under "Environment: ipython";
    ChatML's `<|im_end|>`), the tokenizer's eos, the model's generation-config eos ids, and the
    family's end-of-text token when the vocabulary has it as one token."""

    def encode(text: str) -> tuple[int, ...]:
        return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

    def single(token: str) -> list[tuple[int]]:
        """[(id,)] when the vocabulary holds `token` as one token, else [] (looked up, not by get_vocab(),
        which builds the whole vocabulary as a dict: 60 ms per engine for SmolLM2's 49k tokens)."""
        token_id = tokenizer.convert_tokens_to_ids(token)
        # an absent token maps to the unknown token's id (or None): mapping the id back tells them apart
        return [(token_id,)] if token_id is not None and tokenizer.convert_ids_to_tokens(token_id) == token else []

    closing = [encode(chat.end_of_turn)] + [s for m in chat.message_ends for s in single(m)]
    others: list[tuple[int, ...]] = []
    eos_ids = generation_eos if isinstance(generation_eos, (list, tuple)) else [generation_eos]
    for token_id in [tokenizer.eos_token_id, *eos_ids]:
        if token_id is not None:
            others.append((int(token_id),))
    others += [s for t in chat.end_of_text for s in single(t)]
    stops: list[tuple[int, ...]] = []
    for s in closing + others:
        if s and s not in stops:
            stops.append(s)
    return stops, set(closing)
