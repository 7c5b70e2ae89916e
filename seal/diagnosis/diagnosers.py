"""The diagnosers a run can be configured with (conf/diagnoser/*.yaml).

All share one interface: `label_round(items)` takes the round's (entry, verdict, steps) triples
and returns one label list per trajectory (one label per turn of its entry). `state_dict()` /
`load_state_dict()` carry whatever a resumed run needs to continue identically.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from seal.diagnosis import labels as L
from seal.diagnosis.rules import diagnose
from seal.env.benchmark import Entry
from seal.env.episode import StepRecord
from seal.env.verifier import Verdict

Item = tuple[Entry, Verdict, list[list[StepRecord]]]


class RuleDiagnoser:
    """The paper's Psi: deterministic rules over executable evidence (seal.diagnosis.rules)."""

    provides_labels = True

    def __init__(self, name: str = "rules"):
        self.name = name

    def label_round(self, items: Sequence[Item]) -> list[list[str]]:
        return [diagnose(entry, verdict, steps) for entry, verdict, steps in items]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class RandomDiagnoser(RuleDiagnoser):
    """Falsification control: the rule labels, except that every failed turn's label is redrawn from
    the round's own empirical distribution of failure labels. Pass, correct_abstention and the
    unweighted labels stay; so do the round's label frequencies in expectation. Only the link
    between a failure and its label is broken."""

    def __init__(self, name: str = "random", seed: int = 0):
        super().__init__(name)
        self.seed = seed
        self._rng = random.Random(seed)

    def label_round(self, items: Sequence[Item]) -> list[list[str]]:
        labels = super().label_round(items)
        counts = Counter(x for traj in labels for x in traj if x in L.FAILURE_LABELS)
        if not counts:
            return labels
        population = [x for x in L.FAILURE_LABELS if counts[x]]
        weights = [counts[x] for x in population]
        return [
            [self._rng.choices(population, weights)[0] if x in L.FAILURE_LABELS else x for x in traj]
            for traj in labels
        ]

    def state_dict(self) -> dict:
        version, internal, gauss = self._rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))


class ConstantDiagnoser(RuleDiagnoser):
    """Control: every failed turn (rule label in FAILURE_LABELS) gets the one configured label."""

    def __init__(self, name: str = "constant", label: str = L.RESPONSE_MISMATCH):
        super().__init__(name)
        L.check_labels([label], what="constant diagnoser label")
        self.label = label

    def label_round(self, items: Sequence[Item]) -> list[list[str]]:
        rule_labels = super().label_round(items)
        return [[self.label if x in L.FAILURE_LABELS else x for x in traj] for traj in rule_labels]


class NoDiagnoser:
    """No diagnosis: every turn is `unlabelled`, which no profile counts, so every trajectory weighs
    1 and the failure profile is empty (an evolving interface then never switches)."""

    provides_labels = False

    def __init__(self, name: str = "none"):
        self.name = name

    def label_round(self, items: Sequence[Item]) -> list[list[str]]:
        return [[L.UNLABELLED] * entry.num_turns for entry, _, _ in items]

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
