"""Weight sync from FSDP2 shards: two gloo ranks, each holding half of every parameter (torch's own
`fully_shard` on the CPU) and its own stand-in engine, sync a plain and a LoRA model; each rank's engine
must receive the whole, unsharded tensors. The expected values come from the same models built here
without sharding (and W + (alpha / r) B A worked out by hand for the adapters)."""

import os
import socket
import sys

import torch
import torch.multiprocessing as mp

from tests.policy.test_vllm_unit import _tiny_llama, stand_in_vllm
from tests.rl.ranks import leave_without_teardown

WORLD = 2
ALPHA, R = 4, 2


def _lora_llama():
    """A tiny Llama with LoRA on q_proj and v_proj whose B matrices are not zero, the same on every rank."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=R, lora_alpha=ALPHA, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(_tiny_llama(tied=False), config)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    return model


def _shard(model, layers):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (WORLD,))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _synced(gen, model):
    """The tensors the engine received in one sync, by name (its own copies, taken as they arrived)."""
    gen.sync_weights(model)
    weights = [e for e in gen.llm.events if e[0] == "rpc"][-1][3]
    return {name: copy for name, (_, copy) in weights.items()}


def _rank(rank, port, out_dir):
    from torch.distributed.tensor import DTensor

    from seal.policy import generation_vllm as gv

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        vllm = stand_in_vllm()
        sys.modules["vllm"], sys.modules["vllm.platforms"] = vllm, vllm.platforms
        gen = gv.VLLMGenerator("/models/m", dtype="float32", context_length=64, seed=0)
        plain = _tiny_llama(tied=True)
        plain = _shard(plain, plain.model.layers)
        lora = _lora_llama()
        lora = _shard(lora, lora.base_model.model.model.layers)
        params = list(plain.named_parameters()) + list(lora.named_parameters())
        assert all(isinstance(p, DTensor) for _, p in params)
        local_rows = {name: p.to_local().shape[0] for name, p in params}
        # an engine computing in bf16: the fp32 shards are cast before they are gathered
        half = gv.VLLMGenerator("/models/m", dtype="bfloat16", context_length=64, seed=0)
        torch.save({"plain": _synced(gen, plain), "lora": _synced(gen, lora), "local_rows": local_rows,
                    "plain_bf16": _synced(half, plain)}, out_dir / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()
    leave_without_teardown()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_rank_syncs_whole_tensors_gathered_from_fsdp2_shards(tmp_path):
    mp.spawn(_rank, args=(_free_port(), tmp_path), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    plain = dict(_tiny_llama(tied=True).named_parameters())
    lora = _lora_llama()
    base = lora.get_base_model()
    # each rank held its half of every parameter's rows, never the whole
    full_rows = {name: p.shape[0] for name, p in [*plain.items(), *lora.named_parameters()]}
    assert results[0]["local_rows"].keys() == full_rows.keys()
    for name, rows in full_rows.items():
        assert [r["local_rows"][name] for r in results] == [(rows + 1) // 2, rows // 2], name
    for synced in results:
        # the plain model: every parameter whole, under its own name (the tied head once, as the embedding)
        assert list(synced["plain"]) == list(plain)
        for name, param in plain.items():
            assert torch.equal(synced["plain"][name], param.detach()), name
            # a bf16 engine receives bf16 tensors gathered as such: half the bytes moved, the values rounded once
            assert synced["plain_bf16"][name].dtype == torch.bfloat16, name
            assert torch.equal(synced["plain_bf16"][name], param.detach().to(torch.bfloat16)), name
        # the LoRA model: the base's names, W + (alpha / r) B A where an adapter is, the base elsewhere
        expected = {}
        for name, param in base.named_parameters():
            if "lora_" in name:
                continue
            module = name.removesuffix(".base_layer.weight")
            if module != name:
                a = base.get_submodule(module).lora_A["default"].weight.detach()
                b = base.get_submodule(module).lora_B["default"].weight.detach()
                expected[f"{module}.weight"] = param.detach() + (ALPHA / R) * (b @ a)
            else:
                expected[name] = param.detach()
        assert list(synced["lora"]) == list(expected)
        for name, value in expected.items():
            torch.testing.assert_close(synced["lora"][name], value, rtol=0, atol=1e-6, msg=name)
