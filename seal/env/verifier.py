"""Official BFCL multi-turn verification, replayed on fresh isolated backends.

`verify` gives the same verdict as bfcl-eval's `multi_turn_checker` (plus its force-termination
check in the eval runner) for any trajectory, and in addition keeps the per-turn evidence that
diagnosis needs: every turn is checked, not only up to the first failure.
"""

from __future__ import annotations

import copy

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from seal.env.entry import Entry
from seal.env.calls import ToolCall
from seal.env.executor import Backends, CallRecord, execute

# Official error types
EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"
FORCE_TERMINATED = "multi_turn:force_terminated"
INFERENCE_ERROR = "multi_turn:inference_error"
# A turn the episode never reached (it ended before): not checked
NOT_PLAYED = "not_played"
# Not an official type: an episode that outgrew the backbone's context fails as a whole
CONTEXT_OVERFLOW = "seal:context_overflow"

Trajectory = list[list[list[ToolCall | str]]]  # per turn, per step, the decoded calls


@dataclass
class TurnCheck:
    index: int
    gold_empty: bool
    # "pass", "skipped" (gold is empty: the official checker does not check the turn),
    # "not_played" (the episode ended before this turn), or an official error type
    status: str
    model_calls: list[CallRecord] = field(default_factory=list)
    gold_calls: list[CallRecord] = field(default_factory=list)
    # class -> attribute -> {"model": ..., "ground_truth": ...}
    state_diff: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # gold results not found among the model's results of all turns so far
    missing_results: list[str] = field(default_factory=list)
    # backend classes instantiated on each side when the turn was checked; the official checker
    # asserts they are equal (the release tags a difference instance_mismatch)
    model_classes: frozenset[str] = frozenset()
    gold_classes: frozenset[str] = frozenset()

    @property
    def failed(self) -> bool:
        return self.status not in ("pass", "skipped", NOT_PLAYED)


@dataclass
class Verdict:
    id: str
    valid: bool
    error_type: str | None = None
    error_message: str = ""
    failed_turn: int | None = None
    turns: list[TurnCheck] = field(default_factory=list)

    @property
    def turns_played(self) -> int:
        """Turns the episode reached (a step limit or a context overflow can end it before the last)."""
        return sum(t.status != NOT_PLAYED for t in self.turns)

    @property
    def turns_passed(self) -> int:
        return sum(t.status in ("pass", "skipped") for t in self.turns)

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "valid": self.valid, "error_type": self.error_type}


def _drop_empty_steps(turn: list[list[Any]]) -> list[list[Any]]:
    # The official runner drops steps that decoded to nothing before checking.
    return [step for step in turn if step]


def _compare_state(model: Backends, gold: Backends) -> dict[str, dict[str, dict[str, Any]]]:
    diffs: dict[str, dict[str, dict[str, Any]]] = {}
    for class_name, gold_instance in gold.instances.items():
        model_instance = model.instances[class_name]
        for attr in vars(gold_instance):
            if attr.startswith("_"):
                continue
            model_value, gold_value = getattr(model_instance, attr), getattr(gold_instance, attr)
            if model_value != gold_value:
                # copies: the backends play on, and the evidence must stay this turn's
                diffs.setdefault(class_name, {})[attr] = {"model": copy.deepcopy(model_value),
                                                          "ground_truth": copy.deepcopy(gold_value)}
    return diffs


def _missing(gold_results: list[str], model_results: list[str]) -> list[str]:
    available = Counter(model_results)
    missing = []
    for item in gold_results:
        if available[item] > 0:
            available[item] -= 1
        else:
            missing.append(item)
    return missing


def _turn_status(
    model: Backends, gold: Backends, made_calls: bool, gold_results: list[str], model_results: list[str]
) -> tuple[str, dict[str, dict[str, dict[str, Any]]], list[str]]:
    """The official check of one turn whose gold has calls, in the official order: (status, state
    diff, missing results). `model_results` are the model's results of all turns so far."""
    if not made_calls:
        return EMPTY_TURN, {}, []
    if diff := _compare_state(model, gold):
        return STATE_MISMATCH, diff, []
    if missing := _missing(gold_results, model_results):
        return RESPONSE_MISMATCH, {}, missing
    return "pass", {}, []


def verify(entry: Entry, trajectory: Trajectory, context_overflow: bool = False) -> Verdict:
    """Check a trajectory (per turn, per step, decoded calls) against the entry's gold answer."""
    if not isinstance(trajectory, list) or not all(isinstance(t, list) for t in trajectory):
        # bfcl-eval's message (its runner checks the outer list only; a turn that is not a list fails the same way)
        return Verdict(entry.id, False, INFERENCE_ERROR,
                       "Error during inference phase. Model did not output a list of model responses.")
    model = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    gold = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    all_model_results: list[str] = []
    turns: list[TurnCheck] = []
    first: tuple[str, str, int] | None = None

    for index, gold_calls in enumerate(entry.gold):
        check = TurnCheck(index, gold_empty=not gold_calls, status=NOT_PLAYED)
        turns.append(check)
        if index >= len(trajectory):
            continue
        steps = _drop_empty_steps(trajectory[index])
        check.model_calls = [execute(model, call) for step in steps for call in step]
        check.gold_calls = [execute(gold, call) for call in gold_calls]
        check.model_classes, check.gold_classes = frozenset(model.instances), frozenset(gold.instances)
        all_model_results.extend(r.observation for r in check.model_calls)

        if not gold_calls:
            check.status = "skipped"
            continue
        check.status, check.state_diff, check.missing_results = _turn_status(
            model, gold, bool(steps), [r.observation for r in check.gold_calls], all_model_results
        )
        if check.status == "pass":
            continue
        if check.status == EMPTY_TURN:
            message = f"Model response list is empty for turn {index}"
        elif check.status == STATE_MISMATCH:
            message = (
                f"Model instance for {next(iter(check.state_diff))} does not match the state with ground "
                "truth instance."
            )
        else:
            message = (
                "Model response execution results so far does not contain all the ground truth "
                f"response execution results for turn {index}."
            )
        if first is None:
            first = (check.status, message, index)

    verdict = Verdict(entry.id, True, turns=turns)
    if context_overflow:
        played = min(len(trajectory), len(entry.gold)) - 1
        verdict.valid, verdict.error_type, verdict.failed_turn = False, CONTEXT_OVERFLOW, max(played, 0)
        verdict.error_message = "the episode outgrew the backbone's context window"
    elif len(trajectory) != len(entry.gold):
        # Official: force-terminated when the turn counts differ (the step-limit quit stops the
        # episode early); no per-turn check decides the verdict then.
        verdict.valid, verdict.error_type = False, FORCE_TERMINATED
        verdict.failed_turn = max(len(trajectory) - 1, 0)
        verdict.error_message = (
            f"Model was force-terminated during inference phase. The length of the model result "
            f"turns ({len(trajectory)}) does not match the length of the ground truth turns ({len(entry.gold)})."
        )
    elif first is not None:
        verdict.valid = False
        verdict.error_type, verdict.error_message, verdict.failed_turn = first
    return verdict


def check_from_gold_prior(entry: Entry, index: int, calls: list[str], earlier_results: list[str]) -> str:
    """The official check of turn `index` for `calls`, replayed from the state the *gold* calls of the
    earlier turns leave rather than the state the model's earlier turns left (a counterfactual for
    diagnosis; no verdict depends on it). `earlier_results` are the model's results of the earlier
    turns, which the official response check may draw on. Returns the turn status."""
    model = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    gold = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    for turn in entry.gold[:index]:
        for call in turn:
            execute(model, call)
            execute(gold, call)
    results = [execute(model, call).observation for call in calls]
    gold_results = [execute(gold, call).observation for call in entry.gold[index]]
    if not entry.gold[index]:
        return "skipped"
    return _turn_status(model, gold, bool(calls), gold_results, list(earlier_results) + results)[0]
