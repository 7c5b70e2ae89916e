import pytest

from seal.env import verify
from seal.env.tasks import replay_gold
from seal.env.verifier import CONTEXT_OVERFLOW, EMPTY_TURN, RESPONSE_MISMATCH, STATE_MISMATCH
from tests.env.official_oracle import official_verdicts
from tests.env.perturb import KINDS, perturbed_set


def test_gold_replay_passes_all_800(bench):
    results = replay_gold(list(bench))
    assert len(results) == 800
    failed = [(i, e) for i, ok, e in results if not ok]
    assert failed == []


def _agreement(items, bench):
    official = official_verdicts(items)
    ours = [verify(bench[item["id"]], item["result"]) for item in items]
    disagreements = [
        (item["id"], item["kind"], (v.valid, v.error_type), (o["valid"], o["error_type"]))
        for item, v, o in zip(items, ours, official)
        if (v.valid, v.error_type) != (o["valid"], o["error_type"])
    ]
    return ours, disagreements


def test_agrees_with_official_checker_on_perturbed_trajectories(bench, signatures):
    entries = list(bench.values())[::4]  # 200 entries, 50 per category
    items = perturbed_set(entries, seed=0, signatures=signatures)
    ours, disagreements = _agreement(items, bench)
    assert disagreements == []
    # the generated set exercises every official outcome, not only passes
    outcomes = {v.error_type for v in ours}
    assert {None, EMPTY_TURN, STATE_MISMATCH, RESPONSE_MISMATCH, "multi_turn:force_terminated"} <= outcomes
    assert {item["kind"] for item in items} == set(KINDS)


@pytest.mark.slow
def test_agrees_with_official_checker_on_all_entries(bench, signatures):
    items = perturbed_set(list(bench.values()), seed=1, per_kind=2, signatures=signatures)
    _, disagreements = _agreement(items, bench)
    assert disagreements == []


def test_turn_evidence_is_kept_for_every_turn(bench):
    entry = bench["multi_turn_base_0"]
    trajectory = [[list(turn)] if turn else [] for turn in entry.gold]
    # turn 0 loses its calls; later turns still get checked and keep their own evidence
    trajectory[0] = []
    verdict = verify(entry, trajectory)
    assert not verdict.valid and verdict.failed_turn == 0 and verdict.error_type == EMPTY_TURN
    assert len(verdict.turns) == entry.num_turns
    assert verdict.turns[0].status == EMPTY_TURN
    assert all(t.status != "not_played" for t in verdict.turns)
    later = [t for t in verdict.turns[1:] if t.failed]
    assert later, "dropping turn 0's state change must show up in later turns too"
    assert all(t.state_diff or t.missing_results or t.status == EMPTY_TURN for t in later)


def test_state_mismatch_reports_the_differing_attribute(bench):
    entry = bench["multi_turn_base_0"]
    trajectory = [[list(turn)] if turn else [] for turn in entry.gold]
    first = trajectory[0][0]
    trajectory[0][0] = [c for c in first if not c.startswith("mkdir")] or first[1:]
    verdict = verify(entry, trajectory)
    turn = verdict.turns[0]
    if turn.status == STATE_MISMATCH:
        diff = turn.state_diff["GorillaFileSystem"]
        assert set(diff) and all({"model", "ground_truth"} == set(d) for d in diff.values())
    else:
        assert turn.missing_results


def test_context_overflow_is_a_failure_even_on_the_last_turn(bench):
    entry = bench["multi_turn_base_0"]
    trajectory = [[list(turn)] if turn else [] for turn in entry.gold]
    assert verify(entry, trajectory).valid
    verdict = verify(entry, trajectory, context_overflow=True)
    assert not verdict.valid and verdict.error_type == CONTEXT_OVERFLOW


def test_non_list_result_is_an_inference_error(bench):
    verdict = verify(bench["multi_turn_base_1"], "not a list")  # type: ignore[arg-type]
    assert not verdict.valid and verdict.error_type == "multi_turn:inference_error"
