"""bfcl-eval's agentic check, shared by BFCL V4 memory and web search: the last model message that made
no call must contain an acceptable answer (`agentic_checker`)."""

from __future__ import annotations

import json
from typing import Any

from seal.env.entry import Entry, prepare_bfcl_import
from seal.env.benchmarks.base import Benchmark, one_turn_verdict, overflow_verdict
from seal.env.verifier import Verdict

# Verdict error types that are not bfcl-eval's own
NO_FINAL_ANSWER = "agentic:no_last_message"
ANSWER_NOT_FOUND = "agentic:answer_not_found"


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


class Agentic(Benchmark):
    """Episodes played like multi-turn ones (calls executed), checked on their final text answer."""

    def verdict(self, episode: Any) -> Verdict:
        if episode.ended == "context_overflow":
            return overflow_verdict(episode.entry)
        return one_turn_verdict(episode.entry, *check_agentic(episode.entry, [s for turn in episode.steps for s in turn]))


def agentic_reply(answer: str) -> str:
    """The scripted oracle's final answer, in the layout BFCL's agentic system message asks for."""
    return repr({"answer": answer, "context": "found with the tools"})


def unescaped(observation: str) -> str:
    # observations are the backends' results as JSON text; read their strings back
    try:
        return json.dumps(json.loads(observation), ensure_ascii=False)
    except ValueError:
        return observation
