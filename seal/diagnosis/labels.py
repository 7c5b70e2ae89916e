"""Two label layers per turn: the outcome (what the checker saw) and the cause (why it failed).

The paper names two label sets (Table 5's causes, Table 6's outcomes). Its authors' release labels turns with the
outcomes only and chooses both the trajectory weights and the interface's guidelines from them; this project keeps
both layers, the weights reading the outcomes as the release does, the interface reading the causes as the paper's
Section 3.3 describes it.

**Outcome** (paper Table 6, the vocabulary rho is defined on). The release tags every turn of every
rollout with one outcome by replaying the model's and the gold calls and running the official
per-turn state and response checks on that turn, with no early return; the trajectory weight
w_j = clip(sum_z p_j(z) rho(z)) is computed from these tags alone. Rules, first match wins:

| outcome                   | when                                                              |
|---------------------------|-------------------------------------------------------------------|
| gt_error                  | a gold call of the turn cannot be run as written (broken gold)    |
| spurious_tool_call        | gold is "no call" and the model made a (decoded) call             |
| correct_abstention        | gold is "no call" and the model made none                         |
| empty_turn_model_response | gold has calls, the model made none (official type)               |
| instance_mismatch         | the sets of instantiated backend classes differ (never happens:   |
|                           |   both sides always build every involved class)                   |
| state_mismatch            | the official state check fails (official instance_state_mismatch) |
| response_mismatch         | the official response check fails (execution_response_mismatch)  |
| pass                      | both checks pass                                                  |
| checker_error             | the verification itself failed (unreadable trajectory)            |

Turns after an early end (step limit, context overflow) are still tagged: correct_abstention where
gold is "no call", else empty_turn_model_response, so they count in p_j (weight 1.8 / 1.5).

**Cause** (paper Table 5 and the priority it gives, plus what the executable evidence adds): why a
turn failed, for the interface's evolve(). None on a turn whose outcome is pass or
correct_abstention. See seal.diagnosis.rules for the decision list.

| Table 5 (priority)    | cause(s) here                                           |
|-----------------------|---------------------------------------------------------|
| 1 invalid_tool_call   | invalid_tool_call                                       |
| 2 argument_mismatch   | argument_mismatch                                       |
| 3 state_mismatch      | state_mismatch; value_mismatch (every gold tool called, |
|                       |   some with other argument values)                      |
| 4 recovery_failure    | recovery_failure                                        |
| 5 missing_tool_call   | empty_turn_model_response (no call at all);             |
|                       |   missing_tool_call (some gold tool never called)       |
| 6 response_mismatch   | response_mismatch                                       |
| -                     | inherited_state: the turn's own calls pass the official |
|                       |   check from the gold prior state; an earlier turn left |
|                       |   the state wrong                                       |
| -                     | spurious_tool_call (a call where gold is "no call")     |
| -                     | step_limit / context_overflow: the turn the episode     |
|                       |   ended in (whatever its outcome)                       |
| -                     | not_played (after an early end), checker_error,         |
|                       |   gt_error, unlabelled (NoDiagnoser): never counted     |

Names shared by both layers (state_mismatch, response_mismatch, spurious_tool_call,
empty_turn_model_response) mean the same failure in both; where the project's reading differs from
the release's, the cause has its own name (value_mismatch is the project's "right tool, other
value", which the release's instance_mismatch is not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Outcome tags (Table 6) ------------------------------------------------------------------------
SPURIOUS_TOOL_CALL = "spurious_tool_call"
CORRECT_ABSTENTION = "correct_abstention"
EMPTY_TURN = "empty_turn_model_response"
STATE_MISMATCH = "state_mismatch"
RESPONSE_MISMATCH = "response_mismatch"
INSTANCE_MISMATCH = "instance_mismatch"
PASS = "pass"
CHECKER_ERROR = "checker_error"
GT_ERROR = "gt_error"
# NoDiagnoser's placeholder, in both layers
UNLABELLED = "unlabelled"

# Causes (Table 5 and the project's additions) --------------------------------------------------
INVALID_TOOL_CALL = "invalid_tool_call"
ARGUMENT_MISMATCH = "argument_mismatch"
INHERITED_STATE = "inherited_state"
VALUE_MISMATCH = "value_mismatch"
RECOVERY_FAILURE = "recovery_failure"
MISSING_TOOL_CALL = "missing_tool_call"
STEP_LIMIT = "step_limit"
CONTEXT_OVERFLOW = "context_overflow"
NOT_PLAYED = "not_played"

LAYERS = ("outcome", "cause")

# Table 6's order
OUTCOME_FAILURES = (SPURIOUS_TOOL_CALL, EMPTY_TURN, STATE_MISMATCH, RESPONSE_MISMATCH, INSTANCE_MISMATCH)
COUNTED_OUTCOMES = (
    SPURIOUS_TOOL_CALL,
    CORRECT_ABSTENTION,
    EMPTY_TURN,
    STATE_MISMATCH,
    RESPONSE_MISMATCH,
    INSTANCE_MISMATCH,
    PASS,
)
OUTCOMES = COUNTED_OUTCOMES + (CHECKER_ERROR, GT_ERROR, UNLABELLED)

# Table 5's priority order, each refinement next to the cause it refines, then the additions
CAUSE_FAILURES = (
    INVALID_TOOL_CALL,
    ARGUMENT_MISMATCH,
    STATE_MISMATCH,
    VALUE_MISMATCH,
    RECOVERY_FAILURE,
    EMPTY_TURN,
    MISSING_TOOL_CALL,
    RESPONSE_MISMATCH,
    INHERITED_STATE,
    SPURIOUS_TOOL_CALL,
    STEP_LIMIT,
    CONTEXT_OVERFLOW,
)
CAUSES = CAUSE_FAILURES + (NOT_PLAYED, CHECKER_ERROR, GT_ERROR, UNLABELLED)

# Labels a profile counts (p_j, C_t): a layer's tags, where the cause layer stands for a turn
# without a cause by its outcome (pass or correct_abstention), so both layers share denominators
# for played turns. Checker and ground-truth errors, unplayed and unlabelled turns never count.
COUNTED = {"outcome": COUNTED_OUTCOMES, "cause": CAUSE_FAILURES + (PASS, CORRECT_ABSTENTION)}
COUNTED_LABELS = COUNTED_OUTCOMES + tuple(x for x in COUNTED["cause"] if x not in COUNTED_OUTCOMES)
LABELS = tuple(dict.fromkeys(OUTCOMES + CAUSES))

# The paper's two tables, as sets of labels of the layer each one maps to
TABLE5_TO_CAUSES: dict[str, tuple[str, ...]] = {
    "invalid_tool_call": (INVALID_TOOL_CALL,),
    "argument_mismatch": (ARGUMENT_MISMATCH,),
    "state_mismatch": (STATE_MISMATCH, VALUE_MISMATCH),
    "recovery_failure": (RECOVERY_FAILURE,),
    "missing_tool_call": (EMPTY_TURN, MISSING_TOOL_CALL),
    "response_mismatch": (RESPONSE_MISMATCH,),
}
TABLE6_TO_OUTCOMES: dict[str, tuple[str, ...]] = {name: (name,) for name in COUNTED_OUTCOMES}


@dataclass(frozen=True)
class TurnLabel:
    """The two labels of one turn. `cause` is None on a turn that needs none (pass, correct
    abstention), except on the turn an episode ended early in, whose cause is the early end."""

    outcome: str
    cause: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"outcome": self.outcome, "cause": self.cause}


def check_layer(layer: str) -> None:
    if layer not in LAYERS:
        raise ValueError(f"unknown label layer {layer!r}; layers are {', '.join(LAYERS)}")


def profile_labels(turn_labels: Sequence[TurnLabel], layer: str) -> list[str]:
    """One trajectory's labels in `layer`, as profiles and weights read them: the outcome tags, or
    the causes with a cause-less turn standing as its outcome (pass / correct_abstention)."""
    check_layer(layer)
    if layer == "outcome":
        return [t.outcome for t in turn_labels]
    return [t.outcome if t.cause is None else t.cause for t in turn_labels]


def table5_cause(cause: str) -> str | None:
    """The Table 5 cause a cause refines (None for causes outside Table 5)."""
    for name, causes in TABLE5_TO_CAUSES.items():
        if cause in causes:
            return name
    return None


def check_labels(labels, vocabulary: Sequence[str], what: str) -> None:
    unknown = sorted({str(x) for x in labels} - set(vocabulary))
    if unknown:
        raise ValueError(f"unknown {what}(s) {', '.join(unknown)}; valid ones are {', '.join(vocabulary)}")


def check_rho_keys(rho: Mapping[str, float]) -> None:
    """Raise a clear error when a rho (conf/reweighting/*.yaml) names anything but a counted outcome
    tag (Table 6): rho is defined on outcomes, whichever layer the profile is read from."""
    keys = [str(k) for k in rho]
    check_labels(keys, OUTCOMES, what="rho key")
    uncounted = sorted(set(keys) - set(COUNTED_OUTCOMES))
    if uncounted:
        raise ValueError(
            f"rho key(s) {', '.join(uncounted)} are never weighted; weighted outcomes are "
            f"{', '.join(COUNTED_OUTCOMES)}"
        )
