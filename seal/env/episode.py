"""One BFCL multi-turn episode, played step by step under the benchmark's inference protocol.

Protocol (bfcl-eval's multi-turn inference loop, prompting mode):
- turns are delivered in order; a miss_func holdout turn has no user message of its own: the
  held-out tool docs are delivered then, with the benchmark's "I have updated some more
  functions..." message (rendering is the tool format's job, the episode says what is new);
- within a turn the model is queried repeatedly; an output that decodes to no call, or fails to
  decode, ends the turn; otherwise the calls run and their results go back to the model;
- step limit, `step_limit="turn"` (BFCL's rule, the default): after more than `max_steps` steps with
  calls in one turn the episode is force-quit; `step_limit="episode"` (the authors' release, in
  training): after `max_steps` model outputs in the whole episode (every output counts: calls, text
  replies, undecodable text) it is force-quit, unless that output closed the last turn. Either way the
  official runner then scores it `force_terminated` unless the quit came in the last turn.
The environment's answers follow a `Protocol` (seal.env.protocol): BFCL's (the default, as above) or
the authors' release, which refuses a whole output unexecuted, with an `[ERROR]` observation and the
turn kept open, when a call block is malformed or names a tool the turn has not shown.
The episode records the decoded calls in BFCL's result layout, so `verdict()` is the official check.

Other benchmarks' entries follow their own protocols through the same steps, as their benchmark
(seal.env.benchmarks) says: a single-turn entry takes exactly one reply, whose calls are recorded but
never executed; a memory entry's first system message carries the memory backend's instructions and
core memory, and a memory prerequisite conversation flushes its memory to the run's snapshot when it
ends; a tau2 conversation's next user message comes from its user simulator once the previous turn has
ended (`Benchmark.next_messages`), and its calls run in tau2's own environment (`Benchmark.backends`,
`Benchmark.execute`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seal.env.entry import Entry
from seal.env.benchmarks import benchmark_of
from seal.env.calls import ToolCall
from seal.env.executor import CallRecord
from seal.env.protocol import BFCL, Protocol
from seal.env.verifier import Verdict

MAXIMUM_STEP_LIMIT = 20  # bfcl-eval's default
STEP_LIMITS = ("turn", "episode")


def check_step_limit(value: str, key: str) -> str:
    """`value` if it is a step-limit mode, else a UserError naming the config key and the choices."""
    from seal.errors import UserError

    if value not in STEP_LIMITS:
        raise UserError(f"{key}={value!r}: choose turn (BFCL: max steps per turn) or episode (the release: per trajectory)")
    return value


def describe_step_limit(value: str, max_steps: int) -> str:
    """The rule in words, for reports."""
    if value == "episode":
        return f"{max_steps} model outputs per episode (the release's training rule)"
    return f"more than {max_steps} steps in one turn force-quits (BFCL's rule)"


@dataclass
class TurnStart:
    index: int
    # the benchmark's messages for this turn (empty for a miss_func holdout turn)
    messages: list[dict[str, str]]
    # tool docs delivered at this turn (miss_func holdout turns only)
    new_functions: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, entry: Entry, index: int, turns: list[list[dict[str, str]]] | None = None) -> TurnStart:
        """Turn `index` of `entry` as it opens (`turns`: the messages as an episode delivers them, when
        they differ from the benchmark's)."""
        return cls(index, list((entry.turns if turns is None else turns)[index]), list(entry.holdout.get(index, [])))


@dataclass
class StepRecord:
    """One model query within a turn."""

    raw: str
    calls: list[CallRecord] = field(default_factory=list)
    # text fragments that looked like calls but could not be decoded, with the reason
    parse_failures: list[tuple[str, str]] = field(default_factory=list)
    # model tokens generated for this step (filled in by the rollout engine)
    num_tokens: int = 0
    # the release protocol's `[ERROR]` observation when it refused the whole output (no call ran)
    error: str | None = None


@dataclass
class StepOutcome:
    observations: list[str]
    records: list[CallRecord]
    turn_over: bool
    # set when the episode itself is over: "completed", "force_terminated", "context_overflow"
    ended: str | None = None
    # the refusal the model reads instead of tool results (release protocol), turn kept open
    error: str | None = None


class Episode:
    def __init__(self, entry: Entry, max_steps: int = MAXIMUM_STEP_LIMIT, step_limit: str = "turn",
                 protocol: Protocol = BFCL):
        if step_limit not in STEP_LIMITS:
            raise ValueError(f"step_limit {step_limit!r} is not one of {', '.join(STEP_LIMITS)}")
        self.entry = entry
        self.protocol = protocol
        self.max_steps = max_steps
        self.step_limit = step_limit
        self.benchmark = benchmark_of(entry)
        self.backends = self.benchmark.backends(entry)
        # the turns' messages as this episode delivers them (a memory entry's system message is filled
        # in from the memory it starts with)
        self.turns = self.benchmark.turns(entry, self.backends)
        self.single_reply = self.benchmark.single_reply(entry)
        self.turn = -1
        self.steps_in_turn = 0
        # every model output of the episode (the release's step count)
        self.model_steps = 0
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
        if self.turn + 1 >= len(self.turns):
            # a conversational benchmark's next user message depends on what was said so far
            more = self.benchmark.next_messages(self)
            if self.done:  # the benchmark ended the episode (e.g. its user simulator failed)
                return None
            if more is None:
                self._end("completed")
                return None
            self.turns.append(more)
        self.turn += 1
        self.steps_in_turn = 0
        self.in_turn = True
        self.result.append([])
        self.steps.append([])
        return TurnStart.of(self.entry, self.turn, self.turns)

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
        Under a protocol that refuses the output (`Protocol.refusal`), no call runs, the outcome carries
        the `[ERROR]` text, the turn stays open and the step counts, as a step with calls does.
        """
        if not self.in_turn:
            raise RuntimeError("step() called outside a turn; call next_turn() first")
        record = StepRecord(raw, [], list(parse_failures or []), num_tokens)
        self.steps[-1].append(record)
        self.model_steps += 1
        if self.single_reply:  # one reply, checked unexecuted
            record.calls = [CallRecord(call.to_string(), "", call) for call in calls]
            self.result[-1].append([r.text for r in record.calls])
            self.in_turn = False
            return StepOutcome([], record.calls, turn_over=True)
        error = self.protocol.refusal(calls, record.parse_failures, self.entry.visible_function_names(self.turn))
        if error is not None:
            record.error = error
            self.steps_in_turn += 1
            return self._limit(StepOutcome([error], [], turn_over=False, error=error))
        if calls and self.benchmark.ends_episode(self.backends, calls):
            self.in_turn = False
            self._end("completed")
            return StepOutcome([], [], turn_over=True, ended=self.ended)
        if not calls and not keep_turn:
            self.in_turn = False
            outcome = StepOutcome([], [], turn_over=True)
            # a reply that closes the last turn finishes the episode: nothing is left to cut
            if self._episode_limit_reached() and self.turn + 1 < len(self.turns):
                self._end("force_terminated")
                outcome.ended = self.ended
            return outcome
        record.calls = [self.benchmark.execute(self.backends, call) for call in calls]
        if calls:
            self.result[-1].append([r.text for r in record.calls])
        self.steps_in_turn += 1
        return self._limit(StepOutcome([r.observation for r in record.calls], record.calls, turn_over=False))

    def _limit(self, outcome: StepOutcome) -> StepOutcome:
        """Force-quit the episode when the step that kept the turn open reached the step limit."""
        over = self._episode_limit_reached() if self.step_limit == "episode" else self.steps_in_turn > self.max_steps
        if over:
            self.in_turn = False
            self._end("force_terminated")
            outcome.turn_over, outcome.ended = True, self.ended
        return outcome

    def _episode_limit_reached(self) -> bool:
        return self.step_limit == "episode" and self.model_steps >= self.max_steps

    def abort(self, reason: str = "context_overflow") -> None:
        """End the episode early (the rollout engine calls this when the context is full)."""
        self.in_turn = False
        self._end(reason)

    def _end(self, reason: str) -> None:
        self.ended = reason
        self.benchmark.end(self.entry, self.backends)

    def verdict(self) -> Verdict:
        return self.benchmark.verdict(self)
