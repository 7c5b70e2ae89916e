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
    # Table 1 (paper: qwen2.5-3b seal 14.00 / 19 / 15 / 12 / 10): each cell with the paper's beside it
    # seal base column: runs 19, 21 -> 20.00 +- 12.706 * sqrt(2) / sqrt(2)
    assert "| qwen2.5-3b | seal | 2 | 15.00 ± 12.71 (14) | 20.00 ± 12.71 (19) |" in proc.stdout
    header, *lines = (tmp_path / "t" / "tables.csv").read_text().splitlines()
    seal = dict(zip(header.split(","), next(line for line in lines if ",seal," in line).split(",")))
    assert (seal["avg_paper"], seal["long_context_paper"], seal["miss_func_mean"]) == ("14.0", "10", "16.0")
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


def _trajectories(root, name, valid):
    d = root / name / "eval_after"
    d.mkdir(parents=True, exist_ok=True)
    (d / "trajectories.jsonl").write_text("".join(json.dumps({"id": i, "valid": v}) + "\n" for i, v in valid.items()))


def test_paired_bootstrap_by_hand():
    from experiments.aggregate import paired_bootstrap

    # one seed; per-entry differences (1, 0, 0, 0): observed +25 points. A replicate's mean is
    # 25 * Binomial(4, 1/4), so P(d* <= 0) = (3/4)^4 = 0.3164 -> p = 0.633; the 2.5th percentile is 0
    # and the 97.5th is 75 (P(X <= 2) = 0.949 < 0.975 <= P(X <= 3) = 0.996)
    a = {0: {"e1": 1.0, "e2": 1.0, "e3": 0.0, "e4": 0.0}}
    b = {0: {"e1": 0.0, "e2": 1.0, "e3": 0.0, "e4": 0.0, "only_in_b": 1.0}}
    result = paired_bootstrap(a, b, n=20000)
    assert result["diff"] == pytest.approx(25.0) and (result["seeds"], result["entries"]) == (1, 4)
    assert (result["ci_low"], result["ci_high"]) == (0.0, 75.0)
    assert result["p"] == pytest.approx(2 * 0.75 ** 4, abs=0.02)
    # every entry better in every seed: no replicate reaches 0
    ones = {s: {"x": 1.0, "y": 1.0} for s in (0, 1)}
    zeros = {s: {"x": 0.0, "y": 0.0} for s in (0, 1, 2)}
    assert paired_bootstrap(ones, zeros, n=500) == {"diff": 100.0, "ci_low": 100.0, "ci_high": 100.0, "p": 0.0,
                                                    "seeds": 2, "entries": 2}
    # entries pair within a seed: seed 0 differs on one of two entries, seed 1 on none -> 25 points
    mixed = paired_bootstrap({0: {"x": 1.0, "y": 0.0}, 1: {"x": 1.0, "y": 1.0}},
                             {0: {"x": 0.0, "y": 0.0}, 1: {"x": 1.0, "y": 1.0}}, n=500)
    assert mixed["diff"] == pytest.approx(25.0)
    assert paired_bootstrap(a, {1: b[0]}) is None  # no seed in common


def test_ablation_table_and_differences_from_run_directories(tmp_path):
    from experiments.aggregate import ablation_table, differences

    zero = _metrics(0, 0, 0, 0, 0)
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, zero, _metrics(0.40, 0, 0, 0, 0))
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, zero, _metrics(0.42, 0, 0, 0, 0))
    _run(tmp_path, "r0", "qwen2.5-7b", "wo_reweighting", 0, zero, _metrics(0.33, 0, 0, 0, 0))
    _run(tmp_path, "v0", "qwen2.5-7b", "vanilla_rl", 0, zero, _metrics(0.30, 0, 0, 0, 0))
    _trajectories(tmp_path, "s0", {"a": True, "b": True, "c": False})
    _trajectories(tmp_path, "s1", {"a": True, "b": False, "c": False})
    _trajectories(tmp_path, "v0", {"a": True, "b": False, "c": False})
    runs = load_runs(tmp_path)
    rows = {r["arm"]: r for r in ablation_table(runs)}
    assert list(rows) == ["wo_reweighting", "seal"]  # arms without runs are left out, seal last
    # seal over two seeds: mean 41, half-width t(1) * sd(40, 42) / sqrt(2) = 12.706 * 1
    assert rows["seal"]["avg"] == (pytest.approx(41.0), pytest.approx(12.706))
    assert (rows["seal"]["paper_avg"], rows["wo_reweighting"]["paper_avg"]) == (40.25, 32.75)
    # seal - vanilla_rl pairs seed 0 only (vanilla has no seed 1): entries (1,1,0) - (1,0,0) = +33.3 points;
    # wo_reweighting left no trajectories, so it has no comparison
    (diff,) = differences(runs, n=200)
    assert diff["comparison"] == "seal - vanilla_rl" and diff["diff"] == pytest.approx(100 / 3)
    assert (diff["seeds"], diff["entries"]) == (1, 3)

    out = tmp_path / "tables"
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--out", str(out),
                           "--bootstrap", "200"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| qwen2.5-7b | seal | 2 | 41.00 ± 12.71 | 40.25 |" in proc.stdout
    assert "| qwen2.5-7b | seal - vanilla_rl | +33.33 |" in proc.stdout
    assert (out / "table3.csv").read_text().count("\n") == 1 + 2
    assert (out / "differences.csv").read_text().count("\n") == 1 + 1
    assert (out / "tables.png").read_bytes()[:4] == b"\x89PNG"


def test_the_tables_go_to_wandb_as_one_artifact(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, _metrics(0, 0, 0, 0, 0), _metrics(0.4, 0, 0, 0, 0))
    out = tmp_path / "tables"
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--out", str(out),
                           "--wandb", "offline"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (record,) = out.glob("wandb/offline-run-*/run-*.wandb")
    data = record.read_bytes()
    # the artifact record names the artifact and each of its five files
    assert b"seal-tables" in data
    for name in (b"tables.md", b"tables.csv", b"table3.csv", b"differences.csv", b"tables.png"):
        assert name in data


def _ood(memory=None, web=None):
    out = {}
    if memory is not None:
        out["bfcl_v4_memory"] = {"eval/bfcl_v4_memory/avg": memory}
    if web is not None:
        out["bfcl_v4_web_search"] = {"eval/bfcl_v4_web_search/avg": web}
    return out


def test_table_2_takes_the_out_of_domain_evaluations_with_the_papers_numbers(tmp_path):
    from experiments.aggregate import ood_table

    zero = _metrics(0, 0, 0, 0, 0)
    for name, arm, seed, before, after in [
        ("s0", "seal", 0, _ood(0.02, 0.04), _ood(0.08, 0.10)),
        ("s1", "seal", 1, _ood(0.04, 0.06), _ood(0.10, 0.12)),
        ("v0", "vanilla_rl", 0, _ood(0.02, 0.04), _ood(0.05, None)),  # web search not evaluated
    ]:
        _run(tmp_path, name, "qwen2.5-3b", arm, seed, zero, zero)
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        (tmp_path / name / "metrics.json").write_text(json.dumps({**metrics, "ood_before": before, "ood_after": after}))
    rows = {r["arm"]: r for r in ood_table(load_runs(tmp_path))}
    # seal: memory {8, 10} -> 9, web {10, 12} -> 11, their per-run means {9, 11} -> 10, half-width 12.706 * 1
    assert rows["seal"]["bfcl_v4_memory"] == (pytest.approx(9.0), pytest.approx(12.706))
    assert rows["seal"]["bfcl_v4"] == (pytest.approx(10.0), pytest.approx(12.706))
    assert (rows["seal"]["paper_bfcl_v4"], rows["seal"]["paper_tau2"]) == (8.63, 11.76)
    # vanilla_rl has no web-search result: no BFCL V4 mean, the paper's 4.69 beside it
    assert rows["vanilla_rl"]["bfcl_v4_web_search"] is None and rows["vanilla_rl"]["bfcl_v4"] is None
    assert rows["vanilla_rl"]["paper_bfcl_v4"] == 4.69
    # the base model once per seed: seeds 0 and 1 -> memory {2, 4}
    assert rows["base model"]["runs"] == 2 and rows["base model"]["bfcl_v4_memory"][0] == pytest.approx(3.0)
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--out", str(tmp_path / "t"),
                           "--bootstrap", "50"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| qwen2.5-3b | seal | 2 | 9.00 ± 12.71 | 11.00 ± 12.71 | 10.00 ± 12.71 | 8.63 | 11.76 |" in proc.stdout
    assert (tmp_path / "t" / "table2.csv").read_text().count("\n") == 1 + 3
