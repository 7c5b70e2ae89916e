"""The scripted oracle: not a model. It plays each turn's gold calls through the full rollout engine.

In every turn it writes the turn's gold calls in the chosen tool format as one assistant message,
then a plain-text reply that ends the turn (just the reply when the gold is empty). Its text is
tokenised with the embedded SmolLM2 tokenizer and goes through the same rendering, parsing,
execution, masking and verification path as a model's, so a 100% score proves the harness.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from seal.env.calls import ToolCall, parse_call
from seal.policy.backbones import Policy, embedded_tokenizer

# What the scripted oracle says when it has no (more) calls to make in a turn.
ORACLE_REPLY = "I have completed the requested operations."


def oracle_message(episode: Any, entry: Any, fmt: Any) -> str:
    """The scripted step: the turn's gold calls first, then a plain-text reply that ends the turn."""
    if entry.kind != "multi_turn":
        return _ood_message(episode, entry, fmt)
    gold = entry.gold[episode.turn]
    if gold and not episode.steps[-1]:
        return fmt.render_calls([parse_call(c) for c in gold], entry.docs_by_name())
    return ORACLE_REPLY


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


def possible_answer_calls(entry: Any) -> list[ToolCall]:
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


# the memory calls with which the oracle files an answer and reads it back, per memory backend
_MEMORY_WRITE = {"kv": "archival_memory_add(key={key!r}, value={text!r})", "vector": "archival_memory_add(text={text!r})",
                 "rec_sum": "memory_append(text={text!r})"}
_MEMORY_READ = {"kv": "archival_memory_retrieve(key={key!r})", "vector": "archival_memory_retrieve_all()",
                "rec_sum": "memory_retrieve()"}


def agentic_reply(answer: str) -> str:
    """A final answer in the layout BFCL's agentic system message asks for."""
    return repr({"answer": answer, "context": "found with the tools"})


def _ood_message(episode: Any, entry: Any, fmt: Any) -> str:
    """The scripted trajectory of an out-of-domain entry. Single turn: the possible answer (irrelevance:
    a reply without a call). Memory: the first prerequisite conversation of a scenario files every
    question's answer in the memory backend (the later ones just reply); a question reads its answer back
    and gives it only if the memory returned it. Web search: search for the question, fetch the first
    result, and answer with an acceptable answer only if the fetched page contains it."""
    from seal.env import ood

    steps = episode.steps[-1]
    docs = entry.docs_by_name()
    if entry.kind in ("ast", "relevance", "irrelevance"):
        calls = possible_answer_calls(entry)
        return fmt.render_calls(calls, docs) if calls else ORACLE_REPLY
    if entry.category in ood.MEMORY_CATEGORIES:
        backend = entry.category[len("memory_"):]
        if ood.is_prereq(entry):
            if entry.id.endswith("-0") and episode.turn == 0 and not steps:
                answers = ood.scenario_answers(entry.category, ood.memory_scenario(entry))
                calls = [_MEMORY_WRITE[backend].format(key=k, text=f"{k}: {a}|") for k, a in answers.items()]
                return fmt.render_calls([parse_call(c) for c in calls], docs)
            return ORACLE_REPLY
        key = ood.memory_answer_key(entry.id)
        if not steps:
            return fmt.render_calls([parse_call(_MEMORY_READ[backend].format(key=key))], docs)
        found = re.search(re.escape(key) + r": (.*?)\|", _unescaped(steps[-1].calls[0].observation))
        return agentic_reply(found.group(1) if found else "I do not know")
    # web search
    if not steps:
        question = next(m["content"] for m in episode.turns[0] if m["role"] == "user")
        return fmt.render_calls([ToolCall("search_engine_query", (), {"keywords": question})], docs)
    if len(steps) == 1:
        try:  # the results come back as Python's rendering of a list of dicts (bfcl-eval's stringify)
            url = ast.literal_eval(steps[0].calls[0].observation)[0]["href"]
        except (ValueError, SyntaxError, LookupError, TypeError):
            return agentic_reply("I do not know")
        return fmt.render_calls([ToolCall("fetch_url_content", (), {"url": url, "mode": "truncate"})], docs)
    page = _unescaped(steps[-1].calls[0].observation).lower()
    known = [a for a in entry.answers if a.lower() in page]
    return agentic_reply(known[0] if known else "I do not know")


def _unescaped(observation: str) -> str:
    # observations are the backends' results as JSON text; read their strings back
    try:
        return json.dumps(json.loads(observation), ensure_ascii=False)
    except ValueError:
        return observation


class OracleBackbone:
    trainable = False
    oracle = True
    # the script is played by the rollout engine itself; no generation backend is built
    generation = "transformers"

    def __init__(
        self,
        name: str = "oracle",
        tool_format: str = "qwen_xml",
        context_length: int = 1_000_000,
        params_b: float = 0.0,
        lora: Any = None,
        **extra: Any,
    ):
        self.name, self.tool_format, self.context_length = name, tool_format, int(context_length)
        self.params_b, self.lora, self.extra = float(params_b), lora, extra
        self.dtype = None

    def load(self) -> Policy:
        import torch

        return Policy(model=None, tokenizer=embedded_tokenizer(), device=torch.device("cpu"))

    def describe(self) -> str:
        return (
            f"scripted oracle (not a model): replays each turn's gold calls in the {self.tool_format} format, "
            "tokenised with the SmolLM2 tokenizer; a harness self-check and upper bound"
        )

    def peft_config(self):
        return None
