"""A training job's plan and clock: what it will do, said up front, and how long what is left should take.

`JobPlan` lists the job's work in the order it runs: the evaluations (each an entry count played under each
evaluation protocol), the rounds (episodes each, and the validations among them), and the out-of-domain
benchmarks before and after training. `JobClock` times the work as it is done and estimates the rest from
the rates measured so far: seconds per evaluation episode, seconds per round, seconds per out-of-domain
evaluation. A kind of work not timed yet is not guessed from another (a round's optimisation is most of it
and no evaluation shows it): the estimate covers what was timed and names what is still to be timed, e.g.
"about 40 s left + 3 rounds (not timed yet)". The writes after the last round (its checkpoint and the final model)
count at the time the run's own earlier writes of that kind took (a periodic checkpoint, a model kept on validation),
and are named once no round is left if none was timed. A kind the job has not timed yet may take its rate from another
run that this machine measured with the same backbone, budget and launch (`JobClock.beside`, found by
seal.report.pace.similar_run): a fresh run beside a finished one gives its estimate up front.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from seal.policy.progress import duration


@dataclass(frozen=True)
class Evaluation:
    """One held-out evaluation of the job: `entries` played under each of `protocols`."""

    name: str
    entries: int
    protocols: tuple[str, ...]

    @property
    def episodes(self) -> int:
        return self.entries * len(self.protocols)


@dataclass(frozen=True)
class JobPlan:
    """A training job's work, in the order it runs (what a resumed job still has to do)."""

    before: tuple[Evaluation, ...]
    rounds: int
    planned_rounds: int
    episodes_per_round: int
    prompts: int
    rollouts: int
    steps_per_round: int
    # the rounds (0-based) after which the model is validated, and the validation's size
    validated: tuple[int, ...] = ()
    validation: Evaluation | None = None
    after: tuple[Evaluation, ...] = ()
    # the out-of-domain benchmarks, each evaluated before and after training: (name, episodes each time: its
    # questions and the prerequisite conversations they need; seal.evaluation.out_of_domain.plays_of)
    ood: tuple[tuple[str, int], ...] = ()
    first_round: int = 0
    # what is written after the last round, in order: "checkpoint" (periodic checkpoints are on: the trainer
    # saves at its last step too) and "model" (the final model)
    saves_after: tuple[str, ...] = ()

    @property
    def evaluation_episodes(self) -> int:
        val = len(self.validated) * self.validation.episodes if self.validation else 0
        return sum(e.episodes for e in (*self.before, *self.after)) + val + 2 * sum(n for _, n in self.ood)

    def describe(self) -> str:
        """The plan in one paragraph, for the console and run.log."""
        parts = [_evaluations(e, "before training") for e in self.before]
        if self.rounds:
            first, last = self.first_round, self.first_round + self.rounds - 1
            which = f"round {first}" if first == last else f"rounds {first}-{last}"
            parts.append(f"train {which} ({self.rounds} of {self.planned_rounds}), each {self.episodes_per_round} "
                         f"episodes ({count_of(self.prompts, 'prompt')} x {count_of(self.rollouts, 'rollout')}) and "
                         f"{count_of(self.steps_per_round, 'optimizer step')}")
        elif self.planned_rounds:
            parts.append(f"no round left to train ({self.first_round} of {self.planned_rounds} done)")
        if self.validated and self.validation:
            rounds = ", ".join(map(str, self.validated))
            parts.append(f"validate after round{'s' if len(self.validated) > 1 else ''} {rounds} on "
                         f"{self.validation.entries} entries ({self.validation.episodes} episodes each)")
        parts += [_evaluations(e, "after training") for e in self.after]
        if self.ood:
            each = ", ".join(f"{name} ({count_of(n, 'episode')})" for name, n in self.ood)
            parts.append(f"out of domain before and after training: {each}")
        return (f"plan: {'; '.join(parts)}; {self.evaluation_episodes} evaluation and "
                f"{self.rounds * self.episodes_per_round} training episodes in all")


def count_of(n: int, what: str) -> str:
    """"1 round", "3 rounds"."""
    return f"{n} {what}" + ("" if n == 1 else "s")


def _evaluations(e: Evaluation, when: str) -> str:
    protocols = e.protocols
    return (f"{e.name} {when} on {count_of(e.entries, 'entry').replace('entrys', 'entries')} under "
            f"{count_of(len(protocols), 'protocol')} ({', '.join(protocols)}): {e.episodes} episodes")


@dataclass
class JobClock:
    """Times a JobPlan's work as it is done; `left()` estimates the rest at the rates measured so far."""

    plan: JobPlan
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=0.0)
    eval_seconds: float = 0.0
    eval_episodes: int = 0
    round_seconds: list[float] = field(default_factory=list)
    ood_seconds: float | None = None
    # seconds per evaluation episode and per round another run measured (JobClock.beside): used until this job
    # times that kind of work itself
    other_rates: dict[str, float] = field(default_factory=dict)
    # seconds the latest write of each kind took ("checkpoint", "model"; JobClock.saved)
    save_seconds: dict[str, float] = field(default_factory=dict)
    # what is still to do: evaluation episodes, rounds (from first_round on), out-of-domain evaluations, the
    # writes after the last round
    evals_left: int = 0
    rounds_left: int = 0
    ood_left: int = 0
    saves_left: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()
        self.evals_left = sum(e.episodes for e in (*self.plan.before, *self.plan.after))
        self.rounds_left = self.plan.rounds
        self.ood_left = 2 * len(self.plan.ood)
        self.saves_left = list(self.plan.saves_after)

    def earlier(self, *, eval_episodes: int = 0, eval_seconds: float = 0.0, round_seconds: list[float] = ()) -> None:
        """Rates an earlier attempt of the run measured (a resumed run): they count in the estimate, not in
        what is left."""
        self.eval_episodes += eval_episodes
        self.eval_seconds += eval_seconds
        self.round_seconds += round_seconds

    def beside(self, *, eval_episodes: int, eval_seconds: float, round_seconds: list[float] = ()) -> None:
        """Rates another run measured on this machine (seal.report.pace.similar_run): they stand in for a kind of
        work until this job has timed it."""
        self.other_rates = {what: rate for what, rate in _rates(eval_episodes, eval_seconds, round_seconds).items()
                            if rate is not None}

    def evaluated(self, episodes: int, seconds: float) -> None:
        """An evaluation of `episodes` episodes (before or after training) took `seconds`."""
        self.eval_seconds += seconds
        self.eval_episodes += episodes
        self.evals_left = max(self.evals_left - episodes, 0)

    def round_done(self, seconds: float) -> None:
        """A round (its rollouts, optimisation and any validation after it) took `seconds`."""
        self.round_seconds.append(seconds)
        self.rounds_left = max(self.rounds_left - 1, 0)

    def ood_done(self, seconds: float) -> None:
        """One out-of-domain benchmark's evaluation took `seconds`."""
        self.ood_seconds = seconds
        self.ood_left = max(self.ood_left - 1, 0)

    def saved(self, kind: str, seconds: float) -> None:
        """A write of `kind` ("checkpoint" or "model") took `seconds`: during the rounds it times the writes after
        the last one (the rounds' own writes are in their measured time); once no round is left, it is one of
        those."""
        self.save_seconds[kind] = seconds
        if not self.rounds_left and kind in self.saves_left:
            self.saves_left.remove(kind)

    def left(self) -> tuple[float, list[str]] | None:
        """(seconds the timed kinds of work still take at their measured rates, the work left of kinds not timed
        yet, e.g. ["3 rounds"]); None before anything was timed (by this job, an earlier attempt of it or the run
        beside it). Validations are inside the measured rounds; the evaluations left are the before/after ones."""
        rates = {**_rates(self.eval_episodes, self.eval_seconds, self.round_seconds),
                 "out-of-domain evaluation": self.ood_seconds}
        rates = {what: self.other_rates.get(what) if rate is None else rate for what, rate in rates.items()}
        if rates["evaluation episode"] is None and rates["round"] is None:
            return None
        seconds, untimed = 0.0, []
        for what, n in (("evaluation episode", self.evals_left), ("round", self.rounds_left),
                        ("out-of-domain evaluation", self.ood_left)):
            if n and rates[what] is None:
                untimed.append(count_of(n, what))
            elif n:
                seconds += n * rates[what]
        for kind in self.saves_left:
            if kind in self.save_seconds:
                seconds += self.save_seconds[kind]
            elif not self.rounds_left:
                untimed.append(SAVES[kind])
        return seconds, untimed

    def elapsed(self) -> float:
        return self.clock() - self.started

    def estimate(self) -> str:
        """What the console says: the time so far and, once something was timed, about how long is left."""
        found = self.left()
        if found is None or not (self.evals_left or self.rounds_left or self.ood_left or self.saves_left):
            return f"{duration(self.elapsed())} so far"
        seconds, untimed = found
        return f"{duration(self.elapsed())} so far, about {duration(seconds)} left{not_timed(untimed)}"


def _rates(eval_episodes: int, eval_seconds: float, round_seconds: list[float]) -> dict[str, float | None]:
    """Seconds per evaluation episode and per round (the mean of the rounds timed); None for a kind not timed."""
    rounds = [s for s in round_seconds if s > 0]
    return {"evaluation episode": eval_seconds / eval_episodes if eval_episodes and eval_seconds > 0 else None,
            "round": sum(rounds) / len(rounds) if rounds else None}


# the writes after the last round, as an estimate names them before they were timed
SAVES = {"checkpoint": "the last checkpoint", "model": "the final model"}


def saves_after(rounds: int, periodic_checkpoints: bool) -> tuple[str, ...]:
    """The writes after a job's last round (JobPlan.saves_after), for `rounds` rounds still to train: with
    periodic checkpoints the trainer saves at its last step too (none when no round is left to train); the final
    model always."""
    return ("checkpoint", "model") if rounds and periodic_checkpoints else ("model",)


def not_timed(untimed: list[str]) -> str:
    """What an estimate leaves out, as its tail: "" or " + 3 rounds (not timed yet)", " + 8 evaluation episodes,
    the last checkpoint and the final model (not timed yet)"."""
    if not untimed:
        return ""
    listed = untimed[0] if len(untimed) == 1 else f"{', '.join(untimed[:-1])} and {untimed[-1]}"
    return f" + {listed} (not timed yet)"


def round_seconds(metrics: dict[str, float]) -> float:
    """A round's wall time: the sum of its `time/*` split (generation, optimisation, bookkeeping, validation and the
    models it kept; its checkpoint is written after the round is recorded)."""
    return sum(v for k, v in metrics.items() if k.startswith("time/"))
