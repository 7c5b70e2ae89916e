"""The preflight's model: the backbone's published shape (or the tiny one) built with random weights and
saved where the runs load it, in a child process; the throughput step on it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from experiments.measure.preflight.runs import first_line, peak
from experiments.measure.preflight.steps import CONF, SEED, THROUGHPUT_EPISODES, TINY_SHAPE, Failure, Step
from seal.errors import UserError

def compose(name: str, overrides: list[str], mine: list[str] | None = None) -> Any:
    """The run config of backbone `name` with `overrides`, as run.py composes it; one sentence naming the user's
    overrides (`mine`, default: all of them) if they do not apply."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=[f"backbone={name}", *overrides])
    except Exception as exc:
        raise UserError(f"the overrides {' '.join(overrides if mine is None else mine)} do not apply to backbone "
                        f"{name}: {str(exc).strip().splitlines()[0]}") from exc


def published_backbone(name: str, overrides: list[str]) -> dict[str, Any]:
    """conf/backbone/<name>.yaml composed with the `backbone.` overrides (dtype, context length, ...)."""
    with_arch = sorted(p.stem for p in (CONF / "backbone").glob("*.yaml") if _yaml(p).get("arch"))
    if name not in with_arch:
        raise UserError(f"--backbone {name}: choose a backbone with a published architecture "
                        f"(`arch` in conf/backbone/<name>.yaml): {', '.join(with_arch)}")
    from omegaconf import OmegaConf

    from seal.policy.backbones import check_names

    cfg = compose(name, [o for o in overrides if o.startswith("backbone.")])
    bb = OmegaConf.to_container(cfg.backbone, resolve=True)
    check_names(bb["dtype"], bb["tool_format"], bb["generation"])
    return bb


def _yaml(path: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path))


def model_config(arch: dict[str, Any], tokenizer: Any, context_length: int, tiny: bool) -> Any:
    """The transformers config of the published architecture (TINY_SHAPE's sizes when tiny) with its published
    vocabulary size: the embedding and the LM head, and the logits every step computes, are the published
    model's (the tokenizer's ids cover the first rows, as Qwen's own tokenizer leaves rows of its padded
    vocabulary unused)."""
    from transformers import AutoConfig

    shape = {k: v for k, v in arch.items() if k != "model_type"}
    if tiny:
        shape |= TINY_SHAPE
        if "head_dim" in shape:
            # a published size too (Qwen3's 128 is not hidden / heads); the tiny shape's is hidden / heads
            shape["head_dim"] = TINY_SHAPE["hidden_size"] // TINY_SHAPE["num_attention_heads"]
    return AutoConfig.for_model(
        arch["model_type"], max_position_embeddings=context_length,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **shape,
    )


def model_folder(arch: dict[str, Any], context_length: int, tiny: bool, dtype: str, models_dir: str) -> tuple[Path, Any, Any]:
    """The folder of `models_dir` that holds (or will hold) the randomly initialised model, keyed by its config,
    with the embedded tokenizer and the config."""
    from transformers import AutoTokenizer

    from seal.io import short_hash
    from seal.policy.backbones import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    config = model_config(arch, tokenizer, context_length, tiny)
    key = short_hash(json.dumps([config.to_dict(), dtype, SEED, embedded_model_dir().name], sort_keys=True,
                                default=str))
    return Path(models_dir) / f"{'tiny' if tiny else 'published'}-{key}", tokenizer, config


def build_model(arch: dict[str, Any], context_length: int, tiny: bool, dtype: str, models_dir: str) -> dict[str, Any]:
    """Build (or find, when an earlier preflight built it) the randomly initialised model and its tokenizer
    in a folder of `models_dir` keyed by the config (model_folder); on CUDA when there is one. Returns its record."""
    import torch
    import transformers.utils.logging as hf_logging
    from transformers import AutoModelForCausalLM

    from seal.policy.backbones import _torch_dtype, _write_atomically

    hf_logging.disable_progress_bar()
    target, tokenizer, config = model_folder(arch, context_length, tiny, dtype, models_dir)
    started = time.perf_counter()

    def build(tmp: Path) -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(config, dtype=_torch_dtype(dtype))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"parameters": sum(p.numel() for p in model.parameters()), "dtype": dtype, "seed": SEED,
                  "tiny": tiny, "built_on": device, "tokenizer_size": len(tokenizer)}
        (tmp / "gpu_check_model.json").write_text(json.dumps(record))

    built = not target.exists()
    _write_atomically(target, build)
    record = json.loads((target / "gpu_check_model.json").read_text())
    return record | {"path": str(target), "built": built, "seconds": time.perf_counter() - started, "peak": peak()}


def build_in_a_child(*args: Any) -> dict[str, Any]:
    """build_model in a fresh process: this one never holds CUDA memory while the runs measure theirs."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(build_model, *args).result()
        except UserError:
            raise
        except Exception as exc:
            raise Failure(f"step build failed: {type(exc).__name__}: {first_line(str(exc))}") from exc


def embedding_note(arch: dict[str, Any], vocab: int, tokens: int, tiny: bool) -> str:
    """What the built model's embedding is: the published vocabulary, the tokenizer's ids in its first rows."""
    shape = f"tiny {arch['model_type']} shape {TINY_SHAPE}" if tiny else f"published {arch['model_type']} shape"
    matrices = "one tied matrix" if arch.get("tie_word_embeddings") else "embedding and LM head"
    return (f"{shape}, vocabulary {vocab:,} as published ({matrices}); the embedded SmolLM2 tokenizer's ids "
            f"cover its first {tokens:,} rows")


def measure_rollout(overrides: list[str], episodes: int) -> dict[str, Any]:
    """The bench's throughput row for the configured (built) backbone at `episodes` concurrent episodes."""
    import transformers

    from experiments.measure.rollout import _load, throughput_rows
    from seal.budget import Budget
    from seal.policy.rollout import RolloutEngine

    transformers.utils.logging.disable_progress_bar()  # the preflight prints its own lines only (as run.py's runs)
    cfg, backbone, policy = _load([*overrides, "backbone.generation=transformers"])
    engine = RolloutEngine.for_backbone(backbone, policy, Budget.from_config(cfg.budget))
    (row,) = throughput_rows(engine, concurrency=(episodes,))
    return row | {"peak": peak()}


def throughput_step(overrides: list[str]) -> Step:
    """measure_rollout in a fresh process (as build_in_a_child), printed and kept as a step."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            row = pool.submit(measure_rollout, overrides, THROUGHPUT_EPISODES).result()
        except UserError:
            raise
        except Exception as exc:
            raise Failure(f"step throughput failed: {type(exc).__name__}: {first_line(str(exc))}") from exc
    note = (f"{row['episodes']} episodes on {row['device']}: {row['tokens_per_s']:.0f} new tokens/s "
            f"({row['new_tokens']} new tokens in {row['seconds']:.1f} s; prefill of {row['prompt_tokens']} prompt tokens "
            f"{row['prefill_s']:.1f} s, decode {row['decode_tokens_per_s']:.0f} tokens/s)")
    print(f"step throughput: {note}", flush=True)
    return Step("throughput", time.perf_counter() - started, row.pop("peak"), note=note)


