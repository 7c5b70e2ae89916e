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
