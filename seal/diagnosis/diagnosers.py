"""The diagnosers a run can be configured with (conf/diagnoser/*.yaml).

All share one interface: `label_round(items)` takes the round's (entry, verdict, steps) triples
and returns, per trajectory, one TurnLabel (outcome, cause) per turn of its entry. `state_dict()` /
`load_state_dict()` carry whatever a resumed run needs to continue identically.

The controls act on both layers, each on its own: a turn's outcome is touched only when it is a
failure outcome (OUTCOME_FAILURES), its cause only when it is a failure cause (CAUSE_FAILURES).
Successes (pass, correct_abstention, a None cause) and the uncounted labels (not_played,
checker_error, gt_error) stay as the rules give them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from seal.diagnosis import labels as L
from seal.diagnosis.rules import diagnose
from seal.env.entry import Entry
from seal.env.episode import StepRecord
from seal.env.verifier import Verdict
from seal.io import restore_rng, rng_state

Item = tuple[Entry, Verdict, list[list[StepRecord]]]


class RuleDiagnoser:
    """The paper's Psi: deterministic rules over executable evidence (seal.diagnosis.rules)."""

    provides_labels = True

    def __init__(self, name: str = "rules"):
        self.name = name

    def label_round(self, items: Sequence[Item]) -> list[list[L.TurnLabel]]:
        return [diagnose(entry, verdict, steps) for entry, verdict, steps in items]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class RandomDiagnoser(RuleDiagnoser):
    """Falsification control: the rule labels, except that in each layer every failure label is
    redrawn from the round's own empirical distribution of that layer's failure labels (outcome and
    cause drawn independently). A layer's label frequencies stay the same in expectation; only the
    link between a failed turn and its label is broken, in the weights and in the interface alike."""

    def __init__(self, name: str = "random", *, seed: int):
        super().__init__(name)
        self._rng = random.Random(seed)

    def _sampler(self, values, failures):
        counts = Counter(x for x in values if x in failures)
        population = [x for x in failures if counts[x]]
        weights = [counts[x] for x in population]
        return lambda x: self._rng.choices(population, weights)[0] if x in failures else x

    def label_round(self, items: Sequence[Item]) -> list[list[L.TurnLabel]]:
        labels = super().label_round(items)
        turns = [t for traj in labels for t in traj]
        outcome = self._sampler([t.outcome for t in turns], L.OUTCOME_FAILURES)
        cause = self._sampler([t.cause for t in turns], L.CAUSE_FAILURES)
        # one draw per layer per turn, in order, so a resumed RNG continues the same stream
        return [[L.TurnLabel(outcome(t.outcome), cause(t.cause)) for t in traj] for traj in labels]

    def state_dict(self) -> dict:
        return {"rng": rng_state(self._rng)}

    def load_state_dict(self, state: dict) -> None:
        restore_rng(self._rng, state["rng"])


class ConstantDiagnoser(RuleDiagnoser):
    """Control: every failure outcome becomes `outcome`, every failure cause becomes `cause`."""

    def __init__(
        self, name: str = "constant", outcome: str = L.RESPONSE_MISMATCH, cause: str = L.RESPONSE_MISMATCH
    ):
        super().__init__(name)
        L.check_labels([outcome], L.OUTCOMES, what="constant diagnoser outcome")
        L.check_labels([cause], L.CAUSES, what="constant diagnoser cause")
        self.outcome, self.cause = outcome, cause

    def label_round(self, items: Sequence[Item]) -> list[list[L.TurnLabel]]:
        return [
            [
                L.TurnLabel(
                    self.outcome if t.outcome in L.OUTCOME_FAILURES else t.outcome,
                    self.cause if t.cause in L.CAUSE_FAILURES else t.cause,
                )
                for t in traj
            ]
            for traj in super().label_round(items)
        ]


class NoDiagnoser:
    """No diagnosis: both labels of every turn are `unlabelled`, which no profile counts, so every
    trajectory weighs 1 and the failure profile is empty (an evolving interface never switches)."""

    provides_labels = False

    def __init__(self, name: str = "none"):
        self.name = name

    def label_round(self, items: Sequence[Item]) -> list[list[L.TurnLabel]]:
        return [[L.TurnLabel(L.UNLABELLED, L.UNLABELLED)] * entry.num_turns for entry, _, _ in items]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
