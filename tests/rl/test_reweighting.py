"""Reweighting maths against values computed by hand."""

import json

import pytest

from seal.rl.reweighting import Reweighting, trajectory_weight, update_rho, weight_stats

RHO0 = {"spurious_tool_call": 2.0, "correct_abstention": 1.8, "empty_turn_model_response": 1.5,
        "state_mismatch": 1.0, "response_mismatch": 0.9, "instance_mismatch": 0.6, "pass": 1.0}


def test_weight_is_the_profile_average_of_rho():
    # 2 of 4 turns pass, 1 spurious call, 1 instance mismatch: (2*1.0 + 2.0 + 0.6) / 4 = 1.15
    profile = {"pass": 0.5, "spurious_tool_call": 0.25, "instance_mismatch": 0.25}
    assert trajectory_weight(profile, RHO0, 0.5, 2.0) == pytest.approx(1.15)


def test_weight_is_clipped_and_unknown_labels_weigh_one():
    assert trajectory_weight({"spurious_tool_call": 1.0}, {"spurious_tool_call": 3.0}, 0.5, 2.0) == 2.0
    assert trajectory_weight({"instance_mismatch": 1.0}, {"instance_mismatch": 0.1}, 0.5, 2.0) == 0.5
    assert trajectory_weight({"invalid_tool_call": 1.0}, RHO0, 0.5, 2.0) == 1.0
    assert trajectory_weight({}, RHO0, 0.5, 2.0) == 1.0


def test_closed_loop_update_by_hand():
    # response_mismatch: rho0 0.9, prevalence 0.5, 16 of 32 samples, mean reward 0.25
    # target = 0.9 * (1 + 1.0 * 0.5 * 0.75 * 0.5) = 1.06875; rho = 0.75 * 0.9 + 0.25 * 1.06875 = 0.9421875
    # spurious: rho 2.0, prevalence 0.25, 64 samples -> target = 2 * (1 + 0.1875) = 2.375 -> clipped 2.0
    new = update_rho(
        {"response_mismatch": 0.9, "spurious_tool_call": 2.0},
        {"response_mismatch": 0.9, "spurious_tool_call": 2.0},
        prevalence={"response_mismatch": 0.5, "spurious_tool_call": 0.25},
        counts={"response_mismatch": 16, "spurious_tool_call": 64},
        mean_reward=0.25, alpha=1.0, beta=0.25, confidence_samples=32, w_min=0.5, w_max=2.0,
    )
    assert new["response_mismatch"] == pytest.approx(0.9421875)
    assert new["spurious_tool_call"] == pytest.approx(2.0)


def test_unseen_labels_decay_back_towards_rho0():
    rho = update_rho({"pass": 1.5}, {"pass": 1.0}, {}, {}, 0.0, alpha=1.0, beta=0.25,
                     confidence_samples=32, w_min=0.5, w_max=2.0)
    assert rho["pass"] == pytest.approx(0.75 * 1.5 + 0.25 * 1.0)


def test_modes():
    profiles = [{"spurious_tool_call": 1.0}, {"instance_mismatch": 1.0}, {"pass": 1.0}, {"correct_abstention": 1.0}]
    off = Reweighting(mode="off", rho0=RHO0)
    assert off.weights(profiles) == [1.0] * 4
    fixed = Reweighting(mode="fixed", rho0=RHO0)
    assert fixed.weights(profiles) == [2.0, 0.6, 1.0, 1.8]
    fixed.end_round({"pass": 1.0}, {"pass": 100}, 0.0)
    assert fixed.rho == RHO0
    shuffled = Reweighting(mode="shuffled", rho0=RHO0, seed=3)
    draws = [shuffled.weights(profiles) for _ in range(20)]
    assert all(sorted(d) == [0.6, 1.0, 1.8, 2.0] for d in draws)
    assert any(d != [2.0, 0.6, 1.0, 1.8] for d in draws)
    closed = Reweighting(mode="closed_loop", rho0=RHO0)
    closed.end_round({"response_mismatch": 0.5}, {"response_mismatch": 16}, 0.25)
    assert closed.rho["response_mismatch"] == pytest.approx(0.9421875)
    assert closed.rho0["response_mismatch"] == 0.9


def test_sign_is_preserved_and_state_round_trips():
    rw = Reweighting(mode="shuffled", rho0=RHO0, seed=1)
    rw.end_round({"pass": 0.3}, {"pass": 40}, 0.1)
    state = json.loads(json.dumps(rw.state_dict()))
    twin = Reweighting(mode="shuffled", rho0=RHO0, seed=99)
    twin.load_state_dict(state)
    profiles = [{"pass": 0.5, "state_mismatch": 0.5}] * 3 + [{"spurious_tool_call": 1.0}]
    assert twin.rho == rw.rho and twin.weights(profiles) == rw.weights(profiles)
    assert all(w > 0 for w in rw.weights(profiles))


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="not one of"):
        Reweighting(mode="sometimes")
    with pytest.raises(ValueError, match="w_min"):
        Reweighting(w_min=1.5, w_max=2.0)


def test_weight_stats():
    stats = weight_stats([0.5, 1.0, 2.0, 1.5], 0.5, 2.0)
    assert stats["mean"] == pytest.approx(1.25) and stats["clipped_frac"] == 0.5
    assert stats["min"] == 0.5 and stats["max"] == 2.0
