"""Tool calls as data: parse call text into (name, literal arguments) without evaluating anything.

Model text never reaches `eval`. A call is accepted only when its syntax tree is a plain function
name applied to literal values (strings, numbers, booleans, None, lists, tuples, dicts); every other
construct is rejected with a reason that becomes the call's error observation.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

# Bounds on what one call may contain; generous for the benchmark (its longest gold call is a few
# hundred characters) and small enough that hostile input cannot exhaust memory or the stack.
MAX_CALL_CHARS = 100_000
MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_STRING_CHARS = 50_000

_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


class UnsafeCall(ValueError):
    """Call text that is not a plain call with literal arguments; the message says why."""


@dataclass
class ToolCall:
    name: str
    # positional literal arguments as written (BFCL gold uses them for 40 calls per category)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def to_string(self) -> str:
        """Canonical Python call text; `parse_call(c.to_string())` gives back an equal call."""
        parts = [repr(v) for v in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0


def _literal(node: ast.AST, depth: int, budget: _Budget, bare_names: bool) -> Any:
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise UnsafeCall(f"arguments have more than {MAX_NODES} elements")
    if depth > MAX_DEPTH:
        raise UnsafeCall(f"arguments are nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                raise UnsafeCall(f"a string argument is longer than {MAX_STRING_CHARS} characters")
            return value
        if value is None or isinstance(value, (bool, int, float)):
            return value
        raise UnsafeCall(f"literal of type {type(value).__name__} is not allowed")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            return -operand.value if isinstance(node.op, ast.USub) else operand.value
        raise UnsafeCall("a sign may only precede a number")
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e, depth + 1, budget, bare_names) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise UnsafeCall("dict unpacking (**) is not allowed")
            k = _literal(key, depth + 1, budget, bare_names)
            if isinstance(k, (list, dict)):
                raise UnsafeCall("dict keys must be strings, numbers, booleans, None or tuples")
            out[k] = _literal(value, depth + 1, budget, bare_names)
        return out
    if bare_names and isinstance(node, ast.Name):
        # BFCL's prompting decoder reads a bare name as its own text (f(x=abc) -> x='abc')
        return node.id
    raise UnsafeCall(f"only literal arguments are allowed, got {type(node).__name__}")


def _call_from_node(node: ast.AST, bare_names: bool) -> ToolCall:
    if not isinstance(node, ast.Call):
        raise UnsafeCall(f"expected a function call, got {type(node).__name__}")
    if not isinstance(node.func, ast.Name):
        raise UnsafeCall("only a plain function name may be called (no attributes or expressions)")
    name = node.func.id
    if not _IDENTIFIER.match(name):
        raise UnsafeCall(f"function name {name!r} is not allowed")
    budget = _Budget()
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise UnsafeCall("argument unpacking (*) is not allowed")
        args.append(_literal(arg, 1, budget, bare_names))
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise UnsafeCall("argument unpacking (**) is not allowed")
        kwargs[kw.arg] = _literal(kw.value, 1, budget, bare_names)
    return ToolCall(name, tuple(args), kwargs)


def _parse_expression(text: str) -> ast.AST:
    if not isinstance(text, str):
        raise UnsafeCall(f"call text must be a string, got {type(text).__name__}")
    if len(text) > MAX_CALL_CHARS:
        raise UnsafeCall(f"call text is longer than {MAX_CALL_CHARS} characters")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise UnsafeCall(f"not a valid Python call ({type(exc).__name__}: {exc})") from None


def parse_call(text: str) -> ToolCall:
    """One call such as ``cd(folder='docs')``; raises UnsafeCall for anything else."""
    return _call_from_node(_parse_expression(text), bare_names=False)


def parse_call_list(text: str, bare_names: bool = False) -> list[ToolCall]:
    """A Python list of calls ``[f(a=1), g()]`` or a single call (BFCL's prompting output)."""
    node = _parse_expression(text)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_call_from_node(elt, bare_names) for elt in node.elts]
    return [_call_from_node(node, bare_names)]
