"""`make bench` section memory: what the paper backbones need at the paper budget, from their configs.

No weights are loaded: the architectures are in conf/backbone/*.yaml (from the models' published
config.json), the batch sizes in conf/budget/paper.yaml. Prompt lengths are those of the 400 train
entries rendered under the plain interface and tokenised with the embedded SmolLM2 tokenizer: a proxy
(Qwen's and Llama-3's larger vocabularies give somewhat fewer tokens for the same text).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf"
BACKBONES = ["qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b"]
GPU_GIB = 80


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def _train_prompt_lengths() -> list[int]:
    from hydra.utils import instantiate

    from seal.budget import Budget
    from seal.env.benchmarks.bfcl_v3 import get_entries
    from seal.policy.oracle import OracleBackbone
    from seal.policy.rollout import RolloutEngine

    cfg = _compose("budget=paper")
    engine = RolloutEngine.for_backbone(OracleBackbone(), OracleBackbone().load(), Budget.from_config(cfg.budget))
    return [engine.prompt_tokens(e) for e in get_entries(instantiate(cfg.split).train)]


def memory() -> None:
    """What training the paper's backbones needs per GPU and on disk, launch by launch, from their configs.

    Arithmetic only (seconds); memory_measured checks the plan against training steps it measures."""
    prompts = sorted(_train_prompt_lengths())
    print(f"\n## memory: paper budget (32 prompts x 8 rollouts, max new tokens 4096, context 16384), per rank, "
          f"from configs")
    print(f"train prompts (SmolLM2 tokens, a proxy): median {prompts[len(prompts) // 2]}, max {prompts[-1]}")
    print(plan_tables())


def memory_measured() -> None:
    """The memory plan against a small model's training steps measured on the CPU, one process and FSDP2 on two.

    Minutes: the FSDP2 steps compute in bf16, slow on a CPU without bf16 matrix instructions."""
    print("\n## memory_measured: the plan of seal.policy.memory against training steps measured on this CPU")
    measured_against_plan()


def plan_tables() -> str:
    """Each paper backbone's plan per launch (LAUNCHES), part by part, as `make bench ARGS=memory` prints it
    and docs/gpus-and-slurm.md shows it (python -m tests.tools.docs writes it there)."""
    from seal.policy.generation_hf import PREFILL_CHUNK
    from seal.policy.memory import GiB, kv_bytes_per_token, param_count

    lines = [f"rollouts with vLLM colocated at {ENGINE_SHARE} of each GPU (the authors'), asleep while the "
             f"optimizer runs, or (hf) the transformers engine, prefilling {PREFILL_CHUNK} tokens of a round's "
             f"episodes at a time, its KV cache at least one context long; "
             f"fits = total under {USABLE / GiB:.1f} GiB"]
    for name in BACKBONES:
        cfg = _compose("budget=paper", f"backbone={name}")
        arch = dict(cfg.backbone.arch)
        columns = paper_plans(name)
        kv_kib = kv_bytes_per_token(arch, cfg.backbone.dtype) / 1024
        lines += ["", f"### {name}: {param_count(arch) / 1e9:.2f}B parameters, KV cache "
                      f"{kv_kib:.0f} KiB per token ({cfg.backbone.dtype}); {paper_disk(name)}"]
        lines.append(f"{'GiB per rank':22}" + "".join(f"{label:>13}" for label in columns))
        rows = [part for part, _ in next(iter(columns.values())).table()]
        for i, part in enumerate(rows):
            lines.append(f"{part:22}" + "".join(f"{m.table()[i][1]:13.1f}" for m in columns.values()))
        fits = "".join(f"{'yes' if m.total <= USABLE else 'no':>13}" for m in columns.values())
        lines.append(f"{'fits 80 GB':22}" + fits)
    return "\n".join(lines)


def paper_disk(name: str) -> str:
    """What one budget=paper run of backbone `name` takes on disk at its peak, as the run's own preflight
    counts it (seal.rl.checkpoint.run_disk_need: its checkpoints and its saved models)."""
    from hydra.utils import instantiate

    from seal.budget import Budget
    from seal.policy.memory import GiB
    from seal.rl.checkpoint import run_disk_need

    cfg = _compose("budget=paper", f"backbone={name}")
    need = run_disk_need(dict(cfg.backbone.arch), cfg, Budget.from_config(cfg.budget), len(instantiate(cfg.split).train),
                         dtype=cfg.backbone.dtype)
    return (f"disk of a run {need.total / GiB:.1f} GiB ({need.at_once} checkpoints of {need.checkpoint / GiB:.1f} "
            f"GiB at once, {need.models} models of {need.model / GiB:.1f} GiB)")


def paper_plans(name: str) -> dict:
    """The plan (seal.policy.memory.TrainingMemory) of backbone `name` at budget=paper for every launch of
    LAUNCHES, as check_training_fits makes it on an 80 GB GPU."""
    from seal.policy.generation_hf import PREFILL_CHUNK
    from seal.policy.memory import kv_bytes_per_token, lora_param_count, training_memory

    cfg = _compose("budget=paper", f"backbone={name}")
    arch, budget, ctx = dict(cfg.backbone.arch), cfg.budget, cfg.backbone.context_length
    episodes = budget.prompts_per_round * budget.rollouts_per_prompt
    columns = {}
    for label, sharding, world, lora, engine in LAUNCHES:
        columns[label] = training_memory(
            arch, compute_dtype=cfg.backbone.dtype, episode_tokens=ctx, sharding=sharding, ranks=world,
            lora_params=lora_param_count(arch, 16, "all-linear") if lora else 0,
            gradient_checkpointing=cfg.trainer.gradient_checkpointing, reference=cfg.trainer.beta != 0,
            rollout_engine_bytes=int(ENGINE_SHARE * GPU_GIB * 10**9) if engine == "vllm" else None,
            prefill_rows=min(budget.batch_size, episodes // world), prefill_tokens=PREFILL_CHUNK,
            rollout_kv_bytes=2 * ctx * kv_bytes_per_token(arch, cfg.backbone.dtype),
        )
    return columns


def measured_against_plan(tokens: int = 2048) -> None:
    """The plan against a training step measured on the CPU (measure_training_step) for SMALL_QWEN2."""
    from seal.policy.memory import HEAD_TOKEN_TILE, HEAD_VOCAB_TILE, training_memory

    measured = measure_training_step(SMALL_QWEN2, tokens) | {"ddp buckets": measure_ddp_buckets(SMALL_QWEN2)}
    plan = training_memory(SMALL_QWEN2, compute_dtype="bfloat16", episode_tokens=tokens)
    planned = plan.moments() | {k: getattr(plan, k) for k in ("weights", "optimizer", "reference", "gradients")}
    planned["ddp buckets"] = training_memory(SMALL_QWEN2, compute_dtype="bfloat16", episode_tokens=tokens,
                                             ranks=2).ddp_buckets
    shape = ", ".join(f"{k.removesuffix('_size').removeprefix('num_')} {v}" for k, v in SMALL_QWEN2.items()
                      if isinstance(v, int) and not isinstance(v, bool))
    print(f"\n### plan against a measured training step: Qwen2 ({shape}), {tokens} tokens, CPU")
    print("tensors alive counted op by op (a TorchDispatchMode); the three moments of a micro-batch are peaks "
          "above the weights and gradients (seal.policy.memory.TrainingMemory.moments); DDP's buckets from its "
          "logging data on one gloo rank")
    print(f"{'MiB':22}{'plan':>10}{'measured':>10}{'plan/measured':>15}")
    for name, value in measured.items():
        print(f"{name:22}{planned[name] / 2**20:10.2f}{value / 2**20:10.2f}{planned[name] / value:15.3f}")
    print(f"(the LM head's moments: TRL folds the logit tiles with fp32 torch ops on a CPU where CUDA runs a "
          f"Triton kernel; the vocabulary of {SMALL_QWEN2['vocab_size']} keeps those temporaries small beside the "
          f"{min(tokens, HEAD_TOKEN_TILE)} x {HEAD_VOCAB_TILE} buffer of one tile)")
    fsdp2_against_plan(tokens)


def fsdp2_against_plan(tokens: int) -> None:
    """The fsdp2 plan on two ranks against a training step measured on two gloo ranks (measure_fsdp2_steps), for
    SMALL_QWEN2 and for it with a head unit 6.7 layers large, tied and untied."""
    from seal.policy.memory import training_memory

    big = dict(SMALL_QWEN2, vocab_size=32768)
    archs = {"small head": SMALL_QWEN2, "big head, tied": big,
             "big head, untied": dict(big, tie_word_embeddings=False)}
    print(f"\n### plan against a measured FSDP2 training step: the same Qwen2 on two gloo ranks, {tokens} "
          f"tokens, launched and prepared as on a GPU node (bf16 parameters, fp32 reduction, a reduction every "
          f"micro-batch), rank 0's bytes; storage resizes counted")
    print(f"{'MiB':34}{'plan':>10}{'measured':>10}{'plan/measured':>15}")
    for (label, arch), measured in zip(archs.items(), measure_fsdp2_steps(list(archs.values()), tokens)):
        plan = training_memory(arch, compute_dtype="bfloat16", episode_tokens=tokens, sharding="fsdp2", ranks=2)
        planned = plan.moments() | {k: getattr(plan, k) for k in ("weights", "optimizer", "gradients")}
        for name, value in measured.items():
            note = " (CPU head fold)" if arch is not SMALL_QWEN2 and name in ("forward", "head backward") else ""
            print(f"{label + ': ' + name:34}{planned[name] / 2**20:10.2f}{value / 2**20:10.2f}"
                  f"{planned[name] / value:15.3f}{note}")


# (column label, sharding, ranks, LoRA r=16 all-linear, rollout engine)
LAUNCHES = [("ddp x1 hf", "ddp", 1, False, "hf"), ("ddp x1", "ddp", 1, False, "vllm"),
            ("ddp x4", "ddp", 4, False, "vllm"), ("fsdp2 x2", "fsdp2", 2, False, "vllm"),
            ("fsdp2 x4", "fsdp2", 4, False, "vllm"), ("fsdp2 x4 hf", "fsdp2", 4, False, "hf"),
            ("fsdp2 x8", "fsdp2", 8, False, "vllm"), ("LoRA ddp", "ddp", 1, True, "vllm")]
# the vLLM share of each GPU the authors ran with (release config: gpu_memory_utilization 0.4; the
# paper's Table 4 says 0.6): the release's, as the one behind the paper's numbers (conf/launch/paper.yaml)
ENGINE_SHARE = 0.4
# an 80 GB GPU less the CUDA context and allocator reserve
USABLE = GPU_GIB * 10**9 - 2 * 2**30


# a Qwen2 decoder small enough for the CPU, with Qwen2.5-3B's proportions (MLP 5.375 x hidden, GQA, tied head)
SMALL_QWEN2 = dict(model_type="qwen2", hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=1376, vocab_size=64, tie_word_embeddings=True)


class LiveTensors:
    """Bytes of the tensors alive, and the peak of each named phase, counted from what every torch op returns
    (a TorchDispatchMode) and what is registered before; a storage counts once and until it is freed, at its
    size of the moment (`resizes`: FSDP2 frees and refills its unsharded parameters by resizing their
    storages, which no op reports). The CPU allocator keeps no statistics of its own."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.now = 0
        self.peaks: dict[str, int] = {}
        self.phase = ""

    def register(self, tensor) -> None:
        import weakref

        if tensor is None:
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key not in self.live:
            self.live[key] = storage.nbytes()
            self.now += storage.nbytes()
            weakref.finalize(storage, self._freed, key)
            self._peak()

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def _peak(self) -> None:
        if self.phase:
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), self.now)

    @contextlib.contextmanager
    def resizes(self):
        """Count every storage resize (torch.UntypedStorage.resize_, what torch's FSDP2 calls) while inside."""
        import weakref

        import torch

        resize = torch.UntypedStorage.resize_

        def counted(storage, nbytes):
            result = resize(storage, nbytes)
            key = storage._cdata
            if key not in self.live:
                self.live[key] = 0
                weakref.finalize(storage, self._freed, key)
            self.now += nbytes - self.live[key]
            self.live[key] = nbytes
            self._peak()
            return result

        torch.UntypedStorage.resize_ = counted
        try:
            yield self
        finally:
            torch.UntypedStorage.resize_ = resize

    def mode(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map_only

        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tree_map_only(torch.Tensor, tracker.register, out)
                return out

        return Mode()


def _small_model(arch: dict, dtype):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**arch, attn_implementation="sdpa")
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def measure_training_step(arch: dict, tokens: int) -> dict[str, int]:
    """Bytes held by a training step of `arch` on the CPU as TRL 1.16 runs one under ddp on one process: fp32
    masters, bf16 autocast, gradient checkpointing (non-reentrant), TRL's fused LM head (add_fused_lm_head,
    `model(..., labels=..., fused_lm_head=True)` as _get_per_token_logps_and_entropies calls it), a bf16
    reference, transformers' default fused AdamW. The resident terms are the sizes of the tensors; the three
    moments of a micro-batch (seal.policy.memory.TrainingMemory.moments) are the peaks of the tensors alive
    above the weights and gradients while the second micro-batch of an accumulation runs."""
    import torch
    from trl.trainer.utils import add_fused_lm_head

    from seal.rl.config import score_labelled_positions_only

    model = _small_model(arch, torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    score_labelled_positions_only()  # as a run's trainer scores them (seal.rl.config)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    reference = _small_model(arch, torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    ids = torch.randint(0, arch["vocab_size"], (1, tokens), generator=torch.Generator().manual_seed(0))
    peaks = step_peaks(model, ids, autocast=lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                       backward=torch.Tensor.backward, optimizer=optimizer,
                       held=lambda: [t for p in model.parameters() for t in (p, p.grad)],
                       # the final norm's backward starts once the head's has ended
                       starts={model.model.norm: "layer backward"})
    sizes = {
        "weights": sum(p.nbytes for p in model.parameters()),
        "optimizer": sum(t.nbytes for s in optimizer.state.values() for t in s.values() if t.dim()),
        "reference": sum(p.nbytes for p in reference.parameters()),
        "gradients": sum(p.grad.nbytes for p in model.parameters()),
    }
    return sizes | peaks


def step_peaks(model, ids, *, autocast, backward, optimizer, held, starts: dict) -> dict[str, int]:
    """The three moments of a micro-batch of `ids` through `model` (TRL's fused LM head under `autocast`, the loss
    through `backward`): an accumulation's first micro-batch, an optimizer step (AdamW's state exists from then
    on) and its second (the gradients of an accumulation exist from then on) run untracked; then a third is
    tracked (LiveTensors, storage resizes included) above the tensors `held()` returns. The forward and, from
    its end, the head's backward are phases; `starts` names the phase each module's backward opens ("" ends
    the count)."""
    def micro_batch(tracker: LiveTensors | None = None) -> None:
        with autocast():
            out = model(input_ids=ids, attention_mask=ids.new_ones(ids.shape), labels=ids, fused_lm_head=True)
        if tracker is not None:
            tracker.phase = "head backward"
        backward(out.log_probs.sum() + out.entropy.sum() * 0)

    micro_batch()
    optimizer.step()
    micro_batch()
    tracker = LiveTensors()
    for tensor in held():
        tracker.register(tensor)
    base = tracker.now
    hooks = [module.register_full_backward_pre_hook(lambda *_, name=name: setattr(tracker, "phase", name))
             for module, name in starts.items()]
    tracker.phase = "forward"
    with tracker.mode(), tracker.resizes():
        micro_batch(tracker)
    for hook in hooks:
        hook.remove()
    return {phase: peak - base for phase, peak in tracker.peaks.items()}


def measure_fsdp2_steps(archs: list[dict], tokens: int, world: int = 2) -> list[dict[str, int]]:
    """Bytes held by rank 0 of a training step of each of `archs` under launch.sharding=fsdp2 on `world` gloo
    ranks (experiments/measure/fsdp2_step.py, started by torchrun as a GPU node's ranks are): its shards of
    the weights, the optimizer state and the gradients, and the three moments of a micro-batch as
    measure_training_step counts them under ddp."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rank0.json"
        proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node", str(world), "-m",
                               "experiments.measure.fsdp2_step", str(out), json.dumps(archs), str(tokens)],
                              cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"the FSDP2 step's ranks failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(out.read_text())


def measure_ddp_buckets(arch: dict) -> int:
    """Bytes of the gradient buckets torch's DDP allocates for `arch` with accelerate's arguments (transformers'
    Trainer passes find_unused_parameters only; bucket_cap_mb and gradient_as_bucket_view keep torch's
    defaults), on a one-rank gloo group: the sizes its logging data reports."""
    import os
    import tempfile

    import torch
    import torch.distributed as dist
    from accelerate.utils import DistributedDataParallelKwargs

    model = _small_model(arch, torch.float32)
    kwargs = DistributedDataParallelKwargs(find_unused_parameters=False).to_kwargs()
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1)
        try:
            ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
            sizes = str(ddp._get_ddp_logging_data()["bucket_sizes"])
        finally:
            dist.destroy_process_group()
    return sum(int(size) for size in sizes.split(","))
