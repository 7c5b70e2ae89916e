"""One of two gloo ranks (started by torchrun from tests/rl/test_sharding_gloo.py): shards a tiny Llama with
accelerate's FSDP2 path on the CPU (seal.rl.sharding.shard_on_gloo), and writes what the test checks to
<out>/rank<r>.json: each parameter's local shard shape, the rollout copy against the unsharded weights, the
per-layer reference against an unsharded forward, and a round trip through accelerate's sharded save and load."""

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import load_file
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

from seal.policy import weights
from seal.rl import distributed, selection, sharding
from seal.rl.checkpoint import save_final_model
from tests.rl.ranks import leave_without_teardown


def tiny(seed: int, tie: bool = False) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=tie)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def main(out: Path) -> None:
    accelerator = Accelerator(cpu=True)
    sharding.shard_on_gloo(accelerator, {"fsdp_version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                         "reshard_after_forward": True, "state_dict_type": "SHARDED_STATE_DICT"})
    rank = accelerator.process_index
    model = tiny(0)
    full = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = torch.arange(12).reshape(2, 6)
    report = {"distributed_type": str(accelerator.distributed_type),
              "local_shapes": {n: list(p.to_local().shape) for n, p in model.named_parameters()}}

    step = [0]  # stands in for the trainer's optimizer step
    copy = sharding.RolloutCopy(model, dtype=torch.float32, device=torch.device("cpu"), version=lambda: step[0])
    first = copy.refresh()
    report["copy_equals_unsharded"] = all(torch.equal(first.state_dict()[k], full[k]) for k in full)
    report["copy_is_plain"] = not any(type(p).__name__ == "DTensor" for p in first.parameters())

    # one step, then the copy follows the sharded model (refreshed in place, the same module)
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    # the same version: no gather, the copy keeps the weights of its last refresh
    stale = copy.refresh()
    report["same_version_not_gathered"] = all(torch.equal(stale.state_dict()[k], full[k]) for k in full)
    step[0] += 1
    second = copy.refresh()
    gathered = dict(sharding.full_tensors(model))
    report["copy_follows_training"] = second is first and all(
        torch.equal(second.state_dict()[k], gathered[k]) for k in full)
    report["trained_moved"] = any(not torch.equal(gathered[k], full[k]) for k in full)

    # the best model under FSDP2 (seal.rl.selection): gathered on every rank, written by rank 0 alone, in bf16
    save_final_model(model, out / "best_model", "bfloat16", write=rank == 0)
    if rank == 0:
        written = load_file(out / "best_model" / "model.safetensors")
        report["best_model_equal"] = written.keys() == full.keys() and all(
            torch.equal(written[k], gathered[k].to(torch.bfloat16)) for k in full)
    # a full state dict is never loaded into the shards
    try:
        selection._load(model, out / "best_model")
        report["load_into_shards_refused"] = False
    except ValueError as exc:
        report["load_into_shards_refused"] = "FSDP2-sharded" in str(exc)
    # tied embeddings, sharded: the head and the embedding are one tensor, gathered once and written once
    tied = tiny(2, tie=True)
    expected_tied = {k: v.clone() for k, v in tied.state_dict().items()}
    for layer in sharding.decoder_layers(tied):
        fully_shard(layer)
    fully_shard(tied)
    state = weights.full_state_dict(tied, keep=rank == 0)
    report["tied_shared"] = rank != 0 or state["lm_head.weight"] is state["model.embed_tokens.weight"]
    report["tied_equal"] = rank != 0 or all(torch.equal(state[k], expected_tied[k]) for k in expected_tied)
    report["kept_only_on_rank0"] = (rank == 0) == bool(state)
    save_final_model(tied, out / "tied_model", None, write=rank == 0)
    if rank == 0:
        written = load_file(out / "tied_model" / "model.safetensors")
        report["tied_written_once"] = "lm_head.weight" not in written and torch.equal(
            written["model.embed_tokens.weight"], expected_tied["model.embed_tokens.weight"])

    # the reference: sharded per layer, scoring as the unsharded model does
    reference = tiny(0)
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
    sharding.shard_reference(reference, accelerator)
    units = [m for m in reference.modules() if type(m).__name__.startswith("FSDP")]
    with torch.no_grad():
        got = reference(input_ids=ids).logits
    report["reference_units"] = len(units)
    report["reference_max_diff"] = float((got - expected).abs().max())

    # accelerate's sharded checkpoint: each rank writes its shard, a fresh model loads it back
    accelerator.save_state(str(out / "state"))
    saved = {k: v.clone() for k, v in sharding.full_tensors(model)}
    other = tiny(1)
    other_optimizer = torch.optim.AdamW(other.parameters(), lr=1e-2)
    accelerator._models.clear()
    accelerator._optimizers.clear()
    other, other_optimizer = accelerator.prepare(other, other_optimizer)
    accelerator.load_state(str(out / "state"))
    loaded = dict(sharding.full_tensors(other))
    report["reload_equal"] = all(torch.equal(loaded[k], saved[k]) for k in saved)
    report["state_files"] = sorted(p.name for p in (out / "state").iterdir())
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    distributed.close()
    leave_without_teardown()
