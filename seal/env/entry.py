"""A benchmark entry, the one type every benchmark of seal.env.benchmarks yields, and the import of
bfcl-eval, whose loaders most of those entries are read with."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def prepare_bfcl_import() -> None:
    # bfcl-eval creates result/score/lock folders under BFCL_PROJECT_ROOT when imported; keep them
    # out of site-packages and out of the repository.
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seal" / "bfcl"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(cache))


@dataclass(frozen=True, eq=False)
class Entry:
    """One benchmark entry. Treat every field as read-only: episodes deep-copy what they mutate."""

    id: str
    category: str
    scenario: int
    # per turn, the benchmark's messages (one user message, or [] for a miss_func holdout turn)
    turns: list[list[dict[str, str]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    # tool docs shown at the start (holdout functions removed)
    functions: list[dict[str, Any]]
    # turn index -> tool docs delivered at that turn (miss_func only)
    holdout: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    # per turn, the gold call strings; [] means the correct behaviour is to make no call
    gold: list[list[str]] = field(default_factory=list)
    # how the entry's benchmark checks it (the benchmark's own detail): "multi_turn" (BFCL V3), "agentic"
    # (BFCL V4: the final text answer), "ast" (one reply whose calls are checked unexecuted),
    # "relevance"/"irrelevance" (one reply that must / must not contain a call)
    kind: str = "multi_turn"
    # agentic: the acceptable answers; ast: BFCL's possible answer (per expected call, the acceptable
    # values of every argument)
    answers: list[Any] = field(default_factory=list)
    # the registered benchmark that plays and checks the entry (seal.env.benchmarks)
    benchmark: str = "bfcl_v3"

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def visible_function_names(self, turn: int) -> frozenset[str]:
        """Names of the tools the model has been shown by the start of `turn`."""
        names = {doc["name"] for doc in self.functions}
        for at, docs in self.holdout.items():
            if at <= turn:
                names.update(doc["name"] for doc in docs)
        return frozenset(names)

    def docs_by_name(self) -> dict[str, dict[str, Any]]:
        docs = {doc["name"]: doc for doc in self.functions}
        for extra in self.holdout.values():
            docs.update({doc["name"]: doc for doc in extra})
        return docs

    def to_bfcl(self) -> dict[str, Any]:
        """The entry in the layout the official checker expects."""
        return {
            "id": self.id,
            "initial_config": self.initial_config,
            "involved_classes": self.involved_classes,
        }
