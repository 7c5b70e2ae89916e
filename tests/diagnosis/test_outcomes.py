"""The outcome layer against bfcl-eval's own checker, and the trajectory weight it gives.

The release tags each turn with the official per-turn checks and no early return; the official
checker stops at the first failing turn. So on any trajectory the first turn tagged with an
official failure type must be the checker's verdict, and the verdict itself must not change.
"""

import pytest

from seal.diagnosis import diagnose, diagnose_result, profile_labels, trajectory_profile
from seal.diagnosis.injections import Step, gold_script, play
from seal.env import parse_call, verify
from seal.rl.reweighting import trajectory_weight
from tests.config_values import RHO0
from tests.env.official_oracle import official_verdicts
from tests.env.perturb import perturbed_set

# outcome tag -> the official error type of the same per-turn check
OFFICIAL = {
    "empty_turn_model_response": "multi_turn:empty_turn_model_response",
    "state_mismatch": "multi_turn:instance_state_mismatch",
    "response_mismatch": "multi_turn:execution_response_mismatch",
}
FORCE_TERMINATED = "multi_turn:force_terminated"


def test_the_first_failing_outcome_is_the_official_verdict(bench, signatures):
    entries = list(bench.values())[1::16]  # 50 entries, every category
    items = perturbed_set(entries, seed=2, signatures=signatures)
    official = official_verdicts(items)
    seen = set()
    for item, truth in zip(items, official):
        entry = bench[item["id"]]
        verdict = verify(entry, item["result"])
        labels = diagnose_result(entry, item["result"], verdict)
        seen |= {x.outcome for x in labels}
        # the official verdict is what it was, before and after labelling
        assert (verdict.valid, verdict.error_type) == (truth["valid"], truth["error_type"]), item["kind"]
        played = len(item["result"])
        if truth["error_type"] == FORCE_TERMINATED:
            assert played < entry.num_turns
            assert [x.cause for x in labels[played:]] == ["not_played"] * (entry.num_turns - played)
            assert [x.outcome for x in labels[played:]] == [
                "correct_abstention" if not g else "empty_turn_model_response" for g in entry.gold[played:]]
            if played:
                assert labels[played - 1].cause == "step_limit"
            continue
        first = next((OFFICIAL[x.outcome] for x in labels if x.outcome in OFFICIAL), None)
        assert (first is None, first) == (truth["valid"], truth["error_type"]), item["kind"]
    assert seen >= {"pass", "correct_abstention", "spurious_tool_call", *OFFICIAL}
    assert "instance_mismatch" not in seen and "gt_error" not in seen


def test_the_weight_of_an_early_ended_trajectory_by_hand(bench):
    # miss_param_3: turn 0 makes its gold call, then reads until the step limit (it passes its own
    # checks); turn 1 (gold "no call") and turn 2 are never played. The release tags them
    # correct_abstention and empty_turn_model_response, so w = (1.0 + 1.8 + 1.5) / 3.
    entry = bench["multi_turn_miss_param_3"]
    script = gold_script(entry)
    script[0] = [Step([parse_call(entry.gold[0][0])])] + [Step([parse_call("ls()")]) for _ in range(3)]
    verdict, steps = play(entry, script, max_steps=2)
    labels = diagnose(entry, verdict, steps)
    outcome = trajectory_profile(profile_labels(labels, "outcome"))
    assert trajectory_weight(outcome, RHO0, 0.5, 2.0) == pytest.approx(4.3 / 3)
    # read from causes, only the step limit counts, and no rho names it
    cause = trajectory_profile(profile_labels(labels, "cause"))
    assert cause == {"step_limit": 1.0} and trajectory_weight(cause, RHO0, 0.5, 2.0) == 1.0
