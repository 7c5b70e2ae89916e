"""experiments/mutation_report.py on hand-made mutmut result files: scores, survivors, stale equivalents."""

import json

from experiments import mutation_report


def write(tmp_path, exit_codes, equivalent):
    meta = tmp_path / "mutants" / "seal" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": exit_codes}))
    eq = tmp_path / "eq.txt"
    eq.write_text("# reasons\n" + "".join(f"{k} a reason\n" for k in equivalent))
    return ["--mutants", str(tmp_path / "mutants"), "--equivalent", str(eq)]


def test_scores_survivors_and_stale_equivalent_keys(tmp_path, capsys):
    # mutmut's exit codes: 1 killed, 0 survived, 36 timeout (counted as killed), 33 no tests
    codes = {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_2": 36, "seal.m.x_f__mutmut_3": 0,
             "seal.m.x_f__mutmut_4": 33, "seal.m.x_f__mutmut_5": 0}
    args = write(tmp_path, codes, ["seal.m.x_f__mutmut_5"])
    assert mutation_report.main(args) == 1  # 2 killed of 4 counted: 50%, under the goal
    out = capsys.readouterr().out
    assert "| seal/m.py | 5 | 2 | 1 | 50.0% |" in out
    assert "survived   seal.m.x_f__mutmut_3" in out and "no tests   seal.m.x_f__mutmut_4" in out
    assert "x_f__mutmut_5" not in out.split("not killed")[1]  # listed as equivalent

    # all but the equivalent killed, but a listed key names a killed mutant: stale, and the run fails
    codes = {"seal.m.x_f__mutmut_1": 1, "seal.m.x_f__mutmut_2": 0}
    args = write(tmp_path / "b", codes, ["seal.m.x_f__mutmut_1", "seal.m.x_f__mutmut_2"])
    assert mutation_report.main(args) == 1
    out = capsys.readouterr().out
    assert "1 keys in eq.txt name killed mutants" in out and "\n  seal.m.x_f__mutmut_1" in out

    args = write(tmp_path / "c", codes, ["seal.m.x_f__mutmut_2"])
    assert mutation_report.main(args) == 0
    assert "| seal/m.py | 2 | 1 | 1 | 100.0% |" in capsys.readouterr().out
