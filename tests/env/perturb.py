"""Perturbed versions of gold trajectories, for checking the verifier against the official checker.

Every trajectory is built from the benchmark's own gold calls with literal arguments, in BFCL's
result layout (per turn, per step, call strings).
"""

from __future__ import annotations

import copy
import random

from seal.env.entry import Entry
from seal.env.calls import ToolCall, parse_call

KINDS = (
    "gold",
    "split_steps",
    "drop_call",
    "duplicate_call",
    "reorder",
    "mutate_arg",
    "drop_arg",
    "rename_arg",
    "empty_turn",
    "call_in_empty_gold_turn",
    "unknown_function",
    "step_limit",
    "keywords_only",
    "move_to_next_turn",
)


def _one_step(gold: list[list[str]]) -> list[list[list[str]]]:
    return [[list(turn)] if turn else [] for turn in gold]


def _mutate_value(value, rng: random.Random):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, -1, 7])
    if isinstance(value, float):
        return round(value * 1.5 + 1.0, 2)
    if isinstance(value, str):
        return value + rng.choice(["_x", "2", " extra"])
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return "changed"


def _pick_call(result, rng):
    spots = [(t, s, c) for t, turn in enumerate(result) for s, step in enumerate(turn) for c in range(len(step))]
    return rng.choice(spots) if spots else None


def perturb(entry: Entry, kind: str, rng: random.Random, signatures=None) -> list[list[list[str]]] | None:
    """One perturbed trajectory of `kind`, or None when the entry offers nothing to perturb."""
    result = _one_step(entry.gold)
    if kind == "gold":
        return result
    if kind == "split_steps":
        return [[[c] for c in turn] for turn in entry.gold]
    if kind == "step_limit":
        return result[: rng.randrange(0, len(result))]
    if kind == "empty_turn":
        turns = [t for t, turn in enumerate(entry.gold) if turn]
        result[rng.choice(turns)] = []
        return result
    if kind == "call_in_empty_gold_turn":
        empty = [t for t, turn in enumerate(entry.gold) if not turn]
        calls = [c for turn in entry.gold for c in turn]
        if not empty or not calls:
            return None
        result[rng.choice(empty)] = [[rng.choice(calls)]]
        return result
    if kind == "move_to_next_turn":
        turns = [t for t, turn in enumerate(entry.gold[:-1]) if turn]
        if not turns:
            return None
        t = rng.choice(turns)
        moved = result[t][0].pop()
        if not result[t][0]:
            result[t] = []
        result[t + 1] = result[t + 1] + [[moved]]
        return result
    spot = _pick_call(result, rng)
    if spot is None:
        return None
    t, s, c = spot
    step = result[t][s]
    if kind == "drop_call":
        del step[c]
        if not step:
            del result[t][s]
    elif kind == "duplicate_call":
        step.insert(c, step[c])
    elif kind == "reorder":
        if len(step) < 2:
            return None
        step.reverse()
    elif kind == "unknown_function":
        step.insert(c, "not_a_tool(x=1)")
    elif kind in ("mutate_arg", "drop_arg", "rename_arg", "keywords_only"):
        call = parse_call(step[c])
        call = ToolCall(call.name, call.args, dict(call.kwargs))
        if kind == "keywords_only":
            if not call.args or signatures is None:
                return None
            names = signatures[call.name]
            call = ToolCall(call.name, (), {**dict(zip(names, call.args)), **call.kwargs})
        elif not call.kwargs and not call.args:
            return None
        elif kind == "mutate_arg":
            if call.kwargs:
                key = rng.choice(sorted(call.kwargs))
                call.kwargs[key] = _mutate_value(call.kwargs[key], rng)
            else:
                args = list(call.args)
                i = rng.randrange(len(args))
                args[i] = _mutate_value(args[i], rng)
                call.args = tuple(args)
        elif kind == "drop_arg":
            if not call.kwargs:
                return None
            del call.kwargs[rng.choice(sorted(call.kwargs))]
        elif kind == "rename_arg":
            if not call.kwargs:
                return None
            key = rng.choice(sorted(call.kwargs))
            call.kwargs[key + "_typo"] = call.kwargs.pop(key)
        step[c] = call.to_string()
    else:
        raise ValueError(kind)
    return copy.deepcopy(result)


def perturbed_set(entries: list[Entry], seed: int, per_kind: int = 1, signatures=None) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for entry in entries:
        for kind in KINDS:
            for _ in range(per_kind):
                result = perturb(entry, kind, rng, signatures)
                if result is not None:
                    items.append({"id": entry.id, "kind": kind, "result": result})
    return items
