"""The episode protocol (BFCL's multi-turn inference loop) and isolation between episodes."""

import copy
import json
import random

import pytest

from seal.env import Episode, parse_call
from seal.env.executor import Backends
from tests.env.official_oracle import official_verdicts


def play_gold(episode, stop_after=None):
    while (turn := episode.next_turn()) is not None:
        calls = [parse_call(c) for c in episode.entry.gold[turn.index]]
        if calls:
            episode.step(calls)
        episode.step([])
        if stop_after is not None and turn.index == stop_after:
            break


def test_turns_are_delivered_in_order_with_holdout_functions(bench):
    entry = bench["multi_turn_miss_func_0"]
    (holdout_turn, docs), = entry.holdout.items()
    episode = Episode(entry)
    seen = []
    while (turn := episode.next_turn()) is not None:
        seen.append(turn.index)
        if turn.index == holdout_turn:
            assert turn.messages == [] and [d["name"] for d in turn.new_functions] == [d["name"] for d in docs]
            assert docs[0]["name"] not in {d["name"] for d in entry.functions}
        else:
            assert turn.messages and turn.messages[0]["role"] == "user" and not turn.new_functions
        episode.step([])
    assert seen == list(range(entry.num_turns)) and episode.ended == "completed"
    assert entry.visible_function_names(holdout_turn) - entry.visible_function_names(holdout_turn - 1) == {
        d["name"] for d in docs
    }


def test_a_step_without_calls_ends_the_turn(bench):
    episode = Episode(bench["multi_turn_base_0"])
    episode.next_turn()
    outcome = episode.step([parse_call("pwd()")])
    assert not outcome.turn_over and outcome.observations == ['{"current_working_directory": "/workspace"}']
    outcome = episode.step([], raw="I am done.", parse_failures=[("<tool_call>{oops", "bad json")])
    assert outcome.turn_over and episode.steps[0][-1].parse_failures == [("<tool_call>{oops", "bad json")]
    assert (outcome.observations, outcome.records, outcome.ended) == ([], [], None)  # nothing ran
    assert episode.result == [[["pwd()"]]]
    with pytest.raises(RuntimeError):
        episode.step([parse_call("pwd()")])


def test_step_limit_force_terminates(bench):
    entry = bench["multi_turn_base_0"]
    episode = Episode(entry, max_steps=3)
    episode.next_turn()
    outcomes = [episode.step([parse_call("pwd()")]) for _ in range(4)]
    assert [o.turn_over for o in outcomes] == [False, False, False, True]
    assert outcomes[-1].ended == "force_terminated" and episode.next_turn() is None
    verdict = episode.verdict()
    assert not verdict.valid and verdict.error_type == "multi_turn:force_terminated"


def test_step_limit_on_the_last_turn_is_scored_normally_as_bfcl_does(bench):
    entry = bench["multi_turn_base_0"]
    episode = Episode(entry, max_steps=1)
    last = entry.num_turns - 1
    while (turn := episode.next_turn()) is not None:
        calls = [parse_call(c) for c in entry.gold[turn.index]]
        if calls:
            episode.step(calls)
        if turn.index < last:
            episode.step([])
        else:
            outcome = episode.step([parse_call("pwd()")])
            assert outcome.ended == "force_terminated"
    verdict = episode.verdict()
    # all turns are present, so the official runner checks them instead of force-terminating; the
    # gold calls ran and the extra pwd() changes no state, so bfcl-eval scores the entry a pass
    assert len(episode.result) == entry.num_turns
    official = official_verdicts([{"id": entry.id, "result": episode.result}])
    assert [(o["valid"], o["error_type"]) for o in official] == [(True, None)]
    assert (verdict.valid, verdict.error_type) == (True, None)


def test_interleaved_episodes_of_one_entry_keep_independent_state(bench):
    entry = bench["multi_turn_base_0"]
    a, b = Episode(entry), Episode(entry)
    a.next_turn(), b.next_turn()
    a.step([parse_call("mkdir(dir_name='only_in_a')")])
    b.step([parse_call("ls()")])
    assert "only_in_a" not in b.steps[0][0].calls[0].observation
    a.step([]), b.step([])


def test_many_episodes_side_by_side_all_pass(bench):
    rng = random.Random(0)
    entries = rng.sample(list(bench.values()), 24)
    episodes = [Episode(e) for e in entries]
    pending = {id(ep): ep for ep in episodes}
    # advance a random episode by one whole turn at a time, interleaving all of them
    while pending:
        ep = pending[rng.choice(list(pending))]
        turn = ep.next_turn()
        if turn is None:
            del pending[id(ep)]
            continue
        calls = [parse_call(c) for c in ep.entry.gold[turn.index]]
        if calls:
            ep.step(calls)
        ep.step([])
    assert all(ep.verdict().valid for ep in episodes)


def _mutable_ids(obj, seen=None):
    seen = set() if seen is None else seen
    if isinstance(obj, (dict, list, set)) and id(obj) not in seen:
        seen.add(id(obj))
        items = obj.values() if isinstance(obj, dict) else obj
        for item in items:
            _mutable_ids(item, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and id(obj) not in seen:
        seen.add(id(obj))
        _mutable_ids(vars(obj), seen)
    return seen


def test_long_context_backends_share_no_mutable_data(bench):
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import long_context

    module_data = _mutable_ids({k: v for k, v in vars(long_context).items() if not k.startswith("_")})
    entries = [e for e in bench.values() if e.long_context and "TravelAPI" in e.involved_classes][:2]
    entry = entries[0]
    first = Backends(entry.involved_classes, entry.initial_config, long_context=True)
    second = Backends(entry.involved_classes, entry.initial_config, long_context=True)
    for name in entry.involved_classes:
        ids_first = _mutable_ids(vars(first.instances[name]))
        ids_second = _mutable_ids(vars(second.instances[name]))
        assert not ids_first & ids_second, f"{name}: two episodes share mutable state"
        assert not ids_first & module_data, f"{name}: episode state aliases module-level long-context data"
    # and a mutation in one episode leaves the other and the module untouched
    cards = first.instances["TravelAPI"].credit_card_list
    card_id = next(iter(long_context.CREDIT_CARD_EXTENSION))
    before = copy.deepcopy(long_context.CREDIT_CARD_EXTENSION[card_id])
    cards[card_id]["balance"] = -1
    assert second.instances["TravelAPI"].credit_card_list[card_id] == before
    assert long_context.CREDIT_CARD_EXTENSION[card_id] == before


def test_keep_turn_step_counts_towards_the_limit_and_adds_nothing_to_the_result():
    from seal.env.benchmarks.bfcl_v3 import get_entries

    entry = get_entries(["multi_turn_base_0"])[0]
    episode = Episode(entry, max_steps=2)
    episode.next_turn()
    outcome = episode.step([], raw="<tool_call>{bad", parse_failures=[("{bad", "not JSON")], keep_turn=True)
    assert not outcome.turn_over and episode.in_turn and episode.result == [[]]
    episode.step([], raw="again", keep_turn=True)
    outcome = episode.step([], raw="and again", keep_turn=True)
    assert outcome.turn_over and episode.ended == "force_terminated"
    assert len(episode.steps[0]) == 3 and episode.steps[0][0].parse_failures == [("{bad", "not JSON")]


def test_a_recorded_call_does_not_change_when_the_backend_mutates_its_state():
    from seal.env.benchmarks.bfcl_v3 import load_benchmark
    from seal.env.executor import execute

    entry = next(e for e in load_benchmark().values() if "TwitterAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    account = entry.initial_config["TwitterAPI"]
    login = execute(backends, f"authenticate_twitter(username={account['username']!r}, password={account['password']!r})")
    assert "true" in login.observation
    record = execute(backends, "post_tweet(content='hi', mentions=['@a'])")
    tweet_id = json.loads(record.observation)["id"]
    execute(backends, f"mention(tweet_id={tweet_id}, mentioned_usernames=['@b'])")
    assert backends.instances["TwitterAPI"].tweets[tweet_id]["mentions"] == ["@a", "@b"]
    assert record.call.kwargs["mentions"] == ["@a"]


# ---------------------------------------------------------------------------------------- per-episode limit


def play_script(episode):
    """Each turn: the gold calls in one step (when gold has any), then a text reply; stops when the
    episode ends. Returns the outcomes in order."""
    outcomes = []
    while (turn := episode.next_turn()) is not None:
        calls = [parse_call(c) for c in episode.entry.gold[turn.index]]
        if calls:
            outcomes.append(episode.step(calls))
            if episode.done:
                break
        outcomes.append(episode.step([], raw="Done."))
        if episode.done:
            break
    return outcomes


def test_episode_limit_counts_every_model_output_across_turns(bench):
    # base_0's gold has calls in all 4 turns: 2 outputs per turn, 8 in all. Three outputs are
    # turn 0's calls, turn 0's reply, turn 1's calls: the third one ends the episode in turn 1.
    entry = bench["multi_turn_base_0"]
    episode = Episode(entry, max_steps=3, step_limit="episode")
    outcomes = play_script(episode)
    assert len(outcomes) == 3 and outcomes[-1].turn_over and outcomes[-1].ended == "force_terminated"
    assert episode.model_steps == 3 and episode.ended == "force_terminated" and len(episode.result) == 2
    assert episode.next_turn() is None
    assert episode.verdict().error_type == "multi_turn:force_terminated"
    # BFCL's rule on the same script: no turn has more than 3 steps, the episode passes
    per_turn = Episode(entry, max_steps=3)
    play_script(per_turn)
    assert per_turn.ended == "completed" and per_turn.verdict().valid


def test_a_reply_ending_the_last_turn_on_the_last_step_completes_the_episode(bench):
    entry = bench["multi_turn_miss_param_1"]
    # gold calls in turns 0, 1, 2, 4, none in turn 3: 2 + 2 + 2 + 1 + 2 = 9 outputs
    episode = Episode(entry, max_steps=9, step_limit="episode")
    outcomes = play_script(episode)
    assert len(outcomes) == 9 and outcomes[-1].ended is None and episode.next_turn() is None
    assert episode.ended == "completed" and episode.verdict().valid
    # one output fewer: the limit falls on the last turn's calls; all turns exist, so the official
    # runner scores the entry normally (valid: the calls ran) although the episode was cut
    episode = Episode(entry, max_steps=8, step_limit="episode")
    outcomes = play_script(episode)
    assert len(outcomes) == 8 and episode.ended == "force_terminated"
    assert episode.verdict().valid and episode.verdict().error_type is None
    # the reply closing turn 3 (the 7th output) is not in the last turn: force-quit there
    episode = Episode(entry, max_steps=7, step_limit="episode")
    outcomes = play_script(episode)
    assert len(outcomes) == 7 and outcomes[-1].ended == "force_terminated" and len(episode.result) == 4
    assert episode.verdict().error_type == "multi_turn:force_terminated"


def test_undecodable_outputs_count_towards_the_episode_limit(bench):
    episode = Episode(bench["multi_turn_base_0"], max_steps=2, step_limit="episode")
    episode.next_turn()
    assert not episode.step([], raw="<tool_call>{bad", keep_turn=True).turn_over
    outcome = episode.step([], raw="again", keep_turn=True)
    assert outcome.turn_over and episode.ended == "force_terminated" and episode.result == [[]]


def test_step_limit_mode_is_checked():
    from seal.env.benchmarks.bfcl_v3 import get_entries
    from seal.env.episode import check_step_limit
    from seal.errors import UserError

    with pytest.raises(ValueError, match="step_limit"):
        Episode(get_entries(["multi_turn_base_0"])[0], step_limit="trajectory")
    with pytest.raises(UserError, match="eval.step_limit='trajectory': choose turn"):
        check_step_limit("trajectory", "eval.step_limit")


def test_the_step_rule_in_words_names_the_limit_and_whose_rule_it_is():
    from seal.env.episode import describe_step_limit

    assert describe_step_limit("episode", 30) == "30 model outputs per episode (the release's training rule)"
    assert describe_step_limit("turn", 20) == "more than 20 steps in one turn force-quits (BFCL's rule)"


def test_an_aborted_episode_is_over_mid_turn_and_fails_as_a_context_overflow_by_default(bench):
    from seal.env.verifier import CONTEXT_OVERFLOW

    episode = Episode(bench["multi_turn_base_0"])
    episode.next_turn()
    episode.abort()
    assert episode.ended == "context_overflow" and episode.done and episode.next_turn() is None
    assert episode.verdict().error_type == CONTEXT_OVERFLOW
    other = Episode(bench["multi_turn_base_0"])
    other.next_turn()
    other.abort("force_terminated")
    assert other.ended == "force_terminated"
    with pytest.raises(RuntimeError, match="outside a turn"):
        other.step([])


class _Chat:
    """A scripted benchmark for the episode's own rules: a conversation whose second user message comes
    after the first turn (next_messages), one reply for the entries named in `single`, an output calling
    `done` ending the conversation (tau2's solo stop, told to the session), recording what it is told."""

    def __init__(self, single=()):
        self.single, self.ended, self.executed = set(single), [], []

    def backends(self, entry):
        return {"entry": entry.id}

    def turns(self, entry, backends):
        # the first turn read from the episode's own backends (as a memory entry's system message is)
        return [[{"role": "user", "content": "first" if backends == {"entry": entry.id} else "other backends"}]]

    def single_reply(self, entry):
        return entry.id in self.single

    def next_messages(self, episode):
        return [{"role": "user", "content": "second"}] if len(episode.turns) == 1 else None

    def ends_episode(self, backends, calls):
        if not any(call.name == "done" for call in calls):
            return False
        backends["said"] = "###STOP###"  # as tau2 tells its session the conversation is over
        return True

    def execute(self, backends, call):
        from seal.env.executor import CallRecord

        self.executed.append(call.name)
        return CallRecord(call.to_string(), f"ran {call.name}", call)

    def end(self, entry, backends):
        self.ended.append((entry.id, backends))


@pytest.fixture()
def chat(bench, monkeypatch):
    import seal.env.episode as episode_module

    scripted = _Chat()
    monkeypatch.setattr(episode_module, "benchmark_of", lambda entry: scripted)
    return scripted


def test_a_conversations_next_user_message_opens_the_next_turn_and_its_end_is_told_once(bench, chat):
    entry = bench["multi_turn_base_0"]
    episode = Episode(entry)
    first = episode.next_turn()
    assert (first.index, first.messages) == (0, [{"role": "user", "content": "first"}])
    with pytest.raises(RuntimeError, match="^the current turn has not ended yet$"):
        episode.next_turn()
    outcome = episode.step([parse_call("pwd()")], raw="calling", num_tokens=7)
    assert outcome.observations == ["ran pwd"] and episode.result == [[["pwd()"]]]
    record = episode.steps[0][0]
    assert (record.raw, [r.text for r in record.calls], record.num_tokens) == ("calling", ["pwd()"], 7)
    episode.step([])
    assert (episode.steps[0][1].raw, episode.steps[0][1].calls, episode.steps[0][1].num_tokens) == ("", [], 0)
    second = episode.next_turn()  # from the benchmark: the entry's own turns are not the conversation's
    assert (second.index, second.messages) == (1, [{"role": "user", "content": "second"}])
    assert episode.turns[1] == second.messages and chat.ended == []
    episode.step([])
    assert episode.next_turn() is None and episode.ended == "completed"
    assert chat.ended == [(entry.id, {"entry": entry.id})]


def test_a_single_reply_entry_records_its_calls_unexecuted_and_closes_the_turn(bench, chat):
    chat.single = {"multi_turn_base_0"}
    episode = Episode(bench["multi_turn_base_0"])
    episode.next_turn()
    outcome = episode.step([parse_call("cd(folder='a')"), parse_call("ls()")], raw="two calls")
    assert outcome.turn_over and outcome.observations == []
    assert [(r.text, r.observation, r.call.name) for r in outcome.records] == [("cd(folder='a')", "", "cd"),
                                                                            ("ls()", "", "ls")]
    assert episode.steps[0][0].calls == outcome.records and episode.result == [[["cd(folder='a')", "ls()"]]]
    with pytest.raises(RuntimeError, match=r"^step\(\) called outside a turn; call next_turn\(\) first$"):
        episode.step([])
    assert chat.executed == []
    # the benchmark decides entry by entry: another of its entries plays turns of several steps
    other = Episode(bench["multi_turn_base_1"])
    other.next_turn()
    assert not other.step([parse_call("ls()")]).turn_over and chat.executed == ["ls"]


def test_an_output_that_ends_the_conversation_runs_none_of_its_calls_and_completes_the_episode(bench, chat):
    entry = bench["multi_turn_base_0"]
    episode = Episode(entry)
    episode.next_turn()
    episode.step([parse_call("pwd()")])
    outcome = episode.step([parse_call("ls()"), parse_call("done()")], raw="all set")
    # tau2's solo `done`: the conversation is over, nothing of the output runs, nothing comes back to read
    assert (outcome.observations, outcome.records, outcome.turn_over, outcome.ended) == ([], [], True, "completed")
    assert chat.executed == ["pwd"] and episode.backends["said"] == "###STOP###"
    assert episode.ended == "completed" and chat.ended == [(entry.id, episode.backends)]
    assert episode.next_turn() is None
    with pytest.raises(RuntimeError, match="outside a turn"):
        episode.step([])


def test_turn_start_reads_the_entrys_turns_unless_the_episode_delivers_its_own(bench):
    from seal.env.episode import TurnStart

    entry = bench["multi_turn_base_0"]
    assert TurnStart.of(entry, 1).messages == entry.turns[1]
    assert TurnStart.of(entry, 0, [[{"role": "user", "content": "mine"}]]).messages == [
        {"role": "user", "content": "mine"}]


def test_a_force_quit_turn_is_closed(bench):
    episode = Episode(bench["multi_turn_base_0"], max_steps=1)
    episode.next_turn()
    episode.step([parse_call("pwd()")])
    outcome = episode.step([parse_call("pwd()")])
    assert outcome.ended == "force_terminated" and outcome.turn_over
    with pytest.raises(RuntimeError, match="outside a turn"):
        episode.step([])


def test_an_unknown_step_limit_names_the_choices(bench):
    with pytest.raises(ValueError) as caught:
        Episode(bench["multi_turn_base_0"], step_limit="round")
    assert str(caught.value) == "step_limit 'round' is not one of turn, episode"
