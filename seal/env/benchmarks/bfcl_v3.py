"""BFCL V3 multi-turn (base, miss_func, miss_param, long_context): what SEAL trains and evaluates on.

Entries come from seal.env.benchmark (bfcl-eval's loaders), the verdict from seal.env.verifier (the
official multi-turn checker); the episode protocol is the base class's."""

from __future__ import annotations

from typing import Any

from seal.env.benchmark import CATEGORIES, Entry, load_benchmark
from seal.env.benchmarks.base import Benchmark, register
from seal.env.verifier import Verdict, verify


@register("bfcl_v3")
class BFCLV3(Benchmark):
    CATEGORIES = CATEGORIES
    from_split = True

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        return [e for e in load_benchmark().values() if e.category == category]

    def verdict(self, episode: Any) -> Verdict:
        return verify(episode.entry, episode.result, context_overflow=episode.ended == "context_overflow")
