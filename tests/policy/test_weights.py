"""A model's whole tensors and files on any rank (seal.policy.weights)."""

import json

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from seal.policy.weights import full_state_dict, write_pretrained


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
    write_pretrained(model, tmp_path / "rank1")
    ours, theirs = load_file(tmp_path / "rank1" / "model.safetensors"), load_file(tmp_path / "rank0" / "model.safetensors")
    # the same tensors under the same names: the tied head stored once, under the embedding's name
    assert ours.keys() == theirs.keys() and "lm_head.weight" not in ours
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    config = json.loads((tmp_path / "rank1" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "rank1")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True))
