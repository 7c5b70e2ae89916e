"""`make bench`'s command line: sections by name, a backbone for the sections that load one."""

import pytest

from experiments import bench


@pytest.fixture
def calls(monkeypatch):
    seen = []
    sections = {"executor": lambda: seen.append(("executor",)),
                "throughput": lambda overrides: seen.append(("throughput", overrides)),
                "rollout": lambda overrides: seen.append(("rollout", overrides))}
    monkeypatch.setattr(bench, "SECTIONS", sections)
    return seen


def test_backbone_flag_and_overrides_reach_the_model_sections_only(calls):
    bench.main(["executor", "throughput", "--backbone", "tiny-random", "budget.max_new_tokens=4"])
    assert calls == [("executor",), ("throughput", ["backbone=tiny-random", "budget.max_new_tokens=4"])]
    calls.clear()
    bench.main(["backbone=qwen2.5-3b"])  # no section named: every section, in order
    assert calls == [("executor",), ("throughput", ["backbone=qwen2.5-3b"]), ("rollout", ["backbone=qwen2.5-3b"])]


@pytest.mark.parametrize("argv, message", [
    (["nonsense"], "unknown bench section(s) nonsense"),
    (["executor", "backbone=tiny-random"], "overrides apply to the sections rollout, throughput only"),
    (["throughput", "--backbone"], "--backbone needs a name"),
])
def test_bad_command_lines_exit_with_one_sentence(calls, argv, message):
    with pytest.raises(SystemExit, match=message.replace("(", r"\(").replace(")", r"\)")):
        bench.main(argv)
    assert calls == []


def test_help_lists_the_sections_and_runs_none(calls, capsys):
    bench.SECTIONS["executor"].__doc__ = "The executor against bfcl-eval's.\n\nMore."
    bench.main(["throughput", "--help"])
    out = capsys.readouterr().out
    assert calls == [] and out.startswith("`make bench`")
    assert out.endswith("Sections:\n  executor    The executor against bfcl-eval's.\n  throughput\n  rollout\n")
