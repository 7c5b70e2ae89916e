"""apply(): the View each component produces, on real tool docs and real failed calls."""

import copy

import pytest

from seal.env import load_benchmark, parse_call
from seal.env.executor import Backends, CallRecord, execute
from seal.interface import GUIDELINES, PLAIN, Omega, apply
from seal.interface.render import HINT_PREFIX, SCHEMA_NOTE

EXAMPLE = '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": "<literal>"}}</tool_call>'
ALL_ON = Omega(phi_schema=True, phi_err=True, phi_cap=frozenset(GUIDELINES), version=7)


@pytest.fixture(scope="module")
def base0():
    return load_benchmark()["multi_turn_base_0"]


def run(entry, text):
    backends = Backends(entry.involved_classes, entry.initial_config, entry.long_context)
    return execute(backends, text)


def hint(view, record, visible):
    shown = view.tool_response(record, visible)
    assert shown.startswith(record.observation)
    return shown[len(record.observation):]


def test_everything_off_is_plain():
    assert apply(Omega(version=12), EXAMPLE) is PLAIN


def test_schema_marks_required_and_allowed_values_without_touching_the_input():
    docs = load_benchmark()["multi_turn_base_50"].functions
    before = copy.deepcopy(docs)
    view = apply(Omega(phi_schema=True), EXAMPLE)
    shown = view.tool_docs(docs)
    assert docs == before and [d["name"] for d in shown] == [d["name"] for d in docs]
    by_name = {d["name"]: d["parameters"]["properties"] for d in shown}
    assert by_name["activateParkingBrake"]["mode"]["description"].startswith("[required] ")
    assert by_name["activateParkingBrake"]["mode"]["description"].endswith("Allowed values: engage, release.")
    assert by_name["lockDoors"]["door"]["description"].endswith("Allowed values: driver, passenger, rear_left, rear_right.")
    optional = by_name["adjustClimateControl"]["unit"]["description"]
    assert not optional.startswith("[required]") and "Allowed values: celsius, fahrenheit." in optional
    assert view.system_extra() == SCHEMA_NOTE
    # idempotent: annotating annotated docs changes nothing
    assert view.tool_docs(shown) == shown


def test_cap_lists_active_guidelines_in_order():
    view = apply(Omega(phi_cap=frozenset({"format", "cautious_call"})), EXAMPLE)
    text = view.system_extra()
    assert text.startswith("Guidelines:\n- Cautious call:") and text.splitlines()[-1].startswith("- Format:")
    assert view.tool_docs([{"name": "x"}]) == [{"name": "x"}]


@pytest.mark.parametrize("text, expected", [
    ("mkdir()", "Required argument(s) dir_name of mkdir were missing."),
    ("mkdir(dir_name='a', mode='x')", "mkdir does not accept argument(s) mode; re-check the schema."),
    ("mkdir(dir_name=5)", "mkdir rejected an argument type or value; re-check the schema."),
    ("make_dir(dir_name='a')", "That function is not one of the available tools."),
    ("os.mkdir('a')", "could not be read as a plain tool call"),
    ("cd(folder='nowhere')", "cd reported an error."),
])
def test_err_hints_by_failure_class(base0, text, expected):
    visible = base0.visible_function_names(0)
    record = run(base0, text)
    assert not record.ok
    view = apply(Omega(phi_err=True), EXAMPLE)
    got = hint(view, record, visible)
    assert got.startswith(HINT_PREFIX) and expected in got
    if "available tools" in expected or "plain tool call" in expected:
        assert "Available tools: " + ", ".join(sorted(visible)) in got and "answer in plain text" in got
    # the same record without phi_err is the plain observation
    assert apply(Omega(phi_schema=True), EXAMPLE).tool_response(record, visible) == record.observation


def test_successful_calls_and_parse_errors(base0):
    visible = base0.visible_function_names(0)
    record = run(base0, "pwd()")
    assert record.ok and apply(ALL_ON, EXAMPLE).tool_response(record, visible) == record.observation
    from seal.interface.render import error_hint

    assert error_hint(record, visible, EXAMPLE) == ""
    feedback = apply(Omega(phi_err=True), EXAMPLE).parse_error_feedback([("{bad", "not JSON")], visible)
    assert EXAMPLE in feedback and "answer in plain text" in feedback and "cat, cd, comment" in feedback
    assert apply(Omega(phi_schema=True), EXAMPLE).parse_error_feedback([("{bad", "x")], visible) is None


def test_a_tool_not_yet_shown_is_never_named(base0):
    entry = load_benchmark()["multi_turn_miss_func_0"]
    visible = entry.visible_function_names(1)
    assert "sort" not in visible
    record = CallRecord("sort(file_name=5)", "Error during execution: boom", parse_call("sort(file_name=5)"), "exception")
    got = hint(apply(ALL_ON, EXAMPLE), record, visible)
    assert "sort" not in got.replace("sorted", "") and "not one of the available tools" in got


# ---------------------------------------------------------------------------------------- release style

RELEASE_NOTE = ("Observation note: parameters marked [required] must be provided exactly when calling a tool; "
                "do not invent tools outside the current schema.")


def release_cfg(**kw):
    from seal.interface import InterfaceConfig

    return InterfaceConfig(schema="always", schema_style="release", **kw)


def test_release_style_appends_required_and_adds_no_allowed_values():
    docs = load_benchmark()["multi_turn_base_50"].functions
    before = copy.deepcopy(docs)
    view = apply(Omega(phi_schema=True), EXAMPLE, release_cfg())
    shown = view.tool_docs(docs)
    assert docs == before
    by_name = {d["name"]: d["parameters"]["properties"] for d in shown}
    # the pinned example
    assert by_name["startEngine"]["ignitionMode"]["description"].endswith('[Enum]: ["START", "STOP"] [required]')
    assert by_name["activateParkingBrake"]["mode"]["description"] == 'The mode to set. [Enum]: ["engage", "release"] [required]'
    # optional parameters keep their text, "[Enum]" phrases are not turned into allowed values
    original = {d["name"]: d["parameters"]["properties"] for d in docs}
    assert by_name["adjustClimateControl"]["unit"] == original["adjustClimateControl"]["unit"]
    assert view.system_extra() == RELEASE_NOTE
    assert view.tool_docs(shown) == shown


def test_release_style_on_every_entry_adds_exactly_one_mark_per_required_parameter(bench):
    view = apply(Omega(phi_schema=True), EXAMPLE, release_cfg())
    for entry in bench.values():
        docs = entry.functions + [d for extra in entry.holdout.values() for d in extra]
        for old, new in zip(docs, view.tool_docs(docs)):
            required = set(old["parameters"].get("required", []))
            for name, prop in old["parameters"]["properties"].items():
                want = prop["description"] + (" [required]" if name in required else "")
                assert new["parameters"]["properties"][name] == {**prop, "description": want}, (entry.id, name)
            assert {k: v for k, v in new.items() if k != "parameters"} == {k: v for k, v in old.items() if k != "parameters"}


def test_release_style_uses_only_explicit_enum_keys():
    doc = {"name": "f", "description": "F.", "parameters": {"type": "dict", "required": ["m"], "properties": {
        "m": {"type": "string", "description": "Mode.", "enum": ["a", "b"]},
        "n": {"type": "string", "description": "Name. [Enum]: [\"x\", \"y\"]", "enum": ["x", "y"]},
        "nested": {"type": "dict", "description": "Opts.", "properties": {"k": {"type": "string", "description": "K."}},
                   "required": ["k"]},
    }}}
    (shown,) = apply(Omega(phi_schema=True), EXAMPLE, release_cfg()).tool_docs([doc])
    props = shown["parameters"]["properties"]
    assert props["m"]["description"] == "Mode. [required] Allowed values: a, b"
    assert props["n"]["description"] == 'Name. [Enum]: ["x", "y"] Allowed values: x, y'
    # only top-level parameters are marked
    assert props["nested"]["properties"]["k"]["description"] == "K."


def test_tools_delivered_later_are_annotated_only_in_the_project_style():
    entry = load_benchmark()["multi_turn_miss_func_0"]
    (docs,) = entry.holdout.values()
    release = apply(Omega(phi_schema=True), EXAMPLE, release_cfg())
    project = apply(Omega(phi_schema=True), EXAMPLE)
    assert release.delivered_docs(docs) == docs
    assert "[required]" in str(project.delivered_docs(docs)) and "[required]" not in str(docs)
    assert PLAIN.delivered_docs(docs) is docs


def test_the_note_is_a_config_value_and_the_style_is_checked():
    from seal.interface import InterfaceConfig

    view = apply(Omega(phi_schema=True), EXAMPLE, release_cfg(schema_note="Observation note: be exact."))
    assert view.system_extra() == "Observation note: be exact."
    assert apply(Omega(phi_schema=True), EXAMPLE, release_cfg(schema_note="")).system_extra() == ""
    assert apply(Omega(version=3), EXAMPLE, release_cfg()) is PLAIN
    with pytest.raises(ValueError, match="schema_style"):
        InterfaceConfig(schema_style="fancy")


# ---------------------------------------------------------------------------------------- exact texts

ERR_ONLY = Omega(phi_err=True, version=1)
VISIBLE = frozenset({"cd", "ls", "mv"})
TOOLS = "Available tools: cd, ls, mv. If no tool fits, answer in plain text."


def _hinted(text, observation, error, call=True):
    record = CallRecord(text, observation, parse_call(text) if call else None, error)
    out = apply(ERR_ONLY, EXAMPLE).tool_response(record, VISIBLE)
    assert out.startswith(observation + "\nHint: ")
    return out[len(observation + "\nHint: "):]


def test_every_hint_class_word_for_word():
    # text that is not a plain call
    assert _hinted("os.system('x')", "Error during execution: refused", "unsafe", call=False) == (
        f"The call could not be read as a plain tool call with literal arguments. Expected a tool call in this "
        f"format: {EXAMPLE} {TOOLS}")
    # a tool that is not shown, or blocked
    for error in ("unknown_function", "blocked"):
        assert _hinted("rm(file_name='a')", "Error during execution: no", error) == (
            "That function is not one of the available tools. " + TOOLS)
    # the error class decides, even for a visible tool or a call that parsed
    for error in ("unknown_function", "blocked"):
        assert _hinted("ls()", "Error during execution: no", error) == (
            "That function is not one of the available tools. " + TOOLS)
    assert _hinted("ls()", "Error during execution: refused", "unsafe").startswith("The call could not be read")
    # missing, unknown, positional-overflow and wrong-type arguments
    assert _hinted("mv()", "Error during execution: missing", "bad_arguments") == (
        "Required argument(s) destination, source of mv were missing.")
    assert _hinted("cd(folder='a', depth=2, x=1)", "Error during execution: unexpected", "bad_arguments") == (
        "cd does not accept argument(s) depth, x; re-check the schema.")
    assert _hinted("cd()", "Error during execution: missing", "bad_arguments") == (
        "Required argument(s) folder of cd were missing.")
    assert _hinted("cd(folder='a', depth=2)", "Error during execution: unexpected", "bad_arguments") == (
        "cd does not accept argument(s) depth; re-check the schema.")
    assert _hinted("cd('a', 'b')", "Error during execution: too many", "bad_arguments") == (
        "cd does not accept that many positional arguments; re-check the schema.")
    assert _hinted("cd(folder=5)", "Error during execution: type", "exception") == (
        "cd rejected an argument type or value; re-check the schema.")
    # a well-formed call the backend refused
    assert _hinted("cd(folder='nope')", '{"error": "cd: nope: No such file or directory"}', "backend_error") == (
        "cd reported an error. Re-check its arguments against the schema and the earlier results, then call it "
        "again or explain the problem in plain text.")
    # a call that worked gets no hint at all
    ok = CallRecord("ls()", '{"current_directory_content": []}', parse_call("ls()"), None)
    assert apply(ERR_ONLY, EXAMPLE).tool_response(ok, VISIBLE) == ok.observation
    assert apply(ERR_ONLY, EXAMPLE).parse_error_feedback([("x", "y")], VISIBLE) == (
        f"Your output could not be decoded as a tool call. Expected a tool call in this format: {EXAMPLE} {TOOLS}")


def test_system_extra_and_docs_word_for_word():
    from seal.interface.render import GUIDELINE_TEXT

    view = apply(Omega(phi_schema=True, phi_cap=frozenset({"format", "scope"}), version=1), EXAMPLE)
    assert view.system_extra() == (SCHEMA_NOTE + "\n\nGuidelines:\n- " + GUIDELINE_TEXT["scope"] + "\n- "
                                   + GUIDELINE_TEXT["format"])
    # without phi_schema the docs are the very list given
    docs = [{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {}}}]
    assert apply(ERR_ONLY, EXAMPLE).tool_docs(docs) is docs


def test_annotation_by_hand_and_the_input_is_never_shared():
    from seal.interface.render import annotate_docs

    doc = {"name": "f", "description": "d", "response": {"type": "dict", "properties": {"r": {"type": "string"}}},
           "parameters": {"type": "dict", "required": ["mode", "flag"], "extra": {"k": [1]}, "properties": {
               "mode": {"type": "string", "description": "The mode. [Enum]: [\"a\", \"b\"]  ", "x": {"k": [1]}},
               "odd": ["not a dict", ["nested"]],
               "note": {"type": "string"},
               "flag": {"type": "boolean"},
           }}}
    before = copy.deepcopy(doc)
    (project,) = annotate_docs([doc], "project")
    assert annotate_docs([doc]) == [project]  # the project style is the default
    props = project["parameters"]["properties"]
    assert list(props) == ["mode", "odd", "note", "flag"]
    assert props["mode"]["description"] == '[required] The mode. [Enum]: ["a", "b"] Allowed values: a, b.'
    assert props["note"] == {"type": "string", "description": ""} and props["odd"] == ["not a dict", ["nested"]]
    assert props["flag"] == {"type": "boolean", "description": "[required]"}
    (release,) = annotate_docs([{**doc, "parameters": {**doc["parameters"], "properties": {
        "mode": {"type": "string", "enum": ["x", "y"]}, "note": {"type": "string", "description": "n"}}}}], "release")
    assert release["parameters"]["properties"]["mode"]["description"] == "[required] Allowed values: x, y"
    assert release["parameters"]["properties"]["note"]["description"] == "n"
    # values the description already lists are not listed again
    listed = {"type": "string", "enum": ["x", "y"], "description": "Pick one. Allowed values: x, y"}
    (again,) = annotate_docs([{"name": "h", "parameters": {"type": "dict", "properties": {"m": listed}}}], "release")
    assert again["parameters"]["properties"]["m"]["description"] == "Pick one. Allowed values: x, y"
    # every part of the output is the output's own: changing it leaves the input as it was
    project["response"]["properties"]["r"]["type"] = "int"
    project["parameters"]["extra"]["k"].append(2)
    props["note"]["type"] = "int"
    props["mode"]["x"]["k"].append(2)
    props["odd"][1].append("changed")
    assert doc == before
    # a doc without parameters is copied, not shared
    src = {"name": "g", "tags": ["x"], "parameters": {"type": "dict", "properties": {}}}
    (bare,) = annotate_docs([src], "project")
    bare["tags"].append("y")
    assert src == {"name": "g", "tags": ["x"], "parameters": {"type": "dict", "properties": {}}}
