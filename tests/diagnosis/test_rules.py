"""diagnose(): both labels of each turn on hand-built trajectories of real entries, played through
Episode + verify. Every expected pair is worked out by hand from the entry's gold answer and the
backend's code (comments say how); none is copied from the diagnoser's output."""

import dataclasses

import pytest

from seal.diagnosis import CAUSES, OUTCOMES, TurnLabel, diagnose, diagnose_result
from seal.diagnosis.injections import Step, gold_script, play
from seal.env import Episode, parse_call, verify
from seal.env.executor import CallRecord
from seal.env.verifier import EMPTY_TURN

UNDECODABLE = ("<tool_call>{'name': ", "not valid JSON")
PASS = ("pass", None)
ABSTAIN = ("correct_abstention", None)
# turns after an early end: the release's tags, no cause of their own
LOST = ("empty_turn_model_response", "not_played")
LOST_ABSTAIN = ("correct_abstention", "not_played")


def _parses(text):
    try:
        parse_call(text)
    except Exception:
        return False
    return True


def at(bench, entry_id, turn, calls=None, steps=None, **kw):
    """Gold everywhere except `turn`; returns (that turn's pair, every turn's pair)."""
    script_calls = None if calls is None else [parse_call(c) if _parses(c) else c for c in calls]
    entry = bench[entry_id]
    script = gold_script(entry)
    if steps is not None:
        script[turn] = steps
    else:
        script[turn] = [Step(script_calls)] if script_calls else []
    verdict, played = play(entry, script, **kw)
    labels = diagnose(entry, verdict, played)
    assert len(labels) == entry.num_turns
    assert all(x.outcome in OUTCOMES and (x.cause is None or x.cause in CAUSES) for x in labels)
    pairs = [(x.outcome, x.cause) for x in labels]
    return pairs[turn], pairs


# turn 0: cd(document), mkdir(temp), mv(final_report.pdf -> temp); turn 1: cd(temp), grep(...);
# turn 2: sort(final_report.pdf); turn 3: cd(..), mv(previous_report.pdf -> temp), cd(temp), diff(...)
BASE0 = "multi_turn_base_0"
# turn 0: find(...); turn 1: gold is "no call"; turn 2: cd, cd, cp, cp
PARAM3 = "multi_turn_miss_param_3"


# ------------------------------------------------------------------ outcome rules


def test_gold_trajectories_pass_and_abstain(bench):
    assert at(bench, BASE0, 0, bench[BASE0].gold[0])[1] == [PASS] * 4
    assert at(bench, PARAM3, 0, bench[PARAM3].gold[0])[1] == [PASS, ABSTAIN, PASS]


def test_spurious_tool_call_in_a_no_call_turn(bench):
    # ls() changes nothing, so turn 2 still passes
    assert at(bench, PARAM3, 1, ["ls()"])[1] == [PASS, ("spurious_tool_call", "spurious_tool_call"), PASS]
    # a miss_func turn whose tool is not there yet: calling the held-out tool is spurious too
    assert at(bench, "multi_turn_miss_func_0", 2, ["sort('final_report.pdf')"])[0] == (
        "spurious_tool_call", "spurious_tool_call")


def test_undecodable_text_where_no_call_is_due_is_an_abstention(bench):
    # BFCL decodes nothing from it, so the model made no call: the release tags correct_abstention
    assert at(bench, PARAM3, 1, steps=[Step([], [UNDECODABLE])])[0] == ABSTAIN


def test_empty_turn(bench):
    assert at(bench, BASE0, 1, [])[0] == ("empty_turn_model_response", "empty_turn_model_response")


def test_state_mismatch_outcome(bench):
    # without mkdir, mv renames final_report.pdf to a file called temp: the file system differs
    assert at(bench, BASE0, 0, ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"])[0] == (
        "state_mismatch", "state_mismatch")
    extra = list(bench[BASE0].gold[0]) + ["mkdir(dir_name='extra')"]
    assert at(bench, BASE0, 0, extra)[0] == ("state_mismatch", "state_mismatch")


def test_response_mismatch_outcome(bench):
    # the same two calls in the other order: same final state, but get_watchlist ran before the add
    calls = ["get_watchlist()", "add_to_watchlist(stock='AAPL')"]
    assert at(bench, "multi_turn_base_133", 0, calls)[0] == ("response_mismatch", "response_mismatch")


def test_instance_mismatch_only_when_the_backend_classes_differ(bench):
    entry = bench[BASE0]
    verdict, steps = play(entry, gold_script(entry))
    # both sides always build every involved class, so it never fires on a real trajectory
    assert all(t.model_classes == t.gold_classes == {"TwitterAPI", "GorillaFileSystem"} for t in verdict.turns)
    # the release's check: the sets of instantiated classes differ (here TwitterAPI is missing)
    turns = list(verdict.turns)
    turns[1] = dataclasses.replace(turns[1], model_classes=frozenset({"GorillaFileSystem"}))
    labels = diagnose(entry, dataclasses.replace(verdict, turns=turns), steps)
    assert [x.outcome for x in labels] == ["pass", "instance_mismatch", "pass", "pass"]


def test_checker_error_for_an_unreadable_trajectory(bench):
    entry = bench[BASE0]
    assert diagnose(entry, verify(entry, "garbage"), []) == [TurnLabel("checker_error", "checker_error")] * 4


def test_checker_error_for_a_played_turn_the_verifier_did_not_check(bench):
    entry = bench[BASE0]
    verdict, steps = play(entry, gold_script(entry))
    turns = list(verdict.turns)
    turns[2] = dataclasses.replace(turns[2], status="not_played")
    labels = diagnose(entry, dataclasses.replace(verdict, turns=turns), steps)
    assert labels[2] == TurnLabel("checker_error", "checker_error") and labels[3] == TurnLabel("pass", None)


def test_gt_error_for_a_broken_gold_call(bench):
    # the gold's mkdir renamed to a function no backend has: the gold side cannot run turn 0
    entry = bench[BASE0]
    gold = [list(t) for t in entry.gold]
    gold[0][1] = "make_dir(dir_name='temp')"
    broken = dataclasses.replace(entry, id="broken_gold_base_0", gold=gold)
    result = [[list(t)] for t in entry.gold]
    labels = diagnose_result(broken, result, verify(broken, result))
    assert labels[0] == TurnLabel("gt_error", "gt_error")


def test_diagnosis_leaves_the_official_verdict_as_it_was(bench):
    entry = bench[BASE0]
    script = gold_script(entry)
    script[1] = []
    verdict, steps = play(entry, script)
    before = (verdict.summary(), verdict.failed_turn, [t.status for t in verdict.turns])
    diagnose(entry, verdict, steps)
    # the working directory is private (not compared): turn 2's sort runs in the wrong folder and
    # fails, leaving the tree as gold's; turn 3's mv then finds nothing to move and the trees differ
    assert before == (
        {"id": BASE0, "valid": False, "error_type": "multi_turn:empty_turn_model_response"}, 1,
        ["pass", "multi_turn:empty_turn_model_response", "multi_turn:execution_response_mismatch",
         "multi_turn:instance_state_mismatch"],
    )
    assert (verdict.summary(), verdict.failed_turn, [t.status for t in verdict.turns]) == before


# ------------------------------------------------------------------ early ends


def test_step_limit_and_the_turns_after_it(bench):
    # turn 1 makes only pwd() calls until the limit: the tree is gold's (the working directory is
    # private state, not compared), grep's result is missing
    steps = [Step([parse_call("pwd()")]) for _ in range(4)]
    _, pairs = at(bench, BASE0, 1, steps=steps, max_steps=3)
    assert pairs == [PASS, ("response_mismatch", "step_limit"), LOST, LOST]


def test_turns_after_an_early_end_abstain_where_gold_is_no_call(bench):
    # find then reads until the limit: nothing changes and find's result is there, so turn 0 passes
    steps = [Step([parse_call(bench[PARAM3].gold[0][0])])] + [Step([parse_call("ls()")]) for _ in range(3)]
    _, pairs = at(bench, PARAM3, 0, steps=steps, max_steps=2)
    assert pairs == [("pass", "step_limit"), LOST_ABSTAIN, LOST]


def test_context_overflow(bench):
    _, pairs = at(bench, BASE0, 1, bench[BASE0].gold[1], abort_after=1)
    assert pairs == [PASS, ("pass", "context_overflow"), LOST, LOST]
    # overflow before any turn was played
    entry = bench[BASE0]
    episode = Episode(entry)
    episode.abort()
    assert diagnose(entry, episode.verdict(), episode.steps) == [
        TurnLabel("empty_turn_model_response", "context_overflow")] + [TurnLabel(*LOST)] * 3


def test_overflow_as_a_turn_opens(bench):
    # the context is full once turn 1's message is in: the model never answers turn 1
    verdict, steps = play(bench[PARAM3], gold_script(bench[PARAM3]), abort_before=1)
    pairs = [(x.outcome, x.cause) for x in diagnose(bench[PARAM3], verdict, steps)]
    assert pairs == [PASS, ("correct_abstention", "context_overflow"), LOST]


def test_terminal_cause_beats_the_turn_evidence(bench):
    # the step limit hit in a no-call turn with calls: the outcome stays spurious, the cause is the limit
    steps = [Step([parse_call("ls()")]) for _ in range(3)]
    _, pairs = at(bench, PARAM3, 1, steps=steps, max_steps=2)
    assert pairs == [PASS, ("spurious_tool_call", "step_limit"), LOST]


# ------------------------------------------------------------------ causes


@pytest.mark.parametrize("calls", [
    ["cd(folder='document')", "make_dir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"],
    ["cd(folder='document')", "__import__('os').mkdir('temp')", "mv(source='final_report.pdf', destination='temp')"],
])
def test_invalid_tool_call_unknown_or_unsafe(bench, calls):
    # no temp directory gets made, so mv renames the file: the state differs
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "invalid_tool_call")


def test_invalid_tool_call_undecodable_output(bench):
    # cd ran, then the turn ended on undecodable text: the state differs (no temp, file not moved)
    steps = [Step([parse_call("cd(folder='document')")]), Step([], [UNDECODABLE])]
    assert at(bench, BASE0, 0, steps=steps)[0] == ("state_mismatch", "invalid_tool_call")


def test_invalid_tool_call_tool_not_yet_shown(bench):
    # miss_func_0 delivers `sort` at turn 3; using it at turn 1 (and skipping grep) is invalid. sort
    # reads only, so the state matches; grep's result is missing
    calls = ["cd(folder='temp')", "sort('final_report.pdf')"]
    assert at(bench, "multi_turn_miss_func_0", 1, calls)[0] == ("response_mismatch", "invalid_tool_call")


@pytest.mark.parametrize("call", ["fund_account(amount='2203.4')", "fund_account(amt=2203.4)", "fund_account()"])
def test_argument_mismatch_type_name_missing(bench, call):
    # each call fails (a str compared with 0, or no binding): the balance stays where gold raises it
    assert at(bench, "multi_turn_base_100", 1, [call])[0] == ("state_mismatch", "argument_mismatch")


def test_argument_mismatch_value_outside_allowed_values(bench):
    # 'trunk' is no door: lockDoors raises half way, rear_right stays locked
    calls = ["lockDoors(unlock=True, door=['driver', 'passenger', 'rear_left', 'trunk'])", "setHeadlights(mode='on')"]
    assert at(bench, "multi_turn_base_50", 0, calls)[0] == ("state_mismatch", "argument_mismatch")


def test_value_mismatch_right_tools_other_values(bench):
    calls = ["cd(folder='document')", "mkdir(dir_name='tmp')", "mv(source='final_report.pdf', destination='tmp')"]
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "value_mismatch")
    calls = ["lockDoors(unlock=True, door=['driver', 'passenger', 'rear_left', 'rear_right'])", "setHeadlights(mode='auto')"]
    assert at(bench, "multi_turn_base_50", 0, calls)[0] == ("state_mismatch", "value_mismatch")
    # a read of another stock: the state is untouched, NVDA's info is missing from the results
    assert at(bench, "multi_turn_base_100", 0, ["get_stock_info(symbol='AAPL')"])[0] == (
        "response_mismatch", "value_mismatch")


def test_recovery_failure_error_not_made_good(bench):
    # cd to a folder that does not exist fails; mkdir then lands in the root and mv finds no file
    calls = ["cd(folder='documents')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "recovery_failure")
    assert at(bench, "multi_turn_base_100", 0, ["get_stock_info(symbol='XXXX')"])[0] == (
        "response_mismatch", "recovery_failure")


def test_a_recovered_error_fails_the_turn_only_when_something_else_is_wrong(bench):
    # XXXX errors, NVDA is retried: the turn passes
    calls = ["get_stock_info(symbol='XXXX')", "get_stock_info(symbol='NVDA')"]
    assert at(bench, "multi_turn_base_100", 0, calls)[0] == PASS
    # the cd error is made good by the right cd; the turn fails only because mkdir is missing
    calls = ["cd(folder='documents')", "cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "state_mismatch")


def test_an_error_the_gold_calls_also_get_is_not_the_models_to_recover():
    from seal.diagnosis.rules import _unrecovered_error

    # no gold call of the 800 entries errors, so the case is built by hand: the model's cd fails exactly
    # as the gold cd does (same backend answer) and is never retried
    text = "cd(folder='reports')"
    answer = '{"error": "cd: reports: No such file or directory"}'
    model = [CallRecord(text, answer, parse_call(text), "backend_error")]
    gold = [parse_call(text)]
    assert not _unrecovered_error(model, [CallRecord(text, answer, gold[0], "backend_error")], gold)
    # the gold cd succeeds: the same model error is one the model had to make good
    assert _unrecovered_error(model, [CallRecord(text, '{"current_working_directory": "reports"}', gold[0])], gold)


def test_a_call_identical_to_a_gold_call_is_no_argument_mismatch(bench, monkeypatch):
    from seal.diagnosis import rules

    monkeypatch.setattr(rules, "_ALL_GOLD", {})  # the gold set is built here, not taken from a cache
    # base_173's turn-3 gold, close_ticket(ticket_id='ticket_001'), passes a string where the schema says
    # integer. Called as gold calls it, plus a budget change nobody asked for: the state is wrong because
    # of the extra call (all gold calls made with gold values), not because of the gold-identical call
    gold = "close_ticket(ticket_id='ticket_001')"
    extra = "set_budget_limit(access_token='abc123xyz', budget_limit=5.0)"
    assert bench["multi_turn_base_173"].gold[3] == [gold]
    assert at(bench, "multi_turn_base_173", 3, [gold, extra])[0] == ("state_mismatch", "state_mismatch")
    # the same schema problem in a call that is not gold's is an argument mismatch
    other = "close_ticket(ticket_id='ticket_002')"
    assert at(bench, "multi_turn_base_173", 3, [other, extra])[0] == ("state_mismatch", "argument_mismatch")


def test_missing_tool_call(bench):
    # cd(temp) alone: the state matches, grep's result is missing
    assert at(bench, BASE0, 1, ["cd(folder='temp')"])[0] == ("response_mismatch", "missing_tool_call")


# ------------------------------------------------------------------ inherited failures


def test_inherited_failure_base_98(bench):
    # turn 0 drops lockDoors' `unlock`: the call does not bind, the doors stay unlocked. Turn 1 makes
    # exactly the gold calls; startEngine refuses (doors unlocked) and the engine stays off. Turn 2's
    # gold calls read travel data, but the vehicle's state still differs. Turns 1 and 2 did the right
    # thing: from the gold state their calls pass.
    calls = ["displayCarStatus(option='doors')", "lockDoors(door=['driver', 'passenger', 'rear_left', 'rear_right'])"]
    _, pairs = at(bench, "multi_turn_base_98", 0, calls)
    assert pairs == [("state_mismatch", "argument_mismatch"), ("state_mismatch", "inherited_state"),
                     ("state_mismatch", "inherited_state")]


def test_inherited_failure_after_a_dropped_state_change(bench):
    # without mkdir, final_report.pdf becomes a file named temp; every later gold call then fails
    # (cd into a file, grep/sort/mv/diff on files that are not there) and the trees never match again
    calls = ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"]
    _, pairs = at(bench, BASE0, 0, calls)
    assert pairs == [("state_mismatch", "state_mismatch")] + [("state_mismatch", "inherited_state")] * 3


def test_results_of_earlier_turns_count_for_the_inherited_check(bench):
    # base_98 again, but the model looks both zip codes up in turn 1 already and makes only the
    # distance call in turn 2. The official response check accepts results of earlier turns, and so
    # does the replay from the gold state: turn 2 did the right thing (the zip lookups read travel
    # data the broken doors do not touch)
    entry = bench["multi_turn_base_98"]
    script = gold_script(entry)
    script[0] = [Step([parse_call("displayCarStatus(option='doors')"),
                       parse_call("lockDoors(door=['driver', 'passenger', 'rear_left', 'rear_right'])")])]
    script[1] = [Step([parse_call(c) for c in entry.gold[1] + entry.gold[2][:2]])]
    script[2] = [Step([parse_call(entry.gold[2][2])])]
    verdict, steps = play(entry, script)
    assert diagnose(entry, verdict, steps)[2] == TurnLabel("state_mismatch", "inherited_state")


def test_results_of_every_earlier_turn_count_not_only_the_last(bench):
    # as above, but the zip codes are looked up in turn 0 (next to the broken lockDoors) and turn 1 makes
    # only its gold calls: turn 2's distance call needs results two turns back, which the official
    # response check accepts (it reads all the model's results so far)
    entry = bench["multi_turn_base_98"]
    script = gold_script(entry)
    script[0] = [Step([parse_call("displayCarStatus(option='doors')"),
                       parse_call("lockDoors(door=['driver', 'passenger', 'rear_left', 'rear_right'])"),
                       *[parse_call(c) for c in entry.gold[2][:2]]])]
    script[2] = [Step([parse_call(entry.gold[2][2])])]
    verdict, steps = play(entry, script)
    assert diagnose(entry, verdict, steps)[2] == TurnLabel("state_mismatch", "inherited_state")


def test_a_turns_own_results_are_not_earlier_results_for_the_inherited_check(bench):
    # miss_param_133: turn 0's gold is no call (it lacks the stock); turn 1's is add_to_watchlist(AAPL) and
    # get_watchlist(), both answering {"watchlist": ["NVDA", "AAPL"]} (the watch list starts as [NVDA]). The
    # model leaves out the read-only get_watchlist: the state matches, the response check finds that result
    # once where gold has it twice (response_mismatch). Replayed from the gold state (the same: turn 0 made
    # no call) with no earlier results, it still lacks one copy, so nothing is inherited: get_watchlist is
    # missing. Were the turn's own result also counted as an earlier turn's, two copies would pass the
    # replay and the cause would read inherited_state
    entry = bench["multi_turn_miss_param_133"]
    assert entry.gold[0] == [] and entry.gold[1] == ["add_to_watchlist(stock='AAPL')", "get_watchlist()"]
    pair, pairs = at(bench, entry.id, 1, ["add_to_watchlist(stock='AAPL')"])
    assert pair == ("response_mismatch", "missing_tool_call") and pairs[0] == ABSTAIN


def test_a_played_episode_is_diagnosed_from_its_own_entry_verdict_and_steps(bench):
    from seal.diagnosis.rules import diagnose_episode

    # the trajectory of test_inherited_failure_after_a_dropped_state_change, played turn by turn
    entry = bench[BASE0]
    episode = Episode(entry)
    while (turn := episode.next_turn()) is not None:
        wrong = ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"]
        calls = wrong if turn.index == 0 else entry.gold[turn.index]
        episode.step([parse_call(c) for c in calls], raw="scripted")
        episode.step([], raw="Done.")
    labels = diagnose_episode(episode)
    assert [(x.outcome, x.cause) for x in labels] == [("state_mismatch", "state_mismatch")] + [
        ("state_mismatch", "inherited_state")] * 3


def test_a_call_is_judged_as_the_model_wrote_it_not_as_the_backend_left_it():
    from seal.diagnosis.rules import snapshot

    text = "post_tweet(content='hi', mentions=['@a'])"
    record = CallRecord(text, "{}", parse_call(text))
    record.call.kwargs["mentions"].append("@b")  # the backend kept the list; a later call changed it
    assert snapshot(record).kwargs == {"content": "hi", "mentions": ["@a"]}
    assert snapshot(CallRecord("cd(", "error", None, "unsafe")) is None
    # text the parser refuses but a call was recorded for: that call
    kept = parse_call("ls()")
    assert snapshot(CallRecord("__import__('os')", "error", kept)) is kept


def test_a_wrong_turn_after_a_wrong_state_keeps_its_own_cause(bench):
    entry = bench[BASE0]
    script = gold_script(entry)
    script[0] = [Step([parse_call("cd(folder='document')"), parse_call("mv(source='final_report.pdf', destination='temp')")])]
    # turn 1's own cd goes to a folder that exists nowhere: from the gold state it fails too
    script[1] = [Step([parse_call("cd(folder='tmp')")])]
    verdict, steps = play(entry, script)
    assert diagnose(entry, verdict, steps)[1] == TurnLabel("state_mismatch", "recovery_failure")


# ------------------------------------------------------------------ cause priority when several rules fire


def test_priority_invalid_beats_argument_mismatch(bench):
    calls = ["cd(folder='document')", "mkdir(name='temp')", "move(source='final_report.pdf', destination='temp')"]
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "invalid_tool_call")


def test_priority_argument_beats_state_and_recovery(bench):
    # the typo'd mkdir both fails to bind and leaves the state wrong; mv then errors (a path)
    calls = ["cd(folder='document')", "mkdir(name='temp')", "mv(source='final_report.pdf', destination='temp/x')"]
    assert at(bench, BASE0, 0, calls)[0] == ("state_mismatch", "argument_mismatch")


def test_priority_recovery_beats_missing_call(bench):
    # grep before cd fails (file not here) and is never retried; the turn also lacks a grep result
    calls = ["grep(file_name='final_report.pdf',pattern='budget analysis')", "cd(folder='temp')"]
    assert at(bench, BASE0, 1, calls)[0] == ("response_mismatch", "recovery_failure")


def test_a_passing_turn_is_pass_whatever_happened_on_the_way(bench):
    steps = [Step([], [UNDECODABLE], keep_turn=True), Step([parse_call(c) for c in bench[BASE0].gold[0]])]
    assert at(bench, BASE0, 0, steps=steps)[0] == PASS


def test_score_input_gets_the_same_labels_as_the_played_episode(bench):
    # task=score sees only call strings; for decodable calls the labels match the played episode's
    entry = bench[BASE0]
    calls = ["cd(folder='document')", "mv(source='final_report.pdf', destination='temp')"]
    script = gold_script(entry)
    script[0] = [Step([parse_call(c) for c in calls])]
    verdict, steps = play(entry, script)
    result = [[calls]] + [[list(t)] for t in entry.gold[1:]]
    assert diagnose_result(entry, result, verify(entry, result)) == diagnose(entry, verdict, steps)


# ------------------------------------------------------------------ the rules' building blocks, by hand


def _record(text, observation, error=None):
    return CallRecord(text, observation, parse_call(text), error)


def test_canonical_binds_positional_arguments_and_orders_keywords():
    from seal.diagnosis.rules import canonical
    from seal.env.calls import ToolCall

    # cd's one parameter is `folder`: positional and keyword spellings are the same call
    assert canonical(ToolCall("cd", ("docs",), {})) == canonical(ToolCall("cd", (), {"folder": "docs"})) == (
        "cd", repr([("folder", "docs")]))
    # a tool outside the registry keeps its positional arguments and sorts its keywords by name
    assert canonical(ToolCall("nope", (1,), {"b": 2, "a": "x"})) == ("nope", repr(((1,), [("a", "x"), ("b", 2)])))


def test_unrecovered_error_cases_by_hand():
    from seal.diagnosis.rules import _unrecovered_error

    err = _record("cd(folder='nope')", '{"error": "cd: nope: No such file or directory"}', "backend_error")
    ok_cd = _record("cd(folder='docs')", '{"current_working_directory": "docs"}')
    ok_ls = _record("ls()", '{"current_directory_content": []}')
    cd, ls = parse_call("cd(folder='docs')"), parse_call("ls()")
    # retried once, but gold changes directory twice and the model succeeded once: not made good
    assert _unrecovered_error([err, ok_cd], [], [cd, cd])
    # retried, and as many successful cds as gold has: made good
    assert not _unrecovered_error([err, ok_cd], [], [cd])
    # an error after a successful call is still found
    assert _unrecovered_error([ok_ls, err], [], [ls, cd])
    # a later success of another tool is no retry of cd
    assert _unrecovered_error([err, ok_ls], [], [ls])


def test_outcome_of_an_unplayed_or_unknown_status_is_a_checker_error(bench):
    from seal.diagnosis.rules import turn_outcome

    entry = bench[BASE0]
    check = verify(entry, [[list(t)] if t else [] for t in entry.gold]).turns[0]
    assert turn_outcome(check) == "pass"
    assert turn_outcome(dataclasses.replace(check, status="not_played")) == "checker_error"
    assert turn_outcome(dataclasses.replace(check, status="some_new_error")) == "checker_error"


def test_a_verdict_with_the_wrong_number_of_turns_is_a_checker_error(bench):
    from seal.diagnosis.rules import steps_from_verdict

    entry = bench[BASE0]
    verdict = verify(entry, [[list(t)] if t else [] for t in entry.gold])
    short = dataclasses.replace(verdict, turns=verdict.turns[:-1])
    assert diagnose(entry, short, steps_from_verdict(verdict, entry.num_turns)) == [
        TurnLabel("checker_error", "checker_error")] * entry.num_turns
    # steps rebuilt from a verdict carry the executed calls and no raw text
    steps = steps_from_verdict(verdict, 2)
    assert len(steps) == 2 and [s[0].raw for s in steps] == ["", ""]
    assert [r.text for r in steps[0][0].calls] == entry.gold[0]


# ------------------------------------------------------------------ where the order of the checks matters
# Each case below gives a different label if two neighbouring checks were swapped (named in the comment).


def test_a_broken_gold_call_in_a_turn_where_the_model_made_no_call_is_gt_error(bench):
    # base_0 with turn 0's gold mkdir renamed to a function no backend has. The model answers turn 0
    # with no call at all: the official status is empty_turn, but the gold side could not run the turn
    # whatever the model did, so gt_error comes first (outcome: the broken-gold check precedes the
    # empty-turn check; cause: gt_error precedes every failure rule)
    entry = bench[BASE0]
    gold = [list(t) for t in entry.gold]
    gold[0][1] = "make_dir(dir_name='temp')"
    broken = dataclasses.replace(entry, id="broken_gold_base_0_no_call", gold=gold)
    script = gold_script(broken)
    script[0] = []
    verdict, steps = play(broken, script)
    assert verdict.turns[0].status == EMPTY_TURN  # what the order is tested against
    assert diagnose(broken, verdict, steps)[0] == TurnLabel("gt_error", "gt_error")


def test_a_turn_that_fails_only_through_an_earlier_extra_call_on_the_same_file_is_inherited(bench):
    # base_0: turn 0 makes its gold calls plus one extra echo that overwrites final_report.pdf before it is
    # moved into temp. Turn 0: every gold call made with the gold values, the file's content differs
    # -> (state_mismatch, state_mismatch). Turn 1 makes exactly the gold calls (cd temp, grep the file):
    # the file system still differs (the content) -> outcome state_mismatch, and from the gold state
    # its calls pass -> inherited_state, which precedes the state_mismatch rule. Turns 2 and 3 read the
    # same file (sort, diff) and are inherited the same way.
    entry = bench[BASE0]
    script = gold_script(entry)
    script[0] = [Step([parse_call("cd(folder='document')"),
                       parse_call("echo(content='nothing about budgets', file_name='final_report.pdf')"),
                       parse_call("mkdir(dir_name='temp')"),
                       parse_call("mv(source='final_report.pdf', destination='temp')")])]
    verdict, steps = play(entry, script)
    assert steps[0][0].calls[1].ok  # the echo ran (the file exists in document/ before the mv)
    pairs = [(x.outcome, x.cause) for x in diagnose(entry, verdict, steps)]
    assert pairs == [("state_mismatch", "state_mismatch")] + [("state_mismatch", "inherited_state")] * 3


def test_release_refusal_of_a_malformed_block_is_an_invalid_tool_call(bench):
    from seal.env.protocol import RELEASE

    # base_0 turn 1: one output with a good cd(temp) and a malformed block. The release runs none of it
    # and answers "[ERROR] Invalid tool call format: ..." (bfcl_env.py:1136-1180); the model then stops.
    # Turn 1's result is empty -> outcome empty_turn_model_response; the cause is the refused output:
    # invalid_tool_call, which precedes the empty-turn rule. Under BFCL's harness cd runs and grep is
    # missing -> response_mismatch, with the same cause.
    steps = [Step([parse_call("cd(folder='temp')")], [UNDECODABLE])]
    played, _ = at(bench, BASE0, 1, steps=steps, protocol=RELEASE)
    assert played == ("empty_turn_model_response", "invalid_tool_call")
    assert at(bench, BASE0, 1, steps=steps)[0] == ("response_mismatch", "invalid_tool_call")


def test_release_refusal_of_a_tool_not_yet_delivered_is_an_invalid_tool_call(bench):
    from seal.env.protocol import RELEASE

    # miss_func_0 delivers sort at turn 3. At turn 1 the model calls cd(temp) and sort in one output:
    # the release refuses the output unexecuted ("Tool 'sort' is not available in the current tool
    # list.", env_handler.py:339-362) and the model stops. Nothing ran, nothing was recorded, nothing
    # failed to parse: only the refusal shows the cause -> (empty_turn_model_response, invalid_tool_call)
    calls = ["cd(folder='temp')", "sort('final_report.pdf')"]
    played, _ = at(bench, "multi_turn_miss_func_0", 1, calls, protocol=RELEASE)
    assert played == ("empty_turn_model_response", "invalid_tool_call")


def test_a_refused_output_followed_by_the_right_calls_passes(bench):
    from seal.env.protocol import RELEASE

    # the refusal keeps the turn open; the model's next output makes the gold calls: the turn passes and
    # has no cause (the pass rule precedes the refusal evidence)
    steps = [Step([parse_call("cd(folder='temp')"), parse_call("sort('final_report.pdf')")]),
             Step([parse_call(c) for c in bench["multi_turn_miss_func_0"].gold[1]])]
    played, pairs = at(bench, "multi_turn_miss_func_0", 1, steps=steps, protocol=RELEASE)
    assert played == PASS and pairs[0] == PASS
