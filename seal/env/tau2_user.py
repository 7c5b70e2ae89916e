"""tau2's user simulator, pluggable: any OpenAI-compatible chat endpoint (benchmark.user.url, .model, the key
read from the environment variable .api_key_env), a backbone loaded in-process (benchmark.user.backbone:
seal.policy.simulated_user, which also chooses between the two), or a script (tests, the gold replay).

The simulator is given tau2's user guidelines and the task's user scenario as its system message, and the
conversation from the user's side (the agent's messages as "user", its own as "assistant"). In telecom it
also gets the domain's user tools (the user's phone) and may call them, by name among those tools, before it
answers; the calls run in the task's environment. Its answer ends the conversation when it holds one of
tau2's stop words (###STOP###, ###TRANSFER###, ###OUT-OF-SCOPE###).
"""

from __future__ import annotations

import itertools
import json
import os
import urllib.error
import urllib.request
from typing import Any

from seal.errors import UserError

# tau2's stop words (tau2.user.base): the user is done, asks for a human agent, or is out of scope
STOP_WORDS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
# tool calls the simulator may make before it answers in one turn (a guard against a looping simulator)
MAX_USER_TOOL_ROUNDS = 10
NO_SIMULATOR = ("benchmark=tau2 needs a user simulator: set benchmark.user.url (and benchmark.user.model) to an "
                "OpenAI-compatible chat endpoint, or benchmark.user.backbone to a backbone loaded in-process "
                "(benchmark.user.script=gold, the gold replay's scripted user, checks an install with backbone=oracle)")


class SimulatorError(Exception):
    """The user simulator could not be asked or gave an unusable answer (the message is one sentence)."""


def guidelines(with_tools: bool) -> str:
    from tau2.utils import DATA_DIR

    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    return (DATA_DIR / "tau2" / "user_simulator" / name).read_text()


def user_view(session: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) as the simulator sees the conversation, in OpenAI's chat layout."""
    system = f"{guidelines(bool(session.user_tools))}\n\n<scenario>\n{session.task.user_scenario}\n</scenario>"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in session.trajectory:
        role, requestor = message.role, getattr(message, "requestor", None)
        if role == "assistant" and message.content and not message.tool_calls:
            messages.append({"role": "user", "content": message.content})
        elif role == "user" and message.tool_calls:
            messages.append({"role": "assistant", "content": message.content or "", "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in message.tool_calls]})
        elif role == "user":
            messages.append({"role": "assistant", "content": message.content or ""})
        elif role == "tool" and requestor == "user":
            messages.append({"role": "tool", "tool_call_id": message.id, "content": message.content or ""})
    tools = [tool.openai_schema for tool in session.user_tools.values()]
    return messages, tools


def user_turn(session: Any) -> str | None:
    """Ask the simulator for its next message (running the user-tool calls it makes first); None when the
    message ends the conversation. SimulatorError when an answer is unusable."""
    for _ in range(MAX_USER_TOOL_ROUNDS + 1):
        reply = session.user.respond(session)
        calls = reply.get("tool_calls") or []
        if not calls:
            text = reply.get("content")
            if not isinstance(text, str) or not text.strip():
                raise SimulatorError("the user simulator answered with neither a message nor a tool call")
            session.say("user", text)
            return None if any(word in text for word in STOP_WORDS) else text
        for name, arguments in map(call_of, calls):
            if name not in session.user_tools:
                raise SimulatorError(f"the user simulator called {name!r}, which is not one of the user's tools "
                                     f"({', '.join(sorted(session.user_tools)) or 'none in this domain'})")
            session.call(name, arguments, "user")
    raise SimulatorError(f"the user simulator made tool calls {MAX_USER_TOOL_ROUNDS + 1} times in a row without answering")


def call_of(call: Any) -> tuple[str, dict[str, Any]]:
    try:
        function = call["function"]
        arguments = function.get("arguments") or "{}"
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(function["name"], str) or not isinstance(arguments, dict):
            raise TypeError
    except (KeyError, TypeError, AttributeError, ValueError):
        raise SimulatorError(f"the user simulator sent a malformed tool call ({str(call)[:200]})") from None
    return function["name"], arguments


class OpenAIUser:
    """A user simulator behind an OpenAI-compatible /chat/completions endpoint, greedy (temperature 0)."""

    def __init__(self, url: str, model: str, api_key_env: str | None = None, timeout_s: float = 120.0):
        self.url, self.model, self.timeout_s = url.rstrip("/"), model, timeout_s
        self.key = os.environ.get(api_key_env) if api_key_env else None
        if api_key_env and not self.key:
            raise UserError(f"benchmark.user.api_key_env={api_key_env}: that environment variable is not set; "
                            "export the simulator's key there (or set api_key_env to null for a server without one)")

    def _request(self, path: str, body: dict[str, Any] | None) -> bytes:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return response.read()

    def check(self) -> None:
        """UserError at once when nothing answers at the endpoint (any HTTP answer will do)."""
        try:
            self._request("/models", None)
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"benchmark.user.url={self.url}: no user simulator answers there ({_reason(exc)}); "
                            "start it or point benchmark.user.url at a running OpenAI-compatible server") from None

    def respond(self, session: Any) -> dict[str, Any]:
        """The simulator's next message (OpenAI's assistant-message layout) for the conversation so far."""
        messages, tools = user_view(session)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0.0}
        if tools:
            body["tools"] = tools
        try:
            raw = self._request("/chat/completions", body)
        except (urllib.error.URLError, OSError) as exc:
            raise SimulatorError(f"the user simulator at {self.url} could not be asked ({_reason(exc)})") from None
        try:
            message = json.loads(raw)["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError
        except (ValueError, KeyError, IndexError, TypeError):
            raise SimulatorError(f"the user simulator at {self.url} answered something that is not an OpenAI chat "
                                 f"completion ({raw[:200]!r})") from None
        return message


def gold_actions(task: Any) -> list[Any]:
    """The task's gold actions in order (agent's and user's), or none."""
    criteria = task.evaluation_criteria
    return list(criteria.actions or []) if criteria is not None else []


def _reason(exc: Exception) -> str:
    return str(getattr(exc, "reason", exc))


class GoldUser:
    """The gold replay's user (a script, not a model): it opens with the task's reason for calling, makes
    the task's next run of user-side gold actions whenever the agent hands the turn back, and stops once
    every gold action has been made."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    def respond(self, session: Any) -> dict[str, Any]:
        actions = gold_actions(session.task)
        done = session.calls_made()
        run = list(itertools.takewhile(lambda a: a.requestor == "user", actions[done:]))
        if run:
            return {"tool_calls": [{"id": f"u{next(self._ids)}", "function": {"name": a.name, "arguments": json.dumps(a.arguments)}}
                                   for a in run]}
        if session.user_turns == 1:
            return {"content": "Hello, I need help with my account."}
        if done >= len(actions):
            return {"content": "Thank you. ###STOP###"}
        return {"content": "I have done that. What next?"}
