"""tests/tools/mutation_report.py on hand-made mutmut result files: scores, survivors, stale equivalents."""

import json

from tests.tools import mutation_report

# a module as mutmut writes it: the original function and each mutant beside it
SOURCE = '''
def x_f__mutmut_orig(a):
    return a + 1

def x_f__mutmut_1(a):
    return a - 1

def x_f__mutmut_2(a):
    return a + 2

def x_f__mutmut_3(a):
    return a * 1

def x_f__mutmut_4(a):
    return None

def x_f__mutmut_5(a):
    return a + 1 if a else a + 1
'''
# the changed lines of mutant 5, as the report fingerprints them: "-" the original's, "+" the mutant's
CHANGE_5 = ["-    return a + 1", "+    return a + 1 if a else a + 1"]


def write(tmp_path, exit_codes, equivalent):
    meta = tmp_path / "mutants" / "seal" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": exit_codes}))
    (tmp_path / "mutants" / "seal" / "m.py").write_text(SOURCE)
    eq = tmp_path / "eq.txt"
    eq.write_text("# reasons\n" + "".join(f"{k} {fp} a reason\n" for k, fp in equivalent.items()))
    return ["--mutants", str(tmp_path / "mutants"), "--equivalent", str(eq)]


def test_the_fingerprint_is_the_changed_lines_whatever_their_indentation():
    assert mutation_report.fingerprint(CHANGE_5) == mutation_report.fingerprint(["-return a + 1",
                                                                              "+  return a + 1 if a else a + 1"])
    assert mutation_report.fingerprint(CHANGE_5) != mutation_report.fingerprint(CHANGE_5[::-1])
    assert mutation_report.fingerprint([]) == "-"


def test_scores_survivors_and_stale_equivalent_keys(tmp_path, capsys):
    fp5 = mutation_report.fingerprint(CHANGE_5)
    # mutmut's exit codes: 1 killed, 0 survived, 36 timeout (counted as killed), 33 no tests
    codes = {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_2": 36, "seal.m.x_f__mutmut_3": 0,
             "seal.m.x_f__mutmut_4": 33, "seal.m.x_f__mutmut_5": 0}
    args = write(tmp_path, codes, {"seal.m.x_f__mutmut_5": fp5})
    assert mutation_report.main(args) == 1  # 2 killed of 4 counted: 50%, under the goal
    out = capsys.readouterr().out
    assert "| seal/m.py | 5 | 2 | 1 | 50.0% |" in out
    assert "survived   seal.m.x_f__mutmut_3" in out and "no tests   seal.m.x_f__mutmut_4" in out
    assert "-    return a + 1 / +    return a * 1" in out  # a survivor's change
    assert "x_f__mutmut_5" not in out.split("not killed")[1]  # listed as equivalent

    # all but the equivalent killed, but listed keys name a killed mutant, a mutant whose change is another
    # one (renumbered) and a mutant the module does not have: all stale, and the run fails
    codes = {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_5": 0, "seal.m.x_f__mutmut_3": 0}
    listed = {"seal.m.x_f__mutmut_1": fp5, "seal.m.x_f__mutmut_3": fp5, "seal.m.x_f__mutmut_5": fp5,
              "seal.m.x_f__mutmut_9": fp5, "seal.other.x_g__mutmut_1": fp5}
    args = write(tmp_path / "b", codes, listed)
    assert mutation_report.main(args) == 1
    out = capsys.readouterr().out.split("stale keys in eq.txt")[1]
    assert "seal.m.x_f__mutmut_1 (killed)" in out and "seal.m.x_f__mutmut_9 (no such mutant)" in out
    assert "seal.m.x_f__mutmut_3 (its change is now" in out and "+    return a * 1" in out
    assert "x_f__mutmut_5" not in out and "seal.other" not in out  # right, and a module outside the run

    # a listed mutant that timed out stays equivalent (a loaded machine times out equivalent mutants' tests too),
    # as long as its change is the listed one
    args = write(tmp_path / "t", {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_5": 36},
                 {"seal.m.x_f__mutmut_5": fp5})
    assert mutation_report.main(args) == 0
    assert "| seal/m.py | 2 | 1 | 1 | 100.0% |" in capsys.readouterr().out
    args = write(tmp_path / "u", {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_3": 36},
                 {"seal.m.x_f__mutmut_3": fp5})
    assert mutation_report.main(args) == 1
    assert "seal.m.x_f__mutmut_3 (its change is now" in capsys.readouterr().out

    args = write(tmp_path / "c", codes, {"seal.m.x_f__mutmut_5": fp5})
    assert mutation_report.main(args) == 1  # mutant 3 survives: 1 killed of 2
    args = write(tmp_path / "d", {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_5": 0},
                 {"seal.m.x_f__mutmut_5": fp5})
    assert mutation_report.main(args) == 0
    assert "| seal/m.py | 2 | 1 | 1 | 100.0% |" in capsys.readouterr().out
