"""How the environment answers the model: BFCL's official harness, or the authors' release.

`bfcl` (conf/protocol/bfcl.yaml) is bfcl-eval's multi-turn inference loop: the calls that decoded run,
an output with none ends the turn, any method of the involved classes executes. `release`
(conf/protocol/release.yaml) is what the authors' environment service answered (issue 28, issue 36):
- strict parsing (bfcl_env.py:1136-1180, strict_tool_parser: true in exp/SEAL.yaml:104): <tool_call>
  blocks are read by the release's own parser (bfcl_env.py:216-341; seal.policy.formats.QwenXML.parse_release),
  and an output with any block it refuses runs none of its calls; the model reads `[ERROR] Invalid tool
  call format: <reasons>`, the parser's texts joined with "; " (:339), as a user message and the turn
  stays open (the output counts as one step);
- available tools only (env_handler.py:339-362, enforce_available_tools: true, exp/SEAL.yaml:105): the
  calls are checked in order and the first bad name refuses the whole output, nothing run: a missing
  (empty, null, zero) name reads `[ERROR] Invalid tool call format: Missing function name in tool call.`,
  any other name outside the turn's list (a held-out miss_func tool before its delivery, `Class.method`,
  a number) `... Tool '<name>' is not available in the current tool list.` (env_handler.py:192-197 wraps
  the ValueError, :453 adds "[ERROR] "); the parse check comes first (bfcl_env.py:1150 before :1191);
- tool responses end with a newline before the end of the message (bfcl_env.py:966);
- an environment message over 4,096 tokens is cut to its first characters in proportion to
  (4096 - 100) / its tokens, then "... truncate ..." (cmt_base.py:206-212, max_env_len: 4096 in
  config/agentevolver.yaml:55, applied to every env output by cmt_linear.py:376-382);
- the context is full when the conversation with every environment message unclipped, plus the
  generation prompt, reaches max_model_len - response_length tokens (cmt_linear.py:109-123, :48; checked
  before each model call, agent_flow.py:94-99): the episode stops there, at equality too;
- a training prompt over 8,192 tokens stops the run (trajectory.py:90-95, max_prompt_length: 8192 in
  exp/SEAL.yaml:20);
- PPO mini-batches are taken in order (het_actor.py:93-97, actor.shuffle: false in
  external/config_fallback/ppo_trainer.yaml:205), where TRL shuffles them.
The episode takes the per-call decisions (`refusal`), the rollout engine the rendering ones and the
context check (`context_full`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from seal.env.calls import ToolCall

PROTOCOLS = ("bfcl", "release")
OVER_LONG_PROMPT = ("skip", "error")
# bfcl_env.py:1175 and env_handler.py:187-197: every refusal starts so
INVALID_FORMAT = "[ERROR] Invalid tool call format: "
# env_handler.py:355 (a call's name is empty or missing)
MISSING_NAME = "Missing function name in tool call."
# cmt_base.py:209-212
TRUNCATION_MARKER = "... truncate ..."
CLIP_MARGIN_TOKENS = 100


@dataclass(frozen=True)
class Protocol:
    name: str = "bfcl"
    strict_parse: bool = False
    refuse_unavailable_tools: bool = False
    tool_response_newline: bool = False
    # None: no limit
    max_observation_tokens: int | None = None
    # whether the context is full when the unclipped conversation reaches the window less one output (the
    # release), or only when the clipped one plus one output would pass the window (seal's own rule)
    raw_context_limit: bool = False
    max_prompt_tokens: int | None = None
    # what a train prompt over max_prompt_tokens does: skip (left out, counted) | error (the run stops)
    over_long_prompt: str = "skip"
    shuffle_minibatches: bool = True

    @classmethod
    def from_config(cls, node: Any) -> Protocol:
        """The protocol a conf/protocol/*.yaml node describes; a UserError names a bad value's fix."""
        from seal.errors import UserError

        values = {key: node[key] for key in cls.__dataclass_fields__ if key in node}
        if values.get("name", "bfcl") not in PROTOCOLS:
            raise UserError(f"protocol={values['name']!r}: choose bfcl (the official harness) or release (the authors')")
        if values.get("over_long_prompt", "skip") not in OVER_LONG_PROMPT:
            raise UserError(f"protocol.over_long_prompt={values['over_long_prompt']!r}: choose skip or error")
        for key in ("max_observation_tokens", "max_prompt_tokens"):
            if values.get(key) is not None and int(values[key]) <= CLIP_MARGIN_TOKENS:
                raise UserError(f"protocol.{key}={values[key]}: give a number of tokens above {CLIP_MARGIN_TOKENS}, or null")
        if values.get("strict_parse") and not values.get("refuse_unavailable_tools"):
            # the release's parser keeps a tool name as written (null, a number, `Class.method`): only the
            # tool-list check stands between such a name and the executor
            raise UserError("protocol.strict_parse=true reads tool names as the release did, unchecked: "
                            "set protocol.refuse_unavailable_tools=true with it")
        return cls(**values)

    def refusal(self, calls: list[ToolCall], failures: list[tuple[str, str]], visible: frozenset[str]) -> str | None:
        """The `[ERROR]` observation that refuses a whole output unexecuted, or None to run its calls.
        The parse check comes first, as in the release (bfcl_env.py:1150 before :1191), then each call's
        name in order (env_handler.py:351-362): the first bad one is the refusal."""
        if self.strict_parse and failures:
            # the release joins its parser's reasons with "; " (bfcl_env.py:339)
            return INVALID_FORMAT + "; ".join(reason for _, reason in failures)
        if self.refuse_unavailable_tools:
            for call in calls:
                reason = name_refusal(call.name, visible)
                if reason is not None:
                    return INVALID_FORMAT + reason
        return None

    def context_full(self, length: int, raw_length: int, max_new_tokens: int, context_length: int) -> bool:
        """Whether an episode stops before its next output, its context full. `length` counts the tokens the
        model reads, `raw_length` the same with every environment message unclipped. The release stops when
        the unclipped count reaches max_model_len - response_length (cmt_linear.py:123: safe only while
        below); seal's own rule stops only when the next output of `max_new_tokens` could pass the window."""
        if self.raw_context_limit:
            return raw_length + max_new_tokens >= context_length
        return length + max_new_tokens > context_length

    def clip(self, text: str, count_tokens: Callable[[str], int]) -> str:
        """An environment message as the model reads it: cut as the release cuts one over the limit."""
        if self.max_observation_tokens is None:
            return text
        n_tokens = count_tokens(text)
        if n_tokens <= self.max_observation_tokens:
            return text
        keep = int(len(text) * (self.max_observation_tokens - CLIP_MARGIN_TOKENS) / n_tokens)
        return text[:keep] + TRUNCATION_MARKER

    def prompt_fits(self, tokens: int) -> bool:
        return self.max_prompt_tokens is None or tokens <= self.max_prompt_tokens

    def describe(self) -> dict[str, Any]:
        """The settings as reports record them."""
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def name_refusal(name: Any, visible: frozenset[str]) -> str | None:
    """Why the release refuses a call by its name (env_handler.py:351-362), or None when the turn shows
    the tool. `name` is as the model wrote it: a name that is not a string is never a shown tool."""
    if not name:  # "", null, 0, false, [] or {}
        return MISSING_NAME
    try:
        shown = name in visible
    except TypeError as exc:  # a list or object as the name: the release reports its set lookup's error (:193-197)
        return str(exc)
    return None if shown else f"Tool '{name}' is not available in the current tool list."


BFCL = Protocol()
RELEASE = Protocol("release", strict_parse=True, refuse_unavailable_tools=True, tool_response_newline=True,
                   max_observation_tokens=4096, raw_context_limit=True, max_prompt_tokens=8192,
                   over_long_prompt="error", shuffle_minibatches=False)
BY_NAME = {"bfcl": BFCL, "release": RELEASE}
