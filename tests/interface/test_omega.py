"""Omega state, its serialisation, and the evolution rule: thresholds, hysteresis, evidence, fixed modes."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from seal.diagnosis import FailureProfile
from seal.interface import GUIDELINES, SWITCHES, InterfaceConfig, Omega, evolve, initial_interface, omega_diff, signals

CONF = Path(__file__).resolve().parents[2] / "conf"
EVOLVE_ALL = InterfaceConfig(name="seal", schema="evolve", err="evolve", cap="evolve")


def profile(**counts):
    """A round profile with the given label counts (pass fills up to 100 turns unless given)."""
    labels = [[label] * n for label, n in counts.items()]
    return FailureProfile.from_round(labels, ["base"] * len(labels), [0.0] * len(labels))


def share(label, prevalence, turns=100):
    k = round(prevalence * turns)
    return profile(**{label: k, "pass": turns - k}) if label != "pass" else profile(**{"pass": turns})


def compose_interface(choice):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return instantiate(compose(config_name="config", overrides=[f"env_interface={choice}"]).env_interface)


def test_round_trip_switches_and_equality():
    omega = Omega(phi_schema=True, phi_err=False, phi_cap=frozenset({"scope", "format"}), version=3)
    d = json.loads(json.dumps(omega.to_dict()))
    assert d == {"version": 3, "phi_schema": True, "phi_err": False, "phi_cap": ["scope", "format"]}
    assert Omega.from_dict(d) == omega and hash(Omega.from_dict(d)) == hash(omega)
    assert omega.switches() == {
        "schema": True, "err": False, "cap/cautious_call": False, "cap/active_respond": False,
        "cap/state_aware": False, "cap/scope": True, "cap/format": True,
    }
    assert list(omega.switches()) == list(SWITCHES)
    assert omega.metrics()["iface/cap/scope"] == 1.0 and omega.metrics()["iface/version"] == 3.0
    assert omega != Omega(phi_schema=True, phi_cap=frozenset({"scope"}), version=3)
    with pytest.raises(ValueError, match="guidelines are cautious_call"):
        Omega(phi_cap=frozenset({"be_nice"}))


@pytest.mark.parametrize("choice, switches", [
    ("static", set()), ("schema", {"schema"}), ("seal", set()), ("err_only", set()), ("cap_only", set()),
])
def test_presets_and_initial_interface(choice, switches):
    cfg = compose_interface(choice)
    assert cfg.name == choice
    omega = initial_interface(cfg)
    assert {k for k, v in omega.switches().items() if v} == switches and omega.version == 0


def test_always_and_off_never_change():
    cfg = InterfaceConfig(schema="always", err="off", cap="always")
    omega = initial_interface(cfg)
    assert omega.phi_schema and not omega.phi_err and omega.phi_cap == frozenset(GUIDELINES)
    for p in [share("recovery_failure", 0.9), share("pass", 1.0), profile()]:
        assert evolve(omega, p, cfg) == omega


def test_switch_on_at_the_threshold_and_off_below_the_lower_one():
    cfg = EVOLVE_ALL
    omega = initial_interface(cfg)
    assert evolve(omega, share("argument_mismatch", 0.09), cfg) == omega  # below on: nothing
    on = evolve(omega, share("argument_mismatch", 0.10), cfg)
    assert on.phi_schema and on.version == 1 and omega_diff(omega, on) == "schema: off -> on\nversion: 0 -> 1"
    # hysteresis: between off (0.05) and on (0.10) it stays on
    assert evolve(on, share("argument_mismatch", 0.07), cfg) == on
    assert evolve(on, share("argument_mismatch", 0.05), cfg) == on
    off = evolve(on, share("argument_mismatch", 0.04), cfg)
    assert not off.phi_schema and off.version == 2


def test_each_failure_type_drives_its_own_switch():
    cfg = EVOLVE_ALL
    omega = initial_interface(cfg)
    expected = {
        "recovery_failure": {"err"}, "spurious_tool_call": {"cap/cautious_call"},
        "empty_turn_model_response": {"cap/active_respond"}, "state_mismatch": {"cap/state_aware"},
        "value_mismatch": {"cap/scope"}, "response_mismatch": {"cap/format"},
        "missing_tool_call": {"schema", "cap/active_respond"}, "invalid_tool_call": {"schema", "err"},
        "argument_mismatch": {"schema"}, "step_limit": set(), "correct_abstention": set(),
        # a turn that did right from a wrong inherited state asks nothing of the interface
        "inherited_state": set(),
    }
    for label, switches in expected.items():
        new = evolve(omega, share(label, 0.3), cfg)
        assert {k for k, v in new.switches().items() if v} == switches, label
    assert signals(share("state_mismatch", 0.25), cfg)["cap/state_aware"] == pytest.approx(0.25)


def test_idempotent_and_version_only_moves_on_change():
    cfg = EVOLVE_ALL
    p = share("state_mismatch", 0.5)
    once = evolve(initial_interface(cfg), p, cfg)
    twice = evolve(once, p, cfg)
    assert twice == once and twice.version == 1 and omega_diff(once, twice) == ""


def test_no_switch_moves_without_enough_evidence_but_a_smoke_round_suffices():
    cfg = EVOLVE_ALL
    omega = initial_interface(cfg)
    tiny = FailureProfile.from_round([["state_mismatch", "pass", "not_played"]], ["base"], [0.0])
    assert tiny.num_turns == 2 and evolve(omega, tiny, cfg) == omega
    # two smoke-size episodes of 3 and 4 turns clear the default min_evidence (4)
    smoke = FailureProfile.from_round([["pass", "state_mismatch", "not_played"], ["pass", "pass", "argument_mismatch", "pass"]],
                                      ["base", "base"], [0.0, 0.0])
    new = evolve(omega, smoke, cfg)
    assert new.phi_schema and "state_aware" in new.phi_cap and new.version == 1


def test_per_switch_thresholds_and_guideline_subset():
    cfg = InterfaceConfig(cap="evolve", thresholds={"cap/format": {"on": 0.5, "off": 0.4}}, guidelines=["format", "scope"])
    omega = initial_interface(cfg)
    assert evolve(omega, share("response_mismatch", 0.3), cfg) == omega
    assert evolve(omega, share("response_mismatch", 0.5), cfg).phi_cap == {"format"}
    assert evolve(omega, share("state_mismatch", 0.9), cfg) == omega  # state_aware not allowed here


@pytest.mark.parametrize("kwargs, message", [
    ({"schema": "sometimes"}, "use one of off, always, evolve"),
    ({"schema": True}, "quotes"),
    ({"thresholds": {"cap/tone": {"on": 0.1}}}, "switches are schema, err"),
    ({"triggers": {"err": ["oops"]}}, "valid ones are invalid_tool_call"),
    # triggers are causes: an outcome-only tag (the release's instance_mismatch) is refused
    ({"triggers": {"cap/scope": ["instance_mismatch"]}}, "unknown trigger cause"),
    ({"on_threshold": 0.05, "off_threshold": 0.1}, "off <= on"),
    ({"guidelines": ["polite"]}, "guidelines are"),
])
def test_config_errors_name_the_fix(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InterfaceConfig(**kwargs)


def test_unquoted_off_in_yaml_reads_as_off():
    assert InterfaceConfig(schema=False).schema == "off"
