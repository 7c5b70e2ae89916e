"""bfcl-eval's out-of-domain categories (V4 memory and web search, single turn) read as `Entry` objects
with its own loaders, so questions, tool docs, system messages and ids are the official ones."""

from __future__ import annotations

import functools
import json
from typing import Any

from seal.env.entry import Entry, prepare_bfcl_import


@functools.lru_cache(maxsize=None)
def raw_category(category: str, answers_base: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """bfcl-eval's entries of `category` and their possible answers by id. The answers of memory and web
    search are shared by every backend or setting and carry the base name (memory_0-customer-0 for
    memory_kv_0-customer-0): `answers_base` names it, and they are keyed here by this category's ids
    (None: the category has no possible answers)."""
    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(category)
    answers: dict[str, Any] = {}
    if answers_base is not None:
        for item in load_ground_truth_entry(category):
            answers[item["id"].replace(answers_base, category, 1)] = item["ground_truth"]
    return entries, answers


def tool_safe(doc: dict[str, Any]) -> dict[str, Any]:
    """A tool doc as function-calling models see it in BFCL: dots in the name become underscores
    (`math.factorial` -> `math_factorial`; the memory and web-search tools have none); the single-turn
    checker maps them back."""
    return {**doc, "name": doc["name"].replace(".", "_")}


def load_entries(benchmark: str, category: str, answers_base: str | None, kind: str, config: Any) -> list[Entry]:
    """Every entry of `category` in bfcl-eval's order; `config(item)` gives an entry's initial config."""
    raw, answers = raw_category(category, answers_base)
    entries = []
    for number, item in enumerate(raw):
        item = json.loads(json.dumps(item))  # bfcl-eval's loaders share nested lists between calls
        entries.append(Entry(
            id=item["id"], category=category, scenario=number, turns=item["question"], initial_config=config(item),
            involved_classes=list(item.get("involved_classes", [])), functions=[tool_safe(d) for d in item["function"]],
            kind=kind, answers=list(answers.get(item["id"], [])), benchmark=benchmark,
        ))
    return entries
