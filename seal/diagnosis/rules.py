"""Psi: deterministic rules that label every turn of a verified episode from executable evidence.

Evidence per turn: the decoded steps (parse failures, executed CallRecords with their error kinds),
the tool schemas, and the official verifier's TurnCheck (status, gold replay, state diff). No model
text is interpreted beyond what the parser and executor already decided; nothing is evaluated.

Decision list for one turn (first match wins; this is the paper's priority, Table 5):

0. turns after an early end: not_played; the turn the episode ended in: step_limit or
   context_overflow; an unverifiable trajectory: checker_error.
1. gold is "no call":   any attempted call (executed or undecodable) -> spurious_tool_call,
                        otherwise correct_abstention.
2. the official check passes -> pass.
3. invalid_tool_call:   an undecodable call, a call the parser refused, an unknown or blocked
                        function, or a tool not yet shown at this turn (miss_func holdouts).
4. argument_mismatch:   a call that does not bind to the signature, or breaks the schema (missing
                        required field, unknown argument, wrong type, value outside the allowed
                        values). A call identical to a gold call of the entry is never flagged.
5. recovery_failure:    a call returned an execution error the gold calls did not also get, and
                        the model did not make good: no later call to the same tool succeeded, or
                        fewer calls to that tool succeeded than gold makes.
6. state_mismatch:      (official instance_state_mismatch) the calls execute but the state is
                        wrong. Refined as instance_mismatch when every gold tool was called but
                        with other targets/values (right operation, wrong instance).
7. empty_turn_model_response: no call at all although gold has calls (official type).
8. missing_tool_call:   results mismatch and some gold tool was never called in the turn.
9. instance_mismatch:   results mismatch, every gold tool called, some with other values.
10. response_mismatch:  results mismatch although the turn's gold calls were all made.

Reading of the priority: Table 5 puts state_mismatch (3) before recovery_failure (4) and defines
it as "executes but wrong state". A call that returned an error did not execute, so an
unrecovered error is reported as recovery_failure even when the state it failed to change then
mismatches; a turn whose errors were all recovered can still be a state_mismatch.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from seal.diagnosis import labels as L
from seal.diagnosis.schema import bind_arguments, check_call, tool_registry
from seal.env.benchmark import Entry
from seal.env.calls import ToolCall, UnsafeCall, parse_call
from seal.env.episode import StepRecord
from seal.env.executor import CallRecord
from seal.env.verifier import (
    CONTEXT_OVERFLOW,
    EMPTY_TURN,
    FORCE_TERMINATED,
    INFERENCE_ERROR,
    RESPONSE_MISMATCH,
    STATE_MISMATCH,
    TurnCheck,
    Verdict,
)

INVALID_ERRORS = frozenset({"unsafe", "unknown_function", "blocked"})
EXECUTION_ERRORS = frozenset({"exception", "backend_error", "resource_limit"})


def canonical(call: ToolCall) -> tuple[str, str]:
    """A call with positional arguments bound to their names, for exact comparison."""
    spec = tool_registry().get(call.name)
    if spec is None:
        return call.name, repr((call.args, sorted(call.kwargs.items(), key=lambda kv: kv[0])))
    bound, _ = bind_arguments(call, spec)
    return call.name, repr(sorted(bound.items(), key=lambda kv: kv[0]))


def snapshot(record: CallRecord) -> ToolCall | None:
    """The call as the model wrote it. `record.call` can share lists with backend state that later
    calls mutate (post_tweet keeps its `mentions` list), so the recorded text is parsed again."""
    if record.call is None:
        return None
    try:
        return parse_call(record.text)
    except UnsafeCall:
        return record.call


def _all_gold(entry: Entry) -> frozenset[tuple[str, str]]:
    """Every gold call of the entry, canonical. The benchmark's gold breaks its own schema a few times
    (close_ticket with a string id); a call identical to a gold call is never an argument error."""
    cached = _ALL_GOLD.get(entry.id)
    if cached is None:
        calls = []
        for turn in entry.gold:
            for text in turn:
                try:
                    calls.append(canonical(parse_call(text)))
                except UnsafeCall:
                    pass
        cached = _ALL_GOLD[entry.id] = frozenset(calls)
    return cached


_ALL_GOLD: dict[str, frozenset[tuple[str, str]]] = {}


def _gold_calls(check: TurnCheck, entry: Entry) -> list[ToolCall]:
    out = []
    for text in entry.gold[check.index]:
        try:
            out.append(parse_call(text))
        except UnsafeCall:
            pass
    return out


def _unrecovered_error(
    records: list[CallRecord], gold_records: list[CallRecord], gold: list[ToolCall]
) -> bool:
    """An execution error the gold calls did not also get, after which the model did not make good:
    no later successful call to the same tool, or fewer successful calls to it than gold makes."""
    expected = {r.observation for r in gold_records if not r.ok}
    gold_count = Counter(c.name for c in gold)
    ok_count = Counter(r.call.name for r in records if r.ok and r.call is not None)
    for i, record in enumerate(records):
        if record.error not in EXECUTION_ERRORS or record.observation in expected or record.call is None:
            continue
        name = record.call.name
        retried = any(later.ok and later.call and later.call.name == name for later in records[i + 1 :])
        if not retried or ok_count[name] < gold_count[name]:
            return True
    return False


def diagnose_turn(entry: Entry, check: TurnCheck, steps: list[StepRecord]) -> str:
    """The label of one played turn (see the module docstring for the rules)."""
    records = [r for step in steps for r in step.calls]
    parse_failures = [f for step in steps for f in step.parse_failures]
    if check.gold_empty:
        return L.SPURIOUS_TOOL_CALL if records or parse_failures else L.CORRECT_ABSTENTION
    if check.status == "pass":
        return L.PASS
    if not check.failed:
        return L.CHECKER_ERROR  # a played turn with gold calls is always checked

    visible = entry.visible_function_names(check.index)
    if parse_failures or any(
        r.error in INVALID_ERRORS or (r.call is not None and r.call.name not in visible) for r in records
    ):
        return L.INVALID_TOOL_CALL

    gold = _gold_calls(check, entry)
    gold_canon = Counter(canonical(c) for c in gold)
    called = [c for r in records if (c := snapshot(r)) is not None]
    if any(r.error == "bad_arguments" for r in records) or any(
        canonical(c) not in _all_gold(entry) and check_call(c) for c in called
    ):
        return L.ARGUMENT_MISMATCH

    if _unrecovered_error(records, check.gold_calls, gold):
        return L.RECOVERY_FAILURE

    all_gold_tools = not (Counter(c.name for c in gold) - Counter(c.name for c in called))
    other_values = bool(gold_canon - Counter(canonical(c) for c in called))
    if check.status == STATE_MISMATCH:
        return L.INSTANCE_MISMATCH if all_gold_tools and other_values else L.STATE_MISMATCH
    if check.status == EMPTY_TURN:
        return L.EMPTY_TURN
    if check.status == RESPONSE_MISMATCH:
        if not all_gold_tools:
            return L.MISSING_TOOL_CALL
        return L.INSTANCE_MISMATCH if other_values else L.RESPONSE_MISMATCH
    return L.CHECKER_ERROR


def diagnose(entry: Entry, verdict: Verdict, steps: list[list[StepRecord]]) -> list[str]:
    """One label per turn of `entry` (len == entry.num_turns).

    `steps` is the episode's per-turn list of StepRecords (shorter than the entry when the episode
    ended early); `verdict` is the official verification of the same episode.
    """
    n = entry.num_turns
    if verdict.error_type == INFERENCE_ERROR or len(verdict.turns) != n:
        return [L.CHECKER_ERROR] * n
    labels = [L.NOT_PLAYED] * n
    terminal: tuple[int, str] | None = None
    if verdict.error_type == FORCE_TERMINATED and steps:
        terminal = (min(len(steps), n) - 1, L.STEP_LIMIT)
    elif verdict.error_type == CONTEXT_OVERFLOW:
        terminal = (max(min(len(steps), n) - 1, 0), L.CONTEXT_OVERFLOW)
    for t in range(min(len(steps), n)):
        check = verdict.turns[t]
        labels[t] = L.CHECKER_ERROR if check.status == "not_played" else diagnose_turn(entry, check, steps[t])
    if terminal is not None:
        labels[terminal[0]] = terminal[1]
    return labels


def diagnose_episode(episode: Any) -> list[str]:
    """Labels of a finished seal.env.Episode (verifies it first)."""
    return diagnose(episode.entry, episode.verdict(), episode.steps)
