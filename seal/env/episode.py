"""One BFCL multi-turn episode, played step by step under the benchmark's inference protocol.

Protocol (bfcl-eval's multi-turn inference loop, prompting mode):
- turns are delivered in order; a miss_func holdout turn has no user message of its own: the
  held-out tool docs are delivered then, with the benchmark's "I have updated some more
  functions..." message (rendering is the tool format's job, the episode says what is new);
- within a turn the model is queried repeatedly; an output that decodes to no call, or fails to
  decode, ends the turn; otherwise the calls run and their results go back to the model;
- after more than `max_steps` steps in one turn the episode is force-quit (the official runner
  then scores it `force_terminated` unless that turn was the last one).
The episode records the decoded calls in BFCL's result layout, so `verdict()` is the official check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seal.env.benchmark import Entry
from seal.env.calls import ToolCall
from seal.env.executor import Backends, CallRecord, execute
from seal.env.verifier import Verdict, verify

MAXIMUM_STEP_LIMIT = 20  # bfcl-eval's default


@dataclass
class TurnStart:
    index: int
    # the benchmark's messages for this turn (empty for a miss_func holdout turn)
    messages: list[dict[str, str]]
    # tool docs delivered at this turn (miss_func holdout turns only)
    new_functions: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class StepRecord:
    """One model query within a turn."""

    raw: str
    calls: list[CallRecord] = field(default_factory=list)
    # text fragments that looked like calls but could not be decoded, with the reason
    parse_failures: list[tuple[str, str]] = field(default_factory=list)
    # model tokens generated for this step (filled in by the rollout engine)
    num_tokens: int = 0


@dataclass
class StepOutcome:
    observations: list[str]
    records: list[CallRecord]
    turn_over: bool
    # set when the episode itself is over: "completed", "force_terminated", "context_overflow"
    ended: str | None = None


class Episode:
    def __init__(self, entry: Entry, max_steps: int = MAXIMUM_STEP_LIMIT):
        self.entry = entry
        self.max_steps = max_steps
        self.backends = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
        self.turn = -1
        self.steps_in_turn = 0
        self.in_turn = False
        self.ended: str | None = None
        # decoded calls per turn per step: the layout bfcl-eval stores and scores
        self.result: list[list[list[str]]] = []
        self.steps: list[list[StepRecord]] = []

    @property
    def done(self) -> bool:
        return self.ended is not None

    def next_turn(self) -> TurnStart | None:
        """Open the next turn, or return None (and mark the episode completed) after the last."""
        if self.done:
            return None
        if self.in_turn:
            raise RuntimeError("the current turn has not ended yet")
        if self.turn + 1 >= self.entry.num_turns:
            self.ended = "completed"
            return None
        self.turn += 1
        self.steps_in_turn = 0
        self.in_turn = True
        self.result.append([])
        self.steps.append([])
        return TurnStart(
            self.turn,
            list(self.entry.turns[self.turn]),
            list(self.entry.holdout.get(self.turn, [])),
        )

    def step(
        self,
        calls: list[ToolCall],
        raw: str = "",
        parse_failures: list[tuple[str, str]] | None = None,
        num_tokens: int = 0,
        keep_turn: bool = False,
    ) -> StepOutcome:
        """Submit one decoded model output. No calls ends the turn, as in BFCL.

        `keep_turn=True` (training interfaces only: recovery feedback after an undecodable output)
        keeps the turn open for another step instead; the step counts towards the step limit and
        adds nothing to the scored result (the official checker drops empty steps anyway).
        """
        if not self.in_turn:
            raise RuntimeError("step() called outside a turn; call next_turn() first")
        record = StepRecord(raw, [], list(parse_failures or []), num_tokens)
        self.steps[-1].append(record)
        if not calls and not keep_turn:
            self.in_turn = False
            return StepOutcome([], [], turn_over=True)
        record.calls = [execute(self.backends, call) for call in calls]
        if calls:
            self.result[-1].append([r.text for r in record.calls])
        self.steps_in_turn += 1
        outcome = StepOutcome([r.observation for r in record.calls], record.calls, turn_over=False)
        if self.steps_in_turn > self.max_steps:
            self.in_turn = False
            self.ended = "force_terminated"
            outcome.turn_over, outcome.ended = True, self.ended
        return outcome

    def abort(self, reason: str = "context_overflow") -> None:
        """End the episode early (the rollout engine calls this when the context is full)."""
        self.in_turn = False
        self.ended = reason

    def verdict(self) -> Verdict:
        return verify(self.entry, self.result, context_overflow=self.ended == "context_overflow")
