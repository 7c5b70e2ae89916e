"""Generation backends' shared pieces: keyed sampling, stop sequences, the transformers backend's memory plan."""

import math

import pytest
import torch

from seal.policy.generation import derive_seed, sample, stop_sequences, uniform
from seal.policy.formats import ChatML, Llama3, get_format
from seal.policy.rollout import RolloutEngine


# ---------------------------------------------------------------------------------------- keyed sampling


def test_keyed_draws_are_pure_functions_of_seed_and_position_and_look_uniform():
    assert uniform(7, 100) == uniform(7, 100)
    draws = [uniform(derive_seed(1, i), p) for i in range(50) for p in range(200)]
    assert all(0.0 <= u < 1.0 for u in draws) and len(set(draws)) == len(draws)
    # 10,000 draws in 10 equal bins: each bin expects 1,000 with sd 30; allow 5 sd
    counts = [0] * 10
    for u in draws:
        counts[int(u * 10)] += 1
    assert all(abs(c - 1000) < 150 for c in counts), counts
    assert derive_seed(1, 2) != derive_seed(2, 1)


def test_sampling_draws_from_the_tempered_softmax():
    # by hand: logits (2, 1, 0, -inf) at T = 0.5 -> weights e^4, e^2, e^0, 0
    weights = [math.exp(4), math.exp(2), 1.0, 0.0]
    p = [w / sum(weights) for w in weights]
    n = 20000
    logits = torch.tensor([[2.0, 1.0, 0.0, float("-inf")]]).repeat(n, 1)
    tokens, logprobs = sample(logits, 0.5, [derive_seed(3, i) for i in range(n)], [5] * n)
    for k in range(3):
        freq = (tokens == k).float().mean().item()
        assert abs(freq - p[k]) < 5 * math.sqrt(p[k] * (1 - p[k]) / n), (k, freq, p[k])
    assert not (tokens == 3).any()
    assert torch.allclose(logprobs, torch.tensor([math.log(p[t]) for t in tokens.tolist()]), atol=1e-5)


def test_greedy_takes_the_argmax_with_its_raw_logprob():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    tokens, logprobs = sample(logits, 0.0, [1, 2], [0, 0])
    assert tokens.tolist() == [1, 0]
    expected = [3.0 - math.log(1 + math.exp(3) + math.exp(1)), 2.0 - math.log(math.exp(2) + math.exp(-1) + math.exp(0.5))]
    assert logprobs.tolist() == pytest.approx(expected, abs=1e-6)


def test_a_row_draws_the_same_token_whatever_else_is_in_the_batch():
    torch.manual_seed(0)
    logits = torch.randn(6, 50)
    seeds, positions = [derive_seed(9, i) for i in range(6)], [10 * i for i in range(6)]
    together, _ = sample(logits, 1.0, seeds, positions)
    alone = [sample(logits[i : i + 1], 1.0, seeds[i : i + 1], positions[i : i + 1])[0].item() for i in range(6)]
    reordered, _ = sample(logits[[5, 3, 1]], 1.0, [seeds[5], seeds[3], seeds[1]], [positions[5], positions[3], positions[1]])
    assert together.tolist() == alone and reordered.tolist() == [alone[5], alone[3], alone[1]]


# ---------------------------------------------------------------------------------------- stop sequences


def _word_tokenizer(specials, eos):
    """A tiny word-level tokenizer carrying a model family's special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "hello", "world", *specials])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token=eos)
    fast.add_special_tokens({"additional_special_tokens": list(specials)})
    return fast


def test_llama31_stops_at_eom_and_eot_and_closes_with_either():
    tok = _word_tokenizer(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>",
                           "<|start_header_id|>", "<|end_header_id|>"], eos="<|eot_id|>")
    v = tok.get_vocab()
    # Llama-3.1-Instruct's generation config lists end_of_text, eom and eot
    stops, closing = stop_sequences(tok, Llama3(), [v["<|end_of_text|>"], v["<|eom_id|>"], v["<|eot_id|>"]])
    assert set(stops) == {(v["<|eot_id|>"],), (v["<|eom_id|>"],), (v["<|end_of_text|>"],)}
    assert closing == {(v["<|eot_id|>"],), (v["<|eom_id|>"],)}


def test_qwen_stops_at_endoftext_but_closes_only_with_im_end():
    tok = _word_tokenizer(["<|im_start|>", "<|im_end|>", "<|endoftext|>"], eos="<|im_end|>")
    v = tok.get_vocab()
    stops, closing = stop_sequences(tok, ChatML(), None)
    assert set(stops) == {(v["<|im_end|>"],), (v["<|endoftext|>"],)} and closing == {(v["<|im_end|>"],)}


def test_a_marker_the_vocabulary_lacks_is_no_stop():
    # vocabulary: [UNK]=0, hello=1, world=2, <|im_start|>=3, <|im_end|>=4; no <|endoftext|>, no eos
    tok = _word_tokenizer(["<|im_start|>", "<|im_end|>"], eos=None)
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 0  # what an absent token maps to: [UNK]
    stops, closing = stop_sequences(tok, ChatML(), None)
    assert stops == [(4,)] and closing == {(4,)}


def _scripted_tokens(monkeypatch, script):
    """Make the transformers backend 'sample' a scripted token sequence (one per decode step)."""
    from seal.policy import generation_hf

    queue = list(script)

    def fake_sample(logits, temperature, seeds, positions):
        tokens = torch.tensor([queue.pop(0) if queue else 3] * logits.shape[0])
        return tokens, torch.zeros(logits.shape[0])

    monkeypatch.setattr(generation_hf, "sample", fake_sample)


@pytest.mark.parametrize("stop_token, closes", [("<|im_end|>", True), ("<|endoftext|>", False)])
def test_the_engine_stops_at_end_of_text_and_closes_the_message_itself(tiny_policy, short_entries, monkeypatch,
                                                                      stop_token, closes):
    tok = tiny_policy.tokenizer
    stop_id = tok.convert_tokens_to_ids(stop_token)
    hello = tok("hello", add_special_tokens=False)["input_ids"]
    _scripted_tokens(monkeypatch, [*hello, stop_id])
    eng = RolloutEngine(tiny_policy, get_format("qwen_xml"), context_length=16384, max_new_tokens=20, batch_size=1)
    (r,) = eng.play(short_entries[:1], temperature=1.0)
    first = r.transcript[1]
    assert first.model and first.ids == [*hello, stop_id]
    env = r.transcript[2].text
    assert env.startswith("\n<|im_start|>user") if closes else env.startswith("<|im_end|>\n<|im_start|>user")
    assert r.episode.steps[0][0].raw == "hello"


# ---------------------------------------------------------------------------------------- memory plan


def _play(policy, entries, temperature, memory_bytes=None):
    eng = RolloutEngine(policy, get_format("qwen_xml"), context_length=16384, max_new_tokens=12, batch_size=8,
                        memory_bytes=memory_bytes)
    seeds = [derive_seed(5, i) for i in range(len(entries))]
    return eng, eng.play(entries, temperature=temperature, seeds=seeds)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_small_kv_budget_gives_identical_trajectories_in_more_chunks(tiny_policy, short_entries, temperature):
    entries = short_entries[:4] + short_entries[:2]
    big, a = _play(tiny_policy, entries, temperature)
    kvb = big.generator.kv_bytes_per_token()
    # 2 layers x 2 kv heads x 16 dims x (k, v) x 4 bytes
    assert kvb == 2 * 2 * 16 * 2 * 4
    longest = max(len(r.prompt_ids) + len(r.completion_ids) for r in a)
    # room for about two episodes at a time
    budget = 5 * longest * kvb
    small, b = _play(tiny_policy, entries, temperature, memory_bytes=budget)
    assert small.generator.stats["chunks"] > big.generator.stats["chunks"]
    assert small.generator.stats["peak_kv_bytes"] <= budget < big.generator.stats["peak_kv_bytes"]
    for x, y in zip(a, b):
        assert x.completion_ids == y.completion_ids and x.completion_mask == y.completion_mask
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
        assert x.verdict.valid == y.verdict.valid


def test_a_budget_below_one_episode_is_one_clear_error(tiny_policy, short_entries):
    from seal.errors import UserError

    with pytest.raises(UserError, match="rollout_memory_gb"):
        _play(tiny_policy, short_entries[:1], 0.0, memory_bytes=1000)


# ---------------------------------------------------------------------------------------- batched decoding


def test_grouped_sdpa_equals_attention_over_repeated_kv_heads():
    """A decode step's attention with each KV head read in place is plain softmax attention over the KV
    heads repeated per query head (what transformers' sdpa computes after repeat_kv), padding hidden."""
    from types import SimpleNamespace

    from seal.policy.generation_hf import grouped_sdpa

    torch.manual_seed(0)
    b, kv_heads, groups, length, dim = 3, 2, 3, 7, 4
    query = torch.randn(b, kv_heads * groups, 1, dim)
    key, value = torch.randn(b, kv_heads, length, dim), torch.randn(b, kv_heads, length, dim)
    mask = torch.zeros(b, 1, 1, length)
    mask[1, ..., :3] = torch.finfo(torch.float32).min  # row 1 is left-padded by 3 columns
    module = SimpleNamespace(num_key_value_groups=groups, is_causal=True)
    out, _ = grouped_sdpa(module, query, key, value, mask, scaling=0.5)
    for row in range(b):
        for head in range(kv_heads * groups):
            k, v = key[row, head // groups], value[row, head // groups]
            weights = torch.softmax(0.5 * k @ query[row, head, 0] + mask[row, 0, 0], dim=0)
            assert torch.allclose(out[row, 0, head], weights @ v, atol=1e-6)
    assert torch.allclose(out[1, 0, 0], torch.softmax(0.5 * key[1, 0, 3:] @ query[1, 0, 0], 0) @ value[1, 0, 3:],
                          atol=1e-6)


def _greedy_reference(model, ids, max_new, stops):
    """Greedy decoding by full forward passes over the whole sequence (no cache, no batch, no padding)."""
    out, logprobs = [], []
    with torch.no_grad():
        while True:
            logp = torch.log_softmax(model(torch.tensor([ids + out])).logits[0, -1].float(), -1)
            out.append(int(logp.argmax()))
            logprobs.append(float(logp.max()))
            stop = next((s for s in stops if tuple(out[-len(s):]) == s), None)
            if stop is not None or len(out) == max_new:
                return out, logprobs, stop


@pytest.mark.costly
def test_batched_decoding_equals_one_at_a_time_at_different_positions(tiny_policy):
    """Episodes of different lengths, some continuing from a kept cache and some fresh (two sharing a
    system prompt), each with its own max_new_tokens and under stop sequences: one batched step gives,
    token for token, what each gives alone and what plain greedy decoding without a cache gives."""
    from seal.policy.generation import GenerationRequest
    from seal.policy.generation_hf import TransformersGenerator

    model = tiny_policy.model
    assert model.dtype == torch.float32
    g = torch.Generator().manual_seed(1)
    words = lambda n: torch.randint(10, 5000, (n,), generator=g).tolist()  # noqa: E731
    system = words(40)
    first = {0: words(23), 1: words(61), 2: words(37)}
    # step 1 (no stops) grows episodes 0 and 1 to different positions; they then get new environment tokens
    gen = TransformersGenerator(model, pad_id=0)
    gen.begin()
    grown = gen.generate([GenerationRequest(k, ids, seed=k, max_new_tokens=5 + 3 * k) for k, ids in first.items()
                          if k < 2], temperature=0.0, stops=[])
    assert [len(o.ids) for o in grown] == [5, 8]
    later = {0: first[0] + grown[0].ids + words(9), 1: first[1] + grown[1].ids + words(3)}
    # stops: a token each greedy continuation produces partway, and a two-token sequence of another
    free = {k: _greedy_reference(model, ids, 12, [])[0] for k, ids in [(0, later[0]), (2, system + first[2])]}
    stops = [(free[0][4],), (free[2][2], free[2][3])]
    requests = [
        GenerationRequest(0, later[0], seed=0, max_new_tokens=12),
        GenerationRequest(1, later[1], seed=1, max_new_tokens=3),
        GenerationRequest(2, system + first[2], seed=2, max_new_tokens=12, shared_prefix=len(system)),
        GenerationRequest(3, system + words(5), seed=3, max_new_tokens=7, shared_prefix=len(system)),
    ]
    batched = gen.generate(requests, temperature=0.0, stops=stops)
    gen.end()
    expected = [_greedy_reference(model, r.ids, r.max_new_tokens, stops) for r in requests]
    # the cases the batch mixes: ended by a one-token stop, by a two-token stop, and cut at max_new_tokens
    assert expected[0][2] == stops[0] and len(expected[0][0]) <= 5
    assert expected[2][2] == stops[1] and len(expected[2][0]) <= 4
    assert expected[1][2] is None and len(expected[1][0]) == 3
    for request, out, (ids, logprobs, stop) in zip(requests, batched, expected):
        alone = TransformersGenerator(model, pad_id=0)
        alone.begin()
        (single,) = alone.generate([request], temperature=0.0, stops=stops)
        assert out.ids == single.ids == ids and out.stop == single.stop == stop
        assert out.logprobs == pytest.approx(logprobs, abs=1e-4) and single.logprobs == pytest.approx(logprobs, abs=1e-4)


# ---------------------------------------------------------------------------------------- the KV-cache budget


def test_the_capacity_is_the_tokens_whose_cache_fits_the_budget_twice():
    from seal.policy.generation_hf import TransformersGenerator

    gen = TransformersGenerator(None, pad_id=0, memory_bytes=0)
    gen._kvb = 512
    # ten tokens kept and ten more in a step's batched copy fit, an eleventh does not
    gen.budget = 2 * 512 * 10 + 2 * 512 - 1
    assert gen.capacity_tokens() == 10 and isinstance(gen.capacity_tokens(), int)


def test_eviction_drops_other_episodes_oldest_cache_first_then_the_oldest_shared_prefix():
    from collections import OrderedDict

    from seal.policy.generation_hf import TransformersGenerator

    gen = TransformersGenerator(None, pad_id=0, memory_bytes=0)
    # stored in the order they were made: episode 1's cache first
    gen._caches = OrderedDict([(1, "cache 1"), (2, "cache 2"), (3, "cache 3")])
    gen._prefixes = OrderedDict([((7,), "prefix a"), ((8,), "prefix b")])
    # episode 1 is being fitted: its own cache is never the one dropped
    assert gen._evict(exclude={1}) is True and list(gen._caches) == [1, 3]
    assert gen._evict(exclude={1}) is True and list(gen._caches) == [1]
    assert gen.stats["evictions"] == 2
    # no other episode's cache left: the shared prefixes go, oldest first, and are not counted as evictions
    assert gen._evict(exclude={1}) is True and list(gen._prefixes) == [(8,)]
    assert gen._evict(exclude={1}) is True and not gen._prefixes
    assert gen._evict(exclude={1}) is False
    assert list(gen._caches) == [1] and gen.stats["evictions"] == 2


def test_the_free_memory_of_a_gpu_counts_the_blocks_its_allocator_holds_unused(monkeypatch):
    from seal.policy.generation_hf import free_memory_bytes

    # what the driver reports free on the model's GPU (the second one here, not the current one), plus the
    # blocks reserved there that no tensor uses
    gpu = torch.device("cuda", 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: {gpu: (1000, 8000)}[device])
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: {gpu: 300}[device])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: {gpu: 100}[device])
    assert free_memory_bytes(gpu) == 1000 + 300 - 100


def _cache(tokens):
    """A one-layer cache holding `tokens` positions (batch, heads, positions, dims), as _cache_len reads it."""
    return [(torch.empty(1, 1, tokens, 1), torch.empty(1, 1, tokens, 1))]


def _budgeted(budget, caches=(), prefixes=()):
    from collections import OrderedDict

    from seal.policy.generation_hf import TransformersGenerator

    gen = TransformersGenerator(None, pad_id=0, memory_bytes=budget)
    gen.budget, gen._kvb = budget, 10
    gen._caches, gen._prefixes = OrderedDict(caches), OrderedDict(prefixes)
    return gen


def test_the_stored_caches_count_a_shared_prefix_once():
    shared = _cache(6)
    # episode 3 started from the second system prompt's cache: the same tensors under two names
    gen = _budgeted(0, caches=[(1, _cache(5)), (2, _cache(3)), (3, shared)],
                    prefixes=[((7,), _cache(4)), ((8,), shared)])
    assert gen._stored_bytes() == (5 + 3 + 6 + 4) * 10
    assert gen._stored_bytes(exclude={1, 3}) == (3 + 6 + 4) * 10  # the prefix itself is still kept


def test_a_steps_bytes_are_twice_its_left_padded_batch_with_room_to_decode():
    from seal.policy.generation import GenerationRequest

    gen = _budgeted(0, caches=[(1, _cache(5))])
    one = GenerationRequest(key=1, ids=list(range(9)), seed=0, max_new_tokens=3)  # 5 cached, 4 new
    two = GenerationRequest(key=2, ids=list(range(6)), seed=0, max_new_tokens=7)  # nothing cached, 6 new
    # the longest kept cache (5) and the longest new part (6) left-padded, room for 7 decoded tokens and one
    # more column (the buffer _generate_chunk allocates); the per-row caches cut out of it as much again
    assert gen._step_bytes([one, two]) == 2 * 2 * (5 + 6 + 7 + 1) * 10


def test_a_chunk_takes_the_requests_that_fit_and_evicts_other_episodes_when_not_even_one_does():
    from seal.errors import UserError
    from seal.policy.generation import GenerationRequest

    todo = [GenerationRequest(key=k, ids=list(range(10)), seed=0, max_new_tokens=5) for k in (1, 2, 3)]
    # one row's step: 2 x (10 + 5 + 1) tokens; two rows': twice that; episode 9's kept cache: 20 tokens
    one, two, kept = 32 * 10, 64 * 10, 20 * 10
    assert _budgeted(two)._next_chunk(todo) == todo[:2]
    assert _budgeted(kept + two, caches=[(9, _cache(20))])._next_chunk(todo) == todo[:2]
    assert _budgeted(kept + two - 1, caches=[(9, _cache(20))])._next_chunk(todo) == todo[:1]
    gen = _budgeted(one, caches=[(9, _cache(20))])
    assert gen._next_chunk(todo) == todo[:1] and not gen._caches and gen.stats["evictions"] == 1
    # 16 MiB a token: one row's step is 32 x 16 MiB = 0.5 GiB, a quarter of a GiB cannot hold it
    gen = _budgeted(2**28)
    gen._kvb = 2**24
    with pytest.raises(UserError) as refused:
        gen._next_chunk(todo)
    assert str(refused.value) == (
        "the rollout KV-cache budget (0.25 GiB) cannot hold one episode of 15 tokens (it needs 0.50 GiB): raise "
        "budget.rollout_memory_gb (or budget.rollout_memory_fraction), or lower the context length")
