"""tests/tools/mutate.py's groups (pyproject's [tool.mutmut.groups]): every module and test they name exists,
no module is in two groups, and a partly mutated module is limited to the functions named."""

import ast
import fnmatch
import sys
from pathlib import Path

from tests.tools import mutate

REPO = Path(__file__).resolve().parents[2]


def test_every_group_names_existing_modules_and_tests_and_no_module_twice():
    groups = mutate.groups()
    assert {"env", "train", "tau2", "tables"} <= set(groups)
    modules = [m for g in groups.values() for m in g.only_mutate]
    assert len(modules) == len(set(modules))
    for group in groups.values():
        assert group.tests and all((REPO / m).is_file() for m in group.only_mutate), group.name
        paths = [t.split("::")[0] for t in group.tests if not t.startswith("-")]
        assert all((REPO / p).exists() for p in paths), group.name
        # a function glob names a module of its own group
        assert all(any(f.startswith(mutate.module_of(m) + ".x") for m in group.only_mutate)
                   for f in group.functions), group.name
        # and a function or method that the module defines (a renamed function leaves a glob that matches nothing)
        stale = [f for f in group.functions if not any(
            fnmatch.fnmatchcase(name, f) for m in group.only_mutate for name in mutant_names(m))]
        assert stale == [], group.name


def mutant_names(path: str) -> list[str]:
    """The name mutmut gives the first mutant of every function and method of a module: `<module>.x_<function>__mutmut_1`
    and `<module>.xǁ<class>ǁ<method>__mutmut_1`."""
    module = mutate.module_of(path)
    names = []
    for node in ast.parse((REPO / path).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(f"{module}.x_{node.name}__mutmut_1")
        elif isinstance(node, ast.ClassDef):
            names += [f"{module}.xǁ{node.name}ǁ{item.name}__mutmut_1" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return names


def test_mutant_names_follow_mutmuts_naming(tmp_path, monkeypatch):
    # the names mutmut 3 writes into mutants/ (e.g. `seal.rl.trainer.xǁSealGRPOTrainerǁ_compute_loss__mutmut_1`)
    (tmp_path / "m.py").write_text("def f():\n    pass\n\n\nclass K:\n    def g(self):\n        pass\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert mutant_names("m.py") == ["m.x_f__mutmut_1", "m.xǁKǁg__mutmut_1"]


def test_a_module_with_named_functions_is_limited_to_them_and_the_others_are_mutated_whole():
    group = mutate.Group("g", ["seal/a.py", "seal/b.py", "experiments/c.py"], ["tests"],
                         ["seal.a.x_f*", "seal.a.xǁKǁg*"])
    assert group.mutant_globs() == [
        "seal.a.x_f*", "seal.a.xǁKǁg*", "seal.b.*", "experiments.c.*"]


def test_an_unknown_group_is_named_with_the_choices(capsys):
    assert mutate.main(["--group", "nope"]) == 2
    assert "unknown group nope: choose from signal" in capsys.readouterr().err


def test_mutant_globs_alone_pick_the_groups_that_hold_them():
    group = mutate.Group("g", ["seal/rl/reweighting.py", "experiments/tables/runs.py"], ["tests"], [])
    assert group.holds(["seal.rl.reweighting.*"]) and group.holds(["experiments.tables.runs.x_survey__mutmut_3"])
    assert group.holds(["seal.rl.*"]) and group.holds(["*"])
    assert not group.holds(["seal.rl.trainer.*"]) and not group.holds(["seal.rl.reweighting_other.*"])
