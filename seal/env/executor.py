"""Isolated backend instances per episode and allow-list dispatch of parsed tool calls.

The official executor rewrites call text into `instance.method(...)` and runs `eval()` on it; here
the call is parsed into literals first (seal.env.calls) and dispatched to a bound method looked up
in an explicit table of the episode's public backend methods. Results and errors are stringified
exactly as the official executor does, so observations and verdicts are the same.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from dataclasses import dataclass
from typing import Any

from seal.env.entry import prepare_bfcl_import
from seal.env.calls import ToolCall, UnsafeCall, parse_call

prepare_bfcl_import()
from bfcl_eval.constants.executable_backend_config import (  # noqa: E402
    CLASS_FILE_PATH_MAPPING,
    STATELESS_CLASSES,
)

# Names the official executor refuses before evaluating (its own guard); kept for identical output.
OFFICIAL_BLOCKED_NAMES = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})
ERROR_PREFIX = "Error during execution: "
# the error of a call that does not bind to its tool's signature
BAD_ARGUMENTS = "bad_arguments"


def backend_class(class_name: str) -> type:
    """The class of one of bfcl-eval's executable backends (the tool schemas read signatures from it)."""
    if class_name == "WebSearchAPI":  # bfcl-eval's, with a pluggable search engine
        from seal.env.search import SearchAPI

        return SearchAPI
    if class_name == "MemoryAPI_vector":  # its module loads a sentence encoder when imported
        from seal.env.vector_memory import vector_memory_class

        return vector_memory_class()
    if class_name not in CLASS_FILE_PATH_MAPPING:
        raise KeyError(f"unknown BFCL backend class {class_name!r}")
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


class Backends:
    """The live API instances of one episode (or one side of a verification).

    Each instance is built fresh from a deep copy of the entry's initial config. Long-context
    backends merge module-level padding records into their state by reference (the TravelAPI
    credit cards, for one), so their whole state is deep-copied once more: nothing an episode does
    can reach another episode through shared module data.
    """

    def __init__(self, involved_classes: list[str], initial_config: dict, long_context: bool):
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for class_name in involved_classes:
            instance = backend_class(class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(
                    copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context
                )
                if long_context:
                    instance.__dict__ = copy.deepcopy(instance.__dict__)
            self.instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = method


def stringify(result: Any) -> str:
    """The official executor's rendering of a return value."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:
            return str(result)
    return str(result)


@dataclass
class CallRecord:
    """One executed (or refused) call and the evidence diagnosis needs about it."""

    text: str
    observation: str
    call: ToolCall | None = None
    # None when the call ran and its result carries no error; otherwise one of
    # "unsafe" (text refused by the parser), "unknown_function", "blocked",
    # "bad_arguments" (the call does not bind to the signature), "exception" (raised while
    # running), "backend_error" (the backend returned {"error": ...}) or "resource_limit"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _huge_power(call: ToolCall) -> bool:
    args = dict(zip(("base", "exponent"), call.args)) | call.kwargs
    base, exponent = args.get("base"), args.get("exponent")
    if type(base) is not int or type(exponent) is not int or exponent <= 0:
        return False
    return exponent * max(abs(base), 2).bit_length() > 1_000_000


def _huge_precision(call: ToolCall) -> bool:
    precision = call.kwargs.get("precision", call.args[-1] if call.args else None)
    return type(precision) is int and precision > 10_000


# Calls whose cost grows without bound in an argument value (exact integer powers, arbitrary
# precision): the official executor would hang or exhaust memory on them, so they are refused.
# No gold call comes near these limits.
RESOURCE_GUARDS = {"power": _huge_power, "logarithm": _huge_precision, "square_root": _huge_precision}

_SIGNATURES: dict[Any, inspect.Signature] = {}


def _binds(method: Any, call: ToolCall) -> bool:
    func = method.__func__
    sig = _SIGNATURES.get(func)
    if sig is None:
        sig = _SIGNATURES[func] = inspect.signature(method)
    try:
        sig.bind(*call.args, **call.kwargs)
    except TypeError:
        return False
    return True


def execute(backends: Backends, call: ToolCall | str) -> CallRecord:
    """Run one call against `backends`. Never raises; failures become error observations."""
    if isinstance(call, str):
        text = call
        try:
            call = parse_call(text)
        except UnsafeCall as exc:
            return CallRecord(text, ERROR_PREFIX + str(exc), None, "unsafe")
    else:
        text = call.to_string()
        try:
            parse_call(text)
        except UnsafeCall as exc:
            # a call handed over as data whose text does not parse back (the release's strict parser passes any
            # argument name and JSON value; the release ran the text, env_handler.py:380-381): it fails as its
            # text does, the text the episode records and the verifier replays
            return CallRecord(text, ERROR_PREFIX + str(exc), None, "unsafe")
    name = call.name
    if name in OFFICIAL_BLOCKED_NAMES:
        return CallRecord(text, f"{ERROR_PREFIX}Function call {name} is not allowed.", call, "blocked")
    method = backends.methods.get(name)
    if method is None:
        return CallRecord(text, f"{ERROR_PREFIX}name '{name}' is not defined", call, "unknown_function")
    guard = RESOURCE_GUARDS.get(name)
    if guard is not None and guard(call):
        return CallRecord(
            text, f"{ERROR_PREFIX}{name} refused: the result would exceed the executor's size limit", call, "resource_limit"
        )
    binds = _binds(method, call)
    try:
        # backends keep argument objects in their state (post_tweet stores its `mentions` list):
        # give them copies so the recorded call never changes after the fact
        result = method(*copy.deepcopy(call.args), **copy.deepcopy(call.kwargs))
        # inside the try, as the official executor renders it: a result Python cannot write out (an integer
        # of over 4,300 digits, power(base=10, exponent=5000)) is an error observation, not a crash
        observation = stringify(result)
    except Exception as exc:  # the backend's own failure, reported as the official executor does
        return CallRecord(text, ERROR_PREFIX + str(exc), call, "exception" if binds else BAD_ARGUMENTS)
    error = "backend_error" if isinstance(result, dict) and "error" in result else None
    return CallRecord(text, observation, call, error)
