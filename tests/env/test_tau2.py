"""benchmark=tau2 (seal.env.benchmarks.tau2, seal.env.tau2_user): the gold replay reaches tau2's own reward
1.0 on every task of the test split, a scripted user simulator served over HTTP on the loopback interface
drives whole conversations with tiny-random as the agent, and a missing, unreachable or malformed
simulator gives one sentence without losing the conversations already played."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hydra.utils import instantiate

from seal.env import Episode
from seal.env.benchmarks import benchmark_of
from seal.env.benchmarks.tau2 import (DOMAINS, FIRST_AGENT_MESSAGE, PREMATURE_END, STOP_WORD, USER_SIMULATOR_FAILED, Tau2,
                                      Tau2Solo, load_tasks, task_reward)
from seal.env.calls import ToolCall
from seal.env.tau2_user import NO_SIMULATOR, GoldUser, user_view
from seal.errors import UserError
from seal.evaluation.out_of_domain import evaluate_benchmark
from seal.policy.formats import chat_for, get_format
from seal.policy.oracle import OracleBackbone
from seal.policy.rollout import RolloutEngine
from tests.marks import slow_except
from tests.test_configs import compose_with


def oracle_engine():
    policy = OracleBackbone().load()
    return RolloutEngine(policy, get_format("qwen_xml", chat=chat_for(policy.tokenizer)), context_length=10**7,
                         max_new_tokens=10**6, batch_size=8, oracle=True)


def gold_benchmark(domain, split="test", user=None):
    benchmark = Tau2(domains=[domain], split=split)
    benchmark.use_user(user or GoldUser())
    return benchmark


class OneRequest:
    """A scripted user: states its request, then stops at its next turn."""

    def respond(self, session):
        return {"content": "Hi." if session.user_turns == 1 else "###STOP###"}


# telecom's in the default suite; airline's and retail's, which replay longer databases (about 45 s each on two
# cores), in `make test-slow`
@pytest.mark.parametrize("domain", slow_except(DOMAINS, {"telecom"}))
def test_the_gold_replay_reaches_tau2s_reward_1_on_every_test_task(domain):
    entries = gold_benchmark(domain).entries(domain)
    # tau2's split file: 20 airline, 40 retail, 40 telecom test tasks
    assert len(entries) == {"airline": 20, "retail": 40, "telecom": 40}[domain]
    rollouts = oracle_engine().play(entries, temperature=0.0)
    failed = [(r.entry.id, r.verdict.error_type, r.verdict.error_message) for r in rollouts if not r.verdict.valid]
    assert failed == []
    assert all(r.ended == "completed" for r in rollouts)


def test_the_gold_replay_solves_every_mock_task_its_gold_defines_history_included():
    # tau2's toy domain: two tasks continue a conversation whose message history already holds a call,
    # so the replay must count only the calls made after it. One task has no gold actions at all: its
    # success is an environment assertion (task_2 completed) that no gold script reaches
    tasks = load_tasks("mock", None)
    unscripted = {t.id for t in tasks.values() if not t.evaluation_criteria.actions
                  and "ENV_ASSERTION" in {b.value for b in t.evaluation_criteria.reward_basis}}
    assert unscripted == {"update_task_with_history_and_env_assertions"}
    with_history = {t.id for t in tasks.values() if t.initial_state and t.initial_state.message_history}
    assert with_history == {"update_task_with_message_history", "update_task_with_history_and_env_assertions"}
    rollouts = oracle_engine().play(gold_benchmark("mock", split=None).entries("mock"), temperature=0.0)
    assert len(rollouts) == len(tasks) == 9
    failed = {r.entry.initial_config["task"]: r.verdict.error_message for r in rollouts if not r.verdict.valid}
    assert failed == {"update_task_with_history_and_env_assertions": 'tau2 reward 0.0: {"env": 0.0}'}


def test_tau2s_evaluator_fails_a_replay_that_skips_a_gold_action():
    # retail task 0 of the test split: its reward basis includes the database; leaving out the last gold
    # write leaves the database short of the gold one, so tau2's own check gives 0
    entry = gold_benchmark("retail", user=OneRequest()).entries("retail")[0]
    task = load_tasks("retail", "test")[entry.initial_config["task"]]
    episode = Episode(entry)
    episode.next_turn()
    actions = task.evaluation_criteria.actions
    for action in actions[:-1]:
        episode.step([ToolCall(action.name, (), dict(action.arguments))])
    episode.step([], "Done.")
    assert episode.next_turn() is None and episode.ended == "completed"
    reward, parts = task_reward(episode.backends)
    assert reward == 0.0 and json.loads(parts)["env"] == 0.0
    assert episode.verdict().valid is False


def test_no_task_of_the_default_domains_needs_an_llm_judge():
    from tau2.data_model.tasks import RewardType

    for domain in DOMAINS:
        for split in ("test", "base"):
            for task in load_tasks(domain, split).values():
                assert RewardType.NL_ASSERTION not in task.evaluation_criteria.reward_basis


def test_an_agent_call_outside_the_domains_tools_is_refused_unrun():
    entry = gold_benchmark("airline").entries("airline")[0]
    episode = Episode(entry)
    episode.next_turn()
    outcome = episode.step([ToolCall("set_state", (), {"x": 1}), ToolCall("get_user_details", ("a",), {})])
    assert [r.error for r in outcome.records] == ["unknown_function", "bad_arguments"]
    assert episode.backends.calls_made() == 0


class Talker:
    """A scripted user that says "message k" at its k-th turn (the stop word at turn `stop_at`) and keeps
    what the simulator is shown each time it is asked."""

    def __init__(self, stop_at=None):
        self.stop_at, self.shown = stop_at, []

    def respond(self, session):
        self.shown.append(user_view(session))
        k = session.user_turns
        return {"content": STOP_WORD if k == self.stop_at else f"message {k}"}


def conversation(user, max_user_turns, agent_turn=lambda episode: episode.step([], "Done.")):
    benchmark = Tau2(domains=["mock"], split=None, max_user_turns=max_user_turns)
    benchmark.use_user(user)
    episode = Episode(benchmark.entries("mock")[0])
    while episode.next_turn() is not None:
        agent_turn(episode)
    return episode


def test_a_conversation_reaching_exactly_the_user_turn_cap():
    # cap 2, by hand: the cap is checked before each user turn (user_turns >= cap ends it), so the user is
    # asked twice, the agent answers both, and the third user turn is never asked: the conversation ends
    # force-terminated after two turns, which tau2 scores as a premature end
    user = Talker()
    episode = conversation(user, 2)
    assert (len(user.shown), len(episode.steps), episode.ended) == (2, 2, "force_terminated")
    assert episode.verdict().error_type == PREMATURE_END
    # the user's stop on its second (the last allowed) turn completes the conversation there
    user = Talker(stop_at=2)
    episode = conversation(user, 2)
    assert (len(user.shown), len(episode.steps), episode.ended) == (2, 1, "completed")


def test_the_user_simulator_is_shown_none_of_the_agents_calls_or_results():
    # the agent creates a task (a call and its result), then replies in text: the simulator reads the
    # greeting and that reply as "user" messages and its own first message as "assistant", nothing else
    def agent_turn(episode):
        episode.step([ToolCall("create_task", (), {"user_id": "user_1", "title": "Important Meeting"})],
                     '<tool_call>{"name": "create_task"}</tool_call>')
        episode.step([], "I created it.")

    user = Talker(stop_at=2)
    episode = conversation(user, 5, agent_turn)
    assert episode.backends.calls_made() == 1 and episode.ended == "completed"
    messages, tools = user.shown[1]
    assert messages[0]["role"] == "system" and tools == []
    assert messages[1:] == [{"role": "user", "content": FIRST_AGENT_MESSAGE},
                            {"role": "assistant", "content": "message 1"},
                            {"role": "user", "content": "I created it."}]
    result = episode.steps[0][0].calls[0].observation
    assert "Important Meeting" in result and "Important Meeting" not in str(messages[1:])


# ------------------------------------------------------------------------------- the HTTP simulator


class ScriptedSimulator(BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions on 127.0.0.1 that answers from a script: the k-th reply of a
    conversation (counted from the messages it is sent: its own earlier replies) is script[k], the last
    repeating; a conversation listed in `broken` (by the number of conversations begun before it) gets
    `{"oops": true}` instead. It records every request's body."""

    script: list = []
    broken: set = set()
    requests: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        k = sum(m["role"] == "assistant" for m in body["messages"])
        conversation = sum(len(r["messages"]) == 2 for r in self.requests) - 1
        reply = {"oops": True} if conversation in self.broken else self.script[min(k, len(self.script) - 1)]
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def said(text):
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


@pytest.fixture
def simulator():
    handler = type("Handler", (ScriptedSimulator,), {"script": [], "broken": set(), "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def endpoint_benchmark(url, domain="mock"):
    return instantiate(compose_with("benchmark=tau2", f"benchmark.domains=[{domain}]", f"benchmark.user.url={url}",
                                    "benchmark.user.model=scripted").benchmark)


@pytest.mark.costly
def test_a_scripted_simulator_over_http_drives_whole_conversations_with_tiny_random(simulator):
    from seal.policy.backbones import TinyRandomBackbone

    tiny_policy = TinyRandomBackbone().load()

    handler, url = simulator
    handler.script = [said("Hi, I would like to create a task."), said("That is all. ###STOP###")]
    benchmark = endpoint_benchmark(url)
    benchmark.prepare()
    entries = benchmark.entries("mock")[:2]
    engine = RolloutEngine(tiny_policy, get_format(TinyRandomBackbone().tool_format, chat=chat_for(tiny_policy.tokenizer)),
                           context_length=16384, max_new_tokens=12, batch_size=1)
    rollouts = engine.play(entries, temperature=0.0)
    # each conversation: the user's first message, then its stop after the agent's first reply
    assert [r.ended for r in rollouts] == ["completed", "completed"]
    assert len(handler.requests) == 4
    first, second = handler.requests[0], handler.requests[1]
    task = load_tasks("mock", "test")[entries[0].initial_config["task"]]
    assert first["model"] == "scripted" and first["temperature"] == 0.0
    assert str(task.user_scenario) in first["messages"][0]["content"]
    # the simulator sees the agent's messages as "user" and its own as "assistant"
    assert first["messages"][1:] == [{"role": "user", "content": FIRST_AGENT_MESSAGE}]
    agent_reply = rollouts[0].episode.steps[0][-1].raw
    assert second["messages"][2:] == [{"role": "assistant", "content": "Hi, I would like to create a task."},
                                      {"role": "user", "content": agent_reply}]
    # the agent's first turn opened with tau2's policy as its system message and the simulator's message
    assert "<policy>" in rollouts[0].transcript[0].text and "Hi, I would like to create a task." in rollouts[0].transcript[0].text
    for rollout in rollouts:
        assert rollout.verdict.valid == (task_reward(rollout.episode.backends)[0] == 1.0)


def test_no_simulator_configured_stops_with_one_sentence_naming_both_ways():
    benchmark = instantiate(compose_with("benchmark=tau2").benchmark)
    with pytest.raises(UserError) as err:
        benchmark.prepare()
    assert str(err.value) == NO_SIMULATOR
    assert "benchmark.user.url" in NO_SIMULATOR and "benchmark.user.backbone" in NO_SIMULATOR


def test_an_unreachable_endpoint_stops_before_anything_is_played():
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError) as err:
        endpoint_benchmark(f"http://127.0.0.1:{port}/v1").prepare()
    assert str(err.value).startswith(f"benchmark.user.url=http://127.0.0.1:{port}/v1: no user simulator answers there")
    assert "\n" not in str(err.value)


def test_a_malformed_reply_fails_that_conversation_and_keeps_the_played_ones(simulator, tmp_path):
    handler, url = simulator
    # the first conversation completes; the second one's first answer is not a chat completion
    handler.script, handler.broken = [said("Hello."), said("###STOP###")], {1}
    benchmark = endpoint_benchmark(url)
    entries = benchmark.entries("mock")[:2]
    benchmark.entries = lambda category, files_dir=None: entries
    engine = oracle_engine()
    engine.batch_size = 1
    with pytest.raises(UserError) as err:
        evaluate_benchmark(engine, benchmark, tmp_path, None)
    assert str(err.value).startswith("the user simulator failed on 1 of 2 tau2 conversations (first: "
                                     f"{entries[1].id}: the user simulator at {url} answered something that is not")
    records = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [e.id for e in entries]
    assert records[0]["ended"] == "completed" and records[0]["error_type"] != USER_SIMULATOR_FAILED
    assert records[1]["ended"] == "user_simulator_error" and records[1]["error_type"] == USER_SIMULATOR_FAILED


def test_the_registry_plays_tau2_entries_with_the_tau2_benchmark():
    entry = gold_benchmark("mock").entries("mock")[0]
    assert isinstance(benchmark_of(entry), Tau2) and entry.benchmark == "tau2"


# ------------------------------------------------------------------------------------------- solo mode


def solo_entries(domain, split="test"):
    return Tau2Solo(domains=[domain], split=split).entries(domain)


def test_the_solo_gold_replay_reaches_tau2s_reward_1_on_every_telecom_test_task():
    tasks = load_tasks("telecom", "test")
    # every telecom test task carries a ticket and starts from an empty history: all 40 are playable alone
    assert all(t.ticket and not t.initial_state.message_history for t in tasks.values())
    entries = solo_entries("telecom")
    assert [e.initial_config["task"] for e in entries] == list(tasks)
    rollouts = oracle_engine().play(entries, temperature=0.0)
    failed = [(r.entry.id, r.verdict.error_message) for r in rollouts if not r.verdict.valid]
    assert failed == [] and all(r.ended == "completed" for r in rollouts)
    # the user's gold actions (the phone's toggles) were the agent's calls, and the last message is tau2's stop
    first = rollouts[0].episode.backends
    user_actions = [a.name for a in first.task.evaluation_criteria.actions if a.requestor == "user"]
    assert user_actions and all(m.role == "assistant" for m in first.trajectory if getattr(m, "tool_calls", None))
    assert first.trajectory[-1].content == STOP_WORD and first.trajectory[-1].tool_calls is None


def test_solo_mode_plays_the_mock_tasks_tau2s_solo_agent_accepts_and_solves_those_not_judged_on_talk():
    tasks = load_tasks("mock", None)
    # tau2's LLMSoloAgent.check_valid_task by hand: the two tasks whose history holds user messages are out,
    # and so is the one without a ticket (create_task_1_nl_eval); impossible_task_1 has a ticket but no gold
    # actions, yet a history-less task needs them
    played = {e.initial_config["task"] for e in solo_entries("mock", None)}
    assert played == {"create_task_1", "create_task_1_with_env_assertions", "update_task_1",
                      "update_task_with_initialization_data", "update_task_with_initialization_actions",
                      "impossible_task_1"} - {t for t in tasks if not tasks[t].evaluation_criteria.actions
                                              and not tasks[t].initial_state}
    rollouts = oracle_engine().play(solo_entries("mock", None), temperature=0.0)
    # a solo agent cannot talk, so a task whose reward includes information it must communicate scores 0
    talk = {r.entry.initial_config["task"] for r in rollouts if tasks[r.entry.initial_config["task"]].evaluation_criteria.communicate_info}
    assert talk == {"update_task_with_initialization_data"}
    failed = {r.entry.initial_config["task"]: r.verdict.error_message for r in rollouts if not r.verdict.valid}
    assert failed == {"update_task_with_initialization_data": 'tau2 reward 0.0: {"env": 1.0, "communicate": 0.0}'}


def test_the_solo_agent_reads_tau2s_solo_prompt_with_its_ticket_and_has_the_users_tools_and_done():
    entry = solo_entries("telecom")[0]
    task = load_tasks("telecom", "test")[entry.initial_config["task"]]
    system = entry.turns[0][0]["content"]
    assert system.startswith("<instructions>\nYou are a customer service agent")
    assert "call the appropriate tools to solve the ticket" in system and "to the `done` tool" in system
    assert system.endswith(f"</policy>\n<ticket>\n{task.ticket}\n</ticket>")
    names = [doc["name"] for doc in entry.functions]
    # telecom's user tools (the phone) are the agent's in solo mode, after its own; `done` comes last
    from tau2.domains.telecom.environment import get_environment

    env = get_environment()
    assert names == [t.name for t in env.get_tools()] + [t.name for t in env.get_user_tools()] + ["done"]
    done = entry.functions[-1]
    assert done["description"] == "Call this function when you are done with the task."
    assert done["parameters"]["properties"] == {}


def test_a_solo_agents_user_tool_call_runs_on_the_users_phone():
    from tau2.data_model.message import ToolCall as Tau2Call
    from tau2.domains.telecom.environment import get_environment

    entry = solo_entries("telecom")[0]
    task = load_tasks("telecom", "test")[entry.initial_config["task"]]
    episode = Episode(entry)
    episode.next_turn()
    outcome = episode.step([ToolCall("check_status_bar", (), {})])
    # the same call made directly on tau2's own solo environment set to the task's initial state
    env = get_environment(solo_mode=True)
    env.set_state(initialization_data=task.initial_state.initialization_data,
                  initialization_actions=task.initial_state.initialization_actions, message_history=[])
    expected = env.get_response(Tau2Call(id="x", name="check_status_bar", arguments={}, requestor="assistant"))
    assert outcome.observations == [expected.content] and outcome.records[0].error is None
    # the task's phone: data saver on, which the gold's first user action (toggle_data_saver_mode) turns off
    assert task.evaluation_criteria.actions[0].name == "toggle_data_saver_mode" and "Data Saver" in expected.content


def test_done_ends_the_solo_conversation_and_none_of_its_messages_other_calls_run():
    entry = solo_entries("mock", None)[0]  # create_task_1
    episode = Episode(entry)
    episode.next_turn()
    outcome = episode.step([ToolCall("create_task", (), {"user_id": "user_1", "title": "Important Meeting"}),
                            ToolCall("done", (), {})])
    assert outcome.turn_over and outcome.ended == "completed" and episode.done
    session = episode.backends
    # tau2 turns such a message into its stop word and drops the calls beside it (LLMSoloAgent)
    assert session.calls_made() == 0 and session.trajectory[-1].content == STOP_WORD
    assert episode.verdict().error_message == 'tau2 reward 0.0: {"env": 0.0, "communicate": 1.0}'


@pytest.mark.parametrize("text, ended", [("The task is created.", "agent_error"), ("All done. ###STOP###", "completed")])
def test_a_solo_agents_message_ends_the_conversation_with_an_agent_error_unless_it_is_the_stop(text, ended):
    entry = solo_entries("mock", None)[0]
    episode = Episode(entry)
    episode.next_turn()
    episode.step([ToolCall("create_task", (), {"user_id": "user_1", "title": "Important Meeting"})])
    episode.step([], text)
    assert episode.next_turn() is None and episode.ended == ended
    verdict = episode.verdict()
    # the gold call was made: the stop scores it, the agent error is tau2's premature end (0)
    assert verdict.valid == (ended == "completed")
    if ended == "agent_error":
        assert verdict.error_type == "tau2:premature_end"


def test_solo_mode_is_its_own_benchmark_and_refuses_domains_without_tickets():
    benchmark = instantiate(compose_with("benchmark=tau2_solo").benchmark)
    assert isinstance(benchmark, Tau2Solo) and benchmark.categories == ["telecom"]
    assert benchmark.metric_prefix == "eval/tau2_solo"
    benchmark.prepare()  # no user simulator needed
    from seal.tasks import config_error

    with pytest.raises(Exception) as err:
        instantiate(compose_with("benchmark=tau2_solo", "benchmark.domains=[airline]").benchmark)
    # what run.py prints (seal.tasks.config_error unwraps the sentence from Hydra's instantiation error)
    assert str(config_error(err.value)).startswith("benchmark.domains=['airline']: tau2's solo mode plays tasks with a ticket")
    assert benchmark_of(solo_entries("mock", None)[0]) is not None


# a whole training run with tau2 before and after, about 1 min on two cores: in `make test-slow`; the default suite
# trains with an out-of-domain benchmark before and after (tests/rl/test_loop.py's main job, BFCL's single turn)
# and evaluates tau2 with the oracle through task=eval (above)
@pytest.mark.slow
def test_training_evaluates_tau2_before_and_after_when_the_budget_lists_it(simulator, tmp_path):
    from tests.rl.test_loop import train

    handler, url = simulator
    handler.script = [said("Please create a task called Important Meeting for user_1."), said("Thanks. ###STOP###")]
    metrics = train(tmp_path, "benchmark=tau2", "benchmark.domains=[mock]", f"benchmark.user.url={url}",
                    "benchmark.user.model=scripted", "budget.ood_benchmarks=[tau2]", "budget.ood_entries_per_category=1",
                    "logger.mode=disabled")
    task = next(iter(load_tasks("mock", "test").values()))  # create_task_1: its reward needs a task in the database
    assert task.id == "create_task_1" and "DB" in {b.value for b in task.evaluation_criteria.reward_basis}
    for when in ("ood_before", "ood_after"):
        # six new tokens of tiny-random cannot hold a tool call, so the database stays as it was: reward 0
        assert metrics[when]["tau2"]["counts"] == {"mock": {"passed": 0, "total": 1}}
        assert metrics[when]["tau2"]["eval/tau2/avg"] == 0.0
        record = json.loads((tmp_path / when / "tau2" / "trajectories.jsonl").read_text())
        assert record["id"] == f"tau2_mock_{task.id}" and record["ended"] == "completed"
    # one conversation each time: the user's request, then its stop after the agent's reply
    assert len(handler.requests) == 4


def test_the_gold_replay_user_is_a_named_simulator_choice():
    benchmark = instantiate(compose_with("benchmark=tau2", "benchmark.user.script=gold").benchmark)
    assert isinstance(benchmark.user, GoldUser)
    with pytest.raises(UserError) as err:
        instantiate(compose_with("benchmark=tau2", "benchmark.user.script=silver").benchmark).prepare()
    assert str(err.value) == "benchmark.user.script=silver: no such scripted user; choose gold"
    with pytest.raises(UserError) as err:
        instantiate(compose_with("benchmark=tau2", "benchmark.user.script=gold",
                                 "benchmark.user.url=http://127.0.0.1:9/v1").benchmark).prepare()
    assert str(err.value).startswith("benchmark.user: url=http://127.0.0.1:9/v1 and script=gold are set; choose one")
    assert "benchmark.user.script=gold" in NO_SIMULATOR


def test_task_eval_with_the_oracle_checks_a_tau2_install_offline(tmp_path, capsys):
    from seal.tasks import run

    # python run.py task=eval benchmark=tau2 backbone=oracle: no simulator named, the oracle's user is the gold replay's
    run(compose_with("task=eval", "benchmark=tau2", "backbone=oracle"), tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    # budget=smoke: the first task of each domain's base split (the paper's Qwen2.5 rows: 114/50/114 tasks), each
    # solved by the replay; the metrics say which split and how many tasks it has
    assert metrics["counts"] == {d: {"passed": 1, "total": 1} for d in ("airline", "retail", "telecom")}
    assert (metrics["split"], metrics["split_tasks"]) == ("base", {"airline": 50, "retail": 114, "telecom": 114})
    assert "task split `base` (airline 50 tasks, retail 114 tasks, telecom 114 tasks)" in (tmp_path / "report.md").read_text()
    assert metrics["eval/tau2/avg"] == 1.0
    # a model gets no such default: it needs a simulator, and is told so before it is loaded
    with pytest.raises(SystemExit) as done:
        run(compose_with("task=eval", "benchmark=tau2", "backbone=tiny-random"), tmp_path / "model")
    assert done.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == f"error: {NO_SIMULATOR}"
