"""Tool-call formats: rendering and decoding, gold round trips, malformed text never dropped silently."""

import pytest

from seal.env.schema import tool_registry
from seal.env.calls import ToolCall, parse_call
from seal.errors import UserError
from seal.policy.formats import FORMATS, get_format, keyword_arguments

NAMES = sorted(FORMATS)


def named(call, docs):
    return ToolCall(call.name, (), keyword_arguments(call, docs))


@pytest.mark.parametrize("name", NAMES)
def test_every_gold_call_round_trips_through_the_format(bench, name):
    fmt = get_format(name)
    for entry in bench.values():
        docs = entry.docs_by_name()
        for turn in entry.gold:
            if not turn:
                continue
            calls = [parse_call(c) for c in turn]
            parsed = fmt.parse(fmt.render_calls(calls, docs))
            assert parsed.failures == []
            if name == "bfcl_python":
                assert parsed.calls == calls
            else:  # JSON formats name every argument
                assert parsed.calls == [named(c, docs) for c in calls]


@pytest.mark.parametrize("name", NAMES)
def test_call_example_parses(name):
    fmt = get_format(name)
    parsed = fmt.parse(fmt.call_example)
    assert parsed.calls and parsed.calls[0].name == "tool_name" and not parsed.failures
    # the example shows the syntax only: it names no benchmark tool, which a turn may not have shown
    assert not {c.name for c in parsed.calls} & set(tool_registry())


MALFORMED = {
    "qwen_xml": {
        "truncated": '<tool_call>\n{"name": "cd", "arguments": {"folder": "doc',
        "bad_json": '<tool_call>\n{"name": "cd", "arguments": {folder: 1}}\n</tool_call>',
        "args_not_object": '<tool_call>{"name": "cd", "arguments": [1, 2]}</tool_call>',
        "no_name": '<tool_call>{"arguments": {}}</tool_call>',
        "bad_name": '<tool_call>{"name": "os.system", "arguments": {"cmd": "ls"}}</tool_call>',
        "nested": '<tool_call>{"name": "cd", "arguments": {"folder": ' + "[" * 60 + "]" * 60 + "}}</tool_call>",
        "inf": '<tool_call>{"name": "cd", "arguments": {"folder": 1e999}}</tool_call>',
        "python": "<tool_call>__import__('os').system('ls')</tool_call>",
    },
    "llama3_json": {
        "truncated": '{"name": "cd", "parameters": {"folder": "doc',
        "bad_json": '{"name": "cd", "parameters": {folder: 1}}',
        "args_not_object": '{"name": "cd", "parameters": [1, 2]}',
        "no_name": '{"parameters": {}}',
        "bad_name": '{"name": "__import__", "parameters": {"": "os"}}',
        "nested": '{"name": "cd", "parameters": {"folder": ' + "[" * 60 + "]" * 60 + "}}",
        "inf": '{"name": "cd", "parameters": {"folder": -1e999}}',
        "python": "{__import__('os').system('ls')}",
    },
    "bfcl_python": {
        "truncated": "[cd(folder='doc",
        "attribute": "[os.system('ls')]",
        "import": "__import__('os').system('ls')",
        "expression": "[cd(folder=1+1)]",
        "unpacking": "[cd(**{'folder': 'x'})]",
        "nested": "[cd(folder=" + "[" * 60 + "]" * 60 + ")]",
        "lambda": "[cd(folder=lambda: 1)]",
        "call_in_prose": "Let me call cd(folder='x') for you",
    },
}


@pytest.mark.parametrize("name, kind", [(n, k) for n in NAMES for k in MALFORMED[n]])
def test_malformed_calls_are_reported_as_failures(name, kind):
    parsed = get_format(name).parse(MALFORMED[name][kind])
    assert parsed.calls == [] and parsed.failures, parsed
    fragment, reason = parsed.failures[0]
    assert fragment and reason


@pytest.mark.parametrize("name", NAMES)
def test_plain_text_is_a_reply_not_a_failure(name):
    parsed = get_format(name).parse("I cannot do that: the folder is not given. Which one do you mean?")
    assert parsed.calls == [] and parsed.failures == []


@pytest.mark.parametrize("name", NAMES)
def test_unknown_tools_decode_and_are_left_to_the_executor(name):
    fmt = get_format(name)
    text = fmt.render_calls([ToolCall("launch_rocket", (), {"when": "now"})], {})
    assert fmt.parse(text).calls == [ToolCall("launch_rocket", (), {"when": "now"})]


@pytest.mark.parametrize("name", NAMES)
def test_any_python_identifier_names_an_argument_but_no_keyword_does(name):
    # BFCL's live tools have arguments such as `año_vehiculo` (a Python identifier); `class` is a keyword,
    # which no call text could carry
    fmt = get_format(name)
    call = ToolCall("cotizar", (), {"año_vehiculo": 2024})
    assert fmt.parse(fmt.render_calls([call], {})).calls == [call]
    if name != "bfcl_python":  # the JSON formats carry argument names as strings
        text = fmt.render_calls([ToolCall("cotizar", (), {"x": 1})], {}).replace('"x"', '"class"')
        parsed = fmt.parse(text)
        assert parsed.calls == [] and "not an identifier" in parsed.failures[0][1]


def test_good_calls_survive_next_to_bad_ones():
    parsed = get_format("qwen_xml").parse(
        '<tool_call>{"name": "pwd", "arguments": {}}</tool_call>\n<tool_call>{"name": oops}</tool_call>'
    )
    assert [c.name for c in parsed.calls] == ["pwd"] and len(parsed.failures) == 1
    parsed = get_format("llama3_json").parse('{"name": "pwd", "parameters": {}}\n[{"name": "ls", "parameters": {"a": true}}]')
    assert [c.name for c in parsed.calls] == ["pwd", "ls"] and parsed.calls[1].kwargs == {"a": True}


def test_bfcl_python_follows_bfcl_decoding():
    fmt = get_format("bfcl_python")
    assert fmt.parse("```\n[cd(folder='x'), ls(a=True)]\n```").calls == [
        ToolCall("cd", (), {"folder": "x"}), ToolCall("ls", (), {"a": True})
    ]
    # a bare name reads as its own text, as BFCL's prompting decoder does
    assert fmt.parse("cd(folder=documents)").calls == [ToolCall("cd", (), {"folder": "documents"})]


def test_system_prompts_show_tools_and_extra_text(bench):
    entry = bench["multi_turn_base_0"]
    for name in NAMES:
        text = get_format(name).system_prompt(entry.functions, "Note: be careful.")
        assert all(doc["name"] in text for doc in entry.functions) and text.endswith("Note: be careful.")
    qwen = get_format("qwen_xml").system_prompt(entry.functions)
    assert "<tools>" in qwen and '"type": "object"' in qwen and '"type": "dict"' not in qwen


def test_bfcl_python_system_prompt_is_bfcls_own(bench):
    from seal.env.entry import prepare_bfcl_import

    prepare_bfcl_import()
    utils = pytest.importorskip("bfcl_eval.model_handler.utils", exc_type=ImportError)
    from bfcl_eval.constants.default_prompts import DEFAULT_SYSTEM_PROMPT_FORMAT

    entry = bench["multi_turn_base_0"]
    assert get_format("bfcl_python").system_prompt(entry.functions) == utils.formulate_system_prompt(
        DEFAULT_SYSTEM_PROMPT_FORMAT, entry.functions
    )


def test_holdout_message_is_bfcls(bench):
    entry = bench["multi_turn_miss_func_0"]
    (docs,) = entry.holdout.values()
    for name in NAMES:
        text = get_format(name).holdout_message(docs)
        assert text.endswith("I have updated some more functions you can choose from. What about now?")
        assert docs[0]["name"] in text


def test_unknown_format_is_a_user_error():
    with pytest.raises(UserError, match="qwen_xml"):
        get_format("hermes")


# ---------------------------------------------------------------------------------------- release rendering

# Qwen2.5's function-calling tool block (its chat template with `tools`), which the release used as
# the whole system prompt: no persona line before it
QWEN_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
QWEN_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


@pytest.fixture(scope="module")
def raw_bfcl_docs():
    """Entry id -> its initial tool docs as bfcl-eval loads them without the language hint."""
    from seal.env.benchmarks.bfcl_v3 import CATEGORIES
    from seal.env.entry import prepare_bfcl_import

    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry

    return {item["id"]: item["function"] for c in CATEGORIES
            for item in load_dataset_entry(f"multi_turn_{c}", include_language_specific_hint=False)}


def test_release_rendering_is_qwens_tool_block_over_the_raw_bfcl_documents(bench, raw_bfcl_docs):
    import json

    for entry_id in ("multi_turn_base_50", "multi_turn_miss_func_0", "multi_turn_long_context_120"):
        entry = bench[entry_id]
        text = get_format("qwen_xml", tools="release").system_prompt(entry.functions)
        expected = QWEN_TOOLS_HEAD + "\n".join(json.dumps(d) for d in raw_bfcl_docs[entry_id]) + QWEN_TOOLS_TAIL
        assert text == expected
        assert '"type": "dict"' in text and '"response": {' in text and "Python 3 syntax" not in text
    # the note goes after the tools block and a blank line
    noted = get_format("qwen_xml", tools="release").system_prompt(bench["multi_turn_base_50"].functions, "Observation note: x.")
    assert noted.endswith("</tool_call>\n\nObservation note: x.")


def test_release_rendering_drops_only_the_loaders_sentence_in_every_entry(bench, raw_bfcl_docs):
    from seal.policy.formats import DEFAULT_PERSONA, raw_doc

    for entry in bench.values():
        assert [raw_doc(d) for d in entry.functions] == raw_bfcl_docs[entry.id]
    base = bench["multi_turn_base_0"]
    for name in NAMES:
        release = get_format(name, tools="release").system_prompt(base.functions)
        project = get_format(name, tools="project").system_prompt(base.functions)
        assert "Python 3 syntax" not in release and "Python 3 syntax" in project
        assert DEFAULT_PERSONA not in release
    assert DEFAULT_PERSONA in get_format("qwen_xml").system_prompt(base.functions)
    with pytest.raises(UserError, match="release"):
        get_format("qwen_xml", tools="raw")


def test_release_holdout_delivery_is_bfcls_prompting_message_over_the_raw_documents(bench):
    import json

    entry = bench["multi_turn_miss_func_0"]
    (docs,) = entry.holdout.values()
    for name in NAMES:
        text = get_format(name, tools="release").holdout_message(docs)
        # one JSON list of the held-out documents, then BFCL's sentence
        assert text == json.dumps(docs) + "\nI have updated some more functions you can choose from. What about now?"
        assert '"name": "sort"' in text and "<tools>" not in text


# What each parser reads in text a model may write: (format, text, the calls' (name, kwargs), the failures as
# (fragment, reason)); the reasons are what the model is told back and diagnosis counts.
NOT_JSON = "not valid JSON (JSONDecodeError: "
PWD = '{"name": "pwd", "parameters": {}}'
READ = [
    # a call object's arguments under the format's key, else "arguments", else "parameters", else none
    ("llama3_json", '{"name": "cd", "parameters": {"folder": "a"}, "arguments": {"folder": "b"}}',
     [("cd", {"folder": "a"})], []),
    ("llama3_json", '{"name": "cd", "arguments": {"folder": "b"}, "x": 1}', [("cd", {"folder": "b"})], []),
    ("qwen_xml", '<tool_call>{"name": "cd", "parameters": {"folder": "x"}}</tool_call>', [("cd", {"folder": "x"})], []),
    ("qwen_xml", '<tool_call>{"name": "pwd"}</tool_call><tool_call>{"name": "cd", "arguments": null}</tool_call>',
     [("pwd", {}), ("cd", {})], []),
    # arguments written as a JSON string are decoded
    ("qwen_xml", '<tool_call>{"name": "cd", "arguments": "{\\"folder\\": \\"x\\"}"}</tool_call>',
     [("cd", {"folder": "x"})], []),
    ("qwen_xml", '<tool_call>{"name": "cd", "arguments": "{folder"}</tool_call>', [],
     [('<tool_call>{"name": "cd", "arguments": "{folder"}</tool_call>', '"arguments" is a string that is not JSON')]),
    # every failing block is reported, each by its whole block
    ("qwen_xml", '<tool_call>{"name": 1}</tool_call> <tool_call>nope</tool_call>', [],
     [('<tool_call>{"name": 1}</tool_call>', 'the call has no "name" string'),
      ("<tool_call>nope</tool_call>", NOT_JSON + "Expecting value: line 1 column 1 (char 0))")]),
    ("qwen_xml", '<tool_call>\n{"name": "cd"', [],
     [('<tool_call>\n{"name": "cd"', "unterminated <tool_call> block (no </tool_call>)")]),
    ("qwen_xml", "done </tool_call>", [], [("done </tool_call>", "</tool_call> without an opening <tool_call>")]),
    ("qwen_xml", '<tool_call>{"name": "pwd", "arguments": {}}</tool_call> </tool_call>', [("pwd", {})], []),
    # Llama 3: prose around the objects is skipped, a bracket in prose and a plain list too
    ("llama3_json", "Xavier: " + PWD, [("pwd", {})], []),
    ("llama3_json", "ok [see above] " + PWD, [("pwd", {})], []),
    ("llama3_json", "ok [1, 2] " + PWD, [("pwd", {})], []),
    # a bracket whose next thing is an object starts a call list: broken, it is the failure from there on
    ("llama3_json", "x[{bad}", [], [("[{bad}", NOT_JSON + "Expecting property name enclosed in double quotes: "
                                                "line 1 column 4 (char 3))")]),
    ("llama3_json", "x[ {bad}", [], [("[ {bad}", NOT_JSON + "Expecting property name enclosed in double quotes: "
                                                  "line 1 column 5 (char 4))")]),
    ("llama3_json", '[[{"name": 5}]', [], [('[{"name": 5}]', 'the call has no "name" string')]),
    # BFCL's decoder: backticks, newlines and spaces around are stripped, nothing else
    ("bfcl_python", "Xray(a=1)", [("Xray", {"a": 1})], []),
    ("bfcl_python", "[1, 2]", [], [("[1, 2]", "expected a function call, got Constant")]),
    ("bfcl_python", "[f(a=1e999)]", [], [("f(a=inf)", "only literal arguments are allowed, got Name")]),
]


@pytest.mark.parametrize("name, text, calls, failures", READ)
def test_what_each_parser_reads_and_the_reasons_it_gives(name, text, calls, failures):
    parsed = get_format(name).parse(text)
    assert [(c.name, c.kwargs) for c in parsed.calls] == calls
    assert parsed.failures == failures


@pytest.mark.parametrize("name, kind, reason", [
    ("qwen_xml", "bad_json", NOT_JSON + "Expecting property name enclosed in double quotes: line 1 column 30 (char 29))"),
    ("qwen_xml", "args_not_object", '"arguments" must be a JSON object'),
    ("qwen_xml", "no_name", 'the call has no "name" string'),
    ("qwen_xml", "bad_name", "tool name 'os.system' is not an identifier"),
    ("qwen_xml", "nested", "arguments are nested deeper than 32 levels"),
    ("llama3_json", "truncated", NOT_JSON + "Unterminated string starting at: line 1 column 41 (char 40))"),
    ("llama3_json", "args_not_object", '"parameters" must be a JSON object'),
    ("llama3_json", "bad_name", "argument name '' is not an identifier"),
    ("llama3_json", "inf", "a sign may only precede a number"),
    ("bfcl_python", "attribute", "only a plain function name may be called (no attributes or expressions)"),
    ("bfcl_python", "unpacking", "argument unpacking (**) is not allowed"),
])
def test_a_malformed_call_is_its_whole_text_and_the_reason(name, kind, reason):
    text = MALFORMED[name][kind]
    assert get_format(name).parse(text).failures == [(text.strip(), reason)]


def test_a_call_that_cannot_be_written_back_is_a_failure_cut_to_1000_characters():
    long = "x" * 1200
    parsed = get_format("bfcl_python").parse(f"[f(a='{long}', b=1e999)]")
    assert parsed.calls == [] and parsed.failures == [
        (f"f(a='{long}', b=inf)"[:1000], "only literal arguments are allowed, got Name")]
    # a JSON name that is not a string is refused before anything reads it as a name
    assert get_format("qwen_xml").parse('<tool_call>{"name": 5, "arguments": {}}</tool_call>').failures[0][1] == (
        'the call has no "name" string')


def test_a_number_too_long_to_write_in_decimal_is_a_failure_not_a_crash():
    # Python writes no int of over 4,300 decimal digits (sys.int_info.default_max_str_digits), but reads one in
    # hex: 16^4000 - 1 has floor(16000 log10 2) + 1 = 4,817 digits; the fragment is then the text as written
    text = "[g(b=1), f(a=0x" + "f" * 4000 + ")]"
    parsed = get_format("bfcl_python").parse(text)
    assert [(c.name, c.kwargs) for c in parsed.calls] == [("g", {"b": 1})]
    assert parsed.failures == [(text[:1000], "arguments cannot be written as a call (ValueError)")]


def test_the_release_parser_reports_each_refused_block_whole():
    text = '<tool_call>{"name": "cd"}</tool_call> <tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    parsed = get_format("qwen_xml").parse_release(text)
    assert [c.name for c in parsed.calls] == ["ls"]
    assert parsed.failures == [('<tool_call>{"name": "cd"}</tool_call>',
                                "Tool call JSON must contain both 'name' and 'arguments'.")]
