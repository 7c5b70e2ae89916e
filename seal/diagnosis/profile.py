"""Label statistics: a trajectory's profile p_j(z) and a round's aggregate failure profile C_t."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from seal.diagnosis.labels import WEIGHTED_LABELS


def trajectory_profile(labels: Sequence[str]) -> dict[str, float]:
    """p_j(z) = share of the trajectory's weighted turns labelled z ({} when it has none)."""
    weighted = [x for x in labels if x in WEIGHTED_LABELS]
    if not weighted:
        return {}
    counts = Counter(weighted)
    return {label: counts[label] / len(weighted) for label in WEIGHTED_LABELS if counts[label]}


@dataclass
class FailureProfile:
    """C_t: what the round's rollouts failed at, over weighted turns only."""

    # label -> number of weighted turns with that label (labels that never occur are left out)
    counts: dict[str, int] = field(default_factory=dict)
    # label -> count / num_turns
    prevalence: dict[str, float] = field(default_factory=dict)
    mean_reward: float = 0.0
    # category -> label -> count
    by_category: dict[str, dict[str, int]] = field(default_factory=dict)
    num_trajectories: int = 0
    # number of weighted (labelled, played, checkable) turns: the evidence behind the prevalences
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
            weighted = [x for x in traj if x in WEIGHTED_LABELS]
            total.update(weighted)
            by_category.setdefault(category, Counter()).update(weighted)
        n = sum(total.values())
        order = {label: i for i, label in enumerate(WEIGHTED_LABELS)}
        counts = {k: total[k] for k in sorted(total, key=order.__getitem__)}
        return cls(
            counts=counts,
            prevalence={k: v / n for k, v in counts.items()} if n else {},
            mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
            by_category={
                c: {k: cnt[k] for k in sorted(cnt, key=order.__getitem__)} for c, cnt in by_category.items()
            },
            num_trajectories=len(labels),
            num_turns=n,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def metrics(self) -> dict[str, float]:
        """Flat, namespaced numbers for the logger: diag/<label> is the label's prevalence."""
        out = {f"diag/{label}": share for label, share in self.prevalence.items()}
        out.update({"diag/num_turns": float(self.num_turns), "diag/mean_reward": self.mean_reward})
        return out
