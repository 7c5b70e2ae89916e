"""The configured diagnosers, label statistics, the taxonomy and its mapping to the paper's tables."""

import json

import pytest
from hydra.utils import instantiate

from seal.diagnosis import (
    CAUSE_FAILURES,
    CAUSES,
    COUNTED_OUTCOMES,
    OUTCOME_FAILURES,
    OUTCOMES,
    TABLE5_TO_CAUSES,
    TABLE6_TO_OUTCOMES,
    ConstantDiagnoser,
    FailureProfile,
    NoDiagnoser,
    RandomDiagnoser,
    RuleDiagnoser,
    TurnLabel,
    check_rho_keys,
    profile_labels,
    round_profiles,
    table5_cause,
    trajectory_profile,
)
from seal.diagnosis.validate import build_cases
from tests.test_configs import CONF, compose_with



@pytest.fixture(scope="module")
def round_items():
    cases, _ = build_cases(seed=3, entries_per_category=3)
    return [(c.entry, c.verdict, c.steps) for c in cases]


def test_the_layers_use_the_papers_tables():
    table5 = ["invalid_tool_call", "argument_mismatch", "state_mismatch", "recovery_failure", "missing_tool_call",
              "response_mismatch"]
    table6 = ["spurious_tool_call", "correct_abstention", "empty_turn_model_response", "state_mismatch",
              "response_mismatch", "instance_mismatch", "pass"]
    assert list(TABLE5_TO_CAUSES) == table5 and list(TABLE6_TO_OUTCOMES) == table6
    assert list(COUNTED_OUTCOMES) == table6
    assert set(OUTCOMES) == set(table6) | {"checker_error", "gt_error", "unlabelled"}
    # the project's value-level mismatch has its own name; the release's instance_mismatch is no cause
    assert "value_mismatch" in CAUSES and "instance_mismatch" not in CAUSES
    assert {"inherited_state", "step_limit", "context_overflow"} <= set(CAUSE_FAILURES)
    for causes in TABLE5_TO_CAUSES.values():
        assert set(causes) <= set(CAUSE_FAILURES)
    assert table5_cause("value_mismatch") == "state_mismatch" and table5_cause("empty_turn_model_response") == (
        "missing_tool_call")
    assert table5_cause("inherited_state") is None


def test_profile_labels_per_layer():
    turns = [TurnLabel("pass", None), TurnLabel("state_mismatch", "inherited_state"),
             TurnLabel("correct_abstention", None), TurnLabel("empty_turn_model_response", "not_played")]
    assert profile_labels(turns, "outcome") == ["pass", "state_mismatch", "correct_abstention", "empty_turn_model_response"]
    assert profile_labels(turns, "cause") == ["pass", "inherited_state", "correct_abstention", "not_played"]
    with pytest.raises(ValueError, match="layers are outcome, cause"):
        profile_labels(turns, "causes")


@pytest.mark.parametrize("choice", sorted(p.stem for p in (CONF / "reweighting").glob("*.yaml")))
def test_rho_keys_in_every_config_are_outcome_tags(choice):
    cfg = compose_with(f"reweighting={choice}")
    check_rho_keys(cfg.reweighting.rho0)
    assert cfg.reweighting.profile_layer == "outcome"


def test_check_rho_keys_accepts_only_counted_outcome_tags():
    with pytest.raises(ValueError, match="valid ones are spurious_tool_call"):
        check_rho_keys({"spurious_call": 2.0})
    # a cause is no rho key, even under the cause-layer ablation
    with pytest.raises(ValueError, match="unknown rho key"):
        check_rho_keys({"argument_mismatch": 1.2})
    with pytest.raises(ValueError, match="never weighted"):
        check_rho_keys({"checker_error": 1.0})


def test_label_errors_name_every_bad_label_and_the_whole_vocabulary():
    table6 = ("spurious_tool_call, correct_abstention, empty_turn_model_response, state_mismatch, response_mismatch, "
              "instance_mismatch, pass")
    with pytest.raises(ValueError) as err:
        check_rho_keys({"pass": 1.0, "spurious_call": 2.0, "argument_mismatch": 1.2})
    assert str(err.value) == (
        f"unknown rho key(s) argument_mismatch, spurious_call; valid ones are {table6}, checker_error, gt_error, "
        "unlabelled"
    )
    with pytest.raises(ValueError) as err:
        check_rho_keys({"unlabelled": 1.0, "gt_error": 1.0})
    assert str(err.value) == f"rho key(s) gt_error, unlabelled are never weighted; weighted outcomes are {table6}"
    with pytest.raises(ValueError) as err:
        ConstantDiagnoser(outcome="wrong")
    assert str(err.value) == f"unknown constant diagnoser outcome(s) wrong; valid ones are {table6}, checker_error, gt_error, unlabelled"
    with pytest.raises(ValueError) as err:
        ConstantDiagnoser(cause="instance_mismatch")
    assert str(err.value).startswith(
        "unknown constant diagnoser cause(s) instance_mismatch; valid ones are invalid_tool_call, argument_mismatch, "
    )


@pytest.mark.parametrize("choice", ["rules", "random", "constant", "none"])
def test_a_diagnoser_class_names_itself_as_its_config_does(choice):
    """Built in code without a name (the tests, the validation), a diagnoser reports what its config calls it."""
    cfg = compose_with(f"diagnoser={choice}").diagnoser
    cls = {"rules": RuleDiagnoser, "random": RandomDiagnoser, "constant": ConstantDiagnoser, "none": NoDiagnoser}[choice]
    assert cfg._target_ == f"seal.diagnosis.{cls.__name__}"
    built = cls(seed=0) if cls is RandomDiagnoser else cls()
    assert built.name == cfg.name == choice


@pytest.mark.parametrize("choice", ["rules", "random", "constant", "none"])
def test_every_diagnoser_config_instantiates_and_labels_a_round(choice, round_items):
    cfg = compose_with(f"diagnoser={choice}")
    diagnoser = instantiate(cfg.diagnoser)
    assert diagnoser.name == choice and diagnoser.provides_labels == (choice != "none")
    labels = diagnoser.label_round(round_items)
    assert [len(x) for x in labels] == [e.num_turns for e, _, _ in round_items]
    assert all(t.outcome in OUTCOMES and (t.cause is None or t.cause in CAUSES) for x in labels for t in x)
    json.dumps(diagnoser.state_dict())


def test_random_redraws_failures_in_each_layer_from_the_rounds_own_labels(round_items):
    rules = RuleDiagnoser().label_round(round_items)
    rand = RandomDiagnoser(seed=0).label_round(round_items)
    pairs = [(a, b) for x, y in zip(rules, rand) for a, b in zip(x, y)]
    seen = {"outcome": {a.outcome for a, _ in pairs}, "cause": {a.cause for a, _ in pairs}}
    changed = {"outcome": 0, "cause": 0}
    for a, b in pairs:
        for layer, failures in (("outcome", OUTCOME_FAILURES), ("cause", CAUSE_FAILURES)):
            x, y = getattr(a, layer), getattr(b, layer)
            if x in failures:
                assert y in seen[layer] and y in failures
                changed[layer] += x != y
            else:
                assert y == x
    assert changed["outcome"] > 0 and changed["cause"] > 0
    # causes without an outcome of the same name are redrawn too
    table5_only = ("invalid_tool_call", "argument_mismatch", "recovery_failure")
    assert any(a.cause != b.cause for a, b in pairs if a.cause in table5_only)
    assert RandomDiagnoser(seed=0).label_round(round_items) == rand
    assert RandomDiagnoser(seed=1).label_round(round_items) != rand


def test_random_redraws_follow_the_rounds_label_frequencies():
    """A failure is redrawn with the round's own frequencies, not uniformly over the labels seen: with 99
    state mismatches to 1 response mismatch, about 99% of 4,000 redraws are state mismatches (a uniform draw
    would give 50%; 95% is over 20 standard deviations away from 99% at this size)."""
    rand = RandomDiagnoser(seed=0)
    values = ["state_mismatch"] * 99 + ["response_mismatch", "pass", None]
    draw = rand._sampler(values, OUTCOME_FAILURES)
    draws = [draw("spurious_tool_call") for _ in range(4000)]
    assert set(draws) == {"state_mismatch", "response_mismatch"}
    assert draws.count("state_mismatch") / 4000 > 0.95
    # a success passes through untouched and draws nothing from the stream
    state = rand._rng.getstate()
    assert draw("pass") == "pass" and draw(None) is None and rand._rng.getstate() == state


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
    const = ConstantDiagnoser(outcome="state_mismatch", cause="argument_mismatch").label_round(round_items)
    for a, b in zip(rules, const):
        assert b == [TurnLabel("state_mismatch" if x.outcome in OUTCOME_FAILURES else x.outcome,
                               "argument_mismatch" if x.cause in CAUSE_FAILURES else x.cause) for x in a]
    none = NoDiagnoser().label_round(round_items)
    assert all(set(x) == {TurnLabel("unlabelled", "unlabelled")} for x in none)
    assert all(trajectory_profile(profile_labels(x, layer)) == {} for x in none for layer in ("outcome", "cause"))
    with pytest.raises(ValueError, match="valid ones are"):
        ConstantDiagnoser(outcome="wrong")
    with pytest.raises(ValueError, match="constant diagnoser cause"):
        ConstantDiagnoser(cause="instance_mismatch")


def test_trajectory_profile_by_hand():
    labels = ["pass", "state_mismatch", "state_mismatch", "not_played", "checker_error", "gt_error"]
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
    # reported in the tables' order (Table 6's outcomes, then the causes), not alphabetically
    assert list(p.counts) == ["correct_abstention", "pass", "argument_mismatch"]
    assert list(p.by_category["miss_param"]) == ["correct_abstention", "argument_mismatch"]
    assert json.loads(json.dumps(p.to_dict()))["counts"] == p.counts
    assert p.metrics("diag/cause") == {"diag/cause/argument_mismatch": 0.5, "diag/cause/pass": 0.25,
                                       "diag/cause/correct_abstention": 0.25, "diag/cause/num_turns": 4.0}
    empty = FailureProfile.from_round([], [], [])
    assert empty.num_turns == 0 and empty.prevalence == {} and empty.mean_reward == 0.0
    with pytest.raises(ValueError, match="one category and reward per trajectory"):
        FailureProfile.from_round([["pass"]], [], [1.0])


def test_round_profiles_count_each_layer_on_its_own():
    # base_98-like: an argument error, then two turns that inherit its wrong state; and a trajectory
    # that hit the step limit in its first turn (two turns after the end)
    a = [TurnLabel("state_mismatch", "argument_mismatch"), TurnLabel("state_mismatch", "inherited_state"),
         TurnLabel("state_mismatch", "inherited_state")]
    b = [TurnLabel("pass", "step_limit"), TurnLabel("correct_abstention", "not_played"),
         TurnLabel("empty_turn_model_response", "not_played")]
    profiles = round_profiles([a, b], ["base", "miss_param"], [0.0, 0.0])
    outcome, cause = profiles["outcome"], profiles["cause"]
    assert outcome.counts == {"correct_abstention": 1, "empty_turn_model_response": 1, "state_mismatch": 3, "pass": 1}
    assert outcome.num_turns == 6 and outcome.prevalence["state_mismatch"] == 0.5
    # inherited turns are counted apart from the turn that broke the state; unplayed turns not at all
    assert cause.counts == {"argument_mismatch": 1, "inherited_state": 2, "step_limit": 1}
    assert cause.num_turns == 4 and cause.prevalence["inherited_state"] == 0.5
    assert cause.by_category == {"base": {"argument_mismatch": 1, "inherited_state": 2}, "miss_param": {"step_limit": 1}}
