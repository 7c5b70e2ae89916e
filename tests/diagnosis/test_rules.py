"""diagnose(): each label on hand-built trajectories of real entries, played through Episode + verify."""

import pytest

from seal.diagnosis import LABELS, WEIGHTED_LABELS, diagnose
from seal.diagnosis.injections import Step, gold_script, play
from seal.env import Episode, parse_call, verify

UNDECODABLE = ("<tool_call>{'name': ", "not valid JSON")




def _parses(text):
    try:
        parse_call(text)
    except Exception:
        return False
    return True


def at(bench, entry_id, turn, calls=None, steps=None, **kw):
    script_calls = None if calls is None else [parse_call(c) if _parses(c) else c for c in calls]
    entry = bench[entry_id]
    script = gold_script(entry)
    if steps is not None:
        script[turn] = steps
    else:
        script[turn] = [Step(script_calls)] if script_calls else []
    verdict, played = play(entry, script, **kw)
    labels = diagnose(entry, verdict, played)
    assert len(labels) == entry.num_turns and set(labels) <= set(LABELS)
    return labels[turn], labels


BASE0 = "multi_turn_base_0"  # turn 0: cd(document), mkdir(temp), mv(final_report.pdf -> temp)


def test_gold_trajectories_pass_and_abstain(bench):
    assert at(bench, BASE0, 0, bench[BASE0].gold[0])[1] == ["pass"] * 4
    assert at(bench, "multi_turn_miss_param_3", 0, bench["multi_turn_miss_param_3"].gold[0])[1] == [
        "pass", "correct_abstention", "pass"
    ]


def test_spurious_tool_call_in_a_no_call_turn(bench):
    assert at(bench, "multi_turn_miss_param_3", 1, ["ls()"])[0] == "spurious_tool_call"
    # a miss_func turn whose tool is not there yet: calling the held-out tool is spurious too
    assert at(bench, "multi_turn_miss_func_0", 2, ["sort('final_report.pdf')"])[0] == "spurious_tool_call"


@pytest.mark.parametrize("calls", [
    ["cd(folder='document')", "make_dir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"],
    ["cd(folder='document')", "__import__('os').mkdir('temp')", "mv(source='final_report.pdf', destination='temp')"],
])
def test_invalid_tool_call_unknown_or_unsafe(bench, calls):
    assert at(bench, BASE0, 0, calls)[0] == "invalid_tool_call"


def test_invalid_tool_call_undecodable_output(bench):
    steps = [Step([parse_call("cd(folder='document')")]), Step([], [UNDECODABLE])]
    assert at(bench, BASE0, 0, steps=steps)[0] == "invalid_tool_call"


def test_invalid_tool_call_tool_not_yet_shown(bench):
    # miss_func_0 delivers `sort` at turn 3; using it at turn 1 (and skipping grep) is invalid
    assert at(bench, "multi_turn_miss_func_0", 1, ["cd(folder='temp')", "sort('final_report.pdf')"])[0] == "invalid_tool_call"


@pytest.mark.parametrize("call", ["fund_account(amount='2203.4')", "fund_account(amt=2203.4)", "fund_account()"])
def test_argument_mismatch_type_name_missing(bench, call):
    assert at(bench, "multi_turn_base_100", 1, [call])[0] == "argument_mismatch"


def test_argument_mismatch_value_outside_allowed_values(bench):
    calls = ["lockDoors(unlock=True, door=['driver', 'passenger', 'rear_left', 'trunk'])", "setHeadlights(mode='on')"]
    assert at(bench, "multi_turn_base_50", 0, calls)[0] == "argument_mismatch"


def test_state_mismatch_skipped_state_change_and_extra_change(bench):
    assert at(bench, BASE0, 0, ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"])[0] == "state_mismatch"
    extra = list(bench[BASE0].gold[0]) + ["mkdir(dir_name='extra')"]
    assert at(bench, BASE0, 0, extra)[0] == "state_mismatch"


def test_instance_mismatch_right_tools_other_targets(bench):
    calls = ["cd(folder='document')", "mkdir(dir_name='tmp')", "mv(source='final_report.pdf', destination='tmp')"]
    assert at(bench, BASE0, 0, calls)[0] == "instance_mismatch"
    calls = ["lockDoors(unlock=True, door=['driver', 'passenger', 'rear_left', 'rear_right'])", "setHeadlights(mode='auto')"]
    assert at(bench, "multi_turn_base_50", 0, calls)[0] == "instance_mismatch"
    assert at(bench, "multi_turn_base_100", 0, ["get_stock_info(symbol='AAPL')"])[0] == "instance_mismatch"


def test_recovery_failure_error_not_made_good(bench):
    calls = ["cd(folder='documents')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == "recovery_failure"
    assert at(bench, "multi_turn_base_100", 0, ["get_stock_info(symbol='XXXX')"])[0] == "recovery_failure"


def test_a_recovered_error_is_not_a_recovery_failure(bench):
    calls = ["get_stock_info(symbol='XXXX')", "get_stock_info(symbol='NVDA')"]
    assert at(bench, "multi_turn_base_100", 0, calls)[0] == "pass"


def test_empty_turn_and_missing_tool_call(bench):
    assert at(bench, BASE0, 1, [])[0] == "empty_turn_model_response"
    assert at(bench, BASE0, 1, ["cd(folder='temp')"])[0] == "missing_tool_call"


def test_response_mismatch_right_calls_wrong_order(bench):
    calls = ["get_watchlist()", "add_to_watchlist(stock='AAPL')"]
    assert at(bench, "multi_turn_base_133", 0, calls)[0] == "response_mismatch"


def test_step_limit_and_not_played(bench):
    steps = [Step([parse_call("pwd()")]) for _ in range(4)]
    label, labels = at(bench, BASE0, 1, steps=steps, max_steps=3)
    assert labels == ["pass", "step_limit", "not_played", "not_played"]


def test_context_overflow(bench):
    _, labels = at(bench, BASE0, 1, bench[BASE0].gold[1], abort_after=1)
    assert labels == ["pass", "context_overflow", "not_played", "not_played"]
    # overflow before any turn was played
    entry = bench[BASE0]
    episode = Episode(entry)
    episode.abort()
    assert diagnose(entry, episode.verdict(), episode.steps) == ["context_overflow"] + ["not_played"] * 3


def test_checker_error_for_an_unreadable_trajectory(bench):
    entry = bench[BASE0]
    assert diagnose(entry, verify(entry, "garbage"), []) == ["checker_error"] * 4
    assert not {"checker_error", "not_played", "unlabelled"} & set(WEIGHTED_LABELS)


# ------------------------------------------------------------------ priority when several rules fire


def test_priority_invalid_beats_argument_mismatch(bench):
    calls = ["cd(folder='document')", "mkdir(name='temp')", "move(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == "invalid_tool_call"


def test_priority_argument_beats_state_and_recovery(bench):
    # the typo'd mkdir both fails to bind and leaves the state wrong; mv then errors
    calls = ["cd(folder='document')", "mkdir(name='temp')", "mv(source='final_report.pdf', destination='temp/x')"]
    assert at(bench, BASE0, 0, calls)[0] == "argument_mismatch"


def test_priority_unrecovered_error_beats_the_state_it_leaves_wrong(bench):
    # the cd error leaves the state wrong: the call did not execute, so recovery_failure is reported
    calls = ["cd(folder='documents')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == "recovery_failure"


def test_priority_recovery_beats_missing_call(bench):
    # grep before cd fails (file not here) and is never retried; the turn also lacks a grep result
    calls = ["grep(file_name='final_report.pdf',pattern='budget analysis')", "cd(folder='temp')"]
    assert at(bench, BASE0, 1, calls)[0] == "recovery_failure"


def test_priority_state_beats_missing_call(bench):
    # dropping mkdir is both a skipped needed call and a state mismatch: state_mismatch ranks higher
    assert at(bench, BASE0, 0, ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"])[0] == "state_mismatch"


def test_a_passing_turn_is_pass_whatever_happened_on_the_way(bench):
    steps = [Step([], [UNDECODABLE], keep_turn=True), Step([parse_call(c) for c in bench[BASE0].gold[0]])]
    assert at(bench, BASE0, 0, steps=steps)[0] == "pass"


def test_terminal_label_beats_the_turn_evidence(bench):
    # the step limit hit in a no-call turn with calls: step_limit, not spurious_tool_call
    steps = [Step([parse_call("ls()")]) for _ in range(3)]
    _, labels = at(bench, "multi_turn_miss_param_3", 1, steps=steps, max_steps=2)
    assert labels == ["pass", "step_limit", "not_played"]


def test_diagnose_is_deterministic(bench):
    calls = ["cd(folder='documents')", "mkdir(dir_name='temp')"]
    assert at(bench, BASE0, 0, calls)[1] == at(bench, BASE0, 0, calls)[1]
