"""BFCL's single-turn Python categories (a check that multi-turn RL kept single-turn function calling):
one reply per entry, its calls checked unexecuted by bfcl-eval's `ast_checker` (irrelevance: no call may
be made; relevance: a call must be made)."""

from __future__ import annotations

import functools
from typing import Any

from seal.env.entry import Entry, prepare_bfcl_import
from seal.env.benchmarks.base import ORACLE_REPLY, Benchmark, one_turn_verdict, overflow_verdict, register
from seal.env.benchmarks.bfcl_eval_data import load_entries, raw_category
from seal.env.calls import ToolCall
from seal.env.verifier import Verdict

# the Python single-turn categories (BFCL's "python" collection)
AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple",
                  "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


def kind_of(category: str) -> str:
    """How a category is checked: "ast" (the calls against the possible answer), "irrelevance" (no call
    may be made) or "relevance" (a call must be made)."""
    if category in ("irrelevance", "live_irrelevance"):
        return "irrelevance"
    if category == "live_relevance":
        return "relevance"
    if category in AST_CATEGORIES:
        return "ast"
    raise KeyError(f"{category!r} is not a single-turn category; choose from {', '.join(BFCLSingleTurn.CATEGORIES)}")


def _answers_base(category: str) -> str | None:
    return category if kind_of(category) == "ast" else None  # (ir)relevance has no possible answers


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
    raw, _ = raw_category(category, _answers_base(category))
    return {item["id"]: item["function"] for item in raw}


def _official_docs(entry: Entry) -> list[dict[str, Any]]:
    """The entry's tool docs as bfcl-eval gives them (dotted names), which its checker reads."""
    return _official_docs_by_id(entry.category)[entry.id]


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


def _pick(acceptable: Any, required: bool = False) -> tuple[bool, Any]:
    """(whether to give the argument, its value) for a BFCL possible answer: a list of acceptable values,
    where "" allows leaving the argument out (done here unless the tool doc requires it)."""
    if not isinstance(acceptable, list):
        return True, acceptable  # a nested value given as itself
    if "" in acceptable and not required:
        return False, None
    acceptable = [v for v in acceptable if v != ""]
    if not acceptable:
        return True, []
    return True, _resolve(acceptable[0])


def _resolve(value: Any) -> Any:
    # inside a possible answer, a dict's values are again lists of acceptable values
    if isinstance(value, dict):
        return {k: v for k, (given, v) in ((k, _pick(vals)) for k, vals in value.items()) if given}
    if isinstance(value, list):
        return [_resolve(item) for item in value]
    return value


def possible_answer_calls(entry: Entry) -> list[ToolCall]:
    """A single-turn entry's possible answer as calls (the first acceptable value of every argument, in
    the tool names the model is shown); no call for an irrelevance entry; the first tool, called with no
    arguments, for a relevance entry (which has no possible answer: any call passes)."""
    if entry.kind == "relevance":
        return [ToolCall(entry.functions[0]["name"])]
    calls, docs = [], entry.docs_by_name()
    for expected in entry.answers:
        (name, arguments), = expected.items()
        name = name.replace(".", "_")
        required = set(docs[name].get("parameters", {}).get("required", []))
        kwargs = {k: v for k, (given, v) in ((k, _pick(vals, k in required)) for k, vals in arguments.items()) if given}
        calls.append(ToolCall(name, (), kwargs))
    return calls


@register("bfcl_single_turn")
class BFCLSingleTurn(Benchmark):
    CATEGORIES = AST_CATEGORIES + ("irrelevance", "live_irrelevance", "live_relevance")

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        return load_entries(self.name, category, _answers_base(category), kind_of(category), lambda item: {})

    def single_reply(self, entry: Entry) -> bool:
        return True

    def verdict(self, episode: Any) -> Verdict:
        if episode.ended == "context_overflow":
            return overflow_verdict(episode.entry)
        played = [step for turn in episode.steps for step in turn]
        reply = played[0] if played else None
        calls = [r.call for r in reply.calls] if reply else []
        return one_turn_verdict(episode.entry, *check_single_turn(episode.entry, calls, bool(reply and reply.parse_failures)))

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str:
        """The possible answer (irrelevance: a reply without a call)."""
        calls = possible_answer_calls(entry)
        return fmt.render_calls(calls, entry.docs_by_name()) if calls else ORACLE_REPLY
