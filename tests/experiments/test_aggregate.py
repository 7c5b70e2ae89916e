import json
import subprocess
import sys

import numpy as np
import pytest

from experiments.aggregate import differences, main_table, mean_ci, survey

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
KEYS = ("avg", "base", "miss_func", "miss_param", "long_context")


def _metrics(avg, base=0, mf=0, mp=0, lc=0, release=None, entries=400):
    """One evaluation as metrics.json holds it; release=(avg, base, mf, mp, lc) adds the release protocol."""
    out = {f"eval/bfcl_v3/{k}": v for k, v in zip(KEYS, (avg, base, mf, mp, lc))}
    if release is not None:
        out.update({f"eval/bfcl_v3_release/{k}": v for k, v in zip(KEYS, release)})
    return {**out, "num_entries": entries}


def _run(root, name, backbone, experiment, seed, part="test", **evals):
    d = root / name
    d.mkdir(parents=True)
    (d / "run_config.json").write_text(json.dumps({"backbone": {"name": backbone}, "experiment_name": experiment,
                                                   "seed": seed, "heldout_part": part}))
    (d / "metrics.json").write_text(json.dumps(evals))
    return d


def _trajectories(root, name, valid, folder="eval_after", file="trajectories.jsonl"):
    d = root / name / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / file).write_text("".join(json.dumps({"id": i, "valid": v}) + "\n" for i, v in valid.items()))


def _aggregate(root, *args):
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(root), "--bootstrap", "200", *args],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_mean_ci_by_hand():
    assert mean_ci([0.5]) == (0.5, None)  # one run: no interval
    mean, half = mean_ci([10.0, 20.0, 30.0])
    # sd 10, n 3, t(2) = 4.303: 4.303 * 10 / sqrt(3)
    assert mean == 20.0 and half == pytest.approx(4.303 * 10 / 3 ** 0.5)
    assert mean_ci([7.0, 7.0]) == (7.0, 0.0)


def test_both_protocols_side_by_side_with_the_papers_numbers_beside_the_release_column(tmp_path):
    base0, base1 = _metrics(0.1, 0.2), _metrics(0.2, 0.2)
    _run(tmp_path, "a", "qwen2.5-3b", "seal", 0, eval_before=base0,
         eval_after=_metrics(0.14, 0.19, 0.15, 0.12, 0.10, release=(0.20, 0.30, 0.2, 0.1, 0.2)))
    _run(tmp_path, "b", "qwen2.5-3b", "seal", 1, eval_before=base1,
         eval_after=_metrics(0.16, 0.21, 0.17, 0.14, 0.12, release=(0.24, 0.34, 0.2, 0.1, 0.2)))
    # made before the release protocol existed: official keys only
    _run(tmp_path, "c", "qwen2.5-3b", "vanilla_rl", 0, eval_before=base0, eval_after=_metrics(0.09, 0.16))
    _run(tmp_path, "d", "qwen2.5-3b", "vanilla_rl", 1, eval_before=base1,
         eval_after=_metrics(0.11, 0.16, release=(0.12, 0, 0, 0, 0)))
    runs, problems = survey(tmp_path)
    # no trajectory file was written: each run is named once per protocol it was evaluated under
    assert len(runs) == 4 and sorted((p["dir"], p["state"]) for p in problems) == sorted(
        [(n, "no trajectories: eval_after/trajectories.jsonl") for n in "abcd"]
        + [(n, "no trajectories: eval_after/trajectories_release.jsonl") for n in "abd"])
    rows = {(r["backbone"], r["arm"]): r for r in main_table(runs)}
    seal = rows[("qwen2.5-3b", "seal")]
    assert seal["model"] == "final model" and seal["runs"] == 2
    # official {14, 16}: 15 ± t(1) sd/sqrt(2) = 12.706 * 1; release {20, 24}: 22 ± 12.706 * 2
    assert (seal[("official", "avg")]["mean"], seal[("official", "avg")]["half"]) == (pytest.approx(15.0), pytest.approx(12.706))
    assert (seal[("release", "avg")]["mean"], seal[("release", "avg")]["half"]) == (pytest.approx(22.0), pytest.approx(25.412))
    # the base model once per seed: seeds 0 and 1 -> {10, 20}, whatever the arms
    base = rows[("qwen2.5-3b", "base model")]
    assert base["runs"] == 2 and base[("official", "avg")]["mean"] == pytest.approx(15.0)
    assert base[("release", "avg")] is None  # no run evaluated the initial model under the release protocol
    out = _aggregate(tmp_path)
    # Avg of each model: release (paper's 14 beside it), then official
    assert ("| qwen2.5-3b | seal | final model | 2 | 22.00 ± 25.41 | 14 | 15.00 ± 12.71 |") in out
    # vanilla_rl: one of its two runs has the release protocol: the cell says so; paper 9.25
    assert "| qwen2.5-3b | vanilla_rl | final model | 2 | 12.00 (n=1 of 2) | 9.25 | 10.00 ± 12.71 |" in out
    # {10, 20}: 15 ± t(1) * 7.071 / sqrt(2) = 12.706 * 5
    assert "| qwen2.5-3b | base model | base model (initial) | 2 | — | 5.75 | 15.00 ± 63.53 |" in out
    # every column, release protocol, paper's number in parentheses: seal base {30, 34} -> 32 ± 25.41 (19)
    assert "| qwen2.5-3b | seal | 2 | 22.00 ± 25.41 (14) | 32.00 ± 25.41 (19) |" in out
    # official protocol: no paper number (the paper's protocol is the release's); base {19, 21}
    assert "| qwen2.5-3b | seal | 2 | 15.00 ± 12.71 | 20.00 ± 12.71 | 16.00 ± 12.71 |" in out
    assert "comparable to the paper (release protocol)" in out and "comparable to the BFCL leaderboard" in out
    _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    header, *lines = (tmp_path / "t" / "tables.csv").read_text().splitlines()
    got = {(line.split(",")[1], line.split(",")[3]): dict(zip(header.split(","), line.split(","))) for line in lines}
    assert (got[("seal", "release")]["avg_mean"], got[("seal", "release")]["avg_paper"]) == ("22.0", "14.0")
    assert (got[("seal", "official")]["avg_mean"], got[("seal", "official")]["avg_paper"]) == ("15.0", "")
    assert len(lines) == 3 * 2  # base model, seal, vanilla_rl x two protocols


def test_a_run_with_a_validation_part_is_scored_on_its_test_evaluations(tmp_path):
    val = _metrics(0.9, entries=48)  # the before/after evaluation is on the validation part: never in a table
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, part="val", eval_before=val, eval_after=val,
         test_before=_metrics(0.14), test_final=_metrics(0.38), test_best_on_val=_metrics(0.41),
         test_selected_diagnostic={"eval/bfcl_v3/avg": 0.45, "round": "round_0009"})
    # validated on a part but never scored on test (budget.val_every off): named, in no table
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, part="val", eval_before=val, eval_after=val)
    runs, problems = survey(tmp_path)
    assert [(p["dir"], p["state"]) for p in problems] == [
        ("s1", "finished, not evaluated on test (held-out part val and no test_final: budget.val_every was off)"),
        ("s0", "no trajectories: eval_test_best/trajectories.jsonl")]
    rows = {(r["arm"], r["key"]): r for r in main_table(runs)}
    assert rows[("base model", "initial")][("official", "avg")]["mean"] == pytest.approx(14.0)
    # the second run counts as a run of the group without a test value: n=1 of 2
    final = rows[("seal", "final")][("official", "avg")]
    assert (final["mean"], final["n"], final["of"]) == (pytest.approx(38.0), 1, 2)
    assert rows[("seal", "best_on_val")][("official", "avg")]["mean"] == pytest.approx(41.0)
    assert rows[("seal", "test_selected")][("official", "avg")]["mean"] == pytest.approx(45.0)
    out = _aggregate(tmp_path)
    assert "| qwen2.5-7b | seal | best on validation | 2 | — | 40.25 | 41.00 (n=1 of 2) |" in out
    assert "| qwen2.5-7b | seal | test-selected (diagnostic: chosen on test, optimistic) | 2 | — | 40.25 | 45.00 (n=1 of 2) |" in out
    # the per-column tables use the model chosen on validation
    assert "## Table 1, every column: best on validation (trained arms)" in out
    assert "- s1: finished, not evaluated on test" in out and "90.00" not in out


def test_a_spread_of_exactly_zero_prints_as_zero(tmp_path):
    for seed in (0, 1):
        _run(tmp_path, f"s{seed}", "qwen2.5-3b", "seal", seed, eval_before=_metrics(0.1), eval_after=_metrics(0.2))
        _run(tmp_path, f"v{seed}", "qwen2.5-3b", "vanilla_rl", seed, eval_before=_metrics(0.1), eval_after=_metrics(0.1))
        _trajectories(tmp_path, f"s{seed}", {"a": True, "b": True})
        _trajectories(tmp_path, f"v{seed}", {"a": False, "b": False})
    out = _aggregate(tmp_path)
    assert "| qwen2.5-3b | seal | final model | 2 | — | 14 | 20.00 ± 0.00 |" in out
    # every replicate of a constant +100 difference is 100: the interval is [100, 100], p = 0
    assert "| qwen2.5-3b | seal - vanilla_rl | comparable to the BFCL leaderboard (official protocol) | +100.00 | [+100.00, +100.00] | 0.000 | 2 | 2 | - |" in out
    assert "nan" not in out


def test_the_bootstrap_crosses_one_entry_resample_with_the_seed_resample_by_hand():
    from experiments.aggregate import bootstrap_replicates, paired_bootstrap

    d = np.array([[100.0, 0.0, -100.0], [0.0, 100.0, 100.0]])  # 2 seeds x 3 entries
    reps = bootstrap_replicates(d, n=5, seed=7)
    # the same stream by hand: all seed draws first (5 x 2), then all entry draws (5 x 3)
    rng = np.random.default_rng(7)
    seed_draws, entry_draws = rng.integers(0, 2, size=(5, 2)).tolist(), rng.integers(0, 3, size=(5, 3)).tolist()
    expected = [sum(d[s][e] for s in seeds for e in entries) / 6 for seeds, entries in zip(seed_draws, entry_draws)]
    assert reps.tolist() == pytest.approx(expected)
    a = {0: {"x": 1.0, "y": 0.0, "z": 0.0}, 1: {"x": 0.0, "y": 1.0, "z": 1.0}}
    b = {0: {"x": 0.0, "y": 0.0, "z": 1.0}, 1: {"x": 0.0, "y": 0.0, "z": 0.0}}
    result = paired_bootstrap(a, b, n=5, seed=7)  # the same d as above
    assert result["diff"] == pytest.approx(200 / 6)
    # p = 2 min(share <= 0, share >= 0) of the hand replicates
    low, high = sum(r <= 0 for r in expected) / 5, sum(r >= 0 for r in expected) / 5
    assert result["p"] == pytest.approx(min(1.0, 2 * min(low, high)))
    assert result["ci_low"] == pytest.approx(float(np.percentile(expected, 2.5)))


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
    mixed = paired_bootstrap({0: {"x": 1.0, "y": 0.0}, 1: {"x": 1.0, "y": 1.0}},
                             {0: {"x": 0.0, "y": 0.0}, 1: {"x": 1.0, "y": 1.0}}, n=500)
    assert mixed["diff"] == pytest.approx(25.0)
    assert paired_bootstrap(a, {1: b[0]}) is None  # no seed in common


def _two_arms_two_seeds(root):
    zero = _metrics(0)
    for name, arm, seed, valid in [("s0", "seal", 0, {"a": True, "b": True, "c": False}),
                                   ("s1", "seal", 1, {"a": True, "b": False, "c": False}),
                                   ("v0", "vanilla_rl", 0, {"a": True, "b": False, "c": False}),
                                   ("v1", "vanilla_rl", 1, {"a": False, "b": False, "c": False})]:
        _run(root, name, "qwen2.5-7b", arm, seed, eval_before=zero, eval_after=_metrics(0.3))
        _trajectories(root, name, valid)


def test_a_deleted_trajectory_file_drops_that_seed_only_and_says_so(tmp_path):
    _two_arms_two_seeds(tmp_path)
    (tmp_path / "v1" / "eval_after" / "trajectories.jsonl").unlink()
    runs, problems = survey(tmp_path)
    assert problems == [{"dir": "v1", "state": "no trajectories: eval_after/trajectories.jsonl"}]
    rows = {(d["comparison"], d["protocol"]): d for d in differences(runs, problems, n=200)}
    official = rows[("seal - vanilla_rl", "official")]
    # seed 0 only: (1, 1, 0) - (1, 0, 0) = +33.3 points over 3 entries
    assert official["diff"] == pytest.approx(100 / 3) and (official["seeds"], official["entries"]) == (1, 3)
    assert official["notes"] == "seed 1 dropped: vanilla_rl run v1 has no final model trajectories.jsonl"
    # no run has release trajectories: the row stays, without numbers, and says why
    release = rows[("seal - vanilla_rl", "release")]
    assert "diff" not in release and "no seed with trajectories of both arms" in release["notes"]
    out = _aggregate(tmp_path)
    assert ("| qwen2.5-7b | seal - vanilla_rl | comparable to the BFCL leaderboard (official protocol) | +33.33 |" in out
            and "seed 1 dropped: vanilla_rl run v1 has no final model trajectories.jsonl |" in out)
    assert "- v1: no trajectories: eval_after/trajectories.jsonl" in out


def test_the_manifest_names_runs_never_created_failed_or_unfinished(tmp_path):
    from experiments.reproduce import Job, plan, run_dir, write_manifest

    jobs = plan(("qwen2.5-7b",), (0, 1, 2), None)  # seal and vanilla_rl x 3 seeds
    extra = ("budget=paper",)
    write_manifest(tmp_path, jobs, extra)
    name = lambda arm, seed: run_dir(tmp_path, Job("qwen2.5-7b", arm, seed), extra).name
    zero = _metrics(0)
    for arm in ("seal", "vanilla_rl"):
        _run(tmp_path, name(arm, 0), "qwen2.5-7b", arm, 0, eval_before=zero, eval_after=zero)
        _trajectories(tmp_path, name(arm, 0), {"a": arm == "seal", "b": False})
    _run(tmp_path, name("seal", 1), "qwen2.5-7b", "seal", 1, eval_before=zero, eval_after=zero)
    _trajectories(tmp_path, name("seal", 1), {"a": True, "b": True})
    failed = tmp_path / name("vanilla_rl", 1)
    (failed / ".hydra").mkdir(parents=True)
    (failed / "error.txt").write_text("Traceback ...\nRuntimeError: CUDA out of memory\n")
    unfinished = tmp_path / name("seal", 2)
    (unfinished / ".hydra").mkdir(parents=True)
    (unfinished / "run_config.json").write_text("{}")
    (unfinished / "metrics.jsonl").write_text('{"round": 0}\n{"round": 1}\n')
    # vanilla_rl seed 2 never got a directory
    runs, problems = survey(tmp_path, json.loads((tmp_path / "manifest.json").read_text())["runs"])
    states = {(p["experiment"], p["seed"]): p["state"] for p in problems}
    assert states == {("vanilla_rl", 1): "failed: RuntimeError: CUDA out of memory",
                      ("seal", 2): "unfinished: 2 round(s) done",
                      ("vanilla_rl", 2): "missing: the run directory was never created"}
    (row,) = [d for d in differences(runs, problems, n=100) if d["protocol"] == "official"]
    # seed 0 only: (1, 0) - (0, 0) = +50; seeds 1 and 2 named with what happened to them
    assert row["diff"] == pytest.approx(50.0) and row["seeds"] == 1
    assert row["notes"] == ("seed 1 dropped: vanilla_rl run failed: RuntimeError: CUDA out of memory; "
                            "seed 2 dropped: seal run unfinished: 2 round(s) done; "
                            "seed 2 dropped: vanilla_rl run missing: the run directory was never created")
    out = _aggregate(tmp_path)
    assert "Expected runs: 6 from" in out and "## Runs missing, failed, unfinished or incomplete (3)" in out
    assert f"- {name('vanilla_rl', 2)}: missing: the run directory was never created" in out


def test_without_a_manifest_the_output_says_runs_never_created_cannot_be_named(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    assert "no manifest (runs never created cannot be named" in _aggregate(tmp_path)


def test_ablation_table_has_both_protocols_and_the_papers_avg(tmp_path):
    from experiments.aggregate import ablation_table

    zero = _metrics(0)
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=zero, eval_after=_metrics(0.40, release=(0.5, 0, 0, 0, 0)))
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, eval_before=zero, eval_after=_metrics(0.42, release=(0.5, 0, 0, 0, 0)))
    _run(tmp_path, "r0", "qwen2.5-7b", "wo_reweighting", 0, eval_before=zero, eval_after=_metrics(0.33))
    runs, _ = survey(tmp_path)
    rows = {r["arm"]: r for r in ablation_table(runs)}
    assert list(rows) == ["wo_reweighting", "seal"]  # arms without runs are left out, seal last
    assert (rows["seal"]["official"]["mean"], rows["seal"]["official"]["half"]) == (pytest.approx(41.0), pytest.approx(12.706))
    assert (rows["seal"]["release"]["mean"], rows["seal"]["release"]["half"]) == (50.0, 0.0)
    assert rows["wo_reweighting"]["release"] is None
    assert (rows["seal"]["paper_avg"], rows["wo_reweighting"]["paper_avg"]) == (40.25, 32.75)
    out = tmp_path / "tables"
    text = _aggregate(tmp_path, "--out", str(out))
    assert "| qwen2.5-7b | seal | 2 | 50.00 ± 0.00 | 40.25 | 41.00 ± 12.71 |" in text
    assert "| qwen2.5-7b | wo_reweighting | 1 | — | 32.75 | 33.00 |" in text
    assert (out / "table3.csv").read_text().count("\n") == 1 + 2
    assert (out / "tables.png").read_bytes()[:4] == b"\x89PNG"


def test_the_figure_groups_bars_by_backbone_with_the_papers_marks_and_uncut_error_bars(tmp_path):
    from matplotlib.container import BarContainer

    from experiments.aggregate import figure

    for seed, (s, v) in enumerate([(0.01, 0.30), (0.09, 0.32)]):
        _run(tmp_path, f"s{seed}", "qwen2.5-3b", "seal", seed, eval_before=_metrics(0),
             eval_after=_metrics(0, release=(s, 0, 0, 0, 0)))
        _run(tmp_path, f"v{seed}", "qwen2.5-7b", "vanilla_rl", seed, eval_before=_metrics(0),
             eval_after=_metrics(0, release=(v, 0, 0, 0, 0)))
    runs, _ = survey(tmp_path)
    rows = [r for r in main_table(runs) if r["key"] == "final"]
    ax = figure(rows, "release", "final model").axes[0]
    bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
    assert sorted(bars) == ["seal", "vanilla_rl"]
    # seal on 3B: {1, 9} -> 5 ± 12.706 * sd 5.657 / sqrt 2 = 5 ± 50.82; the lower end is -45.82, not 0
    (seal_bar,) = bars["seal"].patches
    assert seal_bar.get_height() == pytest.approx(5.0)
    (segment,) = bars["seal"].errorbar.lines[2][0].get_segments()
    assert [y for _, y in segment] == [pytest.approx(5 - 50.824), pytest.approx(5 + 50.824)]
    assert ax.get_ylim()[0] < 5 - 50.824
    # vanilla_rl on 7B: {30, 32} -> 31 ± 12.706
    (segment,) = bars["vanilla_rl"].errorbar.lines[2][0].get_segments()
    assert [y for _, y in segment] == [pytest.approx(31 - 12.706), pytest.approx(31 + 12.706)]
    # bars grouped by backbone: seal's bar left of the 3B tick (x=0), vanilla_rl's right of the 7B tick (x=1)
    assert seal_bar.get_x() + seal_bar.get_width() / 2 == pytest.approx(-0.2)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["qwen2.5-3b", "qwen2.5-7b"]
    # the paper's numbers (Table 1: 3B seal 14.00, 7B vanilla_rl 30.75) marked at their height
    marks = sorted(y for line in ax.get_lines() if line.get_gid() == "paper" for y in line.get_ydata())
    assert marks == [14.0, 30.75]
    assert sorted(t.get_text() for t in ax.texts) == ["n=2", "n=2"]


def test_the_tables_go_to_wandb_as_one_artifact(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    out = tmp_path / "tables"
    _aggregate(tmp_path, "--out", str(out), "--wandb", "offline")
    (record,) = out.glob("wandb/offline-run-*/run-*.wandb")
    data = record.read_bytes()
    assert b"seal-tables" in data
    for name in (b"tables.md", b"tables.csv", b"table3.csv", b"differences.csv", b"tables.png"):
        assert name in data


def _ood(memory=None, web=None, tau2=None):
    out = {} if tau2 is None else {"tau2": {"eval/tau2/avg": tau2}}
    if memory is not None:
        out["bfcl_v4_memory"] = {"eval/bfcl_v4_memory/avg": memory}
    if web is not None:
        out["bfcl_v4_web_search"] = {"eval/bfcl_v4_web_search/avg": web}
    return out


def test_table_2_takes_the_out_of_domain_evaluations_with_the_papers_numbers(tmp_path):
    from experiments.aggregate import ood_table

    zero = _metrics(0)
    for name, arm, seed, before, after in [
        ("s0", "seal", 0, _ood(0.02, 0.04), _ood(0.08, 0.10, tau2=0.15)),
        ("s1", "seal", 1, _ood(0.04, 0.06), _ood(0.10, 0.12, tau2=0.25)),
        # web search not evaluated; tau2's solo mode is another benchmark and never fills the paper's tau2 column
        ("v0", "vanilla_rl", 0, _ood(0.02, 0.04), _ood(0.05, None) | {"tau2_solo": {"eval/tau2_solo/avg": 0.5}}),
    ]:
        _run(tmp_path, name, "qwen2.5-3b", arm, seed, eval_before=zero, eval_after=zero, ood_before=before, ood_after=after)
    rows = {r["arm"]: r for r in ood_table(survey(tmp_path)[0])}
    # seal: memory {8, 10} -> 9, web {10, 12} -> 11, their per-run means {9, 11} -> 10, half-width 12.706 * 1
    assert (rows["seal"]["bfcl_v4_memory"]["mean"], rows["seal"]["bfcl_v4_memory"]["half"]) == (pytest.approx(9.0), pytest.approx(12.706))
    assert rows["seal"]["bfcl_v4"]["mean"] == pytest.approx(10.0)
    assert (rows["seal"]["paper_bfcl_v4"], rows["seal"]["paper_tau2"]) == (8.63, 11.76)
    assert rows["vanilla_rl"]["bfcl_v4_web_search"] is None and rows["vanilla_rl"]["bfcl_v4"] is None
    assert rows["base model"]["runs"] == 2 and rows["base model"]["bfcl_v4_memory"]["mean"] == pytest.approx(3.0)
    out = _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    # tau2 {15, 25} -> 20, half-width 12.706 * 5 = 63.53; it never enters the BFCL V4 mean
    assert (rows["seal"]["tau2"]["mean"], rows["seal"]["tau2"]["half"]) == (pytest.approx(20.0), pytest.approx(63.53))
    assert rows["vanilla_rl"]["tau2"] is None
    assert "| qwen2.5-3b | seal | 2 | 9.00 ± 12.71 | 11.00 ± 12.71 | 10.00 ± 12.71 | 8.63 | 20.00 ± 63.53 | 11.76 |" in out
    assert "| qwen2.5-3b | vanilla_rl | 1 | 5.00 | — | — | 4.69 | — | 9.64 |" in out
    assert (tmp_path / "t" / "table2.csv").read_text().count("\n") == 1 + 3
