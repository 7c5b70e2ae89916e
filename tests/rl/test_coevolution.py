"""One round's use of the two label layers: weights from the layer reweighting names (outcome by
default), the interface from the causes, both profiles in the round's metrics and records."""

import json
import time
from types import SimpleNamespace

import pytest

from seal.diagnosis import TurnLabel
from seal.env.benchmarks.bfcl_v3 import get_entries
from seal.interface import InterfaceConfig, initial_interface
from seal.rl.coevolution import CoEvolution
from seal.rl.reweighting import Reweighting
from tests.config_values import RHO0
from seal.policy.generation import derive_seed
from tests.rl.scripted import MASK, ScriptedEngine

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
    # one rollout per prompt by default: a group of one has no spread
    assert m["train/zero_spread_groups_frac"] == 1.0


def test_an_unknown_layer_is_refused():
    with pytest.raises(ValueError, match="layers are outcome, cause"):
        Reweighting(rho0=RHO0, profile_layer="causes")


class RecordingEngine(ScriptedEngine):
    """ScriptedEngine that keeps what play() was asked for; the second entry's prompt does not fit."""

    def play(self, entries, view=None, *, temperature=1.0, seeds=None, progress=False, leave=True):
        self.asked = {"view": view, "temperature": temperature, "seeds": list(seeds), "shown": (progress, leave)}
        out = super().play(entries, view, temperature=temperature, seeds=seeds)
        out[1].completion_ids, out[1].completion_mask, out[1].logprobs = [], [], []
        out[0].timings = {"generation": 2.0, "execution": 0.5, "verification": 0.25}
        return out


def test_play_round_hands_trl_the_round_as_played():
    from seal.interface import Omega
    from seal.interface.render import InterfaceView

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
    # no progress asked for: the engine shows nothing (its defaults)
    assert engine.asked["shown"] == (False, True)
    with pytest.raises(RuntimeError, match="^close_round\\(\\) without a played round$"):
        CoEvolution(engine=engine, entries={}, omega=Omega(), interface_cfg=cfg, diagnoser=FixedDiagnoser([]),
                    reweighting=Reweighting(mode="off"), temperature=1.0, seed=0).close_round(0)


def test_a_rounds_rollouts_are_shown_under_the_rounds_number_and_cleared_when_done():
    # the console's per-round lines count from round 0 ("[1/2] round 0 | ..."): the first round's rollouts are
    # "round 0 · rollouts", the second's "round 1 · rollouts", each bar left off the console once played
    from seal.interface import Omega

    entries = get_entries(IDS)
    engine = RecordingEngine(100)
    co = CoEvolution(
        engine=engine, entries={e.id: e for e in entries}, omega=Omega(), interface_cfg=InterfaceConfig(),
        diagnoser=FixedDiagnoser(LABELS), reweighting=Reweighting(mode="off", rho0=RHO0),
        temperature=1.0, seed=5, progress=True,
    )
    assert co.progress is True
    co.play_round(IDS)
    assert engine.asked["shown"] == ("round 0 · rollouts", False)
    co.close_round(1)
    co.play_round(IDS)
    assert engine.asked["shown"] == ("round 1 · rollouts", False)


# -- one whole round, every number by hand -------------------------------------------------------------
# Three prompts, two rollouts each (TRL's groups are consecutive). miss_func_11 has three turns, the
# middle one with no gold call (checked as "skipped"); base_3 has two turns, base_4 three. The
# scripted engine plays the gold calls at the positions in GOOD and nothing anywhere else, so every
# turn is played and a "bad" episode fails every turn that has gold calls.
ROUND_IDS = ["multi_turn_miss_func_11"] * 2 + ["multi_turn_base_3"] * 2 + ["multi_turn_base_4"] * 2
GOOD = {0, 1, 2, 4}
P = TurnLabel("pass", None)
S = TurnLabel("spurious_tool_call", "spurious_tool_call")
I = TurnLabel("instance_mismatch", "value_mismatch")  # noqa: E741
E = TurnLabel("empty_turn_model_response", "empty_turn_model_response")
ROUND_LABELS = [[P, P, P], [P, P, P], [P, P], [S, S], [P, P, P], [I, I, E]]
# rho0 (conf/reweighting/closed_loop.yaml): pass 1.0, spurious 2.0, instance 0.6, empty turn 1.5
ROUND_WEIGHTS = [1.0, 1.0, 1.0, 2.0, 1.0, (0.6 + 0.6 + 1.5) / 3]


class Endings(ScriptedEngine):
    """ScriptedEngine whose fourth and sixth episodes end early and whose timings are given."""

    def play(self, entries, view=None, *, temperature=1.0, seeds=None, progress=False):
        out = super().play(entries, view, temperature=temperature, seeds=seeds)
        out[3].ended, out[5].ended = "context_overflow", "force_terminated"
        for r in out:
            # more than the whole play can have taken: nothing is left for rollout_other
            r.timings = {"generation": 100.0, "execution": 10.0, "verification": 1.0}
        return out


class Recorder(FixedDiagnoser):
    def label_round(self, items):
        self.items = items
        return super().label_round(items)

    def state_dict(self):
        return {"labelled": len(self.items)}

    def load_state_dict(self, state):
        self.restored = state


def whole_round(mode="fixed", dist=None, labels=ROUND_LABELS, ids=ROUND_IDS, **kw):
    entries = get_entries(sorted(set(ids)))
    cfg = InterfaceConfig(cap="evolve", min_evidence=1)
    co = CoEvolution(
        engine=Endings(100, good=lambda position: position in GOOD), entries={e.id: e for e in entries},
        omega=initial_interface(cfg), interface_cfg=cfg, diagnoser=Recorder(labels),
        reweighting=Reweighting(mode=mode, rho0=RHO0), temperature=1.0, seed=5, group_size=2, dist=dist, **kw,
    )
    t0 = time.perf_counter()
    co.play_round(ids)
    weights = co.close_round(global_step=7)
    return co, weights, time.perf_counter() - t0


def test_a_round_metrics_by_hand():
    co, weights, elapsed = whole_round()
    assert weights == pytest.approx(ROUND_WEIGHTS)
    record = co.history[-1]
    assert (record.round, record.global_step) == (0, 7)
    m = record.metrics
    assert m["train/reward_mean"] == pytest.approx(4 / 6)
    # turns passed (pass or skipped) over turns played: 3 + 3 + 2 + 0 + 3 + 0 of 3 + 3 + 2 + 2 + 3 + 3
    assert m["train/turn_pass_rate"] == pytest.approx(11 / 16)
    # the scripted layout: 5 model tokens of 9, after a 3-token prompt
    assert m["train/model_tokens_mean"] == 5.0 and m["train/episode_tokens_mean"] == 12.0
    assert m["train/context_overflow_frac"] == pytest.approx(1 / 6)
    assert m["train/force_terminated_frac"] == pytest.approx(1 / 6)
    # groups (1, 1), (1, 0), (1, 0): one of three has no spread
    assert m["train/zero_spread_groups_frac"] == pytest.approx(1 / 3)
    # weights 1, 1, 1, 2, 1, 0.9: one at w_max
    assert m["reweight/weight_mean"] == pytest.approx(6.9 / 6)
    assert m["reweight/weight_max"] == 2.0 and m["reweight/weight_min"] == pytest.approx(0.9)
    assert m["reweight/weight_clipped_frac"] == pytest.approx(1 / 6)
    # only the groups with spread (episodes 2-5) change the update
    assert m["reweight/effective_count"] == 4.0
    assert m["reweight/effective_mean"] == pytest.approx(4.9 / 4)
    assert m["reweight/rho/spurious_tool_call"] == 2.0
    # the summed per-episode timings; nothing left over for the rest of the rollout
    assert (m["time/generation"], m["time/execution"], m["time/verification"]) == (600.0, 60.0, 6.0)
    assert m["time/rollout_other"] == 0.0
    for part in ("diagnosis", "weighting", "interface"):
        assert 0.0 <= m[f"time/{part}"] <= elapsed, part


def one_entry_round(diagnoser):
    """A played round of multi_turn_base_3 twice, under a `diagnoser` class labelling both episodes' two turns."""
    entries = get_entries(["multi_turn_base_3"])
    cfg = InterfaceConfig(cap="evolve", min_evidence=1)
    co = CoEvolution(engine=ScriptedEngine(100), entries={e.id: e for e in entries}, omega=initial_interface(cfg),
                     interface_cfg=cfg, diagnoser=diagnoser([[S, S], [S, S]]), reweighting=Reweighting(rho0=RHO0),
                     temperature=1.0, seed=0)
    co.play_round(["multi_turn_base_3"] * 2)
    return co


def test_trls_scoring_between_the_rollouts_and_the_advantage_hook_is_timed(monkeypatch):
    # the round's split held its rollouts, diagnosis and optimisation, but not what TRL does in between (the old
    # policy's and the reference's log-probs: a forward pass of each over the batch); here it takes 40 s
    import seal.rl.coevolution as coevolution_module

    now = [100.0]
    monkeypatch.setattr(coevolution_module, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    co = one_entry_round(Recorder)
    now[0] += 40.0
    co.close_round(0)
    m = co.history[-1].metrics
    assert m["time/scoring"] == 40.0 and m["time/diagnosis"] == 0.0 and m["time/rollout_other"] == 0.0


def test_a_round_record_by_hand():
    co, _, _ = whole_round()
    record = co.history[-1]
    # every episode, in order, with the verdict's own record of it
    first, fourth = record.episodes[0], record.episodes[3]
    assert first == {
        "id": "multi_turn_miss_func_11", "valid": True, "error_type": None, "reward": 1.0, "ended": "completed",
        "model_tokens": 5, "prompt_tokens": 3, "episode_tokens": 12, "turns_played": 3, "turns_passed": 3,
        "turn_labels": [{"outcome": "pass", "cause": None}] * 3,
    }
    assert fourth["error_type"] == "multi_turn:empty_turn_model_response" and fourth["reward"] == 0.0
    assert (fourth["ended"], fourth["turns_played"], fourth["turns_passed"]) == ("context_overflow", 2, 0)
    # the diagnoser saw (entry, verdict, steps) of every episode in order
    items = co.diagnoser.items
    assert [(e.id, v.valid, len(s)) for e, v, s in items] == [
        (i, n in GOOD, len(get_entries([i])[0].turns)) for n, i in enumerate(ROUND_IDS)
    ]
    # the weights used fixed rho0
    assert record.rho == RHO0
    # causes over 16 counted turns: spurious 2/16 and value_mismatch 2/16 reach the 0.10 threshold,
    # the empty turn (1/16) does not
    assert record.interface == {"version": 1, "phi_schema": False, "phi_err": False, "phi_cap": ["cautious_call", "scope"]}
    assert record.interface_diff == "cap/cautious_call: off -> on\ncap/scope: off -> on\nversion: 0 -> 1"
    assert co.round_rewards() == [1.0, 1.0, 1.0, 0.0, 1.0, 0.0]


def test_no_weights_unless_labels_and_an_active_mode():
    co, weights, _ = whole_round(mode="off")
    assert weights is None and "reweight/weight_mean" not in co.history[-1].metrics

    class Unlabelled(Recorder):
        provides_labels = False

    co = one_entry_round(Unlabelled)
    assert co.close_round(0) is None
    # without labels the interface does not move either
    assert co.history[-1].interface["version"] == 0 and co.history[-1].interface_diff == ""


def test_finish_round_adds_the_optimizer_and_calls_back():
    seen = []
    t0 = time.perf_counter()
    co, _, _ = whole_round(on_round_end=seen.append)
    co.finish_round(global_step=12, optimizer_metrics={"train/loss": 0.25})
    elapsed = time.perf_counter() - t0
    record = co.history[-1]
    assert seen == [record] and record.global_step == 12 and record.metrics["train/loss"] == 0.25
    assert 0.0 <= record.metrics["time/optimisation"] <= elapsed


def test_state_survives_a_checkpoint():
    co, _, _ = whole_round(mode="closed_loop")
    state = json.loads(json.dumps(co.state_dict()))
    assert set(state) == {"omega", "reweighting", "diagnoser", "history"}
    assert state["diagnoser"] == {"labelled": 6}
    fresh, _, _ = whole_round(mode="closed_loop", labels=[[P]] * 6)
    fresh.load_state_dict(state)
    assert fresh.omega == co.omega and fresh.omega.phi_cap == frozenset({"cautious_call", "scope"})
    assert fresh.reweighting.rho == co.reweighting.rho and fresh.reweighting.rho != RHO0
    assert fresh.diagnoser.restored == {"labelled": 6}
    assert [vars(r) for r in fresh.history] == [vars(r) for r in co.history]


class OneOfTwo:
    """One rank of two whose partner played the same episodes (so a gather doubles every list)."""

    world = 2

    def __init__(self, rank):
        self.rank = rank
        self.checked = []

    def gather(self, items):
        return list(items) * 2

    def check_agree(self, what, state):
        self.checked.append((what, state))


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_seeds_and_weights_its_own_share(rank):
    dist = OneOfTwo(rank)
    ids = ROUND_IDS[:4]
    labels = [[P], [P], [S, S], [I, I, E], [S], [P], [E], [P]]
    entries = get_entries(sorted(set(ids)))
    cfg = InterfaceConfig(cap="evolve", min_evidence=1)
    engine = RecordingEngine(100)
    co = CoEvolution(engine=engine, entries={e.id: e for e in entries}, omega=initial_interface(cfg),
                     interface_cfg=cfg, diagnoser=Recorder(labels), reweighting=Reweighting(mode="fixed", rho0=RHO0),
                     temperature=1.0, seed=5, group_size=2, dist=dist)
    co.play_round(ids)
    # rank r plays the round's episodes 4r .. 4r + 3
    assert engine.asked["seeds"] == [derive_seed(5, 0, 4 * rank + i) for i in range(4)]
    # the round's 8 weights 1, 1, 2, 0.9 | 2, 1, 1.5, 1: each rank takes its own four
    assert co.close_round(0) == pytest.approx([[1.0, 1.0, 2.0, 0.9], [2.0, 1.0, 1.5, 1.0]][rank])
    record = co.history[-1]
    assert dist.checked == [("rho and Omega", {"rho": RHO0, "omega": record.interface})]


def test_an_empty_completion_is_the_first_end_of_turn_token():
    class TwoTokenEnd(RecordingEngine):
        eot_ids = [2, 3]  # e.g. "<|im_end|>" then "\n"

    entries = get_entries(IDS)
    cfg = InterfaceConfig()
    co = CoEvolution(engine=TwoTokenEnd(100), entries={e.id: e for e in entries}, omega=initial_interface(cfg),
                     interface_cfg=cfg, diagnoser=FixedDiagnoser(LABELS), reweighting=Reweighting(mode="off"),
                     temperature=1.0, seed=0)
    batch = co.play_round(IDS)
    assert batch["completion_ids"][1] == [2] and batch["env_mask"][1] == [0]
    # max_train_tokens unset: the whole completion is trained
    assert len(batch["completion_ids"][0]) == len(MASK)


def test_the_turn_pass_rate_of_a_round_that_played_one_turn():
    from seal.env.calls import parse_call
    from seal.env.episode import Episode

    class OneTurn(ScriptedEngine):
        """Plays turn 0's gold calls, then the context overflows: one turn played, and it passed."""

        def play(self, entries, view=None, *, temperature=1.0, seeds=None, progress=False):
            out = super().play(entries, view, temperature=temperature, seeds=seeds)
            for r in out:
                episode = Episode(r.entry)
                episode.next_turn()
                episode.step([parse_call(c) for c in r.entry.gold[0]], raw="gold")
                episode.step([], raw="done")
                episode.abort("context_overflow")
                r.episode, r.verdict, r.ended = episode, episode.verdict(), "context_overflow"
            return out

    entries = get_entries(["multi_turn_base_3"])
    cfg = InterfaceConfig()
    co = CoEvolution(engine=OneTurn(100), entries={e.id: e for e in entries}, omega=initial_interface(cfg),
                     interface_cfg=cfg, diagnoser=FixedDiagnoser([[P, P]]), reweighting=Reweighting(mode="off"),
                     temperature=1.0, seed=0)
    co.play_round(["multi_turn_base_3"])
    co.close_round(0)
    episode = co.history[-1].episodes[0]
    assert (episode["turns_played"], episode["turns_passed"], episode["reward"]) == (1, 1, 0.0)
    assert co.history[-1].metrics["train/turn_pass_rate"] == 1.0
