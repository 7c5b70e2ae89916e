import json
import subprocess
import sys

import pytest

from experiments.aggregate import load_runs, main_table, mean_ci

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def _metrics(avg, base, mf, mp, lc):
    return {f"eval/bfcl_v3/{k}": v for k, v in zip(("avg", "base", "miss_func", "miss_param", "long_context"),
                                                     (avg, base, mf, mp, lc))}


def _run(root, name, backbone, experiment, seed, before, after):
    d = root / name
    d.mkdir(parents=True)
    (d / "run_config.json").write_text(json.dumps({"backbone": {"name": backbone}, "experiment_name": experiment, "seed": seed}))
    (d / "metrics.json").write_text(json.dumps({"eval_before": before, "eval_after": after}))


def test_mean_ci_by_hand():
    assert mean_ci([0.5]) == (0.5, 0.0)
    mean, half = mean_ci([10.0, 20.0, 30.0])
    # sd 10, n 3, t(2) = 4.303: 4.303 * 10 / sqrt(3)
    assert mean == 20.0 and half == pytest.approx(4.303 * 10 / 3 ** 0.5)


def test_runs_group_by_backbone_and_arm(tmp_path):
    base0, base1 = _metrics(0.1, 0.2, 0.1, 0.05, 0.05), _metrics(0.2, 0.2, 0.1, 0.05, 0.05)
    _run(tmp_path, "a", "qwen2.5-3b", "seal", 0, base0, _metrics(0.14, 0.19, 0.15, 0.12, 0.10))
    _run(tmp_path, "b", "qwen2.5-3b", "seal", 1, base1, _metrics(0.16, 0.21, 0.17, 0.14, 0.12))
    _run(tmp_path, "c", "qwen2.5-3b", "vanilla_rl", 0, base0, _metrics(0.09, 0.16, 0.09, 0.06, 0.06))
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "run_config.json").write_text("{}")
    runs = load_runs(tmp_path)
    assert len(runs) == 3
    rows = {(r["backbone"], r["arm"]): r for r in main_table(runs)}
    assert rows[("qwen2.5-3b", "seal")]["runs"] == 2
    assert rows[("qwen2.5-3b", "seal")]["avg"][0] == pytest.approx(15.0)
    assert rows[("qwen2.5-3b", "seal")]["paper_avg"] == 14.0
    # the base model once per seed (runs a and c share seed 0's initial model): avg over {10, 20},
    # not over {10, 20, 10}; half-width t(1) * sd / sqrt(2) = 12.706 * 7.0711 / 1.4142
    base_row = rows[("qwen2.5-3b", "base model")]
    assert base_row["runs"] == 2 and base_row["avg"][0] == pytest.approx(15.0)
    assert base_row["avg"][1] == pytest.approx(12.706 * 5.0)
    assert base_row["base"] == (pytest.approx(20.0), 0.0)
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--out", str(tmp_path / "t")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| qwen2.5-3b | seal | 2 | 15.00 ±" in proc.stdout
    assert (tmp_path / "t" / "tables.csv").read_text().count("\n") == 4


def test_runs_that_did_not_finish_are_named_with_what_stopped_them(tmp_path):
    from experiments.aggregate import missing_runs

    _run(tmp_path, "seed=0", "qwen2.5-3b", "seal", 0, _metrics(0, 0, 0, 0, 0), _metrics(0, 0, 0, 0, 0))
    for name in ("seed=0", "seed=1", "seed=2", "seed=3"):
        (tmp_path / name / ".hydra").mkdir(parents=True)
    (tmp_path / "seed=1" / "error.txt").write_text("Traceback ...\n  raise X\nValueError: val_scenarios=-3\n\n")
    (tmp_path / "seed=2" / "run_config.json").write_text("{}")
    (tmp_path / "seed=2" / "metrics.jsonl").write_text('{"round": 1}\n{"round": 2}\n')
    assert missing_runs(tmp_path) == [
        {"dir": "seed=1", "state": "failed: ValueError: val_scenarios=-3"},
        {"dir": "seed=2", "state": "unfinished: 2 round(s) done"},
        {"dir": "seed=3", "state": "not started"},
    ]
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "## Missing or unfinished runs (3)" in proc.stdout and "- seed=2: unfinished: 2 round(s) done" in proc.stdout
