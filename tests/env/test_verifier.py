import pytest

from seal.env import parse_call, verify
from seal.env.executor import Backends, execute
from seal.env.verifier import CONTEXT_OVERFLOW, EMPTY_TURN, RESPONSE_MISMATCH, STATE_MISMATCH
from tests.env.official_oracle import official_verdicts
from tests.env.perturb import KINDS, perturbed_set


def _outcome(verdict):
    """A verdict as bfcl-eval's runner states it: validity, error type, message, and for a response mismatch the
    gold results the model's results lack (the checker's missing_items)."""
    missing = verdict.turns[verdict.failed_turn].missing_results if verdict.error_type == RESPONSE_MISMATCH else None
    return verdict.valid, verdict.error_type, verdict.error_message or None, missing


def _agreement(items, bench):
    official = official_verdicts(items)
    ours = [verify(bench[item["id"]], item["result"]) for item in items]
    disagreements = [
        (item["id"], item.get("kind"), _outcome(v), theirs)
        for item, v, o in zip(items, ours, official)
        if _outcome(v) != (theirs := (o["valid"], o["error_type"], o["error_message"], o["missing_items"]))
    ]
    return ours, disagreements


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
    # turn 0's gold is a cd, a mkdir and a mv into the new folder: drop the mkdir and the folder never
    # exists (the mv renames the file instead)
    assert [c.split("(")[0] for c in entry.gold[0]] == ["cd", "mkdir", "mv"]
    trajectory[0] = [[c for c in entry.gold[0] if not c.startswith("mkdir")]]
    # and turn 1 changes the tree again, after turn 0 was checked
    trajectory[1] = [trajectory[1][0] + ["mkdir(dir_name='made_later')"]]
    verdict = verify(entry, trajectory)
    official = official_verdicts([{"id": entry.id, "result": trajectory}])[0]
    assert (verdict.valid, verdict.error_type) == (official["valid"], official["error_type"]) == (False, STATE_MISMATCH)
    turn = verdict.turns[0]
    assert turn.status == STATE_MISMATCH
    diff = turn.state_diff["GorillaFileSystem"]
    # the file system differs in its directory tree (root), and each entry names both sides
    assert set(diff) == {"root"} and all(set(d) == {"model", "ground_truth"} for d in diff.values())
    assert diff["root"]["model"] != diff["root"]["ground_truth"]
    # the diff is turn 0's state, kept as it was: turn 1's new folder is not in it
    alone = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    for text in trajectory[0][0]:
        execute(alone, parse_call(text))
    assert diff["root"]["model"] == alone.instances["GorillaFileSystem"].root
    # and so is the gold's side, though turn 3's gold moves another file into the new folder
    gold_alone = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    for text in entry.gold[0]:
        execute(gold_alone, parse_call(text))
    assert diff["root"]["ground_truth"] == gold_alone.instances["GorillaFileSystem"].root
    replayed = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    for text in [c for turn in entry.gold for c in turn]:
        execute(replayed, parse_call(text))
    assert diff["root"]["ground_truth"] != replayed.instances["GorillaFileSystem"].root


def test_context_overflow_is_a_failure_even_on_the_last_turn(bench):
    entry = bench["multi_turn_base_0"]
    trajectory = [[list(turn)] if turn else [] for turn in entry.gold]
    assert verify(entry, trajectory).valid
    verdict = verify(entry, trajectory, context_overflow=True)
    assert not verdict.valid and verdict.error_type == CONTEXT_OVERFLOW


def test_non_list_result_is_an_inference_error(bench):
    verdict = verify(bench["multi_turn_base_1"], "not a list")  # type: ignore[arg-type]
    assert not verdict.valid and verdict.error_type == "multi_turn:inference_error"
    # as bfcl-eval's runner says it, message included
    assert _agreement([{"id": "multi_turn_base_1", "result": "not a list"}], bench)[1] == []
    # a list holding a turn that is not a list is refused the same way (bfcl-eval would iterate the string)
    entry = bench["multi_turn_base_1"]
    turns = [[] for _ in entry.gold]
    turns[1] = "not a turn"
    broken = verify(entry, turns)
    assert (broken.id, *_outcome(broken)) == (
        "multi_turn_base_1", False, "multi_turn:inference_error",
        "Error during inference phase. Model did not output a list of model responses.", None)


def test_turns_played_and_passed_count_what_the_trajectory_reached(bench):
    # miss_func_11's gold: one call, no call (the turn is skipped by the checker), one call
    entry = bench["multi_turn_miss_func_11"]
    assert [len(g) for g in entry.gold] == [1, 0, 1]
    gold = [[list(turn)] if turn else [] for turn in entry.gold]
    full = verify(entry, gold)
    assert (full.turns_played, full.turns_passed) == (3, 3)
    # ended after two turns: the third is not played, the two reached still pass
    cut = verify(entry, gold[:2])
    assert (cut.turns_played, cut.turns_passed) == (2, 2)
    # every gold turn keeps its record, the unplayed ones too, each with its index and whether its gold is empty
    assert [(t.index, t.gold_empty, t.status) for t in cut.turns] == [
        (0, False, "pass"), (1, True, "skipped"), (2, False, "not_played")]
    assert [(t.index, t.gold_empty, t.status) for t in verify(entry, gold[:1]).turns] == [
        (0, False, "pass"), (1, True, "not_played"), (2, False, "not_played")]
    # nothing called in turn 0 (gold only reads: ls): that turn is played and fails; the skipped turn
    # and turn 2 (its state and its own response match) pass
    empty_first = verify(entry, [[]] + gold[1:])
    assert (empty_first.turns_played, empty_first.turns_passed) == (3, 2)


def test_a_turn_checked_from_the_gold_prior_state_needs_only_that_turns_own_calls(bench):
    from seal.env.verifier import check_from_gold_prior

    entry = bench["multi_turn_base_0"]
    # turn 1's gold (cd into the folder turn 0's gold made, grep) passes from turn 0's gold state, whatever
    # the model did before
    assert check_from_gold_prior(entry, 1, list(entry.gold[1]), []) == "pass"
    assert check_from_gold_prior(entry, 1, [], []) == EMPTY_TURN
    assert check_from_gold_prior(entry, 1, list(entry.gold[1]) + ["mkdir(dir_name='extra')"], []) == STATE_MISMATCH
    # turn 2 only reads (sort): another read leaves the state as the gold's but misses its result, unless an
    # earlier turn of the model's produced it
    assert entry.gold[2] == ["sort('final_report.pdf')"]
    replay = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    sorted_text = [execute(replay, parse_call(c)).observation for turn in entry.gold[:3] for c in turn][-1]
    assert check_from_gold_prior(entry, 2, ["pwd()"], []) == RESPONSE_MISMATCH
    assert check_from_gold_prior(entry, 2, ["pwd()"], ["other", sorted_text]) == "pass"
    # a turn whose gold calls nothing is not checked
    assert check_from_gold_prior(bench["multi_turn_miss_func_11"], 1, ["ls()"], []) == "skipped"


def test_a_verdicts_summary_is_its_id_validity_and_error_type(bench):
    entry = bench["multi_turn_base_0"]
    assert verify(entry, [[]]).summary() == {"id": "multi_turn_base_0", "valid": False,
                                             "error_type": "multi_turn:force_terminated"}


def test_a_gold_result_is_missing_once_per_copy_the_model_results_lack():
    from seal.env.verifier import _missing

    # bfcl-eval's response check: each gold result takes one matching model result (one "a" for two in the gold)
    assert _missing(["a", "a", "b"], ["c", "a"]) == ["a", "b"]
    assert _missing(["a", "a"], ["a", "a", "a"]) == []


# the costly comparisons last: mutmut stops a mutant at its first failing test (-x), and the quick tests above
# fail first for most of them
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


@pytest.mark.parametrize("played, overflow, failed_turn", [
    # the turn the episode was in when it stopped: the last one it reached (turn 0 when it reached none)
    (2, False, 1), (0, False, 0), (1, False, 0),
    (2, True, 1), (0, True, 0), (3, True, 2),
])
def test_an_episode_cut_short_fails_on_the_last_turn_it_reached(bench, played, overflow, failed_turn):
    entry = bench["multi_turn_miss_func_11"]  # three gold turns: one call, none, one call
    gold = [[list(turn)] if turn else [] for turn in entry.gold]
    verdict = verify(entry, gold[:played], context_overflow=overflow)
    if overflow:
        message = "the episode outgrew the backbone's context window"
        assert (verdict.valid, verdict.error_type, verdict.error_message) == (False, CONTEXT_OVERFLOW, message)
    else:  # bfcl-eval's force-termination (its message is checked against bfcl-eval's runner above)
        assert (verdict.valid, verdict.error_type) == (False, "multi_turn:force_terminated")
    assert verdict.failed_turn == failed_turn
