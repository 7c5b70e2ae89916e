"""Tool-call formats: how tools are shown to the model and how its calls are read back.

A format has two halves:
- the chat wrapper (`Chat`): role markers of the model family (ChatML for Qwen and SmolLM2,
  Llama-3 headers for Llama); tool results are rendered the way that family's own template does
  (Qwen2.5: a user message of `<tool_response>` blocks; Llama-3.1: `ipython` messages);
- the tool format proper (`ToolFormat`): the system prompt listing the tools, how a call is written,
  and `parse()`, which turns model text into `ToolCall`s plus the fragments that looked like calls
  but did not decode (never dropped silently).

Two tool renderings (`tools=`, chosen by conf/rendering/*.yaml), the same in training and evaluation:
- `project`: the JSON formats show OpenAI-style schemas (JSON-schema types, no `response` part)
  behind a persona line, and descriptions keep bfcl-eval's "Python 3 syntax" sentence;
- `release`: what the authors' release showed: the raw BFCL function documents (`"type": "dict"`,
  `response` kept, no Python sentence) and no persona line; for qwen_xml the system prompt is then
  exactly Qwen's function-calling tool block; held-out tools arrive as BFCL's prompting-mode message.

Formats only produce text; the rollout engine tokenises each piece once and appends the ids.
Every decoded call must survive `parse_call(call.to_string())`, because the episode records and the
verifier re-executes the call text: a call that could not be replayed is a parse failure instead.

Under a strict protocol (protocol=release) `parse_for` reads <tool_call> blocks as the release's strict
`xml_json` parser did instead (`QwenXML.parse_release`); the formats without such blocks keep their own parser.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from seal.env.entry import prepare_bfcl_import
from seal.env.calls import ToolCall, UnsafeCall, parse_call, parse_call_list

prepare_bfcl_import()
from bfcl_eval.constants.default_prompts import (  # noqa: E402
    DEFAULT_SYSTEM_PROMPT_FORMAT,
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
    DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
    OUTPUT_FORMAT_MAPPING,
    PROMPT_STYLE_TEMPLATES,
    PROMPT_TEMPLATE_MAPPING,
)
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # noqa: E402
from bfcl_eval.utils import _get_language_specific_hint  # noqa: E402

# The persona of the JSON formats' system prompt (BFCL's prompting mode has its own).
DEFAULT_PERSONA = "You are a helpful assistant that completes the user's requests by calling the available tools."
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
TOOL_RENDERINGS = ("project", "release")
# what bfcl-eval's loader appends to every multi-turn tool description (the raw docs do not have it)
PYTHON_SYNTAX_HINT = _get_language_specific_hint("multi_turn_base")


@dataclass
class Parsed:
    calls: list[ToolCall] = field(default_factory=list)
    # (raw fragment, reason) for text that looks like a call but does not decode
    failures: list[tuple[str, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- chat wrappers


class Chat:
    """Role markers of one model family. `end_of_turn` closes an assistant message (the stop string)."""

    name: str
    begin: str = ""
    end_of_turn: str
    # special tokens that end an assistant message as the family's template does (stop and close it)
    message_ends: tuple[str, ...] = ()
    # the family's end-of-text tokens: they stop generation, then the engine closes the message
    end_of_text: tuple[str, ...] = ()
    # text the template puts after a closed assistant message
    after_assistant: str = ""

    def message(self, role: str, content: str) -> str:
        raise NotImplementedError

    def assistant_header(self) -> str:
        raise NotImplementedError

    def tool_results(self, results: list[str], newline: bool = False, clip: Callable[[str], str] | None = None) -> str:
        """The message(s) carrying tool results; `newline` ends the content with one (the release's
        rendering), `clip` cuts each environment message's content as a protocol does."""
        raise NotImplementedError


class ChatML(Chat):
    name = "chatml"
    end_of_turn = "<|im_end|>"
    message_ends = ("<|im_end|>",)
    # Qwen's base-model eos
    end_of_text = ("<|endoftext|>",)
    after_assistant = "\n"

    def message(self, role: str, content: str) -> str:
        return f"<|im_start|>{role}\n{content}<|im_end|>\n"

    def assistant_header(self) -> str:
        return "<|im_start|>assistant\n"

    def tool_results(self, results: list[str], newline: bool = False, clip: Callable[[str], str] | None = None) -> str:
        # Qwen2.5's template: consecutive tool messages become one user message of <tool_response> blocks;
        # the release wrote each block followed by a newline (bfcl_env.py:966), so one ends the content
        content = "\n".join(f"<tool_response>\n{r}\n</tool_response>" for r in results) + ("\n" if newline else "")
        return self.message("user", clip(content) if clip else content)


class Llama3(Chat):
    name = "llama3"
    begin = "<|begin_of_text|>"
    end_of_turn = "<|eot_id|>"
    # Llama-3.1 ends a tool call with <|eom_id|> when the system prompt says "Environment: ipython"
    message_ends = ("<|eot_id|>", "<|eom_id|>")
    end_of_text = ("<|end_of_text|>",)

    def message(self, role: str, content: str) -> str:
        return f"<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"

    def assistant_header(self) -> str:
        return "<|start_header_id|>assistant<|end_header_id|>\n\n"

    def tool_results(self, results: list[str], newline: bool = False, clip: Callable[[str], str] | None = None) -> str:
        # Llama-3.1: each tool result is an ipython message (the release's newline is a ChatML matter: its
        # Llama modes render results differently altogether, bfcl_env.py:902-908)
        return "".join(self.message("ipython", clip(r) if clip else r) for r in results)


CHATS: dict[str, type[Chat]] = {"chatml": ChatML, "llama3": Llama3}


def chat_for(tokenizer: Any) -> str:
    """The chat wrapper a tokenizer was trained with, read from its special tokens."""
    vocab = tokenizer.get_vocab()
    if "<|eot_id|>" in vocab and "<|start_header_id|>" in vocab:
        return "llama3"
    return "chatml"


# ---------------------------------------------------------------------------------------- tool formats


def _openai_type(schema: Any) -> Any:
    """BFCL's Gorilla types as JSON-schema types (dict -> object, float -> number, tuple -> array)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "type" and isinstance(value, str):
                out[key] = GORILLA_TO_OPENAPI.get(value, value)
            elif key == "properties" and isinstance(value, dict):
                out[key] = {name: _openai_type(sub) for name, sub in value.items()}
            elif key == "items":
                out[key] = _openai_type(value)
            else:
                out[key] = value
        return out
    return schema


def as_json_schema(doc: dict[str, Any]) -> dict[str, Any]:
    return {"name": doc["name"], "description": doc.get("description", ""),
            "parameters": _openai_type(doc.get("parameters", {"type": "dict", "properties": {}}))}


def raw_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """The BFCL function document as its func_doc file has it: without the loader's Python sentence."""
    description = doc.get("description")
    if not isinstance(description, str) or not description.endswith(PYTHON_SYNTAX_HINT):
        return doc
    return {**doc, "description": description.removesuffix(PYTHON_SYNTAX_HINT)}


def keyword_arguments(call: ToolCall, docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The call's arguments by name (positional arguments named from the tool doc's parameter order)."""
    if not call.args:
        return dict(call.kwargs)
    names = list(docs[call.name]["parameters"]["properties"])
    return dict(zip(names, call.args)) | call.kwargs


def _replayable(call: ToolCall) -> str | None:
    """None if the call text round-trips through the safe parser, else the reason it does not."""
    if not _IDENTIFIER.match(call.name):
        return f"tool name {call.name!r} is not an identifier"
    for key in call.kwargs:
        # any Python identifier (BFCL's live tools have names like año_vehiculo) that is not a keyword
        if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
            return f"argument name {key!r} is not an identifier"
    try:
        again = parse_call(call.to_string())
    except UnsafeCall as exc:
        return str(exc)
    except (RecursionError, ValueError) as exc:
        return f"arguments cannot be written as a call ({type(exc).__name__})"
    if again != call:
        return "arguments do not survive conversion to a call (non-finite number?)"
    return None


class ToolFormat:
    name: str
    call_example: str

    def __init__(self, chat: Chat, tools: str = "project"):
        if tools not in TOOL_RENDERINGS:
            raise ValueError(f"tool rendering {tools!r} is not one of {', '.join(TOOL_RENDERINGS)}")
        self.chat = chat
        self.tools = tools

    def persona(self) -> str:
        """The project's persona paragraph; the release started straight with the tools."""
        return f"{DEFAULT_PERSONA}\n\n" if self.tools == "project" else ""

    # --- rendering (text only; the engine tokenises)
    def system_prompt(self, docs: list[dict[str, Any]], extra: str = "") -> str:
        raise NotImplementedError

    def holdout_message(self, docs: list[dict[str, Any]]) -> str:
        """The miss_func delivery of held-out tools, as BFCL words it.

        The release delivered them in every format as BFCL's prompting-mode message: the raw
        documents as one JSON list, then "I have updated some more functions ..."."""
        if self.tools == "release":
            return DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
                functions=json.dumps([raw_doc(d) for d in docs], ensure_ascii=False))
        return self._holdout_message(docs)

    def _holdout_message(self, docs: list[dict[str, Any]]) -> str:
        raise NotImplementedError

    def render_calls(self, calls: list[ToolCall], docs: dict[str, dict[str, Any]]) -> str:
        """Assistant text that makes `calls` (the oracle writes its gold calls with this)."""
        raise NotImplementedError

    def parse(self, text: str) -> Parsed:
        raise NotImplementedError

    def parse_for(self, text: str, strict: bool) -> Parsed:
        """The calls in `text` as a protocol reads them: `parse`, or under a strict protocol (protocol=release)
        the release's strict parser where the format has one. The release read <tool_call> blocks only
        (bfcl_env.py:216-341, its xml_json mode), so a format without them keeps its own parser."""
        return self.parse(text)

    # --- whole pieces of a conversation
    def prompt(self, docs: list[dict[str, Any]], extra: str, messages: list[dict[str, str]]) -> str:
        """System prompt, the first turn's messages and the assistant header."""
        system = self.system_prompt(docs, extra)
        return self.chat.begin + self.chat.message("system", system) + self.turn_opening(messages)

    def turn_opening(self, messages: list[dict[str, str]]) -> str:
        return "".join(self.chat.message(m["role"], m["content"]) for m in messages) + self.chat.assistant_header()

    def holdout_opening(self, docs: list[dict[str, Any]]) -> str:
        return self.turn_opening([{"role": "user", "content": self.holdout_message(docs)}])

    def after_assistant(self) -> str:
        return self.chat.after_assistant

    def tool_results(self, results: list[str], newline: bool = False, clip: Callable[[str], str] | None = None) -> str:
        return self.chat.tool_results(results, newline, clip) + self.chat.assistant_header()

    def error_message(self, text: str) -> str:
        """A protocol's refusal (`[ERROR] ...`): the release sends it as a user message (bfcl_env.py:1177)
        and the assistant answers again within the same turn."""
        return self.turn_opening([{"role": "user", "content": text}])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(chat={self.chat.name}, tools={self.tools})"


class _JSONFormat(ToolFormat):
    """Shared decoding of JSON call objects `{"name": ..., <args_key>: {...}}`."""

    args_key: str

    def _decode_object(self, obj: Any, raw: str) -> tuple[ToolCall | None, tuple[str, str] | None]:
        if not isinstance(obj, dict):
            return None, (raw, f"expected a JSON object with \"name\" and \"{self.args_key}\"")
        name = obj.get("name")
        args = obj.get(self.args_key, obj.get("arguments", obj.get("parameters", {})))
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                return None, (raw, f"\"{self.args_key}\" is a string that is not JSON")
        if not isinstance(name, str) or not name:
            return None, (raw, "the call has no \"name\" string")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None, (raw, f"\"{self.args_key}\" must be a JSON object")
        call = ToolCall(name, (), args)
        reason = _replayable(call)
        if reason is not None:
            return None, (raw, reason)
        return call, None

    def _decode_json(self, fragment: str) -> Parsed:
        out = Parsed()
        try:
            obj = json.loads(fragment)
        except (ValueError, RecursionError) as exc:
            out.failures.append((fragment, f"not valid JSON ({type(exc).__name__}: {exc})"[:300]))
            return out
        for item in obj if isinstance(obj, list) else [obj]:
            call, failure = self._decode_object(item, fragment)
            if call is not None:
                out.calls.append(call)
            else:
                out.failures.append(failure)
        return out

    def _render_object(self, call: ToolCall, docs: dict[str, dict[str, Any]]) -> str:
        return json.dumps({"name": call.name, self.args_key: keyword_arguments(call, docs)})

    def _tools_json(self, docs: list[dict[str, Any]], indent: int | None = None) -> list[str]:
        if self.tools == "release":
            return [json.dumps(raw_doc(d), indent=indent) for d in docs]
        return [json.dumps({"type": "function", "function": as_json_schema(d)}, indent=indent) for d in docs]


# The release's strict xml_json parser (bfcl_env.py:216-341, strict_tool_parser: true in exp/SEAL.yaml:104;
# its other switches are off there). A block is a JSON object right between the tags, whitespace around it
# (:254); the object ends at the first "}" that whitespace and a closing tag follow, so an unclosed block
# runs on into the next block's body.
_RELEASE_BLOCK = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
# its texts, word for word (:267, :285; the others below carry the name or the JSON error)
RELEASE_TAG_TEXT = "Found tool_call tag text, but no valid <tool_call>{...}</tool_call> block."
RELEASE_NAME_AND_ARGUMENTS = "Tool call JSON must contain both 'name' and 'arguments'."


def _release_call(body: str) -> tuple[ToolCall | None, str | None]:
    """One block's call, or the release's reason for refusing it (bfcl_env.py:272-322)."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"Invalid tool call JSON: {exc}"  # :314-321
    except RecursionError as exc:  # the release's step fails here (its parser catches JSON errors only)
        return None, f"Invalid tool call JSON: {exc}"
    # a block's body starts with "{", so valid JSON there is an object: :276's skip of other values never fires
    if "name" not in obj or "arguments" not in obj:  # :284-286; "parameters" does not count (:278-283 is off)
        return None, RELEASE_NAME_AND_ARGUMENTS
    name, arguments = obj["name"], obj["arguments"]
    if isinstance(arguments, str):  # :291-298
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            return None, f"Tool '{name}' has non-JSON string arguments."
    if not isinstance(arguments, dict):  # :299-303
        return None, f"Tool '{name}' arguments must be a JSON object."
    # the name as written (any JSON value): the protocol's tool-list check refuses anything but a shown
    # tool's name in the release's words (seal.env.protocol.name_refusal)
    return ToolCall(name, (), arguments), None


class QwenXML(_JSONFormat):
    """Qwen2.5 / Hermes: tools as JSON inside <tools></tools>, calls in <tool_call></tool_call> blocks."""

    name = "qwen_xml"
    args_key = "arguments"
    call_example = '<tool_call>\n{"name": "tool_name", "arguments": {"parameter": "value"}}\n</tool_call>'
    _BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)

    def _tools_block(self, docs: list[dict[str, Any]]) -> str:
        return "<tools>\n" + "\n".join(self._tools_json(docs)) + "\n</tools>"

    def system_prompt(self, docs: list[dict[str, Any]], extra: str = "") -> str:
        text = (
            f"{self.persona()}# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"{self._tools_block(docs)}\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )
        return text + (f"\n\n{extra}" if extra else "")

    def _holdout_message(self, docs: list[dict[str, Any]]) -> str:
        return f"{self._tools_block(docs)}\n{DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}"

    def render_calls(self, calls: list[ToolCall], docs: dict[str, dict[str, Any]]) -> str:
        return "\n".join(f"<tool_call>\n{self._render_object(c, docs)}\n</tool_call>" for c in calls)

    def parse(self, text: str) -> Parsed:
        out = Parsed()
        for match in self._BLOCK.finditer(text):
            body, closed = match.group(1), match.group(2)
            if not closed:
                out.failures.append((match.group(0), "unterminated <tool_call> block (no </tool_call>)"))
                continue
            one = self._decode_json(body.strip())
            out.calls += one.calls
            out.failures += [(match.group(0), reason) for _, reason in one.failures]
        if not out.calls and not out.failures and "</tool_call>" in text:
            out.failures.append((text, "</tool_call> without an opening <tool_call>"))
        return out

    def parse_for(self, text: str, strict: bool) -> Parsed:
        return self.parse_release(text) if strict else self.parse(text)

    def parse_release(self, text: str) -> Parsed:
        """`text` as the release's strict parser reads it: each well-formed block in order gives a call or a
        reason; with no such block, any tag text is one failure (`<tool_call` or `</tool_call>`,
        bfcl_env.py:257-269); text after the last block is never looked at. The reasons are the release's
        own, which the protocol joins with "; " (:339)."""
        out = Parsed()
        blocks = list(_RELEASE_BLOCK.finditer(text))
        if not blocks:
            if "<tool_call" in text or "</tool_call>" in text:
                out.failures.append((text, RELEASE_TAG_TEXT))
            return out
        for block in blocks:
            call, reason = _release_call(block.group(1))
            if call is not None:
                out.calls.append(call)
            else:
                out.failures.append((block.group(0), reason))
        return out


class Llama3JSON(_JSONFormat):
    """Llama-3.1 custom tools: JSON calls {"name": ..., "parameters": {...}}, results as ipython messages."""

    name = "llama3_json"
    args_key = "parameters"
    call_example = '{"name": "tool_name", "parameters": {"parameter": "value"}}'

    def _tools_text(self, docs: list[dict[str, Any]]) -> str:
        return "\n\n".join(self._tools_json(docs, indent=4))

    def system_prompt(self, docs: list[dict[str, Any]], extra: str = "") -> str:
        text = (
            f"Environment: ipython\n\n{self.persona()}"
            "Given the following functions, please respond with a JSON for a function call with its proper "
            "arguments that best answers the given prompt.\n\n"
            'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
            "value}. Do not use variables. To make several calls, write one JSON object per line. When no "
            "function is needed, answer in plain text.\n\n"
            f"{self._tools_text(docs)}"
        )
        return text + (f"\n\n{extra}" if extra else "")

    def _holdout_message(self, docs: list[dict[str, Any]]) -> str:
        return f"{self._tools_text(docs)}\n{DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}"

    def render_calls(self, calls: list[ToolCall], docs: dict[str, dict[str, Any]]) -> str:
        return "\n".join(self._render_object(c, docs) for c in calls)

    def parse(self, text: str) -> Parsed:
        out = Parsed()
        decoder = json.JSONDecoder()
        i, n = 0, len(text)
        while i < n:
            if text[i] not in "{[":
                i += 1
                continue
            try:
                obj, end = decoder.raw_decode(text, i)
            except (ValueError, RecursionError) as exc:
                if text[i] == "[" and not text[i + 1 :].lstrip().startswith("{"):
                    i += 1  # a bracket in prose
                    continue
                out.failures.append((text[i:], f"not valid JSON ({type(exc).__name__}: {exc})"[:300]))
                break
            fragment = text[i:end]
            if isinstance(obj, list) and not any(isinstance(o, dict) for o in obj):
                i = end  # a plain list in prose is not a call
                continue
            for item in obj if isinstance(obj, list) else [obj]:
                call, failure = self._decode_object(item, fragment)
                if call is not None:
                    out.calls.append(call)
                else:
                    out.failures.append(failure)
            i = end
        return out


class BFCLPython(ToolFormat):
    """BFCL's own prompting mode: its system prompt, and calls as a Python list `[f(a=1), g(b='x')]`."""

    name = "bfcl_python"
    call_example = "[tool_name(parameter='value'), other_tool()]"
    _CALL_LIKE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\s*\(")

    def system_prompt(self, docs: list[dict[str, Any]], extra: str = "") -> str:
        # BFCL's default prompt (ret_fmt=python, no tag, json docs, plaintext, classic), built from its constants
        style = PROMPT_STYLE_TEMPLATES["classic"]
        assert "ret_fmt=python" in DEFAULT_SYSTEM_PROMPT_FORMAT and "style=classic" in DEFAULT_SYSTEM_PROMPT_FORMAT
        text = PROMPT_TEMPLATE_MAPPING["plaintext"].format(
            persona=style["persona"],
            task=style["task"],
            tool_call_format=style["tool_call_no_tag"].format(output_format=OUTPUT_FORMAT_MAPPING["python"], param_types=""),
            multiturn_behavior=style["multiturn_behavior"],
            available_tools=style["available_tools"].format(format="json", functions=json.dumps(self._docs(docs), indent=4)),
        )
        return text + (f"\n\n{extra}" if extra else "")

    def _holdout_message(self, docs: list[dict[str, Any]]) -> str:
        return DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=docs)

    def _docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # BFCL's own prompt shows the documents as the loader gives them; the release drops the Python sentence
        return [raw_doc(d) for d in docs] if self.tools == "release" else docs

    def render_calls(self, calls: list[ToolCall], docs: dict[str, dict[str, Any]]) -> str:
        return "[" + ", ".join(c.to_string() for c in calls) + "]"

    def parse(self, text: str) -> Parsed:
        # BFCL's decoder: strip backticks, newlines and spaces, wrap in brackets, parse as Python
        body = text.strip("`\n ")
        if not body:
            return Parsed()
        wrapped = body if body.startswith("[") else "[" + body
        wrapped = wrapped if wrapped.endswith("]") else wrapped + "]"
        try:
            calls = parse_call_list(wrapped, bare_names=True)
        except UnsafeCall as exc:
            if self._CALL_LIKE.search(body) or body.startswith("["):
                return Parsed([], [(body, str(exc))])
            return Parsed()  # plain text: a reply, not a call
        except (RecursionError, MemoryError) as exc:  # pragma: no mutate (a guard: calls._parse_expression catches both itself)
            return Parsed([], [(body[:1000], f"{type(exc).__name__} while parsing")])  # pragma: no mutate (as above)
        out = Parsed()
        for call in calls:
            reason = _replayable(call)
            if reason is None:
                out.calls.append(call)
            else:
                try:
                    fragment = call.to_string()
                except ValueError:  # an int Python will not write in decimal (a hex literal of over 4,300 digits)
                    fragment = body
                out.failures.append((fragment[:1000], reason))
        return out


FORMATS: dict[str, type[ToolFormat]] = {f.name: f for f in (QwenXML, Llama3JSON, BFCLPython)}
# the chat wrapper each format is written for when the tokenizer does not decide
DEFAULT_CHAT = {"qwen_xml": "chatml", "llama3_json": "llama3", "bfcl_python": "chatml"}


def get_format(name: str, chat: str | None = None, tools: str = "project") -> ToolFormat:
    """The tool format `name` (qwen_xml | llama3_json | bfcl_python) wrapped in `chat` (chatml | llama3),
    showing the tools in the `tools` rendering (project | release)."""
    from seal.errors import UserError

    if name not in FORMATS:
        raise UserError(f"unknown tool format {name!r}: choose one of {', '.join(FORMATS)} (backbone.tool_format=...)")
    chat = chat or DEFAULT_CHAT[name]
    if chat not in CHATS:
        raise UserError(f"unknown chat wrapper {chat!r}: choose one of {', '.join(CHATS)}")
    if tools not in TOOL_RENDERINGS:
        raise UserError(f"unknown tool rendering {tools!r}: choose one of {', '.join(TOOL_RENDERINGS)} (rendering=...)")
    return FORMATS[name](CHATS[chat](), tools)
