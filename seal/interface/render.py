"""apply(Omega) -> View: what the learner is shown for an interface state.

Only class-level text is ever added: schema markers and allowed values that the docs already
state, the names of tools already shown, the expected call format, the names of the parameters the
schema declares. Never a correct call, a hidden value, a tool not yet shown, or an answer.

phi_schema has two annotation styles (InterfaceConfig.schema_style, set by conf/rendering/*.yaml):
- `project`: "[required] " in front of each required parameter's description, "Allowed values: ..."
  wherever the docs list values (BFCL writes them as "[Enum]: [...]" phrases), on every doc shown,
  including tools delivered later in miss_func entries;
- `release`: " [required]" at the end of each required top-level parameter's description, allowed
  values only from an explicit `enum` key (no BFCL V3 multi-turn parameter has one), and tools
  delivered later shown as they are: what the authors' release did.

Whose words the learner reads (the paper's Appendix D prints the release's templates word for word: D.2 its
observation_lite instruction, D.3 its parse and tool-error hints, D.4 its five guidelines):
- the release's and Appendix D.2's, quoted: RELEASE_SCHEMA_NOTE (bfcl_env.py, the default instruction of its
  observation_lite; D.2's "Observation-Lite Instruction");
- the same, shortened: SCHEMA_NOTE (RELEASE_SCHEMA_NOTE without "Observation note:" and "when calling a tool");
- this project's paraphrase of the paper's description of the interface (Section 3.3), quoted from neither the
  paper nor the release: PLAIN_TEXT and the openings of the execution-error hints ("Required argument(s) X of T were
  missing", "T does not accept argument(s) A", "T rejected an argument type ...; re-check the schema"). The release
  and Appendix D.3 word the same classes "[ToolHint] Required argument(s) X for `T` were missing.", "`T` does not
  accept argument `A`.", "`T` rejected an argument type." and go on with sentences of their own (bfcl_env.py,
  _enrich_tool_response_text), not used here;
- this project's words: GUIDELINE_TEXT (the paper's five guidelines, by name and what each asks; the release and
  Appendix D.4 word them "[Cautious-call] If no available function clearly matches ..."), the format hint, the
  hints for an unreadable call, an unknown tool and any other error, and the ", or value" of the type hint.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from seal.diagnosis.rules import snapshot
from seal.env.schema import (
    MISSING_REQUIRED,
    NOT_ALLOWED,
    UNKNOWN_ARGUMENT,
    WRONG_TYPE,
    allowed_values,
    check_call,
)
from seal.env.executor import CallRecord
from seal.interface.omega import GUIDELINES, SCHEMA_STYLES, Omega
from seal.interface.view import PLAIN, View

REQUIRED_MARK = "[required]"
# phi_schema's system-prompt note per style, unless the config gives its own text: the release's sentence shortened,
# and the release's sentence, quoted
SCHEMA_NOTE = (
    "Parameters marked [required] must be provided exactly. "
    "Do not invent tools outside the current schema."
)
RELEASE_SCHEMA_NOTE = (
    "Observation note: parameters marked [required] must be provided exactly when calling a tool; "
    "do not invent tools outside the current schema."
)
SCHEMA_NOTES = {"project": SCHEMA_NOTE, "release": RELEASE_SCHEMA_NOTE}
# phi_cap's guidelines: the paper's five (their names and what each asks), in this project's words
GUIDELINE_TEXT = {
    "cautious_call": "Cautious call: if no available tool fits the request, reply in plain text; "
    "do not fabricate a call.",
    "active_respond": "Active respond: if an available tool can serve the request, emit the call "
    "instead of only describing it.",
    "state_aware": "State aware: re-read the most recent tool results before making a call that "
    "changes state.",
    "scope": "Scope: only act on items (files, ids, names) that appeared in the request or in "
    "earlier results.",
    "format": "Format: give the answer in the format the user asked for.",
}
HINT_PREFIX = "\nHint: "
PLAIN_TEXT = "If no tool fits, answer in plain text."


def _project_description(name: str, prop: dict[str, Any], required: set[str]) -> str:
    description = prop.get("description", "")
    values = allowed_values(prop)
    if values and "Allowed values:" not in description:
        description = f"{description.rstrip()} Allowed values: {', '.join(values)}.".strip()
    if name in required and not description.startswith(REQUIRED_MARK):
        description = f"{REQUIRED_MARK} {description}".rstrip()
    return description


def _release_description(name: str, prop: dict[str, Any], required: set[str]) -> str:
    description = str(prop.get("description") or "")
    marks = []
    if name in required and REQUIRED_MARK not in description:
        marks.append(REQUIRED_MARK)
    # only an explicit enum counts: the "[Enum]: [...]" phrases of BFCL's text are left to the reader
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and "Allowed values:" not in description:
        marks.append("Allowed values: " + ", ".join(str(v) for v in enum))
    return " ".join([description, *marks]).strip() if marks else description


_DESCRIBE = {"project": _project_description, "release": _release_description}


def annotate_docs(docs: list[dict[str, Any]], style: str = "project") -> list[dict[str, Any]]:
    """phi_schema's cues on the top-level parameters of each doc, in the given style.

    Copies only the dicts it changes (a deep copy of every doc per episode is measurably slow);
    the input is never mutated.
    """
    describe = _DESCRIBE[style]
    out = []
    for doc in docs:
        params = doc.get("parameters") or {}
        props = params.get("properties") or {}
        if not props:
            out.append(copy.deepcopy(doc))
            continue
        required = set(params.get("required") or [])
        new_props = {}
        for name, prop in props.items():
            if not isinstance(prop, dict):
                new_props[name] = copy.deepcopy(prop)
                continue
            new_props[name] = {**copy.deepcopy(prop), "description": describe(name, prop, required)}
        new_params = {k: (new_props if k == "properties" else copy.deepcopy(v)) for k, v in params.items()}
        out.append({k: (new_params if k == "parameters" else copy.deepcopy(v)) for k, v in doc.items()})
    return out


def _tools(visible: frozenset[str]) -> str:
    return "Available tools: " + ", ".join(sorted(visible)) + "."


def format_hint(call_example: str, visible: frozenset[str]) -> str:
    return f"Expected a tool call in this format: {call_example} {_tools(visible)} {PLAIN_TEXT}"


def error_hint(record: CallRecord, visible: frozenset[str], call_example: str) -> str:
    """The class-level recovery hint for one failed call ("" for a call that did not fail)."""
    if record.ok:
        return ""
    if record.error == "unsafe" or record.call is None:
        return "The call could not be read as a plain tool call with literal arguments. " + format_hint(
            call_example, visible
        )
    name = record.call.name
    if record.error in ("unknown_function", "blocked") or name not in visible:
        return f"That function is not one of the available tools. {_tools(visible)} {PLAIN_TEXT}"
    call = snapshot(record)  # the call as written (record.call is not None here)
    issues = check_call(call)
    missing = [i.argument for i in issues if i.kind == MISSING_REQUIRED]
    unknown = [i.argument for i in issues if i.kind == UNKNOWN_ARGUMENT]
    if missing:
        return f"Required argument(s) {', '.join(missing)} of {name} were missing."
    if unknown:
        shown = [a for a in unknown if a.isidentifier()]
        what = f"argument(s) {', '.join(shown)}" if shown else "that many positional arguments"
        return f"{name} does not accept {what}; re-check the schema."
    if any(i.kind in (WRONG_TYPE, NOT_ALLOWED) for i in issues):
        return f"{name} rejected an argument type or value; re-check the schema."
    return (
        f"{name} reported an error. Re-check its arguments against the schema and the earlier results, "
        "then call it again or explain the problem in plain text."
    )


class InterfaceView:
    """The View for one Omega (see seal.interface.view.View)."""

    def __init__(self, omega: Omega, call_example: str, schema_style: str = "project", schema_note: str | None = None):
        if schema_style not in SCHEMA_STYLES:
            raise ValueError(f"schema_style {schema_style!r} is not one of {', '.join(SCHEMA_STYLES)}")
        self.omega = omega
        self.call_example = call_example
        self.schema_style = schema_style
        self.schema_note = SCHEMA_NOTES[schema_style] if schema_note is None else schema_note
        # everything the rendered text depends on (the version counter does not change it): equal keys, equal prompts
        self.cache_key = (dataclasses.replace(omega, version=0), call_example, schema_style, self.schema_note)

    def tool_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return annotate_docs(docs, self.schema_style) if self.omega.phi_schema else docs

    def delivered_docs(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the release annotated only the tool list of the system prompt
        return docs if self.schema_style == "release" else self.tool_docs(docs)

    def system_extra(self) -> str:
        parts = []
        if self.omega.phi_schema and self.schema_note:
            parts.append(self.schema_note)
        if self.omega.phi_cap:
            lines = [f"- {GUIDELINE_TEXT[g]}" for g in GUIDELINES if g in self.omega.phi_cap]
            parts.append("Guidelines:\n" + "\n".join(lines))
        return "\n\n".join(parts)

    def tool_response(self, record: CallRecord, visible: frozenset[str]) -> str:
        if not self.omega.phi_err or record.ok:
            return record.observation
        return record.observation + HINT_PREFIX + error_hint(record, visible, self.call_example)

    def parse_error_feedback(self, failures: list[tuple[str, str]], visible: frozenset[str]) -> str | None:
        if not self.omega.phi_err:
            return None
        return "Your output could not be decoded as a tool call. " + format_hint(self.call_example, visible)


def apply(omega: Omega, call_example: str, cfg: Any = None) -> View:
    """The View the learner sees under `omega`; PLAIN itself when every component is off.

    `cfg` (an InterfaceConfig) gives phi_schema's annotation style and note; without it, the project's.
    """
    if not omega.active:
        return PLAIN
    if cfg is None:
        return InterfaceView(omega, call_example)
    return InterfaceView(omega, call_example, cfg.schema_style, cfg.schema_note)
