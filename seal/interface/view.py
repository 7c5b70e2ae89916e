"""The contract between the learning interface and the tool formats / rollout engine.

A `View` is what one episode's learner is shown around the benchmark: tool docs (possibly with
schema cues), extra system-prompt text (notes, behavioural guidelines), and what follows a failed
call or an undecodable output. Tool semantics, tool outputs, the verifier and the reward never
change. `PLAIN` is the benchmark itself and is what evaluation always uses.
"""

from __future__ import annotations

from typing import Any, Protocol

from seal.env.executor import CallRecord


class View(Protocol):
    def tool_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Tool docs as shown (same tools, same order); must not mutate `docs`."""

    def delivered_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Tool docs delivered during the episode (miss_func holdout turns), as shown."""

    def system_extra(self) -> str:
        """Text appended to the system prompt ("" shows nothing)."""

    def tool_response(self, record: CallRecord, visible: frozenset[str]) -> str:
        """The observation shown for one executed call; `record.observation` itself is never
        altered, only followed by a class-level hint when the call failed."""

    def parse_error_feedback(self, failures: list[tuple[str, str]], visible: frozenset[str]) -> str | None:
        """Feedback for a step whose output looked like calls but decoded to none. None keeps the
        benchmark protocol (the turn ends); a string is shown as a tool response and the turn goes on."""


class PlainView:
    """The unmodified benchmark interface."""

    def tool_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return docs

    def delivered_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return docs

    def system_extra(self) -> str:
        return ""

    def tool_response(self, record: CallRecord, visible: frozenset[str]) -> str:
        return record.observation

    def parse_error_feedback(self, failures: list[tuple[str, str]], visible: frozenset[str]) -> str | None:
        return None


PLAIN = PlainView()
