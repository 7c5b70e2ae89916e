"""Reweighting maths against values computed by hand (fractions in the comments)."""

import json
import random

import pytest

from seal.diagnosis import trajectory_profile
from seal.rl.reweighting import (
    Reweighting,
    TagWindow,
    rho_target,
    trajectory_weight,
    update_rho,
    weight_stats,
)
from tests.config_values import RHO0

RULE = dict(alpha=1.0, beta=0.25, confidence_samples=32, w_min=0.5, w_max=2.0)


def test_weight_is_the_profile_average_of_rho():
    # 2 of 4 turns pass, 1 spurious call, 1 instance mismatch: (2*1.0 + 2.0 + 0.6) / 4 = 1.15
    profile = {"pass": 0.5, "spurious_tool_call": 0.25, "instance_mismatch": 0.25}
    assert trajectory_weight(profile, RHO0, 0.5, 2.0) == pytest.approx(1.15)


def test_weight_is_clipped_and_unknown_labels_weigh_one():
    assert trajectory_weight({"spurious_tool_call": 1.0}, {"spurious_tool_call": 3.0}, 0.5, 2.0) == 2.0
    assert trajectory_weight({"instance_mismatch": 1.0}, {"instance_mismatch": 0.1}, 0.5, 2.0) == 0.5
    assert trajectory_weight({"invalid_tool_call": 1.0}, RHO0, 0.5, 2.0) == 1.0
    assert trajectory_weight({}, RHO0, 0.5, 2.0) == 1.0


def test_profile_leaves_out_turns_the_checker_could_not_judge():
    assert trajectory_profile(["pass", "state_mismatch", "checker_error", "state_mismatch"]) == pytest.approx(
        {"pass": 1 / 3, "state_mismatch": 2 / 3})
    assert trajectory_profile(["checker_error", "not_played"]) == {}


def test_window_counts_occurrences_and_per_tag_rewards():
    window = TagWindow()
    window.add([["pass", "state_mismatch", "state_mismatch", "checker_error"], ["pass", "pass"]], [0.0, 1.0])
    # checker_error is not counted: 5 turns in all
    assert window.counts == {"pass": 3, "state_mismatch": 2} and window.total == 5
    assert window.prevalence("state_mismatch") == pytest.approx(2 / 5)
    # stagnation is per occurrence: pass occurs once in the failed and twice in the passed trajectory
    assert window.stagnation("pass") == pytest.approx(1 - 2 / 3)
    assert window.stagnation("state_mismatch") == 1.0 and window.stagnation("spurious_tool_call") == 0.0
    with pytest.raises(ValueError, match="one reward per trajectory"):
        window.add([["pass"]], [1.0, 0.0])


def test_the_target_is_clipped_before_smoothing():
    # empty turns are 40 of 50 counted turns, all in failed trajectories, 40 >= 32 samples:
    # target = 1.5 * (1 + 0.8 * 1 * 1) = 2.7 -> clipped to 2.0; rho = 0.75 * 1.5 + 0.25 * 2.0 = 1.625
    # (clipping after the EMA instead would give 0.75 * 1.5 + 0.25 * 2.7 = 1.8)
    window = TagWindow()
    window.add([["empty_turn_model_response"] * 40, ["pass"] * 10], [0.0, 1.0])
    rho = update_rho(RHO0, RHO0, window, **RULE)
    assert rho["empty_turn_model_response"] == pytest.approx(1.625)


def test_unseen_tags_decay_back_towards_rho0():
    rho = update_rho({"state_mismatch": 1.5}, {"state_mismatch": 1.0}, TagWindow(), **RULE)
    assert rho["state_mismatch"] == pytest.approx(0.75 * 1.5 + 0.25 * 1.0)


def test_pass_never_moves_however_often_it_fails_to_lead_to_success():
    # pass is 10 of 10 turns, all in failed trajectories: any other tag would get target 2.0
    window = TagWindow()
    window.add([["pass"] * 10], [0.0])
    assert update_rho(RHO0, RHO0, window, **RULE)["pass"] == 1.0
    assert update_rho({**RHO0, "pass": 1.4}, RHO0, window, **RULE)["pass"] == pytest.approx(0.75 * 1.4 + 0.25)


# Batches of the two-step example (+ one batch after the epoch reset); checker_error is not counted.
BATCH_1 = ([["pass", "state_mismatch", "state_mismatch", "checker_error"], ["pass", "pass"],
            ["response_mismatch", "pass"]], [0.0, 1.0, 0.0])
BATCH_2 = ([["spurious_tool_call", "state_mismatch", "state_mismatch"], ["correct_abstention", "pass"]], [0.0, 1.0])
BATCH_3 = ([["state_mismatch"], ["pass"]], [0.0, 1.0])


def hand_example_rw(mode="closed_loop"):
    # confidence_samples 4 so that confidence is below 1 for rare tags and reaches 1 in batch 2
    return Reweighting(mode=mode, rho0=RHO0, confidence_samples=4, rounds_per_epoch=2, seed=5)


def test_closed_loop_two_steps_and_an_epoch_reset_by_hand():
    rw = hand_example_rw()
    # step 1: window = batch 1; counted turns: pass 4, state_mismatch 2, response_mismatch 1 (7)
    #   state_mismatch:    target = 1.0 * (1 + 2/7 * 1 * 2/4) = 8/7;  rho = 3/4 + 1/4 * 8/7 = 29/28
    #   response_mismatch: target = 0.9 * (1 + 1/7 * 1 * 1/4) = 0.9 * 29/28
    #                      rho = 0.9 * (3/4 + 1/4 * 29/28) = 1017/1120
    #   pass stays 1.0 (its window says 4 turns, half of them in failed trajectories)
    w1 = rw.weigh_batch(*BATCH_1)
    assert rw.rho["state_mismatch"] == pytest.approx(29 / 28)
    assert rw.rho["response_mismatch"] == pytest.approx(1017 / 1120)
    assert rw.rho["pass"] == 1.0 and rw.rho["spurious_tool_call"] == 2.0
    # the batch is weighted with the rho it has just moved:
    #   [pass, sm, sm]: 1/3 + 2/3 * 29/28 = 43/42;  [pass, pass]: 1;  [rm, pass]: (1017/1120 + 1) / 2
    assert w1 == pytest.approx([43 / 42, 1.0, (1017 / 1120 + 1) / 2])

    # step 2, same epoch: window = batches 1 + 2: pass 5, state_mismatch 4, response_mismatch 1,
    # spurious_tool_call 1, correct_abstention 1 (12 counted turns)
    #   state_mismatch:     target = 1 + 4/12 * 1 * 4/4 = 4/3;  rho = 3/4 * 29/28 + 1/4 * 4/3 = 373/336
    #   response_mismatch:  target = 0.9 * (1 + 1/12 * 1/4) = 0.9 * 49/48
    #                       rho = 3/4 * 1017/1120 + 1/4 * 0.9 * 49/48 = 51/56
    #   spurious_tool_call: target = 2 * (1 + 1/48) -> clipped 2.0; rho = 2.0
    #   correct_abstention: only in a passed trajectory, stagnation 0: target = 1.8, rho = 1.8
    #                       (the batch-mean reward 1/2 would have moved it)
    w2 = rw.weigh_batch(*BATCH_2)
    assert rw.rho["state_mismatch"] == pytest.approx(373 / 336)
    assert rw.rho["response_mismatch"] == pytest.approx(51 / 56)
    assert rw.rho["spurious_tool_call"] == pytest.approx(2.0)
    assert rw.rho["correct_abstention"] == pytest.approx(1.8)
    assert rw.rho["pass"] == 1.0
    #   [sp, sm, sm]: 1/3 * 2 + 2/3 * 373/336 = 709/504;  [ca, pass]: (1.8 + 1) / 2 = 1.4
    assert w2 == pytest.approx([709 / 504, 1.4])
    # two rounds per epoch: the window was cleared after batch 2
    assert rw.window.counts == {} and rw.rounds_in_epoch == 0

    # step 3, new epoch: window = batch 3 only: state_mismatch 1, pass 1
    #   state_mismatch:    target = 1 + 1/2 * 1 * 1/4 = 9/8;  rho = 3/4 * 373/336 + 1/4 * 9/8 = 499/448
    #                      (without the reset: 1 + 5/14, rho = 1.171875)
    #   response_mismatch: absent, target 0.9:  rho = 3/4 * 51/56 + 1/4 * 0.9 = 1017/1120
    w3 = rw.weigh_batch(*BATCH_3)
    assert rw.rho["state_mismatch"] == pytest.approx(499 / 448)
    assert rw.rho["response_mismatch"] == pytest.approx(1017 / 1120)
    assert rw.rho["pass"] == 1.0
    assert w3 == pytest.approx([499 / 448, 1.0])


def test_shuffled_moves_rho_exactly_like_closed_loop_and_permutes_the_weights():
    rw = hand_example_rw("shuffled")
    rw.weigh_batch(*BATCH_1)
    w2 = rw.weigh_batch(*BATCH_2)
    assert rw.rho["state_mismatch"] == pytest.approx(373 / 336) and rw.rho["pass"] == 1.0
    assert sorted(w2) == pytest.approx(sorted([709 / 504, 1.4]))
    many = Reweighting(mode="shuffled", rho0=RHO0, seed=3)
    profiles = [{"spurious_tool_call": 1.0}, {"instance_mismatch": 1.0}, {"pass": 1.0}, {"correct_abstention": 1.0}]
    draws = [many.weights(profiles) for _ in range(20)]
    assert all(sorted(d) == [0.6, 1.0, 1.8, 2.0] for d in draws)
    assert any(d != [2.0, 0.6, 1.0, 1.8] for d in draws)


def test_fixed_and_off_never_move_rho():
    fixed = hand_example_rw("fixed")
    # fixed: rho0 weights; [pass, sm, sm] = 1/3 + 2/3 = 1.0, [rm, pass] = (0.9 + 1) / 2 = 0.95
    assert fixed.weigh_batch(*BATCH_1) == pytest.approx([1.0, 1.0, 0.95])
    assert fixed.weigh_batch(*BATCH_2) == pytest.approx([(2.0 + 2.0) / 3, 1.4])
    assert fixed.rho == RHO0
    off = Reweighting(mode="off", rho0=RHO0)
    assert off.weigh_batch(*BATCH_1) == [1.0, 1.0, 1.0] and off.rho == RHO0 and off.window.counts == {}


def test_state_round_trips_mid_epoch():
    rw = hand_example_rw("shuffled")
    rw.weigh_batch(*BATCH_1)
    state = json.loads(json.dumps(rw.state_dict()))
    twin = Reweighting(mode="shuffled", rho0=RHO0, confidence_samples=4, rounds_per_epoch=2, seed=99)
    twin.load_state_dict(state)
    # the twin continues the epoch: its step 2 is the hand value, which needs batch 1's window
    assert twin.weigh_batch(*BATCH_2) == rw.weigh_batch(*BATCH_2)
    assert twin.rho["state_mismatch"] == pytest.approx(373 / 336)
    assert twin.window.counts == {} and rw.window.counts == {}


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="not one of off, fixed, closed_loop, shuffled"):
        Reweighting(mode="sometimes")
    with pytest.raises(ValueError, match="w_min"):
        Reweighting(w_min=0.0)
    # the bounds may touch 1 (no down- or no up-weighting)
    assert Reweighting(w_min=1.0, w_max=2.0).w_min == 1.0 and Reweighting(w_min=0.5, w_max=1.0).w_max == 1.0
    with pytest.raises(ValueError, match="w_min"):
        Reweighting(w_min=1.5, w_max=2.0)
    with pytest.raises(ValueError, match="rounds_per_epoch"):
        Reweighting(rounds_per_epoch=0)


def test_weight_stats():
    stats = weight_stats([0.5, 1.0, 2.0, 1.5], 0.5, 2.0)
    assert stats["mean"] == pytest.approx(1.25) and stats["clipped_frac"] == 0.5
    assert stats["min"] == 0.5 and stats["max"] == 2.0


def test_window_and_rule_edges_by_hand():
    # a tag the checker could not judge, first in its trajectory, is skipped and the rest still counts
    window = TagWindow()
    window.add([["checker_error", "state_mismatch", "pass"]], [0.0])
    assert window.counts == {"state_mismatch": 1, "pass": 1}
    # an absent tag has prevalence 0 (also in an empty window) and stagnation 0
    assert window.prevalence("spurious_tool_call") == 0.0 and TagWindow().prevalence("pass") == 0.0
    assert window.stagnation("spurious_tool_call") == 0.0
    # excluded tags target 1.0 whatever their base
    assert rho_target("checker_error", 1.7, window, alpha=1.0, confidence_samples=32, w_min=0.5, w_max=2.0) == 1.0
    # confidence saturates at 1: 64 state_mismatch turns (n_conf 32) of 80, all failed:
    # target = 1.0 * (1 + 1.0 * 64/80 * 1 * 1) = 1.8 (not clipped); with confidence 2 it would be 2.0 after clipping
    big = TagWindow()
    big.add([["state_mismatch"] * 64 + ["pass"] * 16], [0.0])
    assert rho_target("state_mismatch", 1.0, big, alpha=1.0, confidence_samples=32, w_min=0.5, w_max=2.0) == (
        pytest.approx(1.8))
    # a tag missing from the current rho starts from rho0; custom frozen/excluded sets are honoured
    assert update_rho({}, RHO0, TagWindow(), **RULE) == pytest.approx(RHO0)
    moved = update_rho(RHO0, RHO0, big, **RULE, frozen=frozenset())
    # pass: 16 of 80 turns, all failed, 16/32 confidence: target = 1 + 0.2 * 1 * 0.5 = 1.1; rho = 0.75 + 0.275
    assert moved["pass"] == pytest.approx(1.025)
    kept = update_rho(RHO0, RHO0, big, **RULE, excluded=frozenset({"state_mismatch"}))
    assert kept["state_mismatch"] == pytest.approx(0.75 * 1.0 + 0.25 * 1.0)


def test_off_weights_are_one_and_state_loads_without_a_window():
    off = Reweighting(mode="off", rho0=RHO0)
    assert off.weights([{"spurious_tool_call": 1.0}, {}]) == [1.0, 1.0]
    rw = Reweighting(mode="closed_loop", rho0=RHO0, rounds_per_epoch=1)  # one round per epoch is valid
    state = rw.state_dict()
    del state["window"], state["rounds_in_epoch"]
    rw.load_state_dict(state)
    assert rw.window.counts == {} and rw.window.reward_sums == {} and rw.rounds_in_epoch == 0


def test_shuffled_permutations_follow_the_seed():
    profiles = [{"spurious_tool_call": 1.0}, {"instance_mismatch": 1.0}, {"pass": 1.0}, {"correct_abstention": 1.0}]
    expected = [2.0, 0.6, 1.0, 1.8]
    random.Random(7).shuffle(expected)  # the permutation Python's RNG seeded with 7 draws
    assert Reweighting(mode="shuffled", rho0=RHO0, seed=7).weights(profiles) == expected


def test_weight_stats_std_by_hand():
    # weights 0.5, 1.0, 2.0, 1.5: mean 1.25, squared deviations 0.5625 + 0.0625 + 0.5625 + 0.0625 = 1.25
    assert weight_stats([0.5, 1.0, 2.0, 1.5], 0.5, 2.0)["std"] == pytest.approx((1.25 / 4) ** 0.5)
    assert weight_stats([], 0.5, 2.0) == {}


@pytest.mark.parametrize("settings, message", [
    # a negative base weight was accepted and clipped up to w_min silently; a word reached a comparison's TypeError
    ({"rho0": {"pass": -1}}, "rho0.pass=-1: give a positive weight (an outcome's informativeness; 1.0: neutral)"),
    ({"rho0": {"pass": 1.0, "state_mismatch": 0}}, "rho0.state_mismatch=0: give a positive weight (an outcome's "
                                                   "informativeness; 1.0: neutral)"),
    ({"rho0": {"pass": "high"}}, "rho0.pass='high': give a number"),
    ({"w_min": "abc"}, "w_min='abc': give a number"),
    ({"w_max": True}, "w_max=True: give a number"),
    ({"ema_beta": "0.25"}, "ema_beta='0.25': give a number"),
    ({"prevalence_alpha": None}, "prevalence_alpha=None: give a number"),
    ({"ema_beta": 1.01}, "ema_beta=1.01: give the EMA's step, from 0 to 1"),
    ({"ema_beta": -0.01}, "ema_beta=-0.01: give the EMA's step, from 0 to 1"),
    ({"prevalence_alpha": -0.5}, "prevalence_alpha=-0.5: give 0 or more"),
    ({"confidence_samples": 0}, "confidence_samples=0: give a whole number, at least 1"),
    ({"confidence_samples": 2.5}, "confidence_samples=2.5: give a whole number, at least 1"),
])
def test_a_setting_the_weights_cannot_use_is_one_sentence(settings, message):
    with pytest.raises(ValueError) as refused:
        Reweighting(**settings)
    assert str(refused.value) == message


def test_the_edges_of_the_settings_are_taken():
    # an EMA step of 0 keeps rho0 and of 1 jumps to the target; no prevalence term; one sample is full confidence
    for settings in ({"ema_beta": 0.0}, {"ema_beta": 1}, {"prevalence_alpha": 0}, {"confidence_samples": 1},
                     {"rho0": {"pass": 1e-9}}):
        Reweighting(**settings)
