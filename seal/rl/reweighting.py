"""Diagnosis-guided advantage reweighting (paper section 3.4, Table 6) as pure functions.

    p_j(z)  = share of trajectory j's counted turns tagged z         (seal.diagnosis.trajectory_profile)
              in the layer `profile_layer` names: the outcome tags (default, as in the authors'
              release) or the causes (an ablation); rho is defined on outcome tags either way
    w_j     = clip( sum_z p_j(z) * rho(z), w_min, w_max )            trajectory_weight()
    A~_j    = w_j * A_j                                              (w_j > 0: the sign never changes)

Closed loop (what the "w/o closed-loop update" ablation removes), as the authors' release runs it.
Section 3.4 describes rho as fixed across runs; the release behind the paper's numbers (arm 04) updates
it every round as below, and `seal` follows the release (`fixed` is the ablation's rho0 throughout).
Each generation batch first enters a window of turn-tag statistics that is cumulative since the
start of the current epoch (TagWindow); rho is then moved towards the window, and only then is the
batch weighted, with the just-updated rho:

    prevalence(z) = count(z) / all counted turns in the window
    stagnation(z) = 1 - mean trajectory reward over z's occurrences (per tag, not the batch mean)
    confidence(z) = min(1, count(z) / n_conf)
    target(z)     = clip( rho0(z) * (1 + alpha * prevalence(z) * stagnation(z) * confidence(z)), w_min, w_max )
    rho(z)       <- (1 - beta) * rho(z) + beta * target(z)                            update_rho()

`pass` never moves (its target is its base); checker/ground-truth errors are not counted and target
1.0. Tags without a rho0 entry weigh 1.0. The functions work on plain tag strings per turn, so any
label layer (the project's diagnosis labels or Table 6 outcome tags) can drive them. The binary
verifier reward itself is never touched.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from seal.diagnosis.labels import COUNTED_LABELS, LABELS
from seal.diagnosis.profile import trajectory_profile
from seal.io import restore_rng, rng_state

MODES = ("off", "fixed", "closed_loop", "shuffled")
# turns the checker could not judge (and placeholders): never counted, never weighted, target 1.0
EXCLUDED_TAGS = frozenset(LABELS) - frozenset(COUNTED_LABELS)
# the release keeps these at their base whatever the statistics say
FROZEN_TAGS = frozenset({"pass"})


def trajectory_weight(profile: Mapping[str, float], rho: Mapping[str, float], w_min: float, w_max: float) -> float:
    """w_j for one trajectory's tag profile; an empty profile (no counted turn) weighs 1."""
    if not profile:
        return 1.0
    raw = sum(share * rho.get(tag, 1.0) for tag, share in profile.items())
    return min(max(raw, w_min), w_max)


@dataclass
class TagWindow:
    """Turn-tag statistics since the start of the epoch: per tag, its number of turns and the sum of
    the rewards of the trajectories those turns belong to (one term per occurrence)."""

    counts: dict[str, int] = field(default_factory=dict)
    reward_sums: dict[str, float] = field(default_factory=dict)

    def add(self, turn_tags: Sequence[Sequence[str]], rewards: Sequence[float],
            excluded: Collection[str] = EXCLUDED_TAGS) -> None:
        if len(turn_tags) != len(rewards):
            raise ValueError(f"one reward per trajectory: got {len(turn_tags)} tag lists and {len(rewards)} rewards")
        for tags, reward in zip(turn_tags, rewards):
            for tag in tags:
                if tag in excluded:
                    continue
                self.counts[tag] = self.counts.get(tag, 0) + 1
                self.reward_sums[tag] = self.reward_sums.get(tag, 0.0) + float(reward)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def prevalence(self, tag: str) -> float:
        total = self.total
        return self.counts.get(tag, 0) / total if total else 0.0

    def stagnation(self, tag: str) -> float:
        count = self.counts.get(tag, 0)
        return 1.0 - self.reward_sums[tag] / count if count else 0.0

    def clear(self) -> None:
        self.counts.clear()
        self.reward_sums.clear()


def rho_target(
    tag: str,
    base: float,
    window: TagWindow,
    *,
    alpha: float,
    confidence_samples: int,
    w_min: float,
    w_max: float,
    frozen: Collection[str] = FROZEN_TAGS,
    excluded: Collection[str] = EXCLUDED_TAGS,
) -> float:
    """Where the closed loop pulls rho(tag) for the current window."""
    if tag in excluded:
        return 1.0
    if tag in frozen:
        return base
    confidence = min(1.0, window.counts.get(tag, 0) / confidence_samples)
    target = base * (1.0 + alpha * window.prevalence(tag) * window.stagnation(tag) * confidence)
    # the target is clipped, not the smoothed rho: rho then approaches the bound and never jumps to it
    return min(max(target, w_min), w_max)


def update_rho(
    rho: Mapping[str, float],
    rho0: Mapping[str, float],
    window: TagWindow,
    *,
    alpha: float,
    beta: float,
    confidence_samples: int,
    w_min: float,
    w_max: float,
    frozen: Collection[str] = FROZEN_TAGS,
    excluded: Collection[str] = EXCLUDED_TAGS,
) -> dict[str, float]:
    """One closed-loop EMA step of every rho0 tag towards its target for the window."""
    new = {}
    for tag, base in rho0.items():
        target = rho_target(tag, base, window, alpha=alpha, confidence_samples=confidence_samples,
                            w_min=w_min, w_max=w_max, frozen=frozen, excluded=excluded)
        new[tag] = (1.0 - beta) * rho.get(tag, base) + beta * target
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
    """rho, the epoch's tag window, and the rule that turns a batch's turn tags into advantage weights.

    Built from conf/reweighting/*.yaml; `rounds_per_epoch` comes from the caller (the train part's
    size over the prompts per round). State (rho, the window, the position in the epoch, the
    shuffling RNG) is saved with every checkpoint so a resumed run continues with identical weights.
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
    # batches (rounds) per epoch: the window is cleared after each epoch's last one; None: never
    rounds_per_epoch: int | None = None
    rho: dict[str, float] = field(init=False)
    window: TagWindow = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"reweighting mode {self.mode!r} is not one of {', '.join(MODES)}")
        numbers = {"w_min": self.w_min, "w_max": self.w_max, "ema_beta": self.ema_beta,
                   "prevalence_alpha": self.prevalence_alpha, **{f"rho0.{k}": v for k, v in dict(self.rho0).items()}}
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}={value!r}: give a number")
        if not 0 <= self.ema_beta <= 1:
            raise ValueError(f"ema_beta={self.ema_beta}: give the EMA's step, from 0 to 1")
        if self.prevalence_alpha < 0:
            raise ValueError(f"prevalence_alpha={self.prevalence_alpha}: give 0 or more")
        if isinstance(self.confidence_samples, bool) or not isinstance(self.confidence_samples, int) or \
                self.confidence_samples < 1:
            raise ValueError(f"confidence_samples={self.confidence_samples!r}: give a whole number, at least 1")
        low = [f"rho0.{k}={v}" for k, v in dict(self.rho0).items() if v <= 0]
        if low:
            raise ValueError(f"{low[0]}: give a positive weight (an outcome's informativeness; 1.0: neutral)")
        if not 0 < self.w_min <= 1 <= self.w_max:
            raise ValueError(f"need 0 < w_min <= 1 <= w_max, got w_min={self.w_min}, w_max={self.w_max}")
        if self.rounds_per_epoch is not None and self.rounds_per_epoch < 1:
            raise ValueError(f"rounds_per_epoch must be at least 1 (or null), got {self.rounds_per_epoch}")
        self.rho0 = {str(k): float(v) for k, v in dict(self.rho0).items()}
        from seal.diagnosis import check_layer, check_rho_keys

        check_layer(self.profile_layer)
        check_rho_keys(self.rho0)
        self.rho = dict(self.rho0)
        self.window = TagWindow()
        self.rounds_in_epoch = 0
        self._rng = random.Random(self.seed)

    @property
    def active(self) -> bool:
        return self.mode != "off"

    @property
    def closed_loop(self) -> bool:
        # the shuffled control must move rho exactly as SEAL does, or it tests two things at once
        return self.mode in ("closed_loop", "shuffled")

    def weights(self, profiles: Sequence[Mapping[str, float]]) -> list[float]:
        """One weight per trajectory under the current rho, in order (permuted in `shuffled`)."""
        if not self.active:
            return [1.0] * len(profiles)
        weights = [trajectory_weight(p, self.rho, self.w_min, self.w_max) for p in profiles]
        if self.mode == "shuffled":
            # control: same weight distribution, no link to the trajectory it multiplies
            self._rng.shuffle(weights)
        return weights

    def weigh_batch(self, turn_tags: Sequence[Sequence[str]], rewards: Sequence[float]) -> list[float]:
        """The batch's weights: its tags enter the epoch window, rho moves (closed-loop modes), and
        the batch is weighted with the moved rho; the window is cleared after an epoch's last batch."""
        if not self.active:
            return [1.0] * len(turn_tags)
        self.window.add(turn_tags, rewards)
        if self.closed_loop:
            self.rho = update_rho(
                self.rho, self.rho0, self.window,
                alpha=self.prevalence_alpha, beta=self.ema_beta, confidence_samples=self.confidence_samples,
                w_min=self.w_min, w_max=self.w_max,
            )
        weights = self.weights([trajectory_profile(tags) for tags in turn_tags])
        self.rounds_in_epoch += 1
        if self.rounds_per_epoch is not None and self.rounds_in_epoch >= self.rounds_per_epoch:
            self.end_epoch()
        return weights

    def end_epoch(self) -> None:
        """Start a new statistics window (rho itself carries over)."""
        self.window.clear()
        self.rounds_in_epoch = 0

    def state_dict(self) -> dict:
        return {
            "rho": dict(self.rho),
            "window": {"counts": dict(self.window.counts), "reward_sums": dict(self.window.reward_sums)},
            "rounds_in_epoch": self.rounds_in_epoch,
            "rng": rng_state(self._rng),
        }

    def load_state_dict(self, state: dict) -> None:
        self.rho = {k: float(v) for k, v in state["rho"].items()}
        window = state.get("window", {})
        self.window = TagWindow({k: int(v) for k, v in window.get("counts", {}).items()},
                                {k: float(v) for k, v in window.get("reward_sums", {}).items()})
        self.rounds_in_epoch = int(state.get("rounds_in_epoch", 0))
        restore_rng(self._rng, state["rng"])
