"""A model's whole tensors on any rank of a launch: gathered from FSDP2 shards, tied names resolved, and
written the way transformers reads them back."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def whole(tensor: Any, dtype: Any = None) -> Any:
    """A tensor's whole value, detached: an FSDP2 shard (a DTensor) is gathered from every rank (a collective),
    after its local part is cast to `dtype` (None: its own), so that the gather moves and allocates the
    receiver's dtype, not the fp32 masters'. A plain tensor is returned as it is (its reader casts it)."""
    from torch.distributed.tensor import DTensor

    tensor = tensor.detach()
    if not isinstance(tensor, DTensor):
        return tensor
    if dtype is not None and tensor.is_floating_point():
        tensor = tensor.to(dtype)
    return tensor.full_tensor()


def full_state_dict(model: Any, dtype: Any = None, *, keep: bool = True) -> dict[str, Any]:
    """The model's state dict as whole tensors in host memory, floating-point ones cast to `dtype` (None: their
    own). A sharded parameter is gathered, which is a collective: every rank calls this, in the same order, and
    only where `keep` is true are the gathered tensors kept (elsewhere each is dropped at once, so one rank
    holds the copy). A tensor registered under several names (tied embeddings) is gathered once and shared by
    its names, as save_pretrained expects of ties: ties are found by the registered tensor itself, never by
    data_ptr(), which is 0 for every DTensor."""
    wanted = model.state_dict().keys()  # persistent tensors only (no rotary caches)
    gathered: dict[int, Any] = {}
    state: dict[str, Any] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if name not in wanted:
            continue
        if id(tensor) not in gathered:
            value = whole(tensor, dtype)
            cast = dtype if dtype is not None and value.is_floating_point() else value.dtype
            gathered[id(tensor)] = value.to("cpu", cast) if keep else None
        if keep:
            state[name] = gathered[id(tensor)]
    return state


def write_pretrained(model: Any, folder: Path) -> None:
    """What save_pretrained writes for a plain model (config, generation config, safetensors weights with
    a tied tensor stored once under its first name), on whichever rank calls it: transformers 5 writes a
    model's files only on global rank 0 once a process group exists, and any rank of a launch may be the
    one that builds a shared cache entry (seal.policy.backbones)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    # as save_pretrained records them: TRL builds its reference model from architectures[0]
    model.config.architectures = [type(model).__name__]
    model.config.dtype = str(model.dtype).removeprefix("torch.")
    model.config.save_pretrained(folder)
    if model.can_generate():
        model.generation_config.save_pretrained(folder)
    state = full_state_dict(model)
    first: dict[int, str] = {}
    for name, tensor in state.items():
        first.setdefault(id(tensor), name)
    save_file({name: t.contiguous() for name, t in state.items() if first[id(t)] == name},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
