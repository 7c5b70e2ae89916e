"""One turn-level failure taxonomy covering both of the paper's label tables.

The paper names two label sets. Table 5 is the diagnosis priority (what went wrong first); Table 6
is the set rho is defined on. This module keeps one taxonomy that contains every label of both,
plus the labels the executable evidence needs (episodes that ended early, checker problems).

Every turn of an entry gets exactly one label. Mapping between the tables:

| Table 5 (priority)    | label(s) here                         | Table 6 (rho)             |
|-----------------------|---------------------------------------|---------------------------|
| 1 invalid_tool_call   | invalid_tool_call                     | -                         |
| 2 argument_mismatch   | argument_mismatch                     | -                         |
| 3 state_mismatch      | state_mismatch                        | state_mismatch            |
|                       | instance_mismatch (right tools, wrong | instance_mismatch         |
|                       |   targets/values)                     |                           |
| 4 recovery_failure    | recovery_failure                      | -                         |
| 5 missing_tool_call   | empty_turn_model_response (no call at | empty_turn_model_response |
|                       |   all: the official checker's type)   |                           |
|                       | missing_tool_call (some needed tool   | -                         |
|                       |   never called)                       |                           |
| 6 response_mismatch   | response_mismatch                     | response_mismatch         |
| - (gold is "no call") | spurious_tool_call                    | spurious_tool_call        |
| - (gold is "no call") | correct_abstention                    | correct_abstention        |
| - (turn passes)       | pass                                  | pass                      |

Labels of neither table, needed by the evidence:
- step_limit: the turn in which the episode hit the step limit and was force-quit (official
  `force_terminated`); context_overflow: the turn during which the episode outgrew the context.
  Both are behaviour of the model and count in profiles.
- not_played: turns after an early end; checker_error: the verification itself failed (malformed
  trajectory); unlabelled: NoDiagnoser's placeholder. None of these count in profiles or weights.
"""

from __future__ import annotations

from collections.abc import Mapping

# Failure labels in the paper's priority order (Table 5, with the Table 6 refinements next to the
# Table 5 label they refine), then the terminal labels.
INVALID_TOOL_CALL = "invalid_tool_call"
ARGUMENT_MISMATCH = "argument_mismatch"
STATE_MISMATCH = "state_mismatch"
INSTANCE_MISMATCH = "instance_mismatch"
RECOVERY_FAILURE = "recovery_failure"
EMPTY_TURN = "empty_turn_model_response"
MISSING_TOOL_CALL = "missing_tool_call"
RESPONSE_MISMATCH = "response_mismatch"
SPURIOUS_TOOL_CALL = "spurious_tool_call"
STEP_LIMIT = "step_limit"
CONTEXT_OVERFLOW = "context_overflow"
# Non-failures
PASS = "pass"
CORRECT_ABSTENTION = "correct_abstention"
# Not counted anywhere
NOT_PLAYED = "not_played"
CHECKER_ERROR = "checker_error"
UNLABELLED = "unlabelled"

FAILURE_LABELS = (
    INVALID_TOOL_CALL,
    ARGUMENT_MISMATCH,
    STATE_MISMATCH,
    INSTANCE_MISMATCH,
    RECOVERY_FAILURE,
    EMPTY_TURN,
    MISSING_TOOL_CALL,
    RESPONSE_MISMATCH,
    SPURIOUS_TOOL_CALL,
    STEP_LIMIT,
    CONTEXT_OVERFLOW,
)
# Labels that count in trajectory profiles, failure profiles and weights
WEIGHTED_LABELS = FAILURE_LABELS + (PASS, CORRECT_ABSTENTION)
LABELS = WEIGHTED_LABELS + (NOT_PLAYED, CHECKER_ERROR, UNLABELLED)

# The paper's two tables, as sets of labels of this taxonomy (see the module docstring)
TABLE5_TO_LABELS: dict[str, tuple[str, ...]] = {
    "invalid_tool_call": (INVALID_TOOL_CALL,),
    "argument_mismatch": (ARGUMENT_MISMATCH,),
    "state_mismatch": (STATE_MISMATCH, INSTANCE_MISMATCH),
    "recovery_failure": (RECOVERY_FAILURE,),
    "missing_tool_call": (EMPTY_TURN, MISSING_TOOL_CALL),
    "response_mismatch": (RESPONSE_MISMATCH,),
}
TABLE6_TO_LABELS: dict[str, tuple[str, ...]] = {
    name: (name,)
    for name in (
        SPURIOUS_TOOL_CALL, CORRECT_ABSTENTION, EMPTY_TURN, STATE_MISMATCH, RESPONSE_MISMATCH,
        INSTANCE_MISMATCH, PASS,
    )
}


def table5_label(label: str) -> str | None:
    """The Table 5 label a label refines (None for labels outside Table 5)."""
    for name, labels in TABLE5_TO_LABELS.items():
        if label in labels:
            return name
    return None


def check_labels(labels, what: str = "label") -> None:
    unknown = sorted({str(x) for x in labels} - set(LABELS))
    if unknown:
        raise ValueError(f"unknown {what}(s) {', '.join(unknown)}; valid labels are {', '.join(LABELS)}")


def check_rho_keys(rho: Mapping[str, float]) -> None:
    """Raise a clear error when a rho (conf/reweighting/*.yaml) names a label that does not exist
    or one that is never weighted (not_played, checker_error, unlabelled)."""
    keys = [str(k) for k in rho]
    check_labels(keys, what="rho key")
    unweighted = sorted(set(keys) - set(WEIGHTED_LABELS))
    if unweighted:
        raise ValueError(
            f"rho key(s) {', '.join(unweighted)} are never weighted; "
            f"weighted labels are {', '.join(WEIGHTED_LABELS)}"
        )
