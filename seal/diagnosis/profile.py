"""Label statistics: a trajectory's profile p_j(z) and a round's aggregate failure profile C_t.

Both read one label layer at a time (seal.diagnosis.labels.profile_labels): the weights read the
outcome layer by default, the interface's evolve() reads the cause layer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from seal.diagnosis.labels import COUNTED_LABELS, LAYERS, TurnLabel, profile_labels


def trajectory_profile(labels: Sequence[str]) -> dict[str, float]:
    """p_j(z) = share of the trajectory's counted turns labelled z ({} when it has none). `labels`
    are one layer's labels (profile_labels)."""
    weighted = [x for x in labels if x in COUNTED_LABELS]
    if not weighted:
        return {}
    counts = Counter(weighted)
    return {label: counts[label] / len(weighted) for label in COUNTED_LABELS if counts[label]}


@dataclass
class FailureProfile:
    """C_t: what the round's rollouts failed at, in one label layer, over counted turns only."""

    # label -> number of weighted turns with that label (labels that never occur are left out)
    counts: dict[str, int] = field(default_factory=dict)
    # label -> count / num_turns
    prevalence: dict[str, float] = field(default_factory=dict)
    mean_reward: float = 0.0
    # category -> label -> count
    by_category: dict[str, dict[str, int]] = field(default_factory=dict)
    num_trajectories: int = 0
    # number of counted (labelled, checkable) turns: the evidence behind the prevalences
    num_turns: int = 0

    @classmethod
    def from_round(
        cls, labels: Sequence[Sequence[str]], categories: Sequence[str], rewards: Sequence[float]
    ) -> FailureProfile:
        if not len(labels) == len(categories) == len(rewards):
            raise ValueError(
                f"one category and reward per trajectory: got {len(labels)} label lists, "
                f"{len(categories)} categories, {len(rewards)} rewards"
            )
        total: Counter[str] = Counter()
        by_category: dict[str, Counter[str]] = {}
        for traj, category in zip(labels, categories):
            weighted = [x for x in traj if x in COUNTED_LABELS]
            total.update(weighted)
            by_category.setdefault(category, Counter()).update(weighted)
        n = sum(total.values())
        order = {label: i for i, label in enumerate(COUNTED_LABELS)}
        counts = {k: total[k] for k in sorted(total, key=order.__getitem__)}
        return cls(
            counts=counts,
            prevalence={k: v / n for k, v in counts.items()},  # no counts when n == 0
            mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            by_category={
                c: {k: cnt[k] for k in sorted(cnt, key=order.__getitem__)} for c, cnt in by_category.items()
            },
            num_trajectories=len(labels),
            num_turns=n,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def metrics(self, prefix: str) -> dict[str, float]:
        """Flat, namespaced numbers for the logger: <prefix>/<label> is the label's prevalence,
        <prefix>/num_turns the number of counted turns (e.g. prefix diag/outcome, diag/cause)."""
        out = {f"{prefix}/{label}": share for label, share in self.prevalence.items()}
        out[f"{prefix}/num_turns"] = float(self.num_turns)
        return out


def round_profiles(
    turn_labels: Sequence[Sequence[TurnLabel]], categories: Sequence[str], rewards: Sequence[float]
) -> dict[str, FailureProfile]:
    """The round's failure profile C_t in each layer: {"outcome": ..., "cause": ...}."""
    return {
        layer: FailureProfile.from_round([profile_labels(t, layer) for t in turn_labels], categories, rewards)
        for layer in LAYERS
    }
