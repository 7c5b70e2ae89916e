"""Evaluation isolation and leakage, over all 800 entries.

- An Omega with every component off renders exactly what PLAIN renders (docs, system text, tool
  responses, parse-error handling), whatever its version: evaluation sees the benchmark itself.
- With every component on, no annotation or hint contains a gold argument value the entry's tool
  docs do not already contain, or the name of a tool not shown at that turn.
"""

import json
import re

import pytest

from seal.env.schema import tool_registry
from seal.env import load_benchmark, parse_call
from seal.env.calls import ToolCall
from seal.env.executor import Backends, execute
from seal.interface import GUIDELINES, PLAIN, Omega, apply
from tests.env.official_oracle import official_observations

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


@pytest.fixture(scope="module")
def raw_entries():
    """The entries as bfcl-eval's own inference loads them (with its Python-syntax note in each doc)."""
    from seal.env.benchmarks.bfcl_v3 import CATEGORIES
    from seal.env.entry import prepare_bfcl_import

    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry

    return {item["id"]: item for category in CATEGORIES
            for item in load_dataset_entry(f"multi_turn_{category}")}


def test_an_all_off_interface_is_the_benchmark_itself(entries, raw_entries):
    # whatever its version (components that were on and went off), an all-off Omega is PLAIN
    for version in (0, 5):
        assert apply(Omega(version=version), EXAMPLE) is PLAIN
    assert apply(ALL_ON, EXAMPLE) is not PLAIN
    # and PLAIN shows what bfcl-eval loads for each entry: its docs unchanged and no system text
    for entry in entries:
        assert PLAIN.tool_docs(shown_docs(entry, 0)) == raw_entries[entry.id]["function"], entry.id
        assert PLAIN.system_extra() == ""
        assert PLAIN.parse_error_feedback(FAILURES, entry.visible_function_names(0)) is None


SET_OF_STRINGS = re.compile(r"\{'[^'{}]*'(?:, '[^'{}]*')+\}")


def _unordered_sets(text):
    """A Python set printed in a message ("{'economy', 'first'}") in one order: its order depends on the
    process's string-hash seed, so two processes print the same backend error differently."""
    return SET_OF_STRINGS.sub(lambda m: "{" + ", ".join(sorted(m.group(0)[1:-1].split(", "))) + "}", text)


def test_plain_tool_responses_are_the_official_executors_strings(entries, executed):
    # the gold calls and their failure variants, one entry in 20, against bfcl-eval's own executor
    sample = entries[::20]
    played = {entry.id: [[] for _ in entry.gold] for entry in sample}
    for entry in sample:
        for turn, record in executed[entry.id]:
            played[entry.id][turn].append(record)
    items = [{"id": eid, "turns": [[r.text for r in turn] for turn in turns]} for eid, turns in played.items()]
    compared = refused = 0
    for item, theirs in zip(items, official_observations(items)):
        for turn, official in zip(played[item["id"]], theirs):
            for record, expected in zip(turn, official, strict=True):
                got = PLAIN.tool_response(record, frozenset())
                if record.error == "unsafe":
                    # deliberate: text that is not a plain call with literal arguments is refused before it
                    # could run (bfcl-eval evals it); both answers are execution errors
                    assert got.startswith("Error during execution: ") and expected.startswith("Error during")
                    refused += 1
                    continue
                assert _unordered_sets(got) == _unordered_sets(expected), (item["id"], record.text)
                compared += 1
    assert compared > 1500 and 0 < refused < compared / 5


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
