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
    base = _metrics(0.1, 0.2, 0.1, 0.05, 0.05)
    _run(tmp_path, "a", "qwen2.5-3b", "seal", 0, base, _metrics(0.14, 0.19, 0.15, 0.12, 0.10))
    _run(tmp_path, "b", "qwen2.5-3b", "seal", 1, base, _metrics(0.16, 0.21, 0.17, 0.14, 0.12))
    _run(tmp_path, "c", "qwen2.5-3b", "vanilla_rl", 0, base, _metrics(0.09, 0.16, 0.09, 0.06, 0.06))
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "run_config.json").write_text("{}")
    runs = load_runs(tmp_path)
    assert len(runs) == 3
    rows = {(r["backbone"], r["arm"]): r for r in main_table(runs)}
    assert rows[("qwen2.5-3b", "seal")]["runs"] == 2
    assert rows[("qwen2.5-3b", "seal")]["avg"][0] == pytest.approx(15.0)
    assert rows[("qwen2.5-3b", "seal")]["paper_avg"] == 14.0
    assert rows[("qwen2.5-3b", "base model")]["runs"] == 3 and rows[("qwen2.5-3b", "base model")]["avg"][1] == 0.0
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--out", str(tmp_path / "t")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| qwen2.5-3b | seal | 2 | 15.00 ±" in proc.stdout
    assert (tmp_path / "t" / "tables.csv").read_text().count("\n") == 4
