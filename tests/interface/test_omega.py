"""Omega state, its serialisation, and the evolution rule: thresholds, hysteresis, evidence, fixed modes."""

import json

import pytest
from hydra.utils import instantiate

from seal.diagnosis import FailureProfile
from seal.interface import GUIDELINES, SWITCHES, InterfaceConfig, Omega, evolve, initial_interface, omega_diff, signals
from tests.test_configs import compose_with

EVOLVE_ALL = InterfaceConfig(name="evolving", schema="evolve", err="evolve", cap="evolve")


def profile(**counts):
    """A round profile with the given label counts (pass fills up to 100 turns unless given)."""
    labels = [[label] * n for label, n in counts.items()]
    return FailureProfile.from_round(labels, ["base"] * len(labels), [0.0] * len(labels))


def share(label, prevalence, turns=100):
    k = round(prevalence * turns)
    return profile(**{label: k, "pass": turns - k}) if label != "pass" else profile(**{"pass": turns})


def compose_interface(choice):
    return instantiate(compose_with(f"env_interface={choice}").env_interface)


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
    ("static", set()), ("schema", {"schema"}), ("evolving", set()), ("err_only", set()), ("cap_only", set()),
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


def test_config_edges_and_messages():
    from omegaconf import OmegaConf

    # nested Hydra nodes are resolved to plain values (an interpolation inside a threshold override)
    node = OmegaConf.create({"base": 0.3, "t": {"cap/format": {"on": "${base}", "off": 0.2}}})
    cfg = InterfaceConfig(cap="evolve", thresholds=node.t)
    assert cfg.threshold("cap/format") == (0.3, 0.2) and cfg.threshold("schema") == (0.10, 0.05)
    # the thresholds may sit on their bounds: off = 0, off = on, on = 1
    InterfaceConfig(on_threshold=1.0, off_threshold=0.0)
    InterfaceConfig(on_threshold=0.2, off_threshold=0.2)
    with pytest.raises(ValueError, match=r"cap/format: need 0 <= off <= on <= 1 for the thresholds, got on=1.5"):
        InterfaceConfig(thresholds={"cap/format": {"on": 1.5}})
    with pytest.raises(ValueError, match="^env_interface.err='sometimes' is not a mode; use one of off, always, "
                                         'evolve \\(write "off" in quotes in YAML\\)$'):
        InterfaceConfig(err="sometimes")
    with pytest.raises(ValueError, match="^unknown interface switch\\(es\\) cap/x, y; switches are schema, err, "
                                         "cap/cautious_call, cap/active_respond, cap/state_aware, cap/scope, cap/format$"):
        InterfaceConfig(thresholds={"y": {}, "cap/x": {}})
    with pytest.raises(ValueError, match="^unknown guideline\\(s\\) a, b; guidelines are cautious_call, active_respond, "
                                         "state_aware, scope, format$"):
        InterfaceConfig(guidelines=["b", "a"])
    with pytest.raises(ValueError, match="^schema_style='fancy': choose one of project, release \\(rendering=...\\)$"):
        InterfaceConfig(schema_style="fancy")
    # min_evidence 0 (move on any round) is valid; a negative one is not
    assert InterfaceConfig(min_evidence=0).min_evidence == 0
    with pytest.raises(ValueError, match="^min_evidence must be >= 0, got -1$"):
        InterfaceConfig(min_evidence=-1)
    # a guideline left out of the config is off whatever the cap mode; the others follow it
    cfg = InterfaceConfig(cap="always", guidelines=["scope"])
    assert cfg.mode_of("cap/scope") == "always" and cfg.mode_of("cap/format") == "off" and cfg.mode_of("err") == "off"


def test_from_dict_without_guidelines_and_with_err_on():
    assert Omega.from_dict({"phi_schema": False, "phi_err": True, "version": 2}) == Omega(phi_err=True, version=2)


def test_evidence_exactly_min_evidence_moves_and_a_fixed_mode_is_set_whatever_came_before():
    cfg = InterfaceConfig(schema="evolve", cap="off", err="always", min_evidence=4)
    # 4 turns, all argument mismatches: evidence 4 >= 4, signal 1.0 >= 0.10
    moved = evolve(Omega(), profile(argument_mismatch=4), cfg)
    assert moved.phi_schema and moved.phi_err and moved.version == 1
    # a state that has cap on under a config with cap off: evolve switches it off, and every later
    # switch is still visited (schema turns on below)
    stale = Omega(phi_cap=frozenset({"scope"}))
    out = evolve(stale, profile(argument_mismatch=4), cfg)
    assert out.phi_cap == frozenset() and out.phi_schema and out.phi_err
    # a switch on evolve that loses its evidence goes off (False, not None)
    off = evolve(Omega(phi_schema=True, phi_err=True), profile(**{"pass": 100}), cfg)
    assert off.switches()["schema"] is False


def test_omega_diff_text():
    old, new = Omega(phi_err=True, version=1), Omega(phi_schema=True, version=2)
    assert omega_diff(old, new) == "schema: off -> on\nerr: on -> off\nversion: 1 -> 2"
    assert omega_diff(old, old) == ""


def test_widest_interface_has_every_switch_the_config_can_turn_on():
    from seal.interface.omega import replace, widest_interface

    cfg = InterfaceConfig(schema="evolve", err="off", cap="always", guidelines=["scope", "format"])
    assert widest_interface(cfg) == Omega(phi_schema=True, phi_cap=frozenset({"scope", "format"}))
    assert replace(Omega(), version=4) == Omega(version=4)


def test_without_evidence_fixed_modes_still_apply_after_an_evolving_switch():
    # schema (evolving) comes first and waits for evidence; err (always) after it is still set
    cfg = InterfaceConfig(schema="evolve", err="always", cap="off", min_evidence=4)
    out = evolve(Omega(), profile(argument_mismatch=3), cfg)
    assert (out.phi_schema, out.phi_err, out.version) == (False, True, 1)
