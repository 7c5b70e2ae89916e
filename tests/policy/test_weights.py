"""A model's whole tensors and files on any rank (seal.policy.weights)."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from seal.policy.weights import full_state_dict, whole, write_pretrained


def tiny(tie: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=24, tie_word_embeddings=tie))


def test_the_full_state_dict_casts_keeps_ties_as_one_tensor_and_leaves_out_rotary_caches():
    model = tiny(tie=True)
    state = full_state_dict(model, torch.bfloat16)
    # exactly the state dict's keys: the persistent tensors (the rotary inv_freq buffer is not one)
    assert state.keys() == model.state_dict().keys() and not any("rotary" in k for k in state)
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]
    assert all(v.dtype == torch.bfloat16 and v.device.type == "cpu" for v in state.values())
    assert torch.equal(state["model.norm.weight"], model.model.norm.weight.detach().to(torch.bfloat16))
    # an untied head is its own tensor; keep=False takes part and keeps nothing
    untied = full_state_dict(tiny(tie=False))
    assert untied["lm_head.weight"] is not untied["model.embed_tokens.weight"]
    assert full_state_dict(tiny(tie=True), keep=False) == {}


def test_a_model_is_written_on_a_rank_other_than_0_as_save_pretrained_writes_it_on_rank_0(tmp_path, monkeypatch):
    model = tiny(tie=True)
    model.save_pretrained(tmp_path / "rank0")
    # what transformers 5 does on rank 1 of a process group: it writes no model file at all
    from transformers.distributed import mixin

    monkeypatch.setattr(mixin, "_is_torch_distributed_initialized", lambda: True)
    monkeypatch.setattr(mixin, "_get_torch_distributed_rank", lambda: 1)
    model.save_pretrained(tmp_path / "rank1_transformers")
    assert not (tmp_path / "rank1_transformers" / "model.safetensors").exists()
    write_pretrained(model, tmp_path / "rank1" / "nested")
    ours = load_file(tmp_path / "rank1" / "nested" / "model.safetensors")
    theirs = load_file(tmp_path / "rank0" / "model.safetensors")
    # the same tensors under the same names: the tied head stored once, under the embedding's name
    assert ours.keys() == theirs.keys() and "lm_head.weight" not in ours
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # the header metadata transformers writes ({"format": "pt"}), which its loaders check
    with safe_open(tmp_path / "rank1" / "nested" / "model.safetensors", "pt") as a, \
            safe_open(tmp_path / "rank0" / "model.safetensors", "pt") as b:
        assert a.metadata() == b.metadata() == {"format": "pt"}
    config = json.loads((tmp_path / "rank1" / "nested" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "rank1" / "nested")
    # a folder that exists already (a cache entry rebuilt) is written into
    write_pretrained(model, tmp_path / "rank1" / "nested")
    assert load_file(tmp_path / "rank1" / "nested" / "model.safetensors").keys() == ours.keys()
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True))


class Buffers(torch.nn.Module):
    """A non-persistent cache registered before a persistent integer counter, which a submodule also holds."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.register_buffer("cache", torch.zeros(2), persistent=False)
        self.register_buffer("steps", torch.tensor([3]))
        self.inner = torch.nn.Module()
        self.inner.register_buffer("steps", self.steps)


def test_the_full_state_dict_has_every_persistent_buffer_under_every_name_and_casts_only_floats():
    model = Buffers()
    state = full_state_dict(model, torch.bfloat16)
    # what state_dict holds: the shared counter under both its names, the cache (after which it comes) left out
    assert state.keys() == model.state_dict().keys() == {"linear.weight", "linear.bias", "steps", "inner.steps"}
    assert state["steps"] is state["inner.steps"]
    # an integer tensor keeps its dtype and value; the floating-point ones are cast
    assert state["steps"].dtype == torch.int64 and state["steps"].tolist() == [3]
    assert state["linear.weight"].dtype == torch.bfloat16


def test_the_full_state_dict_copies_to_host_memory_only_where_it_is_kept():
    with torch.device("meta"):
        model = torch.nn.Linear(2, 2)
    # a tensor on the meta device has no data to copy to the host: a rank that keeps the state tries to
    with pytest.raises(NotImplementedError, match="meta tensor"):
        full_state_dict(model)
    # a rank that does not keep it takes part in the gathering and never copies
    assert full_state_dict(model, keep=False) == {}


class one_rank_shards:
    """A one-rank gloo group in which a module's tensors can be FSDP2-style DTensors (sharded over the single
    rank: whole tensors behind DTensor's interface), and a record of the dtype each gather moves."""

    def __enter__(self):
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
        self.gathered, self._full = [], DTensor.full_tensor
        recorded = self.gathered

        def full_tensor(tensor, *args, **kwargs):
            recorded.append(tensor.dtype)
            return self._full(tensor, *args, **kwargs)

        DTensor.full_tensor = full_tensor
        return self

    @staticmethod
    def shard(tensor):
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import Shard, distribute_tensor

        return distribute_tensor(tensor, DeviceMesh("cpu", [0]), [Shard(0)])

    def __exit__(self, *exc):
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        DTensor.full_tensor = self._full
        dist.destroy_process_group()


def test_a_shard_is_gathered_in_the_receivers_dtype_and_integers_are_never_cast():
    torch.manual_seed(0)
    weight, steps = torch.randn(4, 3), torch.arange(4, dtype=torch.int64)
    with one_rank_shards() as group:
        # cast before the gather: what moves between ranks is bf16, half the bytes of the fp32 masters
        bf16 = whole(group.shard(weight), torch.bfloat16)
        assert group.gathered == [torch.bfloat16]
        assert bf16.dtype == torch.bfloat16 and torch.equal(bf16, weight.to(torch.bfloat16))
        # no dtype: the shard's own (fp32, bit for bit)
        assert torch.equal(whole(group.shard(weight)), weight) and group.gathered[-1] == torch.float32
        # an integer tensor keeps its dtype whatever the receiver computes in
        kept = whole(group.shard(steps), torch.bfloat16)
        assert group.gathered[-1] == torch.int64 and torch.equal(kept, steps)
        # the state dict gathers each sharded tensor once, already in the dtype it is kept in
        linear = torch.nn.Linear(3, 4)
        linear.weight = torch.nn.Parameter(group.shard(weight))
        del group.gathered[:]
        state = full_state_dict(linear, torch.bfloat16)
        assert group.gathered == [torch.bfloat16]  # the weight; the bias is a plain tensor, cast on the host
        assert {v.dtype for v in state.values()} == {torch.bfloat16}
        assert torch.equal(state["weight"], weight.to(torch.bfloat16))
    # a plain tensor is never cast here (its reader casts it), only detached
    plain = torch.randn(2, requires_grad=True)
    assert whole(plain, torch.bfloat16).dtype == torch.float32 and not whole(plain).requires_grad


def test_a_sharded_parameter_is_gathered_into_a_plain_whole_tensor():
    from torch.distributed.tensor import DTensor

    linear = torch.nn.Linear(4, 2)
    plain = linear.weight.detach().clone()
    with one_rank_shards() as group:
        linear.weight = torch.nn.Parameter(group.shard(plain))
        state = full_state_dict(linear)
    assert not any(isinstance(v, DTensor) for v in state.values())
    assert torch.equal(state["weight"], plain)
