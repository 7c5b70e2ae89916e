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


class RecordingEngine(ScriptedEngine):
    """ScriptedEngine that keeps what play() was asked for; the second entry's prompt does not fit."""

    def play(self, entries, view=None, *, temperature=1.0, seeds=None, progress=False):
        self.asked = {"view": view, "temperature": temperature, "seeds": list(seeds)}
        out = super().play(entries, view, temperature=temperature, seeds=seeds)
        out[1].completion_ids, out[1].completion_mask, out[1].logprobs = [], [], []
        out[0].timings = {"generation": 2.0, "execution": 0.5, "verification": 0.25}
        return out


def test_play_round_hands_trl_the_round_as_played():
    from seal.interface import Omega
    from seal.interface.render import InterfaceView
    from seal.policy.generation import derive_seed
    from tests.rl.scripted import MASK

    entries = get_entries(IDS)
    cfg = InterfaceConfig(err="always", schema_style="release")
    engine = RecordingEngine(100)
    co = CoEvolution(
        engine=engine, entries={e.id: e for e in entries}, omega=Omega(phi_err=True), interface_cfg=cfg,
        diagnoser=FixedDiagnoser(LABELS), reweighting=Reweighting(mode="off", rho0=RHO0),
        temperature=0.7, seed=5, max_train_tokens=4,
    )
    batch = co.play_round(IDS)
    # the current interface, in the configured style, with the engine's call example; the run's temperature
    view = engine.asked["view"]
    assert isinstance(view, InterfaceView) and view.omega == Omega(phi_err=True)
    assert view.schema_style == "release" and view.call_example == ScriptedEngine.format.call_example
    assert engine.asked["temperature"] == 0.7
    # seeds keyed by (run seed, round 0, global episode index), one rank
    assert engine.asked["seeds"] == [derive_seed(5, 0, 0), derive_seed(5, 0, 1)]
    # completions cut at max_train_tokens; the one that did not fit is one end-of-turn token, masked out
    assert set(batch) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "verifier_reward"}
    assert [len(p) for p in batch["prompt_ids"]] == [3, 3]
    assert len(batch["completion_ids"][0]) == 4 and batch["completion_ids"][1] == [2]
    assert batch["env_mask"] == [MASK[:4], [0]] and batch["logprobs"] == [[0.0] * 4, [0.0]]
    # ScriptedEngine plays the gold calls at even positions: rewards 1, 0
    assert batch["verifier_reward"] == [1.0, 0.0]
    timing = co._timing
    assert (timing["generation"], timing["execution"], timing["verification"]) == (2.0, 0.5, 0.25)
    assert timing["rollout_other"] >= 0.0
    with pytest.raises(RuntimeError, match="^close_round\\(\\) without a played round$"):
        CoEvolution(engine=engine, entries={}, omega=Omega(), interface_cfg=cfg, diagnoser=FixedDiagnoser([]),
                    reweighting=Reweighting(mode="off"), temperature=1.0, seed=0).close_round(0)
