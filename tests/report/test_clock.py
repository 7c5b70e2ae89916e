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
                   ood=(("bfcl_v4_memory", 5),))
    assert resumed.describe() == (
        "plan: train rounds 1-2 (2 of 3), each 2 episodes (1 prompt x 2 rollouts) and 1 optimizer step; validate after "
        "round 2 on 3 entries (3 episodes each); evaluate (test part) after training on 4 entries under 2 protocols "
        "(bfcl, release): 8 episodes; out of domain before and after training: bfcl_v4_memory (5 episodes); 21 evaluation "
        "and 4 "
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
    clock = JobClock(plan(before=(), rounds=2, first_round=2, planned_rounds=4, ood=(("bfcl_v4_memory", 5),)),
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
    clock = JobClock(plan(ood=(("bfcl_v4_memory", 5),), rounds=0, after=()), clock=lambda: 0.0, started=0.0)
    clock.evaluated(8, 8.0)
    assert clock.left() == (0.0, ["2 out-of-domain evaluations"])  # two to come, untimed
    clock.ood_done(30.0)
    assert clock.left() == (30.0, [])


def test_the_writes_after_the_last_round_count_once_timed_and_are_named_once_no_round_is_left():
    # the one-GPU preflight's train run (2026-12-04, H200, docs/results.md) in round figures: 16 episodes before
    # training in 20 s (1.25 s each), the 24 after it (validation part, then the final and the best model on test)
    # at that rate take 30 s. Its last round line said "about 30 s left" while 1 min 43 s were: the last
    # checkpoint (68 s) and the final model were not counted
    both = ("bfcl", "release")
    clock = JobClock(plan(before=(Evaluation("evaluate (val part)", 4, both), Evaluation("test", 4, both)), rounds=2,
                          planned_rounds=2, after=(Evaluation("evaluate (val part)", 4, both), Evaluation("final", 4, both),
                                                   Evaluation("best", 4, both)),
                          saves_after=("checkpoint", "model")), clock=lambda: 0.0, started=0.0)
    clock.evaluated(16, 20.0)
    # while a round is left, a write not timed yet is not named (the rounds are not timed either)
    assert clock.left() == (30.0, ["2 rounds"])
    # round 0 kept the model best on validation, a 12 s write, told before the round is done: it times the final
    # model's write and is not that write
    clock.saved("model", 12.0)
    clock.round_done(27.0)
    assert clock.saves_left == ["checkpoint", "model"]
    assert clock.left() == (30.0 + 27.0 + 12.0, [])
    # the last round done: its checkpoint, never timed, is named
    clock.round_done(9.0)
    assert clock.left() == (42.0, ["the last checkpoint"])
    assert clock.estimate() == "0 s so far, about 42 s left + the last checkpoint (not timed yet)"
    clock.saved("checkpoint", 68.0)
    assert (clock.saves_left, clock.left()) == (["model"], (42.0, []))
    clock.saved("model", 15.0)
    assert (clock.saves_left, clock.left()) == ([], (30.0, []))
    # with a checkpoint every round the first one times the last (5 s, counted while rounds are left); nothing
    # else left but the final model, whose write is still said
    every = JobClock(plan(before=(), after=(), rounds=2, saves_after=("checkpoint", "model")), clock=lambda: 0.0,
                     started=0.0)
    every.round_done(10.0)
    every.saved("checkpoint", 5.0)
    assert every.left() == (10.0 + 5.0, [])
    every.round_done(11.0)
    assert every.estimate() == "0 s so far, about 5 s left + the final model (not timed yet)"
    every.saved("checkpoint", 6.0)
    every.saved("model", 1.0)
    assert every.estimate() == "0 s so far"


def test_the_last_checkpoint_is_written_when_checkpoints_are_on_and_a_round_is_left():
    from seal.report.clock import saves_after

    assert saves_after(2, True) == ("checkpoint", "model")
    # a resumed job whose rounds are all done writes only the final model; so does one without checkpoints
    assert saves_after(0, True) == saves_after(2, False) == ("model",)


def test_what_an_estimate_leaves_out_is_listed_as_a_sentence_lists():
    from seal.report.clock import not_timed

    assert not_timed([]) == ""
    assert not_timed(["3 rounds"]) == " + 3 rounds (not timed yet)"
    assert not_timed(["3 rounds", "2 out-of-domain evaluations"]) == " + 3 rounds and 2 out-of-domain evaluations (not timed yet)"
    assert not_timed(["8 evaluation episodes", "the last checkpoint", "the final model"]) == (
        " + 8 evaluation episodes, the last checkpoint and the final model (not timed yet)")


def test_a_resumed_job_estimates_from_the_earlier_attempts_rates():
    # the first attempt: 8 evaluation episodes in 16 s, rounds of 30 s and 50 s; left: 2 rounds and the 8
    # episodes after training: 2 x 40 + 8 x 2 = 96 s, measured before anything of this attempt ran
    clock = JobClock(plan(before=(), rounds=2, first_round=2, planned_rounds=4), clock=lambda: 0.0, started=0.0)
    clock.earlier(eval_episodes=8, eval_seconds=16.0, round_seconds=[30.0, 50.0])
    assert clock.left() == (96.0, [])
    assert (clock.rounds_left, clock.evals_left) == (2, 8)


def test_a_fresh_job_estimates_up_front_from_the_run_beside_it_until_it_times_its_own_work():
    # the run beside it: 8 evaluation episodes in 24 s (3 s each), rounds of 40 s and 50 s (an untimed 0 left out:
    # 45 s a round); this job's 16 evaluation episodes and 3 rounds: 16 x 3 + 3 x 45 = 183 s before anything ran
    clock = JobClock(plan(), clock=lambda: 0.0, started=0.0)
    clock.beside(eval_episodes=8, eval_seconds=24.0, round_seconds=[40.0, 0.0, 50.0])
    assert clock.left() == (183.0, [])
    # its own evaluation before training: 8 episodes in 40 s; its rate replaces the other run's (not averaged with
    # it): the 8 after training at 5 s and 3 rounds at the other run's 45 s
    clock.evaluated(8, 40.0)
    assert clock.left() == (8 * 5.0 + 3 * 45.0, [])
    clock.round_done(60.0)
    assert clock.left() == (8 * 5.0 + 2 * 60.0, [])
    # a run beside it that timed only its evaluation leaves the rounds named, as without it
    rounds_unknown = JobClock(plan(), clock=lambda: 0.0, started=0.0)
    rounds_unknown.beside(eval_episodes=4, eval_seconds=8.0)
    assert rounds_unknown.left() == (32.0, ["3 rounds"])


def test_one_round_several_validations_and_several_benchmarks_are_each_said_as_such():
    one_round = plan(before=(), after=(), rounds=1, first_round=2, validated=(0, 2),
                     validation=Evaluation("validation", 3, ("bfcl", "release")),
                     ood=(("bfcl_v4_memory", 5), ("bfcl_v4_web_search", 1)))
    # validation: 2 validations x 3 entries x 2 protocols = 12 evaluation episodes, out of domain 2 x (5 + 1) = 12;
    # 1 round of 2 training episodes
    assert one_round.describe() == (
        "plan: train round 2 (1 of 3), each 2 episodes (1 prompt x 2 rollouts) and 1 optimizer step; validate after "
        "rounds 0, 2 on 3 entries (6 episodes each); out of domain before and after training: bfcl_v4_memory (5 "
        "episodes), bfcl_v4_web_search (1 episode); 24 evaluation and 2 training episodes in all")
    # a validation set but no round validated (train() always passes the validation's size): nothing said of it
    none_validated = plan(validation=Evaluation("validation", 3, ("bfcl",)))
    assert "validat" not in none_validated.describe()
    assert none_validated.evaluation_episodes == 16


def test_a_resumed_job_with_no_round_left_says_so():
    done = plan(before=(), rounds=0, first_round=3)
    assert done.describe() == (
        "plan: no round left to train (3 of 3 done); evaluate (test part) after training on 4 entries under 2 "
        "protocols (bfcl, release): 8 episodes; 8 evaluation and 0 training episodes in all")
    # a job planned without rounds (nothing to train) says nothing of them
    assert "round" not in plan(rounds=0, planned_rounds=0).describe()


def test_the_run_says_at_its_end_how_many_rounds_this_attempt_trained():
    from seal.tasks.train import done_line

    assert done_line(3, 0, 450.0) == "3 rounds in 7 min 30 s"
    assert done_line(1, 0, 5.0) == "1 round in 5 s"
    assert done_line(3, 1, 300.0) == "3 rounds, 2 of them in this attempt, which took 5 min 00 s"
    assert done_line(2, 2, 11.0) == "2 rounds, none of them in this attempt, which took 11 s"


def test_the_clock_starts_when_the_job_does_unless_told_when_it_started():
    now = [50.0]
    clock = JobClock(plan(), clock=lambda: now[0])
    now[0] = 80.0
    assert clock.elapsed() == 30.0
    assert JobClock(plan(), clock=lambda: now[0], started=20.0).elapsed() == 60.0


def test_every_evaluation_and_earlier_attempt_adds_to_the_rates():
    clock = JobClock(plan(), clock=lambda: 0.0, started=0.0)
    # two earlier attempts: 4 episodes in 20 s and 4 in 10 s (30 s / 8 = 3.75 s an episode), rounds of 0.5 s and
    # 1.5 s (short rounds count; only an untimed 0 is left out): 16 episodes and 3 rounds at 1 s
    clock.earlier(eval_episodes=4, eval_seconds=20.0, round_seconds=[0.5, 0.0])
    clock.earlier(eval_episodes=4, eval_seconds=10.0, round_seconds=[1.5])
    assert clock.left() == (16 * 3.75 + 3 * 1.0, [])
    # an earlier attempt that timed only rounds adds no evaluation: this job's 8 episodes in 40 s are 5 s each
    rounds_only = JobClock(plan(), clock=lambda: 0.0, started=0.0)
    rounds_only.earlier(round_seconds=[10.0])
    rounds_only.evaluated(8, 40.0)
    assert rounds_only.left() == (8 * 5.0 + 3 * 10.0, [])
    # two evaluations: 8 episodes in 40 s, then 8 in 20 s: 60 s / 16 = 3.75 s for each of the 8 left
    twice = JobClock(plan(before=(), after=(Evaluation("test", 4, ("bfcl", "release")),) * 3), clock=lambda: 0.0,
                     started=0.0)
    twice.evaluated(8, 40.0)
    twice.evaluated(8, 20.0)
    assert twice.left() == (8 * 3.75, ["3 rounds"])


def test_an_evaluation_that_took_no_measurable_time_or_played_nothing_times_nothing():
    for episodes, seconds in ((8, 0.0), (0, 0.2)):
        clock = JobClock(plan(), clock=lambda: 0.0, started=0.0)
        clock.evaluated(episodes, seconds)
        assert clock.left() is None, (episodes, seconds)
    # a fast one does: 8 episodes in 0.8 s, the 8 left at 0.1 s each
    fast = JobClock(plan(), clock=lambda: 0.0, started=0.0)
    fast.evaluated(8, 0.8)
    left, untimed = fast.left()
    assert (round(left, 12), untimed) == (0.8, ["3 rounds"])


def test_the_estimate_lasts_while_any_one_kind_of_work_is_left():
    both = ("bfcl", "release")
    # only the out-of-domain evaluations left: the first took 30 s, so the second should too; then nothing
    ood_only = JobClock(plan(before=(), after=(), rounds=0, ood=(("bfcl_v4_memory", 5),)), clock=lambda: 0.0, started=0.0)
    ood_only.earlier(eval_episodes=8, eval_seconds=8.0)
    ood_only.ood_done(30.0)
    assert ood_only.estimate() == "0 s so far, about 30 s left"
    ood_only.ood_done(20.0)
    assert (ood_only.ood_left, ood_only.estimate()) == (0, "0 s so far")
    # only evaluation episodes left: 4 entries under 2 protocols at 5 s an episode
    evals_only = JobClock(plan(before=(), after=(Evaluation("test", 4, both),), rounds=0), clock=lambda: 0.0,
                          started=0.0)
    evals_only.earlier(eval_episodes=2, eval_seconds=10.0)
    assert evals_only.estimate() == "0 s so far, about 40 s left"
