"""Psi: deterministic rules that give every turn of a verified episode an outcome and a cause.

Evidence per turn: the decoded steps (parse failures, executed CallRecords with their error kinds),
the tool schemas, and the official verifier's TurnCheck (status, gold replay, state diff). No model
text is interpreted beyond what the parser and executor already decided; nothing is evaluated.

**Outcome** (the release's per-turn tag; see seal.diagnosis.labels for the vocabulary). Every turn
gets the official state and response checks of its own (the verifier checks every turn, with no
early return): gt_error > gold "no call" (spurious_tool_call if the model made a decoded call, else
correct_abstention) > empty_turn_model_response > instance_mismatch > state_mismatch >
response_mismatch > pass. An undecodable output is no call, as in BFCL. Turns after an early end:
correct_abstention where gold is "no call", else empty_turn_model_response.

**Cause**, decision list for one played turn (first match wins; the paper's Table 5 priority):

0. the turn the episode ended in: step_limit or context_overflow (whatever its outcome); turns
   after it: not_played; an unverifiable trajectory: checker_error; a broken gold: gt_error.
1. gold is "no call":   spurious_tool_call on a spurious_tool_call outcome, else None.
2. outcome pass -> None.
3. inherited_state:     the turn's own calls pass the official check when replayed from the state
                        the gold calls of the earlier turns leave: an earlier turn left the state
                        wrong and this turn did the right thing (never a recovery_failure then).
4. invalid_tool_call:   an undecodable call, a call the parser refused, an unknown or blocked
                        function, a tool not yet shown at this turn (miss_func holdouts), or an
                        output the release protocol refused unexecuted (its `[ERROR]` answer: a
                        malformed block, or a tool outside the turn's list).
5. argument_mismatch:   a call that does not bind to the signature, or breaks the schema (missing
                        required field, unknown argument, wrong type, value outside the allowed
                        values). A call identical to a gold call of the entry is never flagged.
6. recovery_failure:    a call returned an execution error the gold calls did not also get, and
                        the model did not make good: no later call to the same tool succeeded, or
                        fewer calls to that tool succeeded than gold makes.
7. state_mismatch:      (official instance_state_mismatch) the calls execute but the state is
                        wrong. Refined as value_mismatch when every gold tool was called but with
                        other argument values.
8. empty_turn_model_response: no call at all although gold has calls (official type).
9. missing_tool_call:   results mismatch and some gold tool was never called in the turn.
10. value_mismatch:     results mismatch, every gold tool called, some with other values.
11. response_mismatch:  results mismatch although the turn's gold calls were all made.

Reading of the priority: Table 5 puts state_mismatch (3) before recovery_failure (4) and defines
it as "executes but wrong state". A call that returned an error did not execute, so an
unrecovered error is reported as recovery_failure even when the state it failed to change then
mismatches; a turn whose errors were all recovered can still be a state_mismatch. inherited_state
comes first among the failures because it is the official checker's own judgement of the turn's
calls: a turn that would pass from the right state is charged to the turn that broke the state.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from seal.diagnosis import labels as L
from seal.env.schema import bind_arguments, check_call, tool_registry
from seal.env.entry import Entry
from seal.env.calls import ToolCall, UnsafeCall, parse_call
from seal.env.episode import StepRecord
from seal.env.executor import BAD_ARGUMENTS, CallRecord
from seal.env.verifier import (
    CONTEXT_OVERFLOW,
    EMPTY_TURN,
    FORCE_TERMINATED,
    INFERENCE_ERROR,
    NOT_PLAYED,
    RESPONSE_MISMATCH,
    STATE_MISMATCH,
    TurnCheck,
    Verdict,
    check_from_gold_prior,
)

INVALID_ERRORS = frozenset({"unsafe", "unknown_function", "blocked"})
EXECUTION_ERRORS = frozenset({"exception", "backend_error", "resource_limit"})
# a gold call that fails like this could not be run as written: the ground truth is broken
# (a backend's own {"error": ...} answer is left out: a gold call may mean to provoke one)
GOLD_BROKEN = INVALID_ERRORS | EXECUTION_ERRORS.difference({"backend_error"}) | {BAD_ARGUMENTS}


def canonical(call: ToolCall) -> tuple[str, str]:
    """A call with positional arguments bound to their names, for exact comparison."""
    spec = tool_registry().get(call.name)
    if spec is None:
        return call.name, repr((call.args, sorted(call.kwargs.items())))
    bound, _ = bind_arguments(call, spec)
    return call.name, repr(sorted(bound.items()))


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
    cached = _ALL_GOLD.get(entry.id)  # pragma: no mutate (a miss rebuilds the same set)
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


def turn_outcome(check: TurnCheck) -> str:
    """The release's outcome tag of one played turn, from the official per-turn checks."""
    if check.status == NOT_PLAYED:
        return L.CHECKER_ERROR  # a played turn is always checked
    if any(r.error in GOLD_BROKEN for r in check.gold_calls):
        return L.GT_ERROR
    if check.gold_empty:
        return L.SPURIOUS_TOOL_CALL if check.model_calls else L.CORRECT_ABSTENTION
    if check.status == EMPTY_TURN:
        return L.EMPTY_TURN
    if check.model_classes != check.gold_classes:
        return L.INSTANCE_MISMATCH
    return {STATE_MISMATCH: L.STATE_MISMATCH, RESPONSE_MISMATCH: L.RESPONSE_MISMATCH, "pass": L.PASS}.get(
        check.status, L.CHECKER_ERROR
    )


def turn_cause(
    entry: Entry, check: TurnCheck, steps: list[StepRecord], outcome: str, earlier_results: list[str]
) -> str | None:
    """The cause of one played turn (see the module docstring for the rules). `earlier_results` are
    the model's results of the turns before it."""
    if outcome in (L.CHECKER_ERROR, L.GT_ERROR):
        return outcome
    if check.gold_empty:
        return L.SPURIOUS_TOOL_CALL if outcome == L.SPURIOUS_TOOL_CALL else None
    if outcome == L.PASS:
        return None
    records = [r for step in steps for r in step.calls]
    # a turn without calls cannot have been right; the first turn has no earlier state to inherit.
    # Only a shortcut (the replay could not pass in either case): no mutant of it changes a label, and
    # inherited_state from turn 1 on is tested (test_inherited_failure_base_98)
    if records and check.index > 0:  # pragma: no mutate
        calls = [r.text for r in check.model_calls]
        if check_from_gold_prior(entry, check.index, calls, earlier_results) == "pass":
            return L.INHERITED_STATE

    parse_failures = [f for step in steps for f in step.parse_failures]
    visible = entry.visible_function_names(check.index)
    # a refused output (protocol=release) ran nothing and left no record: its refusal is the evidence
    refused = any(step.error for step in steps)
    if parse_failures or refused or any(
        r.error in INVALID_ERRORS or (r.call is not None and r.call.name not in visible) for r in records
    ):
        return L.INVALID_TOOL_CALL

    gold = _gold_calls(check, entry)
    gold_canon = Counter(canonical(c) for c in gold)
    called = [c for r in records if (c := snapshot(r)) is not None]
    if any(r.error == BAD_ARGUMENTS for r in records) or any(
        canonical(c) not in _all_gold(entry) and check_call(c) for c in called
    ):
        return L.ARGUMENT_MISMATCH

    if _unrecovered_error(records, check.gold_calls, gold):
        return L.RECOVERY_FAILURE

    all_gold_tools = not (Counter(c.name for c in gold) - Counter(c.name for c in called))
    other_values = bool(gold_canon - Counter(canonical(c) for c in called))
    if outcome == L.STATE_MISMATCH:
        return L.VALUE_MISMATCH if all_gold_tools and other_values else L.STATE_MISMATCH
    if outcome == L.EMPTY_TURN:
        return L.EMPTY_TURN
    if outcome == L.RESPONSE_MISMATCH:
        if not all_gold_tools:
            return L.MISSING_TOOL_CALL
        return L.VALUE_MISMATCH if other_values else L.RESPONSE_MISMATCH
    return L.CHECKER_ERROR


def diagnose(entry: Entry, verdict: Verdict, steps: list[list[StepRecord]]) -> list[L.TurnLabel]:
    """One TurnLabel (outcome, cause) per turn of `entry` (len == entry.num_turns).

    `steps` is the episode's per-turn list of StepRecords (shorter than the entry when the episode
    ended early); `verdict` is the official verification of the same episode (left unchanged).
    """
    n = entry.num_turns
    if verdict.error_type == INFERENCE_ERROR or len(verdict.turns) != n:
        return [L.TurnLabel(L.CHECKER_ERROR, L.CHECKER_ERROR)] * n
    played = min(len(steps), n)
    terminal: tuple[int, str] | None = None
    if verdict.error_type == FORCE_TERMINATED and played:
        terminal = (played - 1, L.STEP_LIMIT)
    elif verdict.error_type == CONTEXT_OVERFLOW:
        terminal = (max(played - 1, 0), L.CONTEXT_OVERFLOW)
    labels = []
    results: list[str] = []
    for t, check in enumerate(verdict.turns):
        if t >= played:
            # the release still tags turns after an early end, as if the model had not answered
            outcome = L.CORRECT_ABSTENTION if check.gold_empty else L.EMPTY_TURN
            labels.append(L.TurnLabel(outcome, L.NOT_PLAYED))
            continue
        outcome = turn_outcome(check)
        labels.append(L.TurnLabel(outcome, turn_cause(entry, check, steps[t], outcome, results)))
        results += [r.observation for r in check.model_calls]
    if terminal is not None:
        t, cause = terminal
        labels[t] = L.TurnLabel(labels[t].outcome, cause)
    return labels


def steps_from_verdict(verdict: Verdict, played: int) -> list[list[StepRecord]]:
    """Per-turn steps for a trajectory known only as call strings (task=score): one step per played
    turn holding the calls the verifier executed. There is no raw text, so no parse failures."""
    return [[StepRecord("", list(check.model_calls))] for check in verdict.turns[:played]]


def diagnose_result(entry: Entry, result: list, verdict: Verdict) -> list[L.TurnLabel]:
    """Labels of a trajectory in BFCL's result layout (per turn, per step, call strings)."""
    played = len(result) if isinstance(result, list) else 0  # pragma: no mutate (diagnose answers a non-list first)
    return diagnose(entry, verdict, steps_from_verdict(verdict, played))


def diagnose_episode(episode: Any) -> list[L.TurnLabel]:
    """Labels of a finished seal.env.Episode (verifies it first)."""
    return diagnose(episode.entry, episode.verdict(), episode.steps)
