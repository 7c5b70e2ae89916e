"""seal.report.clock: a training job says up front what it will do, and how long the rest should take."""

from seal.report.clock import Evaluation, JobClock, JobPlan


def plan(**changes):
    values = dict(before=(Evaluation("evaluate (test part)", 4, ("bfcl", "release")),), rounds=3, planned_rounds=3,
                  episodes_per_round=2, prompts=1, rollouts=2, steps_per_round=1,
                  after=(Evaluation("evaluate (test part)", 4, ("bfcl", "release")),))
    return JobPlan(**{**values, **changes})


def test_the_plan_names_each_evaluation_its_episodes_and_the_rounds():
    assert plan().describe() == (
        "plan: evaluate (test part) before training on 4 entries under 2 protocols (bfcl, release): 8 episodes; "
        "train rounds 0-2 (3 of 3), each 2 episodes (1 prompt x 2 rollouts) and 1 optimizer step; evaluate (test "
        "part) after training on 4 entries under 2 protocols (bfcl, release): 8 episodes; 16 evaluation and 6 "
        "training episodes in all")
    # a resumed run: what is left, numbered as the per-round lines number rounds; validation and out of domain
    resumed = plan(before=(), rounds=2, first_round=1, validated=(2,), validation=Evaluation("validation", 3, ("bfcl",)),
                   ood=("bfcl_v4_memory",))
    assert resumed.describe() == (
        "plan: train rounds 1-2 (2 of 3), each 2 episodes (1 prompt x 2 rollouts) and 1 optimizer step; validate after "
        "round 2 on 3 entries (3 episodes each); evaluate (test part) after training on 4 entries under 2 protocols "
        "(bfcl, release): 8 episodes; out of domain: bfcl_v4_memory, before and after training; 11 evaluation and 4 "
        "training episodes in all")


def test_the_time_left_comes_from_the_rates_measured_so_far():
    now = [0.0]
    clock = JobClock(plan(), clock=lambda: now[0], started=0.0)
    assert clock.left() is None and clock.estimate() == "0 s so far"
    # the evaluation before: 8 episodes in 40 s = 5 s each; the 8 after training take 40 s at that rate; no round
    # timed yet, and no round is guessed from the evaluation's rate (its optimisation is most of it): named instead
    now[0] = 40.0
    clock.evaluated(8, 40.0)
    assert clock.left() == (40.0, ["3 rounds"])
    assert clock.estimate() == "40 s so far, about 40 s left + 3 rounds (not timed yet)"
    # a round took 60 s: 8 x 5 + 2 x 60 = 160 s, all measured
    now[0] = 100.0
    clock.round_done(60.0)
    assert clock.left() == (160.0, [])
    assert clock.estimate() == "1 min 40 s so far, about 2 min 40 s left"
    clock.round_done(100.0)
    clock.round_done(80.0)
    clock.evaluated(8, 20.0)
    assert clock.estimate() == "1 min 40 s so far"  # nothing left to estimate


def test_work_not_timed_yet_is_named_with_its_count():
    # rounds timed (a resumed run's earlier attempt), no evaluation episode: 2 rounds of 30 s; the 8 evaluation
    # episodes after training and the two out-of-domain evaluations named, one of each
    clock = JobClock(plan(before=(), rounds=2, first_round=2, planned_rounds=4, ood=("bfcl_v4_memory",)),
                     clock=lambda: 0.0, started=0.0)
    clock.earlier(round_seconds=[30.0, 30.0])
    assert clock.left() == (60.0, ["8 evaluation episodes", "2 out-of-domain evaluations"])
    clock.ood_done(45.0)
    assert clock.left() == (105.0, ["8 evaluation episodes"])
    assert clock.estimate() == "0 s so far, about 1 min 45 s left + 8 evaluation episodes (not timed yet)"
    # one of a kind: the singular
    one = JobClock(plan(before=(), after=(Evaluation("evaluate (test part)", 1, ("bfcl",)),), rounds=1),
                   clock=lambda: 0.0, started=0.0)
    one.earlier(round_seconds=[30.0])
    assert one.left() == (30.0, ["1 evaluation episode"])


def test_an_out_of_domain_benchmark_not_timed_yet_is_named():
    clock = JobClock(plan(ood=("bfcl_v4_memory",), rounds=0, after=()), clock=lambda: 0.0, started=0.0)
    clock.evaluated(8, 8.0)
    assert clock.left() == (0.0, ["2 out-of-domain evaluations"])  # two to come, untimed
    clock.ood_done(30.0)
    assert clock.left() == (30.0, [])


def test_a_resumed_job_estimates_from_the_earlier_attempts_rates():
    # the first attempt: 8 evaluation episodes in 16 s, rounds of 30 s and 50 s; left: 2 rounds and the 8
    # episodes after training: 2 x 40 + 8 x 2 = 96 s, measured before anything of this attempt ran
    clock = JobClock(plan(before=(), rounds=2, first_round=2, planned_rounds=4), clock=lambda: 0.0, started=0.0)
    clock.earlier(eval_episodes=8, eval_seconds=16.0, round_seconds=[30.0, 50.0])
    assert clock.left() == (96.0, [])
    assert (clock.rounds_left, clock.evals_left) == (2, 8)
