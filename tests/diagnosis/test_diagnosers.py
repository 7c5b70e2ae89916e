"""The configured diagnosers, label statistics, the taxonomy and its mapping to the paper's tables."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from seal.diagnosis import (
    FAILURE_LABELS,
    LABELS,
    TABLE5_TO_LABELS,
    TABLE6_TO_LABELS,
    WEIGHTED_LABELS,
    ConstantDiagnoser,
    FailureProfile,
    NoDiagnoser,
    RandomDiagnoser,
    RuleDiagnoser,
    check_rho_keys,
    table5_label,
    trajectory_profile,
)
from seal.diagnosis.validate import build_cases

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(scope="module")
def round_items():
    cases, _ = build_cases(seed=3, entries_per_category=3)
    return [(c.entry, c.verdict, c.steps) for c in cases]


def test_taxonomy_covers_both_tables():
    table5 = ["invalid_tool_call", "argument_mismatch", "state_mismatch", "recovery_failure", "missing_tool_call",
              "response_mismatch"]
    table6 = ["spurious_tool_call", "correct_abstention", "empty_turn_model_response", "state_mismatch",
              "response_mismatch", "instance_mismatch", "pass"]
    assert list(TABLE5_TO_LABELS) == table5 and sorted(TABLE6_TO_LABELS) == sorted(table6)
    for name in table6:
        assert name in LABELS
    for labels in TABLE5_TO_LABELS.values():
        assert set(labels) <= set(FAILURE_LABELS)
    assert table5_label("empty_turn_model_response") == "missing_tool_call"
    assert table5_label("instance_mismatch") == "state_mismatch" and table5_label("pass") is None
    assert len(set(LABELS)) == len(LABELS) and set(WEIGHTED_LABELS) < set(LABELS)


@pytest.mark.parametrize("choice", sorted(p.stem for p in (CONF / "reweighting").glob("*.yaml")))
def test_rho_keys_in_every_config_are_weighted_labels(choice):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"reweighting={choice}"])
    check_rho_keys(cfg.reweighting.rho0)


def test_check_rho_keys_names_the_valid_labels():
    with pytest.raises(ValueError, match="valid labels are invalid_tool_call"):
        check_rho_keys({"spurious_call": 2.0})
    with pytest.raises(ValueError, match="never weighted"):
        check_rho_keys({"not_played": 1.0})


@pytest.mark.parametrize("choice", ["rules", "random", "constant", "none"])
def test_every_diagnoser_config_instantiates_and_labels_a_round(choice, round_items):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"diagnoser={choice}"])
    diagnoser = instantiate(cfg.diagnoser)
    assert diagnoser.name == choice and diagnoser.provides_labels == (choice != "none")
    labels = diagnoser.label_round(round_items)
    assert [len(x) for x in labels] == [e.num_turns for e, _, _ in round_items]
    assert all(set(x) <= set(LABELS) for x in labels)
    json.dumps(diagnoser.state_dict())


def test_random_keeps_everything_but_failure_labels_and_draws_from_the_round(round_items):
    rules = RuleDiagnoser().label_round(round_items)
    rand = RandomDiagnoser(seed=0).label_round(round_items)
    observed = {x for traj in rules for x in traj if x in FAILURE_LABELS}
    changed = 0
    for a, b in zip(rules, rand):
        for x, y in zip(a, b):
            if x in FAILURE_LABELS:
                assert y in observed
                changed += x != y
            else:
                assert x == y
    assert changed > 0
    assert RandomDiagnoser(seed=0).label_round(round_items) == rand
    assert RandomDiagnoser(seed=1).label_round(round_items) != rand


def test_random_state_dict_round_trip_continues_the_stream(round_items):
    a = RandomDiagnoser(seed=5)
    a.label_round(round_items)
    state = json.loads(json.dumps(a.state_dict()))
    expected = [a.label_round(round_items) for _ in range(2)]
    b = RandomDiagnoser(seed=99)
    b.load_state_dict(state)
    assert [b.label_round(round_items) for _ in range(2)] == expected


def test_constant_and_none(round_items):
    rules = RuleDiagnoser().label_round(round_items)
    const = ConstantDiagnoser(label="state_mismatch").label_round(round_items)
    for a, b in zip(rules, const):
        assert b == ["state_mismatch" if x in FAILURE_LABELS else x for x in a]
    none = NoDiagnoser().label_round(round_items)
    assert all(set(x) == {"unlabelled"} for x in none)
    assert all(trajectory_profile(x) == {} for x in none)
    with pytest.raises(ValueError, match="valid labels"):
        ConstantDiagnoser(label="wrong")


def test_trajectory_profile_by_hand():
    labels = ["pass", "state_mismatch", "state_mismatch", "not_played", "checker_error"]
    assert trajectory_profile(labels) == {"state_mismatch": 2 / 3, "pass": 1 / 3}
    assert trajectory_profile(["not_played", "unlabelled"]) == {}
    assert trajectory_profile([]) == {}


def test_failure_profile_by_hand():
    labels = [["pass", "argument_mismatch", "not_played"], ["argument_mismatch", "correct_abstention"], ["unlabelled"]]
    p = FailureProfile.from_round(labels, ["base", "miss_param", "base"], [1.0, 0.0, 0.0])
    assert p.counts == {"argument_mismatch": 2, "pass": 1, "correct_abstention": 1}
    assert p.prevalence == {"argument_mismatch": 0.5, "pass": 0.25, "correct_abstention": 0.25}
    assert p.mean_reward == pytest.approx(1 / 3)
    assert p.by_category == {"base": {"argument_mismatch": 1, "pass": 1}, "miss_param": {"argument_mismatch": 1, "correct_abstention": 1}}
    assert (p.num_trajectories, p.num_turns) == (3, 4)
    assert json.loads(json.dumps(p.to_dict()))["counts"] == p.counts
    assert p.metrics() == {"diag/argument_mismatch": 0.5, "diag/pass": 0.25, "diag/correct_abstention": 0.25,
                           "diag/num_turns": 4.0, "diag/mean_reward": pytest.approx(1 / 3)}
    empty = FailureProfile.from_round([], [], [])
    assert empty.num_turns == 0 and empty.prevalence == {} and empty.mean_reward == 0.0
    with pytest.raises(ValueError, match="one category and reward per trajectory"):
        FailureProfile.from_round([["pass"]], [], [1.0])
