"""Tool-call parsing and execution under hostile input: nothing is evaluated, nothing escapes."""

import os
import pickle
import select
import shutil
import signal
import subprocess
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seal.env.calls import MAX_DEPTH, MAX_STRING_CHARS, ToolCall, UnsafeCall, parse_call, parse_call_list
from seal.env.executor import ERROR_PREFIX, Backends, execute


@pytest.fixture()
def backends(bench):
    entry = bench["multi_turn_base_0"]
    return Backends(entry.involved_classes, entry.initial_config, long_context=False)


def within(seconds, fn):
    """fn()'s value, computed in a forked child that is killed after `seconds`: a refusal that stops holding (a guard
    let through) fails here in seconds, where the call itself would run for hours (10**10**10, 10^8 digits)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send the value (or what it raised) and leave without running pytest's teardown
        os.close(read)
        try:
            payload = pickle.dumps((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
            payload = pickle.dumps((False, repr(exc)))
        with os.fdopen(write, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + seconds
    with os.fdopen(read, "rb") as pipe:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([pipe], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"still running after {seconds} s")
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        pytest.fail(f"raised {value}")
    return value


@pytest.mark.parametrize(
    "text, expected",
    [
        ("cd(folder='document')", ToolCall("cd", (), {"folder": "document"})),
        ("mean([1, 2.5, -3])", ToolCall("mean", ([1, 2.5, -3],))),
        ("f(a=None, b=True, c={'k': (1, 2)}, d=-0.5)", ToolCall("f", (), {"a": None, "b": True, "c": {"k": (1, 2)}, "d": -0.5})),
        ("  g()  ", ToolCall("g")),
    ],
)
def test_literal_calls_parse_and_round_trip(text, expected):
    call = parse_call(text)
    assert call == expected
    assert parse_call(call.to_string()) == call


HOSTILE = [
    "__import__('os').system('touch /tmp/seal_pwned')",
    "os.system('touch /tmp/seal_pwned')",
    "cd.__globals__['os'].system('id')",
    "__class__()",
    "_private_helper()",
    "cd(folder=__import__('os').getcwd())",
    "cd(folder=open('/etc/passwd').read())",
    "cd(folder=(lambda: 1)())",
    "cd(folder=[x for x in range(10)])",
    "cd(folder=f'{1+1}')",
    "cd(folder='a' + 'b')",
    "cd(folder=folder)",
    "cd(*['a'])",
    "cd(**{'folder': 'a'})",
    "cd(folder=b'bytes')",
    "cd(folder=1j)",
    "cd(folder=...)",
    "cd(folder={1, 2})",
    "cd(folder=-'a')",
    "getattr(cd, '__code__')",
    "cd(folder='a')(x=1)",
    "[cd(folder='a')][0]",
    "cd(folder='a'); import os",
    "cd(folder='a')\x00",
    "cd(folder='\ud800')",
    "cd(folder='" + "x" * (MAX_STRING_CHARS + 1) + "')",
    "cd(folder=" + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + ")",
    "cd(folder=" + "[" * 5000 + "]" * 5000 + ")",
    "cd(folder=" + "1" * 6000 + ")",
    "",
    "not a call at all",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_call_text_is_refused_without_evaluation(text, backends):
    with pytest.raises(UnsafeCall) as refusal:
        parse_call(text)
    record = execute(backends, text)
    # the text as given, and the parser's own reason after the official prefix
    assert (record.text, record.observation, record.call, record.error) == (
        text, ERROR_PREFIX + str(refusal.value), None, "unsafe")


@pytest.fixture()
def tripwires(monkeypatch, tmp_path):
    """Record any attempt to reach the operating system while hostile input is handled."""
    hits = []

    def trip(name):
        def _f(*args, **kwargs):
            hits.append(name)
            raise AssertionError(f"{name} was called")

        return _f

    for module, name in [(os, "system"), (os, "popen"), (os, "remove"), (os, "unlink"), (shutil, "rmtree")]:
        monkeypatch.setattr(module, name, trip(name))
    monkeypatch.setattr(subprocess, "Popen", trip("Popen"))
    return hits


_DANGEROUS = st.sampled_from(
    ["__import__('os')", "os.system", "open('/etc/passwd')", "exec", "eval", "lambda: 0", "__class__",
     "__subclasses__()", ".__globals__", "getattr", "[x for x in ()]", "*", "**", "\x00", "\udcff", ";", ")", "("]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.one_of(st.text(max_size=40), _DANGEROUS), min_size=1, max_size=6).map("".join))
def test_random_text_never_escapes(text, backends, tripwires, tmp_path):
    cwd, env, before = os.getcwd(), dict(os.environ), set(tmp_path.iterdir())
    record = execute(backends, text)
    assert isinstance(record.observation, str)
    if record.error == "unsafe":
        assert record.observation.startswith(ERROR_PREFIX)
    assert tripwires == []
    assert os.getcwd() == cwd and dict(os.environ) == env and set(tmp_path.iterdir()) == before
    assert not os.path.exists("/tmp/seal_pwned")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_invalid_utf8_bytes_are_refused(raw, backends, tripwires):
    text = raw.decode("utf-8", errors="surrogateescape")
    record = execute(backends, "cd(folder='" + text + "')")
    assert isinstance(record.observation, str) and tripwires == []


@pytest.mark.parametrize("name", ["exec", "eval", "open", "getattr", "__import__", "print", "compile", "breakpoint"])
def test_names_outside_the_allow_list_never_run(name, backends, tripwires):
    record = execute(backends, f"{name}('import os')")
    assert record.error in ("unknown_function", "unsafe") and tripwires == []


def test_unknown_and_blocked_names_match_official_messages(backends):
    assert execute(backends, "not_a_tool(x=1)").observation == f"{ERROR_PREFIX}name 'not_a_tool' is not defined"
    assert execute(backends, "kill(pid=1)").observation == f"{ERROR_PREFIX}Function call kill is not allowed."
    record = execute(backends, "exit()")
    assert (record.text, record.observation, record.call, record.error) == (
        "exit()", f"{ERROR_PREFIX}Function call exit is not allowed.", ToolCall("exit"), "blocked")


def test_a_call_by_position_that_binds_but_fails_is_the_tools_exception_not_bad_arguments(bench):
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    # power(base, exponent) binds either way; a float base overflows in the tool
    assert execute(backends, "power(2.0, 10000000)").error == "exception"
    assert execute(backends, "power(2.0, 10000000, 3)").error == "bad_arguments"


def test_bad_arguments_give_pythons_own_message(backends):
    record = execute(backends, "cd(directory='x')")
    assert record.error == "bad_arguments"
    assert record.observation == f"{ERROR_PREFIX}GorillaFileSystem.cd() got an unexpected keyword argument 'directory'"
    record = execute(backends, "cd()")
    assert record.error == "bad_arguments" and "missing 1 required positional argument: 'folder'" in record.observation


@pytest.mark.parametrize("kwargs, reason", [
    ({"dir name": "x"}, "not a valid Python call (SyntaxError"),
    ({"dir_name": float("nan")}, "only literal arguments are allowed, got Name"),
    ({"dir_name": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}, f"arguments are nested deeper than {MAX_DEPTH} levels"),
])
def test_a_call_whose_text_does_not_parse_back_fails_as_its_text_does(backends, kwargs, reason):
    # the release's strict parser hands any JSON argument name or value over as data; the episode records
    # the call's text and the verifier replays it, so the call runs only if that text would
    ran = []

    class Recorder:
        def mkdir(self, **kw):
            ran.append(kw)

    backends.methods["mkdir"] = Recorder().mkdir
    record = execute(backends, ToolCall("mkdir", (), kwargs))
    assert (record.error, record.call, ran) == ("unsafe", None, [])
    assert record.observation.startswith(ERROR_PREFIX + reason) and record.text == ToolCall("mkdir", (), kwargs).to_string()
    assert execute(backends, ToolCall("mkdir", (), {"dir_name": "x"})).ok and ran == [{"dir_name": "x"}]


def test_positional_arguments_reach_the_method(backends):
    by_position, by_keyword = execute(backends, "mkdir('new_dir')"), execute(backends, "ls()")
    assert by_position.ok and "new_dir" in by_keyword.observation


def test_unbounded_arithmetic_is_refused(bench):
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    assert within(10, lambda: execute(backends, "power(base=10, exponent=10000000000)").error) == "resource_limit"
    assert within(10, lambda: execute(backends, "logarithm(value=10, base=2, precision=100000000)").error) == "resource_limit"
    assert execute(backends, "power(base=2, exponent=10)").observation == '{"result": 1024}'


def test_a_power_is_refused_once_its_result_would_pass_a_million_bits(bench):
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    # exponent x bits of |base| (at least 2): 2 x 500,000 is exactly the limit and runs; 2^100 has 101 bits,
    # 101 x 9,901 = 1,000,001 is one over; arguments by position count the same
    assert execute(backends, "power(base=2, exponent=500000)").error == "exception"
    assert execute(backends, f"power(base={2**100}, exponent=9901)").error == "resource_limit"
    assert execute(backends, "power(2, 1000000)").error == "resource_limit"
    assert execute(backends, f"power(base=-{2**100}, exponent=9901)").error == "resource_limit"
    # the guard reads integers only: a float power overflows in the backend, a negative exponent is a fraction
    assert execute(backends, "power(base=2, exponent=10000000.0)").observation == (
        "Error during execution: (34, 'Numerical result out of range')")
    assert execute(backends, "power(base=2.0, exponent=10000000)").error == "exception"
    assert execute(backends, "power(base=2.5, exponent=2)").observation == '{"result": 6.25}'
    assert execute(backends, "power(base=2, exponent=-1000000)").observation == '{"result": 0.0}'


def test_a_precision_over_10000_digits_is_refused_by_name_or_by_position(bench):
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    # logarithm(value, base, precision), square_root(number, precision): the precision is the last argument
    assert within(10, lambda: execute(backends, "logarithm(10, 2, 100000000)").error) == "resource_limit"
    assert execute(backends, "square_root(4, 10001)").error == "resource_limit"
    assert execute(backends, "square_root(number=4, precision=10000)").ok
    # by name as well: one digit over is refused (run here, not in a child: unguarded it would still end in a
    # moment, so the guard's own test sees the call)
    assert execute(backends, "square_root(number=4, precision=10001)").error == "resource_limit"
    assert execute(backends, "logarithm(value=10, base=2, precision=10001)").error == "resource_limit"
    # a large base is no precision
    assert execute(backends, "logarithm(8, 20000, 5)").ok


def test_a_result_too_long_to_write_out_is_the_official_executors_error_text(bench):
    # bfcl-eval renders the result inside its try: Python's limit on integer digits becomes the observation
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    record = execute(backends, "power(base=10, exponent=5000)")
    assert record.error == "exception" and record.observation == (
        "Error during execution: Exceeds the limit (4300 digits) for integer string conversion; "
        "use sys.set_int_max_str_digits() to increase the limit")


def test_call_list_parsing_follows_bfcl_prompting_output():
    calls = parse_call_list("[cd(folder='a'), ls()]")
    assert [c.name for c in calls] == ["cd", "ls"]
    assert parse_call_list("cd(folder=docs)", bare_names=True)[0].kwargs == {"folder": "docs"}
    with pytest.raises(UnsafeCall):
        parse_call_list("cd(folder=docs)")


def test_backend_classes_are_bfcl_evals_but_for_the_search_engine_and_the_vector_memory(monkeypatch):
    import importlib

    from seal.env import executor, vector_memory
    from seal.env.search import SearchAPI

    assert executor.backend_class("WebSearchAPI") is SearchAPI
    # the vector memory comes through the loader that finds its encoder on local disk, not from a plain import of
    # bfcl-eval's module (which would fetch the encoder from the hub): here that module is a decoy
    import sys
    import types

    stand_in = type("MemoryAPI_vector", (), {})
    monkeypatch.setattr(vector_memory, "vector_memory_class", lambda: stand_in)
    decoy = types.ModuleType("decoy")
    decoy.MemoryAPI_vector = type("MemoryAPI_vector", (), {})
    monkeypatch.setitem(sys.modules, executor.CLASS_FILE_PATH_MAPPING["MemoryAPI_vector"], decoy)
    assert executor.backend_class("MemoryAPI_vector") is stand_in
    filesystem = executor.CLASS_FILE_PATH_MAPPING["GorillaFileSystem"]
    assert executor.backend_class("GorillaFileSystem") is importlib.import_module(filesystem).GorillaFileSystem
    with pytest.raises(KeyError) as unknown:
        executor.backend_class("NoSuchAPI")
    assert unknown.value.args == ("unknown BFCL backend class 'NoSuchAPI'",)


def test_an_episode_can_call_every_public_method_and_no_private_one(backends):
    classes = [type(instance) for instance in backends.instances.values()]
    public = {n for cls in classes for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}
    assert set(backends.methods) == public and "cd" in public


def test_every_kind_of_record_keeps_its_text_its_call_and_its_error(bench):
    entry = bench["multi_turn_base_4"]  # TwitterAPI (logged in), GorillaFileSystem
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)

    def fields(text):
        record = execute(backends, text)
        return record.text, record.observation, record.call, record.error

    assert fields("not_a_tool(x=1)") == (
        "not_a_tool(x=1)", f"{ERROR_PREFIX}name 'not_a_tool' is not defined", ToolCall("not_a_tool", (), {"x": 1}),
        "unknown_function")
    # the backend's own error answer (a dict with "error"), as bfcl-eval's file system words it
    assert fields("cd(folder='nope')") == (
        "cd(folder='nope')", '{"error": "cd: \'nope\': No such file or directory"}',
        ToolCall("cd", (), {"folder": "nope"}), "backend_error")
    # an argument the backend keeps (the tweet's tag list) is a copy: changing the stored tweet leaves the record
    record = execute(backends, "post_tweet('hi', ['#a'], ['@b'])")
    assert record.error is None and record.call == ToolCall("post_tweet", ("hi", ["#a"], ["@b"]))
    stored = backends.instances["TwitterAPI"].tweets[2]
    stored["tags"].append("#changed"), stored["mentions"].append("@changed")
    assert record.call == ToolCall("post_tweet", ("hi", ["#a"], ["@b"]))


def test_a_refused_or_failing_math_call_keeps_its_text_and_call(bench):
    entry = next(e for e in bench.values() if "MathAPI" in e.involved_classes)
    backends = Backends(entry.involved_classes, entry.initial_config, long_context=False)
    refused = execute(backends, "power(2, 1000000)")
    assert (refused.text, refused.observation, refused.call, refused.error) == (
        "power(2, 1000000)", f"{ERROR_PREFIX}power refused: the result would exceed the executor's size limit",
        ToolCall("power", (2, 1000000)), "resource_limit")
    failed = execute(backends, "power(2.0, 10000000)")
    assert (failed.text, failed.observation, failed.call, failed.error) == (
        "power(2.0, 10000000)", f"{ERROR_PREFIX}(34, 'Numerical result out of range')",
        ToolCall("power", (2.0, 10000000)), "exception")
