"""Known failures, injected into gold trajectories of real entries (the diagnoser's validation set).

A recipe takes an entry and an RNG and returns a scripted trajectory (gold everywhere except where
it injects), the target turn, the play settings, and an acceptance check. The check confirms, from
the executor's and the official checker's outcome only, that the injection produced the failure it
intends, and returns the target turn's true TurnLabel (None: not confirmed): the cause the recipe
injects, and the outcome the release would tag (the official per-turn check of that turn, or what
the recipe fixes by construction). It never consults a diagnoser.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from seal.diagnosis import labels as L
from seal.diagnosis.rules import EXECUTION_ERRORS
from seal.env.schema import check_call, tool_registry
from seal.env.entry import Entry
from seal.env.calls import ToolCall, parse_call
from seal.env.episode import Episode, StepRecord
from seal.env.protocol import BFCL, Protocol
from seal.env.verifier import EMPTY_TURN, FORCE_TERMINATED, RESPONSE_MISMATCH, STATE_MISMATCH, Verdict

# Step limit used for the step_limit recipe (the benchmark's 20 would only cost time)
SMALL_STEP_LIMIT = 3


@dataclass
class Step:
    calls: list[ToolCall | str] = field(default_factory=list)
    parse_failures: list[tuple[str, str]] = field(default_factory=list)
    keep_turn: bool = False


Script = list[list[Step]]  # per turn, the model's steps before its closing plain-text answer


@dataclass
class Case:
    entry: Entry
    recipe: str
    target: int
    # the target turn's true labels (None: an injection the checker did not confirm)
    label: L.TurnLabel | None
    verdict: Verdict
    steps: list[list[StepRecord]]
    # further (turn, labels) pairs the same trajectory is scored on (turns after an early end)
    extra: list[tuple[int, L.TurnLabel]] = field(default_factory=list)


def gold_script(entry: Entry) -> Script:
    return [[Step([parse_call(c) for c in turn])] if turn else [] for turn in entry.gold]


def play(
    entry: Entry, script: Script, max_steps: int = 20, abort_after: int | None = None,
    abort_before: int | None = None, protocol: Protocol = BFCL,
):
    """Run a scripted trajectory through the episode protocol; returns (verdict, steps).

    `abort_after=t` ends the episode (context overflow) once turn t is played; `abort_before=t`
    right after turn t opens, before the model answers it (as the rollout engine does when the
    new user message leaves no room). `protocol` decides how the environment answers (BFCL's harness
    or the release's refusals)."""
    episode = Episode(entry, max_steps=max_steps, protocol=protocol)
    while (turn := episode.next_turn()) is not None:
        if abort_before is not None and turn.index == abort_before:
            episode.abort("context_overflow")
            break
        for step in script[turn.index]:
            outcome = episode.step(list(step.calls), raw="scripted", parse_failures=step.parse_failures,
                                   keep_turn=step.keep_turn)
            if outcome.turn_over:
                break
        if episode.in_turn:
            episode.step([], raw="Done.")
        if abort_after is not None and turn.index == abort_after:
            episode.abort("context_overflow")
    return episode.verdict(), episode.steps


# ---------------------------------------------------------------- evidence used for acceptance


def _turn_errors(steps: list[StepRecord], verdict: Verdict, t: int) -> list[str]:
    expected = {r.observation for r in verdict.turns[t].gold_calls if not r.ok}
    return [r.error for s in steps for r in s.calls if not r.ok and r.observation not in expected]


def _status(verdict: Verdict, t: int) -> str:
    return verdict.turns[t].status


_OFFICIAL_OUTCOME = {EMPTY_TURN: L.EMPTY_TURN, STATE_MISMATCH: L.STATE_MISMATCH,
                     RESPONSE_MISMATCH: L.RESPONSE_MISMATCH, "pass": L.PASS}


def checked_outcome(verdict: Verdict, t: int) -> str:
    """The release's tag for a played turn: gold "no call" -> spurious / abstention by whether the
    model made a call, else the official per-turn check's result."""
    check = verdict.turns[t]
    if check.gold_empty:
        return L.SPURIOUS_TOOL_CALL if check.model_calls else L.CORRECT_ABSTENTION
    return _OFFICIAL_OUTCOME[check.status]


def after_end(entry: Entry, turn: int) -> L.TurnLabel:
    """The release's tags for a turn after the episode ended early."""
    return L.TurnLabel(L.CORRECT_ABSTENTION if not entry.gold[turn] else L.EMPTY_TURN, L.NOT_PLAYED)


def _failed(verdict: Verdict, t: int) -> bool:
    return verdict.turns[t].failed


# ---------------------------------------------------------------- value mutations


def _bound(call: ToolCall) -> tuple[list[str], dict[str, Any]]:
    spec = tool_registry()[call.name]
    names = list(spec.params[: len(call.args)])
    return names, {**dict(zip(names, call.args)), **call.kwargs}


def _with_args(call: ToolCall, args: dict[str, Any]) -> ToolCall:
    """The call with all arguments passed by keyword."""
    return ToolCall(call.name, (), dict(args))


def _other_value(name: str, param: str, value: Any, rng: random.Random, erroring: bool) -> Any:
    allowed = tool_registry()[name].allowed.get(param)
    if allowed and isinstance(value, str):
        others = [v for v in allowed if v != value]
        return rng.choice(others) if others else None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return -abs(value) - 1000 if erroring else value + rng.choice([1, 2, 7])
    if isinstance(value, float):
        return -abs(value) - 1000.0 if erroring else round(value * 1.5 + 1.0, 2)
    if isinstance(value, str):
        return ("missing_" + value) if erroring else (value + rng.choice(["_2", "_new", "x"]))
    if isinstance(value, list) and value:
        return value[:-1]
    return None


_WRONG_TYPE = {
    "string": 12345,
    "integer": "twelve",
    "float": "1.5 units",
    "boolean": "yes",
    "array": "a, b",
    "dict": "key=value",
}

# ---------------------------------------------------------------- recipes
# A recipe takes (entry, rng) and returns (script, target turn, intended label, play kwargs,
# accept(verdict, steps) -> intended label or None). None from the recipe: not applicable.

Recipe = Callable[[Entry, random.Random], "tuple | None"]


def _call_turns(entry: Entry) -> list[int]:
    return [t for t, turn in enumerate(entry.gold) if turn]


def _multi_call_turn(entry: Entry, rng) -> int | None:
    """A random turn whose gold answer has at least two calls (None when the entry has none)."""
    turns = [t for t in _call_turns(entry) if len(entry.gold[t]) >= 2]
    return rng.choice(turns) if turns else None


def _empty_turns(entry: Entry) -> list[int]:
    return [t for t, turn in enumerate(entry.gold) if not turn]


def _pick_call(entry: Entry, rng: random.Random, where: Callable[[ToolCall], bool] = lambda c: True):
    spots = [
        (t, i) for t in _call_turns(entry) for i, text in enumerate(entry.gold[t]) if where(parse_call(text))
    ]
    return rng.choice(spots) if spots else None


def _accept_failed(cause: str, clean: bool = False):
    def accept(verdict, steps, t):
        if not _failed(verdict, t):
            return None
        if clean and _turn_errors(steps[t], verdict, t):
            return None
        return L.TurnLabel(checked_outcome(verdict, t), cause)

    return accept


PASSED = L.TurnLabel(L.PASS, None)


def _accept_pass(v, s, t):
    return PASSED if _status(v, t) == "pass" else None


def r_gold_turn(entry, rng):
    t = rng.choice(_call_turns(entry))
    return gold_script(entry), t, {}, _accept_pass


def r_split_steps(entry, rng):
    t = rng.choice(_call_turns(entry))
    script = gold_script(entry)
    script[t] = [Step([parse_call(c)]) for c in entry.gold[t]]
    return script, t, {}, _accept_pass


def r_recovered_parse_error(entry, rng):
    t = rng.choice(_call_turns(entry))
    script = gold_script(entry)
    script[t] = [Step([], [("<tool_call>{\"name\": ", "not valid JSON")], keep_turn=True)] + script[t]
    return script, t, {}, _accept_pass


def r_recovered_execution_error(entry, rng):
    spot = _pick_call(entry, rng, lambda c: bool(c.args or c.kwargs))
    if spot is None:
        return None
    t, i = spot
    call = parse_call(entry.gold[t][i])
    names, args = _bound(call)
    param = rng.choice(sorted(args))
    bad = _other_value(call.name, param, args[param], rng, erroring=True)
    if bad is None:
        return None
    script = gold_script(entry)
    script[t] = [Step([_with_args(call, {**args, param: bad})])] + script[t]

    def accept(v, s, t):
        errored = any(r.error in EXECUTION_ERRORS for r in s[t][0].calls)
        return PASSED if errored and _status(v, t) == "pass" else None

    return script, t, {}, accept


def r_abstain(entry, rng):
    empty = _empty_turns(entry)
    if not empty:
        return None
    return gold_script(entry), rng.choice(empty), {}, lambda v, s, t: L.TurnLabel(L.CORRECT_ABSTENTION, None)


def r_call_when_no_call_needed(entry, rng):
    empty, calls = _empty_turns(entry), [c for turn in entry.gold for c in turn]
    if not empty or not calls:
        return None
    t = rng.choice(empty)
    script = gold_script(entry)
    script[t] = [Step([parse_call(rng.choice(calls))])]
    return script, t, {}, lambda v, s, t: L.TurnLabel(L.SPURIOUS_TOOL_CALL, L.SPURIOUS_TOOL_CALL)


def r_undecodable_when_no_call_needed(entry, rng):
    """Text that looks like a call but does not decode, where gold is "no call": BFCL sees no call."""
    empty = _empty_turns(entry)
    if not empty:
        return None
    t = rng.choice(empty)
    script = gold_script(entry)
    script[t] = [Step([], [("<tool_call>{'name': x", "not valid JSON")])]
    return script, t, {}, lambda v, s, t: L.TurnLabel(L.CORRECT_ABSTENTION, None)


def r_unknown_function(entry, rng):
    t, i = _pick_call(entry, rng)
    call = parse_call(entry.gold[t][i])
    script = gold_script(entry)
    script[t][0].calls[i] = ToolCall(call.name + rng.choice(["_v2", "_tool", "_all"]), call.args, call.kwargs)
    return script, t, {}, _accept_failed(L.INVALID_TOOL_CALL)


def r_undecodable_call(entry, rng):
    t = rng.choice(_call_turns(entry))
    script = gold_script(entry)
    calls = script[t][0].calls
    keep = rng.randrange(0, len(calls))
    undecodable = Step([], [("<tool_call>{'name': x", "not valid JSON")])
    script[t] = ([Step(calls[:keep])] if keep else []) + [undecodable]
    return script, t, {}, _accept_failed(L.INVALID_TOOL_CALL)


def r_unsafe_call(entry, rng):
    t, i = _pick_call(entry, rng)
    script = gold_script(entry)
    unsafe = ["__import__('os').getcwd()", f"tools.{entry.gold[t][i]}", "open('notes.txt')"]
    script[t][0].calls[i] = rng.choice(unsafe)
    return script, t, {}, _accept_failed(L.INVALID_TOOL_CALL)


def r_tool_not_yet_shown(entry, rng):
    if not entry.holdout:
        return None
    at = min(entry.holdout)
    hidden = {d["name"] for d in entry.holdout[at]}
    later = [c for turn in entry.gold[at:] for c in turn if parse_call(c).name in hidden]
    turns = [t for t in _call_turns(entry) if t < at]
    if not later or not turns:
        return None
    t = rng.choice(turns)
    script = gold_script(entry)
    script[t][0].calls.append(parse_call(rng.choice(later)))
    return script, t, {}, _accept_failed(L.INVALID_TOOL_CALL)


def _arg_recipe(entry, rng, mutate):
    spots = []
    for t in _call_turns(entry):
        for i, text in enumerate(entry.gold[t]):
            call = parse_call(text)
            names, args = _bound(call)
            for param in sorted(args):
                spots.append((t, i, call, args, param))
    candidates = [s for s in spots if mutate(*s[2:], rng, dry=True)]
    if not candidates:
        return None
    t, i, call, args, param = rng.choice(candidates)
    script = gold_script(entry)
    script[t][0].calls[i] = mutate(call, args, param, rng, dry=False)
    return script, t


def _drop_required(call, args, param, rng, dry):
    if param not in tool_registry()[call.name].required:
        return False
    return True if dry else _with_args(call, {k: v for k, v in args.items() if k != param})


def _unknown_argument(call, args, param, rng, dry):
    if dry:
        return True
    renamed = param + rng.choice(["_name", "_value", "s"])
    return _with_args(call, {(renamed if k == param else k): v for k, v in args.items()})


def _wrong_type(call, args, param, rng, dry):
    declared = tool_registry()[call.name].types.get(param)
    if declared not in _WRONG_TYPE:
        return False
    return True if dry else _with_args(call, {**args, param: _WRONG_TYPE[declared]})


def _not_allowed(call, args, param, rng, dry):
    if param not in tool_registry()[call.name].allowed:
        return False
    bad = rng.choice(["maximum", "unknown", "other"])
    value = [bad] if isinstance(args[param], list) else bad
    return True if dry else _with_args(call, {**args, param: value})


def _make_arg_recipe(mutate):
    def recipe(entry, rng):
        out = _arg_recipe(entry, rng, mutate)
        if out is None:
            return None
        return *out, {}, _accept_failed(L.ARGUMENT_MISMATCH)

    return recipe


def r_drop_call(entry, rng, intended):
    t, i = _pick_call(entry, rng)
    if len(entry.gold[t]) < 2:
        return None
    script = gold_script(entry)
    del script[t][0].calls[i]
    want = STATE_MISMATCH if intended == L.STATE_MISMATCH else RESPONSE_MISMATCH

    def accept(v, s, t):
        ok = _status(v, t) == want and not _turn_errors(s[t], v, t)
        return L.TurnLabel(_OFFICIAL_OUTCOME[want], intended) if ok else None

    return script, t, {}, accept


def r_extra_call(entry, rng):
    t = rng.choice(_call_turns(entry))
    visible = entry.visible_function_names(t)
    calls = [c for turn in entry.gold for c in turn if parse_call(c).name in visible]
    script = gold_script(entry)
    script[t][0].calls.append(parse_call(rng.choice(calls)))

    def accept(v, s, t):
        ok = _status(v, t) == STATE_MISMATCH and not _turn_errors(s[t], v, t)
        return L.TurnLabel(L.STATE_MISMATCH, L.STATE_MISMATCH) if ok else None

    return script, t, {}, accept


def r_reorder(entry, rng):
    t = _multi_call_turn(entry, rng)
    if t is None:
        return None
    script = gold_script(entry)
    calls = script[t][0].calls
    if rng.random() < 0.5:
        calls.reverse()
    else:
        calls.insert(0, calls.pop())

    def accept(v, s, t):
        if _turn_errors(s[t], v, t) or _status(v, t) not in (STATE_MISMATCH, RESPONSE_MISMATCH):
            return None
        label = _OFFICIAL_OUTCOME[_status(v, t)]
        return L.TurnLabel(label, label)

    return script, t, {}, accept


def _value_recipe(entry, rng, erroring):
    spot = _pick_call(entry, rng, lambda c: bool(c.args or c.kwargs))
    if spot is None:
        return None
    t, i = spot
    call = parse_call(entry.gold[t][i])
    _, args = _bound(call)
    param = rng.choice(sorted(args))
    value = _other_value(call.name, param, args[param], rng, erroring)
    if value is None:
        return None
    script = gold_script(entry)
    script[t][0].calls[i] = _with_args(call, {**args, param: value})
    give_up = erroring and rng.random() < 0.5
    if give_up:  # the model stops the turn after the error
        del script[t][0].calls[i + 1 :]
    return script, t, i


def r_wrong_value(entry, rng):
    out = _value_recipe(entry, rng, erroring=False)
    if out is None:
        return None
    script, t, i = out
    schema_ok = not check_call(script[t][0].calls[i])

    def accept(v, s, t):
        ok = schema_ok and _failed(v, t) and not _turn_errors(s[t], v, t)
        return L.TurnLabel(checked_outcome(v, t), L.VALUE_MISMATCH) if ok else None

    return script, t, {}, accept


def r_erroring_value(entry, rng):
    out = _value_recipe(entry, rng, erroring=True)
    if out is None:
        return None
    script, t, i = out
    schema_ok = not check_call(script[t][0].calls[i])

    def accept(v, s, t):
        if not schema_ok:
            return None
        record = s[t][0].calls[i]
        errors = _turn_errors(s[t], v, t)
        ok = _failed(v, t) and record.error in EXECUTION_ERRORS and set(errors) <= EXECUTION_ERRORS
        return L.TurnLabel(checked_outcome(v, t), L.RECOVERY_FAILURE) if ok else None

    return script, t, {}, accept


def r_read_out_of_order(entry, rng):
    """One call of the turn moved to another position: same calls, same values, results differ."""
    t = _multi_call_turn(entry, rng)
    if t is None:
        return None
    script = gold_script(entry)
    calls = script[t][0].calls
    i, j = rng.sample(range(len(calls)), 2)
    calls.insert(j, calls.pop(i))

    def accept(v, s, t):
        ok = _status(v, t) == RESPONSE_MISMATCH and not _turn_errors(s[t], v, t)
        return L.TurnLabel(L.RESPONSE_MISMATCH, L.RESPONSE_MISMATCH) if ok else None

    return script, t, {}, accept


def r_answer_without_calls(entry, rng):
    t = rng.choice(_call_turns(entry))
    script = gold_script(entry)
    script[t] = []
    return script, t, {}, lambda v, s, t: L.TurnLabel(L.EMPTY_TURN, L.EMPTY_TURN)


def r_stop_early(entry, rng):
    t = _multi_call_turn(entry, rng)
    if t is None:
        return None
    script = gold_script(entry)
    del script[t][0].calls[rng.randrange(1, len(entry.gold[t])) :]

    def accept(v, s, t):
        ok = _status(v, t) == RESPONSE_MISMATCH and not _turn_errors(s[t], v, t)
        return L.TurnLabel(L.RESPONSE_MISMATCH, L.MISSING_TOOL_CALL) if ok else None

    return script, t, {}, accept


def r_step_limit(entry, rng):
    turns = list(range(entry.num_turns - 1))  # on the last turn BFCL scores normally
    if not turns:
        return None
    t = rng.choice(turns)
    calls = [c for turn in entry.gold for c in turn] or ["pwd()"]
    script = gold_script(entry)
    loop = parse_call(rng.choice(calls))
    script[t] = script[t] + [Step([loop]) for _ in range(SMALL_STEP_LIMIT + 1)]

    def accept(v, s, t):
        ok = v.error_type == FORCE_TERMINATED and len(s) == t + 1
        return L.TurnLabel(checked_outcome(v, t), L.STEP_LIMIT) if ok else None

    return script, t, {"max_steps": SMALL_STEP_LIMIT}, accept


def r_context_overflow(entry, rng):
    t = rng.randrange(entry.num_turns)
    accept = lambda v, s, t: L.TurnLabel(checked_outcome(v, t), L.CONTEXT_OVERFLOW)  # noqa: E731
    return gold_script(entry), t, {"abort_after": t}, accept


def r_overflow_at_turn_start(entry, rng):
    """The context fills up as turn t opens: the model never answers it (nor any later turn)."""
    t = rng.randrange(entry.num_turns)
    accept = lambda v, s, t: L.TurnLabel(after_end(entry, t).outcome, L.CONTEXT_OVERFLOW)  # noqa: E731
    return gold_script(entry), t, {"abort_before": t}, accept


def _break_state(call: ToolCall, rng: random.Random) -> ToolCall | None:
    """The call with one argument dropped or changed (None when it has none)."""
    _, args = _bound(call)
    if not args:
        return None
    param = rng.choice(sorted(args))
    if rng.random() < 0.5:
        return _with_args(call, {k: v for k, v in args.items() if k != param})
    value = _other_value(call.name, param, args[param], rng, erroring=False)
    return None if value is None else _with_args(call, {**args, param: value})


def _inherited(entry, rng, needs_error: bool):
    """An earlier turn leaves the state wrong (a call dropped, or one argument dropped or changed);
    the target turn, the next one with gold calls, makes exactly its gold calls and fails anyway.
    From the gold prior state the gold calls pass by construction (the gold replay passes), so the
    target's true cause is inherited_state, whatever error the wrong state provokes there."""
    turns = _call_turns(entry)
    pairs = [(e, u) for e, u in zip(turns, turns[1:])]
    if not pairs:
        return None
    e, u = rng.choice(pairs)
    script = gold_script(entry)
    calls = script[e][0].calls
    i = rng.randrange(len(calls))
    broken = _break_state(calls[i], rng) if rng.random() < 0.7 else None
    if broken is None:
        del calls[i]
    else:
        calls[i] = broken

    def accept(v, s, t):
        if not _failed(v, e) or not _failed(v, t):
            return None
        if needs_error and not _turn_errors(s[t], v, t):
            return None
        return L.TurnLabel(checked_outcome(v, t), L.INHERITED_STATE)

    return script, u, {}, accept


def r_inherited_state(entry, rng):
    return _inherited(entry, rng, needs_error=False)


def r_inherited_error(entry, rng):
    """As inherited_state, where the wrong state makes one of the target's gold calls return an
    error (base_98: startEngine refuses because the doors were never locked)."""
    return _inherited(entry, rng, needs_error=True)


RECIPES: dict[str, Recipe] = {
    "gold_turn": r_gold_turn,
    "split_steps": r_split_steps,
    "recovered_parse_error": r_recovered_parse_error,
    "recovered_execution_error": r_recovered_execution_error,
    "abstain": r_abstain,
    "call_when_no_call_needed": r_call_when_no_call_needed,
    "undecodable_when_no_call_needed": r_undecodable_when_no_call_needed,
    "unknown_function": r_unknown_function,
    "undecodable_call": r_undecodable_call,
    "unsafe_call": r_unsafe_call,
    "tool_not_yet_shown": r_tool_not_yet_shown,
    "drop_required_argument": _make_arg_recipe(_drop_required),
    "unknown_argument": _make_arg_recipe(_unknown_argument),
    "wrong_argument_type": _make_arg_recipe(_wrong_type),
    "value_not_allowed": _make_arg_recipe(_not_allowed),
    "drop_state_changing_call": lambda e, r: r_drop_call(e, r, L.STATE_MISMATCH),
    "extra_state_changing_call": r_extra_call,
    "reorder_calls": r_reorder,
    "call_out_of_order": r_read_out_of_order,
    "wrong_value": r_wrong_value,
    "erroring_value": r_erroring_value,
    "answer_without_calls": r_answer_without_calls,
    "drop_read_call": lambda e, r: r_drop_call(e, r, L.MISSING_TOOL_CALL),
    "stop_early": r_stop_early,
    "step_limit": r_step_limit,
    "context_overflow": r_context_overflow,
    "overflow_at_turn_start": r_overflow_at_turn_start,
    "inherited_state": r_inherited_state,
    "inherited_error": r_inherited_error,
}
