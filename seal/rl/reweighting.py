"""Diagnosis-guided advantage reweighting (paper section 3.3, Table 6) as pure functions.

    p_j(z)  = share of trajectory j's turns labelled z          (seal.diagnosis.trajectory_profile)
              in the layer `profile_layer` names: the outcome tags (default, as in the authors'
              release) or the causes (an ablation); rho is defined on outcome tags either way
    w_j     = clip( sum_z p_j(z) * rho(z), w_min, w_max )       trajectory_weight()
    A~_j    = w_j * A_j                                         (w_j > 0: the sign never changes)

Closed loop (what the "w/o closed-loop update" ablation removes): after every round,

    target(z) = rho0(z) * (1 + alpha * prevalence(z) * (1 - mean_reward) * min(1, count(z) / n_conf))
    rho(z)   <- (1 - beta) * rho(z) + beta * clip(target(z), w_min, w_max)          update_rho()

Labels without a rho0 entry weigh 1.0. The binary verifier reward itself is never touched.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MODES = ("off", "fixed", "closed_loop", "shuffled")


def trajectory_weight(profile: Mapping[str, float], rho: Mapping[str, float], w_min: float, w_max: float) -> float:
    """w_j for one trajectory's label profile; an empty profile (no labelled turn) weighs 1."""
    if not profile:
        return 1.0
    raw = sum(share * rho.get(label, 1.0) for label, share in profile.items())
    return min(max(raw, w_min), w_max)


def update_rho(
    rho: Mapping[str, float],
    rho0: Mapping[str, float],
    prevalence: Mapping[str, float],
    counts: Mapping[str, int],
    mean_reward: float,
    *,
    alpha: float,
    beta: float,
    confidence_samples: int,
    w_min: float,
    w_max: float,
) -> dict[str, float]:
    """One closed-loop EMA step of rho towards the round's label statistics."""
    new = {}
    for label, base in rho0.items():
        confidence = min(1.0, counts.get(label, 0) / confidence_samples)
        target = base * (1.0 + alpha * prevalence.get(label, 0.0) * (1.0 - mean_reward) * confidence)
        target = min(max(target, w_min), w_max)
        new[label] = (1.0 - beta) * rho.get(label, base) + beta * target
    return new


def weight_stats(weights: Sequence[float], w_min: float, w_max: float) -> dict[str, float]:
    n = len(weights)
    if n == 0:
        return {}
    mean = sum(weights) / n
    return {
        "mean": mean,
        "std": (sum((w - mean) ** 2 for w in weights) / n) ** 0.5,
        "min": min(weights),
        "max": max(weights),
        "clipped_frac": sum(w <= w_min or w >= w_max for w in weights) / n,
    }


@dataclass
class Reweighting:
    """rho and the rule that turns a round's label profiles into advantage weights.

    Built from conf/reweighting/*.yaml. State (rho, the shuffling RNG) is saved with every
    checkpoint so a resumed run continues with identical weights.
    """

    mode: str = "closed_loop"
    w_min: float = 0.5
    w_max: float = 2.0
    rho0: dict[str, float] = field(default_factory=dict)
    ema_beta: float = 0.25
    prevalence_alpha: float = 1.0
    confidence_samples: int = 32
    seed: int = 0
    # which label layer p_j(z) and the closed-loop statistics read: "outcome" or "cause"
    profile_layer: str = "outcome"
    rho: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"reweighting mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not 0 < self.w_min <= 1 <= self.w_max:
            raise ValueError(f"need 0 < w_min <= 1 <= w_max, got w_min={self.w_min}, w_max={self.w_max}")
        self.rho0 = {str(k): float(v) for k, v in dict(self.rho0).items()}
        from seal.diagnosis import check_layer, check_rho_keys

        check_layer(self.profile_layer)
        check_rho_keys(self.rho0)
        self.rho = dict(self.rho0)
        self._rng = random.Random(self.seed)

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def weights(self, profiles: Sequence[Mapping[str, float]]) -> list[float]:
        """One weight per trajectory of the round, in order."""
        if not self.active:
            return [1.0] * len(profiles)
        weights = [trajectory_weight(p, self.rho, self.w_min, self.w_max) for p in profiles]
        if self.mode == "shuffled":
            # control: same weight distribution, no link to the trajectory it multiplies
            self._rng.shuffle(weights)
        return weights

    def end_round(self, prevalence: Mapping[str, float], counts: Mapping[str, int], mean_reward: float) -> None:
        """Closed-loop modes move rho towards the round's statistics; other modes keep it."""
        if self.mode in ("closed_loop", "shuffled"):
            self.rho = update_rho(
                self.rho, self.rho0, prevalence, counts, mean_reward,
                alpha=self.prevalence_alpha, beta=self.ema_beta, confidence_samples=self.confidence_samples,
                w_min=self.w_min, w_max=self.w_max,
            )

    def state_dict(self) -> dict:
        return {"rho": dict(self.rho), "rng": self._rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.rho = {k: float(v) for k, v in state["rho"].items()}
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
