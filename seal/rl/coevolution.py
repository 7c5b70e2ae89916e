"""One SEAL round (paper Algorithm 1) around TRL's GRPO step, and the state that survives it.

TRL calls the three stages in this order (seal.rl.trainer wires them):

    play_round()    TRL's rollout_func: this rank's episodes under Omega_t, verified (reward)
    close_round()   TRL's advantage hook: gather every rank's episodes, diagnose them (labels),
                    C_t; rho_t moves (closed loop, from the epoch's tags so far), weights w_j
                    (A~_j = w_j A_j); Omega_{t+1} = Evolve(Omega_t, C_t)
    finish_round()  after the round's optimizer steps (TRL: GRPO update with the KL term), before
                    its checkpoint: the optimizer's own signals join the round's record

Every rank gathers the whole round before anything shared changes, so all ranks apply the same
deterministic update and hold the same rho and Omega (checked every round when there are several).
The state that must survive a crash (Omega, rho, the diagnoser's RNG, round history) is
`state_dict()`, written next to every TRL checkpoint by seal.rl.checkpoint; sampling needs no
state, being keyed by (seed, round, episode).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from seal.diagnosis import FailureProfile, profile_labels, round_profiles
from seal.interface import apply, evolve, omega_diff
from seal.policy.generation import derive_seed
from seal.rl.distributed import Dist
from seal.rl.reweighting import Reweighting, weight_stats


@dataclass
class RoundRecord:
    """What one round leaves in metrics.jsonl, report.md and W&B."""

    round: int
    global_step: int
    metrics: dict[str, float] = field(default_factory=dict)
    # "outcome/<tag>" and "cause/<cause>" -> number of counted turns
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
        group_size: int = 1,
        max_train_tokens: int | None = None,
        dist: Dist | None = None,
        on_round_end: Any = None,
        progress: bool = False,
    ):
        self.engine = engine
        self.entries = entries
        self.omega = omega
        self.interface_cfg = interface_cfg
        self.diagnoser = diagnoser
        self.reweighting = reweighting
        self.temperature = temperature
        self.seed = seed
        # rollouts per prompt: TRL's groups are consecutive runs of this many episodes
        self.group_size = max(1, int(group_size))
        # the release trains on the first max_train_tokens tokens after the prompt only (None: all)
        self.max_train_tokens = max_train_tokens
        self.dist = dist or Dist()
        self.history: list[RoundRecord] = []
        self.on_round_end = on_round_end
        # show each round's rollouts as they go (turns, episodes, tokens: seal.policy.progress), cleared after
        self.progress = progress
        # the one place where reweighting is decided: it needs labels, and a mode that uses them
        self.weighted = bool(diagnoser.provides_labels and reweighting.active)
        self._played: list[Any] | None = None
        self._timing: dict[str, float] = {}  # pragma: no mutate (set by play_round before it is read)
        self._closed_at = 0.0  # pragma: no mutate (set by close_round before it is read)
        self._played_at = 0.0  # pragma: no mutate (set by play_round before it is read)

    # -- TRL's rollout_func ------------------------------------------------------------------------
    def play_round(self, prompts: list[str], trainer: Any = None) -> dict[str, list]:
        """Play this rank's episodes (prompts arrive repeated G times) under Omega_t."""
        t0 = time.perf_counter()
        entries = [self.entries[p] for p in prompts]
        view = apply(self.omega, self.engine.format.call_example, self.interface_cfg)
        # sampling is keyed by (run seed, round, global episode index): the same episodes whatever the
        # number of ranks, and a resumed round draws exactly what it drew
        offset = self.dist.rank * len(prompts)
        seeds = [derive_seed(self.seed, len(self.history), offset + i) for i in range(len(entries))]
        shown = {"progress": f"round {len(self.history)} · rollouts", "leave": False} if self.progress else {}
        rollouts = self.engine.play(entries, view, temperature=self.temperature, seeds=seeds, **shown)
        parts = {k: sum(r.timings[k] for r in rollouts) for k in ("generation", "execution", "verification")}
        # whatever else the rollout took (prompt rendering, bookkeeping)
        self._played_at = time.perf_counter()
        parts["rollout_other"] = max(self._played_at - t0 - sum(parts.values()), 0.0)
        self._played, self._timing = rollouts, parts
        eot = self.engine.eot_ids[:1]
        cut = slice(self.max_train_tokens)
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            # an episode whose prompt did not fit has no completion; TRL needs at least one token, so it
            # gets the end-of-turn marker as an environment token (no loss)
            "completion_ids": [r.completion_ids[cut] or list(eot) for r in rollouts],
            "logprobs": [r.logprobs[cut] or [0.0] for r in rollouts],
            "env_mask": [r.completion_mask[cut] or [0] for r in rollouts],
            "verifier_reward": [r.reward for r in rollouts],
        }

    # -- TRL's advantage hook ---------------------------------------------------------------------
    def close_round(self, global_step: int) -> list[float] | None:
        """Gather the round, diagnose it, and move rho and Omega; returns this rank's weights w_j
        (None when the run does not reweight)."""
        if self._played is None:
            raise RuntimeError("close_round() without a played round")
        local, self._played = self._played, None
        t0 = time.perf_counter()
        # TRL's part between the rollouts and this hook: the batch padded, the old policy's and the reference's
        # log-probs computed, the advantages
        self._timing["scoring"] = t0 - self._played_at
        # the whole round on every rank, in global order (rank 0's episodes first)
        played = self.dist.gather([(r.entry.id, r.verdict, r.episode.steps, _episode_summary(r)) for r in local])
        timing = {k: max(v) for k, v in zip(self._timing, zip(*self.dist.gather([tuple(self._timing.values())])))}
        labels = self.diagnoser.label_round([(self.entries[i], v, s) for i, v, s, _ in played])
        t1 = time.perf_counter()
        episodes = [dict(summary, turn_labels=[t.to_dict() for t in traj]) for (_, _, _, summary), traj in zip(played, labels)]
        rewards = [e["reward"] for e in episodes]
        # weights read the layer reweighting.profile_layer names (outcome by default), evolve() the causes
        profiles = round_profiles(labels, [self.entries[e["id"]].category for e in episodes], rewards)
        weights = None
        if self.weighted:
            # the release's order: the batch's tags enter the epoch's statistics, rho moves, then the
            # batch is weighted with the moved rho
            layer = self.reweighting.profile_layer
            weights = self.reweighting.weigh_batch([profile_labels(t, layer) for t in labels], rewards)

        record = RoundRecord(round=len(self.history), global_step=global_step)
        record.metrics = self._metrics(episodes, profiles, weights)
        record.labels = {f"{k}/{label}": n for k, p in profiles.items() for label, n in p.counts.items()}
        # the rho that weighted this round
        record.rho = dict(self.reweighting.rho)
        t2 = time.perf_counter()
        if self.diagnoser.provides_labels:
            old = self.omega
            self.omega = evolve(self.omega, profiles["cause"], self.interface_cfg)
            record.interface_diff = omega_diff(old, self.omega)
        record.interface = self.omega.to_dict()
        t3 = time.perf_counter()
        self.dist.check_agree("rho and Omega", {"rho": self.reweighting.rho, "omega": record.interface})
        timing.update(diagnosis=t1 - t0, weighting=t2 - t1, interface=t3 - t2)
        record.metrics.update({f"time/{k}": v for k, v in timing.items()})
        record.episodes = episodes
        self.history.append(record)
        self._closed_at = time.perf_counter()
        if weights is None:
            return None
        n = len(local)
        return weights[self.dist.rank * n : (self.dist.rank + 1) * n]

    def round_rewards(self) -> list[float]:
        """The closed round's rewards over all ranks, in global episode order (groups consecutive)."""
        return [e["reward"] for e in self.history[-1].episodes]

    # -- after the round's optimizer steps ----------------------------------------------------------
    def finish_round(self, global_step: int, optimizer_metrics: dict[str, float] | None = None) -> None:
        """Called once the round's optimizer steps are done (before its checkpoint is written)."""
        record = self.history[-1]
        record.global_step = global_step
        record.metrics.update(optimizer_metrics or {})
        record.metrics["time/optimisation"] = time.perf_counter() - self._closed_at
        if self.on_round_end is not None:
            self.on_round_end(record)

    def _metrics(self, episodes: list[dict[str, Any]], profiles: dict[str, FailureProfile], weights) -> dict[str, float]:
        n = len(episodes)
        rewards = [e["reward"] for e in episodes]
        metrics = {
            "train/reward_mean": sum(rewards) / n,
            # progress is logged, never rewarded
            "train/turn_pass_rate": sum(e["turns_passed"] for e in episodes) / max(sum(e["turns_played"] for e in episodes), 1),
            "train/model_tokens_mean": sum(e["model_tokens"] for e in episodes) / n,
            "train/episode_tokens_mean": sum(e["episode_tokens"] for e in episodes) / n,
            "train/context_overflow_frac": sum(e["ended"] == "context_overflow" for e in episodes) / n,
            "train/force_terminated_frac": sum(e["ended"] == "force_terminated" for e in episodes) / n,
        }
        # GRPO learns nothing from a group whose rewards are all equal (its advantages are zero)
        spread = _group_spread(rewards, self.group_size)
        metrics["train/zero_spread_groups_frac"] = sum(not s for s in spread) / len(spread)
        for name, profile in profiles.items():
            metrics.update(profile.metrics(f"diag/{name}"))
        metrics.update({f"reweight/rho/{label}": v for label, v in self.reweighting.rho.items()})
        if weights is not None:
            bounds = (self.reweighting.w_min, self.reweighting.w_max)
            metrics.update({f"reweight/weight_{k}": v for k, v in weight_stats(weights, *bounds).items()})
            # the weights that multiply a non-zero advantage: the only ones that change the update
            effective = [w for j, w in enumerate(weights) if spread[j // self.group_size]]
            metrics.update({f"reweight/effective_{k}": v for k, v in weight_stats(effective, *bounds).items()})
            metrics["reweight/effective_count"] = float(len(effective))
        metrics.update(self.omega.metrics())
        return metrics

    # -- checkpoint state -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "omega": self.omega.to_dict(),
            "reweighting": self.reweighting.state_dict(),
            "diagnoser": self.diagnoser.state_dict(),
            "history": [vars(r) for r in self.history],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.omega = type(self.omega).from_dict(state["omega"])
        self.reweighting.load_state_dict(state["reweighting"])
        self.diagnoser.load_state_dict(state["diagnoser"])
        self.history = [RoundRecord(**r) for r in state["history"]]


def _group_spread(rewards: list[float], group_size: int) -> list[bool]:
    """Whether each consecutive group of `group_size` rewards has any spread."""
    return [len(set(rewards[i : i + group_size])) > 1 for i in range(0, len(rewards), group_size)]


def _episode_summary(rollout: Any) -> dict[str, Any]:
    verdict = rollout.verdict
    return {
        **verdict.summary(),
        "reward": rollout.reward,
        "ended": rollout.ended,
        "model_tokens": rollout.num_model_tokens,
        "prompt_tokens": len(rollout.prompt_ids),
        "episode_tokens": len(rollout.prompt_ids) + len(rollout.completion_ids),
        "turns_played": verdict.turns_played,
        "turns_passed": verdict.turns_passed,
    }
