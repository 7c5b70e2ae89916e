"""tests/tools/mutate.py's groups (pyproject's [tool.mutmut.groups]): every module and test they name exists,
no module is in two groups, and a partly mutated module is limited to the functions named."""

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
