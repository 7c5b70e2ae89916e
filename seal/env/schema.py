"""Tool-schema validation of one decoded call against the benchmark's own tool docs.

Used by diagnosis (argument_mismatch: required fields, types, allowed values, structure) and by the
interface's recovery feedback (which class of argument error a failed call made). Everything here
is read from the docs and the backend signatures the model is shown or calls; nothing is evaluated.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from dataclasses import dataclass
from typing import Any

from seal.env.benchmarks.bfcl_v3 import load_benchmark
from seal.env.calls import ToolCall
from seal.env.executor import backend_class

# kinds of schema issue, in the order a hint reports them
MISSING_REQUIRED = "missing_required"
UNKNOWN_ARGUMENT = "unknown_argument"
WRONG_TYPE = "wrong_type"
NOT_ALLOWED = "not_allowed"

# Ways the benchmark's descriptions spell an enumeration ("[Enum]: [...]", "Options are: a, b.")
_ENUM_PATTERNS = (
    re.compile(r"\[Enum\]:\s*(\[.*?\])"),
    re.compile(r"\[Enum\]:\s*([^\[\]]+?)\s*$"),
    re.compile(r"Here are the options:\s*(.+?)\.?\s*$"),
    re.compile(r"Options are:\s*(.+?)\.?\s*$"),
)


def allowed_values(prop: dict[str, Any]) -> tuple[str, ...] | None:
    """The values a parameter (or its list items) may take, from `enum` or the description text."""
    for holder in (prop, prop.get("items") or {}):
        if isinstance(holder.get("enum"), list):
            return tuple(str(v) for v in holder["enum"])
    description = prop.get("description", "")
    for pattern in _ENUM_PATTERNS:
        match = pattern.search(description)
        if not match:
            continue
        text = match.group(1).strip()
        if text.startswith("["):
            try:
                values = json.loads(text)
            except json.JSONDecodeError:
                continue
            return tuple(str(v) for v in values)
        return tuple(v.strip() for v in text.split(",") if v.strip())
    return None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    # parameter names in signature order (positional arguments bind to these)
    params: tuple[str, ...]
    required: frozenset[str]
    # parameter -> declared JSON-schema type ("string", "integer", "float", "boolean", "array", "dict")
    types: dict[str, str]
    item_types: dict[str, str]
    allowed: dict[str, tuple[str, ...]]


@functools.lru_cache(maxsize=1)
def tool_registry() -> dict[str, ToolSpec]:
    """All benchmark tools by name (no method name is shared across classes)."""
    docs: dict[str, dict[str, Any]] = {}
    classes: dict[str, str] = {}
    for entry in load_benchmark().values():
        for name, doc in entry.docs_by_name().items():
            docs[name] = doc
        for class_name in entry.involved_classes:
            classes.setdefault(class_name, class_name)
    order: dict[str, tuple[str, ...]] = {}
    for class_name in classes:
        cls = backend_class(class_name)
        for name, func in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                order[name] = tuple(p for p in inspect.signature(func).parameters if p != "self")
    registry = {}
    for name, doc in docs.items():
        props = doc.get("parameters", {}).get("properties", {})
        registry[name] = ToolSpec(
            name=name,
            params=order.get(name, tuple(props)),
            required=frozenset(doc.get("parameters", {}).get("required", [])),
            types={p: s.get("type", "") for p, s in props.items()},
            item_types={
                p: s["items"].get("type", "") for p, s in props.items() if isinstance(s.get("items"), dict)
            },
            allowed={p: v for p, s in props.items() if (v := allowed_values(s)) is not None},
        )
    return registry


def _type_ok(value: Any, declared: str) -> bool:
    if declared == "string":
        return isinstance(value, str)
    if declared == "integer":
        return type(value) is int
    if declared == "float":
        return type(value) in (int, float)
    if declared == "boolean":
        return type(value) is bool
    if declared == "array":
        return isinstance(value, (list, tuple))
    if declared == "dict":
        return isinstance(value, dict)
    return True  # "any" or undeclared


@dataclass(frozen=True)
class SchemaIssue:
    kind: str
    argument: str


def bind_arguments(call: ToolCall, spec: ToolSpec) -> tuple[dict[str, Any], list[SchemaIssue]]:
    """Positional and keyword arguments by parameter name, plus structural issues."""
    issues: list[SchemaIssue] = []
    bound: dict[str, Any] = {}
    for i, value in enumerate(call.args):
        if i < len(spec.params):
            bound[spec.params[i]] = value
        else:
            issues.append(SchemaIssue(UNKNOWN_ARGUMENT, f"#{i + 1}"))
    for key, value in call.kwargs.items():
        if key not in spec.params and key not in spec.types:
            issues.append(SchemaIssue(UNKNOWN_ARGUMENT, key))
        else:
            bound[key] = value
    return bound, issues


def check_call(call: ToolCall) -> list[SchemaIssue]:
    """Schema issues of a call to a known tool ([] for unknown tools: that is another failure)."""
    spec = tool_registry().get(call.name)
    if spec is None:
        return []
    bound, issues = bind_arguments(call, spec)
    for name in sorted(spec.required - set(bound)):
        issues.append(SchemaIssue(MISSING_REQUIRED, name))
    for name, value in bound.items():
        declared = spec.types.get(name, "")
        if value is None and name not in spec.required:
            continue  # an optional argument passed as its None default
        if not _type_ok(value, declared):
            issues.append(SchemaIssue(WRONG_TYPE, name))
            continue
        item_type = spec.item_types.get(name)
        if item_type and isinstance(value, (list, tuple)) and not all(_type_ok(v, item_type) for v in value):
            issues.append(SchemaIssue(WRONG_TYPE, name))
            continue
        allowed = spec.allowed.get(name)
        if allowed is not None:
            values = value if isinstance(value, (list, tuple)) else [value]
            if any(str(v) not in allowed for v in values):
                issues.append(SchemaIssue(NOT_ALLOWED, name))
    return issues
