"""One SEAL round (paper Algorithm 1) around TRL's GRPO step.

    roll out G episodes per prompt under Omega_t          rollout()      (TRL's rollout_func)
    verify (reward) and diagnose (labels) each episode    rollout()
    aggregate C_t; rho_t (closed loop) from the epoch's   end_round()    (TRL's advantage hook)
      tags so far; weights w_j; A~_j = w_j A_j
    Omega_{t+1} = Evolve(Omega_t, C_t)
    one GRPO update with KL regularisation                TRL

The state that must survive a crash (Omega, rho, RNG states, round history) is `state_dict()`,
written next to every TRL checkpoint by seal.rl.checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from seal.diagnosis import FailureProfile
from seal.interface import apply, evolve, omega_diff
from seal.rl.reweighting import Reweighting, weight_stats


@dataclass
class RoundRecord:
    """What one round leaves in metrics.jsonl, report.md and W&B."""

    round: int
    global_step: int
    metrics: dict[str, float] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)
    rho: dict[str, float] = field(default_factory=dict)
    interface: dict[str, Any] = field(default_factory=dict)
    interface_diff: str = ""
    episodes: list[dict[str, Any]] = field(default_factory=list)


class CoEvolution:
    def __init__(
        self,
        *,
        engine: Any,
        entries: dict[str, Any],
        omega: Any,
        interface_cfg: Any,
        diagnoser: Any,
        reweighting: Reweighting,
        temperature: float,
        seed: int,
        on_round_end: Any = None,
    ):
        self.engine = engine
        self.entries = entries
        self.omega = omega
        self.interface_cfg = interface_cfg
        self.diagnoser = diagnoser
        self.reweighting = reweighting
        self.temperature = temperature
        self.generator = torch.Generator().manual_seed(seed)
        self.history: list[RoundRecord] = []
        self.on_round_end = on_round_end
        self._pending: dict[str, Any] | None = None
        self._closed_at = 0.0

    # -- TRL's rollout_func ------------------------------------------------------------------------
    def rollout(self, prompts: list[str], trainer: Any = None) -> dict[str, list]:
        """Play one episode per prompt (prompts arrive repeated G times) under Omega_t."""
        t0 = time.perf_counter()
        entries = [self.entries[p] for p in prompts]
        view = apply(self.omega, self.engine.format.call_example, self.interface_cfg)
        rollouts = self.engine.play(entries, view, temperature=self.temperature, generator=self.generator)
        t1 = time.perf_counter()
        labels = self.diagnoser.label_round([(r.entry, r.verdict, r.episode.steps) for r in rollouts])
        t2 = time.perf_counter()
        # the round's time split: the engine attributes generation / execution / verification
        # time to episodes; whatever else the rollout took (prompt rendering, bookkeeping) is
        # "rollout_other"
        parts = {k: _sum_timings(rollouts).get(k, 0.0) for k in ("generation", "execution", "verification")}
        parts["rollout_other"] = max(t1 - t0 - sum(parts.values()), 0.0)
        self._pending = {"rollouts": rollouts, "labels": labels, "timing": {**parts, "diagnosis": t2 - t1}}
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.completion_ids for r in rollouts],
            "logprobs": [r.logprobs for r in rollouts],
            "env_mask": [r.completion_mask for r in rollouts],
            "verifier_reward": [float(r.verdict.valid) for r in rollouts],
        }

    # -- TRL's advantage hook ---------------------------------------------------------------------
    def end_round(self, global_step: int) -> list[float] | None:
        """Weights for this round's trajectories (None when reweighting is off), then evolve."""
        if self._pending is None:
            raise RuntimeError("end_round() without a rollout in this round")
        pending, self._pending = self._pending, None
        rollouts, labels = pending["rollouts"], pending["labels"]
        t0 = time.perf_counter()
        rewards = [float(r.verdict.valid) for r in rollouts]
        profile = FailureProfile.from_round(labels, [r.entry.category for r in rollouts], rewards)
        use_labels = self.diagnoser.provides_labels
        weights = None
        if use_labels and self.reweighting.active:
            # the batch's tags move rho first, then the batch is weighted with it (the release's order)
            weights = self.reweighting.weigh_batch(labels, rewards)
        record = RoundRecord(round=len(self.history), global_step=global_step)
        record.metrics = self._metrics(rollouts, labels, profile, weights)
        record.labels = dict(profile.counts)
        record.rho = dict(self.reweighting.rho)
        t1 = time.perf_counter()
        if use_labels:
            old = self.omega
            self.omega = evolve(self.omega, profile, self.interface_cfg)
            record.interface_diff = omega_diff(old, self.omega)
        record.interface = self.omega.to_dict()
        t2 = time.perf_counter()
        timing = dict(pending["timing"], weighting=t1 - t0, interface=t2 - t1)
        record.metrics.update({f"time/{k}": v for k, v in timing.items()})
        record.episodes = [_episode_summary(r, l) for r, l in zip(rollouts, labels)]
        self.history.append(record)
        self._closed_at = time.perf_counter()
        return weights

    def finish_round(self, global_step: int) -> None:
        """Called once the round's optimizer steps are done (before its checkpoint is written)."""
        record = self.history[-1]
        record.global_step = global_step
        record.metrics["time/optimisation"] = time.perf_counter() - self._closed_at
        if self.on_round_end is not None:
            self.on_round_end(record)

    def last_round_metrics(self) -> dict[str, float]:
        return dict(self.history[-1].metrics) if self.history else {}

    def _metrics(self, rollouts, labels, profile, weights) -> dict[str, float]:
        n = len(rollouts)
        turns = [r.verdict.turns for r in rollouts]
        played = [t for ts in turns for t in ts if t.status != "not_played"]
        metrics = {
            "train/reward_mean": sum(r.verdict.valid for r in rollouts) / n,
            # progress is logged, never rewarded
            "train/turn_pass_rate": sum(t.status in ("pass", "skipped") for t in played) / max(len(played), 1),
            "train/model_tokens_mean": sum(r.num_model_tokens for r in rollouts) / n,
            "train/episode_tokens_mean": sum(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts) / n,
            "train/context_overflow_frac": sum(r.ended == "context_overflow" for r in rollouts) / n,
            "train/force_terminated_frac": sum(r.ended == "force_terminated" for r in rollouts) / n,
        }
        metrics.update(profile.metrics())
        metrics.update({f"reweight/rho/{label}": v for label, v in self.reweighting.rho.items()})
        if weights is not None:
            stats = weight_stats(weights, self.reweighting.w_min, self.reweighting.w_max)
            metrics.update({f"reweight/weight_{k}": v for k, v in stats.items()})
        metrics.update(self.omega.metrics())
        return metrics

    # -- checkpoint state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "omega": self.omega.to_dict(),
            "reweighting": self.reweighting.state_dict(),
            "diagnoser": self.diagnoser.state_dict(),
            "generator": self.generator.get_state().tolist(),
            "history": [vars(r) for r in self.history],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.omega = type(self.omega).from_dict(state["omega"])
        self.reweighting.load_state_dict(state["reweighting"])
        self.diagnoser.load_state_dict(state["diagnoser"])
        self.generator.set_state(torch.tensor(state["generator"], dtype=torch.uint8))
        self.history = [RoundRecord(**r) for r in state["history"]]


def _sum_timings(rollouts: list[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rollouts:
        for key, value in r.timings.items():
            out[key] = out.get(key, 0.0) + value
    return out


def _episode_summary(rollout: Any, labels: list[str]) -> dict[str, Any]:
    return {
        "id": rollout.entry.id,
        "valid": rollout.verdict.valid,
        "error_type": rollout.verdict.error_type,
        "labels": labels,
        "ended": rollout.ended,
        "model_tokens": rollout.num_model_tokens,
    }
