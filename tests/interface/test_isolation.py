"""Evaluation isolation and leakage, over all 800 entries.

- An Omega with every component off renders exactly what PLAIN renders (docs, system text, tool
  responses, parse-error handling), whatever its version: evaluation sees the benchmark itself.
- With every component on, no annotation or hint contains a gold argument value the entry's tool
  docs do not already contain, or the name of a tool not shown at that turn.
"""

import json
import re

import pytest

from seal.diagnosis.schema import tool_registry
from seal.env import load_benchmark, parse_call
from seal.env.calls import ToolCall
from seal.env.executor import Backends, execute
from seal.interface import GUIDELINES, PLAIN, Omega, apply

EXAMPLE = '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": "<literal>"}}</tool_call>'
ALL_ON = Omega(phi_schema=True, phi_err=True, phi_cap=frozenset(GUIDELINES), version=3)
FAILURES = [("<tool_call>{'name'", "not valid JSON")]


def shown_docs(entry, turn):
    docs = list(entry.functions)
    for at in sorted(entry.holdout):
        if at <= turn:
            docs += entry.holdout[at]
    return docs


def failure_variants(call: ToolCall):
    """Failed versions of one gold call: each class of error a model makes with it."""
    spec = tool_registry()[call.name]
    names = list(spec.params[: len(call.args)])
    args = {**dict(zip(names, call.args)), **call.kwargs}
    out = [ToolCall(call.name + "_x", call.args, call.kwargs), "helper." + call.to_string()]
    for param, value in args.items():
        rest = {k: v for k, v in args.items() if k != param}
        out.append(ToolCall(call.name, (), rest))  # missing argument
        out.append(ToolCall(call.name, (), {**rest, param + "_x": value}))  # unknown argument
        wrong = 12345 if isinstance(value, str) else "twelve"
        out.append(ToolCall(call.name, (), {**rest, param: wrong}))  # wrong type
        if isinstance(value, str):
            out.append(ToolCall(call.name, (), {**rest, param: "missing_" + value}))  # backend error
    return out


def records(entry):
    """Every gold call of the entry and its failure variants, executed in order on one backend."""
    backends = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    for turn, calls in enumerate(entry.gold):
        for text in calls:
            call = parse_call(text)
            for variant in failure_variants(call):
                yield turn, execute(backends, variant)
            yield turn, execute(backends, call)


@pytest.fixture(scope="module")
def entries():
    return list(load_benchmark().values())


@pytest.fixture(scope="module")
def executed(entries):
    return {entry.id: list(records(entry)) for entry in entries}


def test_an_all_off_interface_renders_exactly_plain(entries, executed):
    views = [apply(Omega(version=v), EXAMPLE) for v in (0, 5)]
    for entry in entries:
        for view in views:
            for turn in range(entry.num_turns):
                docs = shown_docs(entry, turn)
                assert json.dumps(view.tool_docs(docs)) == json.dumps(PLAIN.tool_docs(docs))
            assert view.system_extra() == PLAIN.system_extra() == ""
            visible = entry.visible_function_names(0)
            assert view.parse_error_feedback(FAILURES, visible) is PLAIN.parse_error_feedback(FAILURES, visible) is None
        for turn, record in executed[entry.id]:
            visible = entry.visible_function_names(turn)
            assert all(v.tool_response(record, visible) == PLAIN.tool_response(record, visible) for v in views)


def _gold_values(entry, docs_text):
    values = set()

    def walk(v):
        if isinstance(v, str):
            if len(v) >= 3 and v not in docs_text:
                values.add(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for turn in entry.gold:
        for text in turn:
            call = parse_call(text)
            walk(list(call.args))
            walk(call.kwargs)
    return values


def annotations(plain, annotated):
    """The text phi_schema added to the docs (everything else must be unchanged)."""
    assert [d["name"] for d in plain] == [d["name"] for d in annotated]
    added = []
    for old, new in zip(plain, annotated):
        old_props = old.get("parameters", {}).get("properties", {})
        new_props = new.get("parameters", {}).get("properties", {})
        assert list(old_props) == list(new_props)
        for name in old_props:
            before, after = old_props[name].get("description", ""), new_props[name]["description"]
            assert before.strip() in after
            added.append(after.replace(before.strip(), " "))
            assert {**old_props[name], "description": after} == new_props[name]
        assert {k: v for k, v in old.items() if k != "parameters"} == {k: v for k, v in new.items() if k != "parameters"}
    return "\n".join(added)


def words(text):
    return set(re.findall(r"\w+", text))


def test_no_annotation_or_hint_leaks_gold_values_or_unseen_tools(entries, executed):
    view = apply(ALL_ON, EXAMPLE)
    all_names = set(tool_registry())
    checked = 0
    for entry in entries:
        all_docs_text = json.dumps(shown_docs(entry, entry.num_turns))
        secret = _gold_values(entry, all_docs_text)
        added_by_turn = {}
        for turn in range(entry.num_turns):
            docs = shown_docs(entry, turn)
            added = annotations(docs, view.tool_docs(docs)) + view.system_extra()
            # annotations add no gold value and no tool name that is not shown yet
            assert not {v for v in secret if v in added}, entry.id
            unseen = all_names - entry.visible_function_names(turn)
            assert not unseen & words(added), entry.id
            visible = entry.visible_function_names(turn)
            added_by_turn[turn] = (visible, unseen)
            feedback = view.parse_error_feedback(FAILURES, visible)
            assert not unseen & words(feedback), entry.id
        for turn, record in executed[entry.id]:
            visible, unseen = added_by_turn[turn]
            shown = view.tool_response(record, visible)
            hint = shown[len(record.observation):]
            if record.ok:
                assert hint == ""
                continue
            checked += 1
            leaked = {v for v in secret if v in hint}
            assert not leaked, (entry.id, record.text, hint, leaked)
            names = unseen & words(hint)
            assert not names, (entry.id, record.text, hint, names)
    assert checked > 10_000


def test_the_leak_check_catches_an_echoed_call(entries):
    """The check above would fail for a hint that repeats the failed call (it contains gold values)."""
    entry = load_benchmark()["multi_turn_base_0"]
    secret = _gold_values(entry, json.dumps(shown_docs(entry, entry.num_turns)))
    assert "final_report.pdf" in secret
    echoed = "Hint: did you mean " + entry.gold[0][2] + "?"
    assert {v for v in secret if v in echoed}
