"""One round's use of the two label layers: weights from the layer reweighting names (outcome by
default), the interface from the causes, both profiles in the round's metrics and records."""

import pytest

from seal.diagnosis import TurnLabel
from seal.env.benchmark import get_entries
from seal.interface import InterfaceConfig, initial_interface
from seal.rl.coevolution import CoEvolution
from seal.rl.reweighting import Reweighting
from tests.config_values import RHO0
from tests.rl.scripted import ScriptedEngine

IDS = ["multi_turn_base_0", "multi_turn_base_0"]


class FixedDiagnoser:
    """Hands out given labels, so the round's use of each layer can be computed by hand."""

    provides_labels = True
    name = "fixed"

    def __init__(self, labels):
        self.labels = labels

    def label_round(self, items):
        return [list(x) for x in self.labels]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


# base_0 has four turns. First trajectory: a value error, then two turns that inherit the wrong
# state, then the step limit; second: one turn passes, three value mismatches on read calls.
LABELS = [
    [TurnLabel("state_mismatch", "value_mismatch"), TurnLabel("state_mismatch", "inherited_state"),
     TurnLabel("state_mismatch", "inherited_state"), TurnLabel("empty_turn_model_response", "not_played")],
    [TurnLabel("pass", None)] + [TurnLabel("response_mismatch", "value_mismatch")] * 3,
]


def one_round(layer):
    entries = get_entries(IDS)
    cfg = InterfaceConfig(cap="evolve", min_evidence=1)
    co = CoEvolution(
        engine=ScriptedEngine(100), entries={e.id: e for e in entries}, omega=initial_interface(cfg),
        interface_cfg=cfg, diagnoser=FixedDiagnoser(LABELS),
        reweighting=Reweighting(mode="fixed", rho0=RHO0, profile_layer=layer), temperature=1.0, seed=0,
    )
    co.play_round(IDS)
    weights = co.close_round(global_step=0)
    return co, weights


def test_weights_read_the_outcome_tags_by_default():
    assert Reweighting(rho0=RHO0).profile_layer == "outcome"
    _, weights = one_round("outcome")
    # (1.0 + 1.0 + 1.0 + 1.5) / 4 and (1.0 + 3 * 0.9) / 4
    assert weights == pytest.approx([4.5 / 4, 3.7 / 4])


def test_the_cause_layer_ablation_weighs_causes():
    _, weights = one_round("cause")
    # no cause is a rho key (rho is on outcomes), so every counted turn but a pass weighs 1.0; the
    # unplayed turn does not count at all
    assert weights == pytest.approx([1.0, 1.0])


def test_the_interface_evolves_from_causes_whatever_the_weight_layer():
    for layer in ("outcome", "cause"):
        co, _ = one_round(layer)
        # causes: value_mismatch 4 of 7 counted turns -> scope; no cause is a state or response
        # mismatch, so state_aware and format stay off although the outcomes are full of them
        assert co.omega.phi_cap == frozenset({"scope"}), layer


def test_the_round_records_both_profiles():
    co, _ = one_round("outcome")
    record = co.history[-1]
    assert record.labels == {
        "outcome/empty_turn_model_response": 1, "outcome/state_mismatch": 3, "outcome/response_mismatch": 3,
        "outcome/pass": 1, "cause/value_mismatch": 4, "cause/inherited_state": 2, "cause/pass": 1,
    }
    m = record.metrics
    assert m["diag/outcome/state_mismatch"] == pytest.approx(3 / 8) and m["diag/outcome/num_turns"] == 8.0
    assert m["diag/cause/inherited_state"] == pytest.approx(2 / 7) and m["diag/cause/num_turns"] == 7.0
    assert record.episodes[0]["turn_labels"][1] == {"outcome": "state_mismatch", "cause": "inherited_state"}
    assert record.episodes[1]["turn_labels"][0] == {"outcome": "pass", "cause": None}


def test_an_unknown_layer_is_refused():
    with pytest.raises(ValueError, match="layers are outcome, cause"):
        Reweighting(rho0=RHO0, profile_layer="causes")
