"""The functions of experiments.tables that decide a number in a table, one at a time and without the command:
means, t-intervals, a cell's runs, the grouping by arm and seed, Table 2's columns, the paired bootstrap and a
cell's rounding. Every expected number is worked out by hand (the t quantiles from a printed t-table), so that
`make mutate GROUP=tables` runs these fast tests on its mutants before the end-to-end ones in test_aggregate.py."""

import json
import math

import pytest

from experiments.tables import cells, columns, differences, paper_numbers, write
from experiments.tables import runs as reading

# two-sided 95% Student t quantiles from a printed t-table, by degrees of freedom
T1, T2, T3, T10, T30 = 12.7062, 4.3027, 3.1824, 2.2281, 2.0423
OFFICIAL, RELEASE = "eval/bfcl_v3", "eval/bfcl_v3_release"


def _eval(avg=None, release=None, **columns):
    """One evaluation as metrics.json holds it: official Avg (and other official columns), release Avg."""
    out = {f"{OFFICIAL}/{k}": v for k, v in columns.items()}
    if avg is not None:
        out[f"{OFFICIAL}/avg"] = avg
    if release is not None:
        out[f"{RELEASE}/avg"] = release
    return out


def _r(name, backbone, arm, seed, budget="paper", headline="final", split="seal_release", **evals):
    """A run as survey returns it, in memory (no folders: the cells never read them)."""
    if headline in evals:
        evals["headline"] = evals[headline]
    return {"name": name, "dir": f"/nowhere/{name}", "backbone": backbone, "experiment": arm, "seed": seed,
            "budget": budget, "split": split, "headline": headline, "evals": evals, "folders": {}, "ood_before": {}, "ood_after": {}}


def test_the_interval_uses_students_t_quantile_with_n_minus_one_degrees_of_freedom():
    assert [cells.t95(df) for df in (1, 2, 3, 10, 30)] == pytest.approx([T1, T2, T3, T10, T30], rel=1e-4)
    # {1, 2, 3, 4}: mean 2.5, sample sd sqrt(5/3), t(3) = 3.1824
    mean, half = cells.mean_ci([1.0, 2.0, 3.0, 4.0])
    assert (mean, half) == (2.5, pytest.approx(T3 * math.sqrt(5 / 3) / 2, rel=1e-4))
    # two runs already have a spread: {1, 3} -> 2 ± t(1) * sqrt(2) / sqrt(2)
    assert cells.mean_ci([1.0, 3.0]) == (2.0, pytest.approx(T1, rel=1e-4))


def test_a_cell_holds_its_mean_half_width_and_how_many_of_the_expected_runs_have_a_value():
    assert cells.cell([10.0, 20.0, 30.0], 5) == {"mean": 20.0, "half": pytest.approx(T2 * 10 / math.sqrt(3), rel=1e-4),
                                                "n": 3, "of": 5}
    assert cells.cell([40.0], 3) == {"mean": 40.0, "half": None, "n": 1, "of": 3}
    assert cells.cell([], 2) is None


def test_a_value_is_the_protocols_metric_in_percent_and_a_zero_is_a_value():
    metrics = {f"{OFFICIAL}/avg": 0.25, f"{RELEASE}/avg": 0.5, f"{OFFICIAL}/base": 0.0, f"{OFFICIAL}/miss_func": None}
    assert cells._value(metrics, "official", "avg") == 25.0
    assert cells._value(metrics, "release", "avg") == 50.0
    assert cells._value(metrics, "official", "base") == 0.0  # evaluated and scored zero: not "—"
    assert cells._value(metrics, "official", "miss_func") is None
    assert cells._value(metrics, "release", "base") is None
    assert cells._value(None, "official", "avg") is None and cells._value({}, "official", "avg") is None


def test_table_2s_columns_are_each_benchmarks_metric_in_percent_and_bfcl_v4_the_mean_of_two():
    found = {"bfcl_v4_web_search": {"eval/bfcl_v4_web_search/avg": 0.10},
             "bfcl_v4_memory": {"eval/bfcl_v4_memory/avg": 0.30},
             "tau2": {"eval/tau2/avg": 0.20, "eval/tau2/retail": 0.15, "eval/tau2/airline": 0.45, "eval/tau2/telecom": 0.0}}
    got = {c: cells._ood_value(found, c) for c in paper_numbers.TABLE2_COLUMNS}
    assert got == {"bfcl_v4": pytest.approx(20.0), "bfcl_v4_web_search": pytest.approx(10.0),
                   "bfcl_v4_memory": pytest.approx(30.0), "tau2": pytest.approx(20.0), "tau2_retail": pytest.approx(15.0),
                   "tau2_airline": pytest.approx(45.0), "tau2_telecom": 0.0}
    # memory alone: no BFCL V4 Avg (never the web search's 0 counted as a score), and no tau2 at all
    memory_only = {"bfcl_v4_memory": {"eval/bfcl_v4_memory/avg": 0.30}}
    assert [cells._ood_value(memory_only, c) for c in ("bfcl_v4", "bfcl_v4_memory", "tau2", "tau2_retail")] == [
        None, pytest.approx(30.0), None, None]
    web_only = {"bfcl_v4_web_search": {"eval/bfcl_v4_web_search/avg": 0.10}}
    assert cells._ood_value(web_only, "bfcl_v4") is None


def test_the_initial_model_of_a_seed_is_the_mean_of_its_runs_evaluations_key_by_key():
    evals = [{f"{OFFICIAL}/avg": 0.2, f"{OFFICIAL}/base": 0.4, "num_entries": 400, "selected": {"round": 3}},
             {f"{OFFICIAL}/avg": 0.4, f"{RELEASE}/avg": 0.1, "num_entries": 400}]
    # each key over the evaluations that have it: avg (0.2 + 0.4) / 2, base and release from one each
    assert cells._mean_eval(evals) == {f"{OFFICIAL}/avg": pytest.approx(0.3), f"{OFFICIAL}/base": 0.4,
                                     f"{RELEASE}/avg": 0.1}
    assert cells._mean_eval([]) is None


def test_the_base_model_row_has_one_value_per_backbone_and_seed_and_the_arms_one_per_run():
    runs = [_r("s0", "qwen2.5-7b", "seal", 0, initial=_eval(0.10), final=_eval(0.40)),
            _r("v0", "qwen2.5-7b", "vanilla_rl", 0, initial=_eval(0.20), final=_eval(0.30)),
            _r("s1", "qwen2.5-7b", "seal", 1, initial=_eval(0.50), final=_eval(0.44)),
            _r("t0", "qwen2.5-3b", "seal", 0, final=_eval(0.05))]  # no initial evaluation
    groups = cells._groups(runs, "initial")
    assert list(groups) == [("qwen2.5-3b", paper_numbers.BASE), ("qwen2.5-7b", paper_numbers.BASE)]
    (none, members), = groups[("qwen2.5-3b", paper_numbers.BASE)]
    assert none is None and [r["name"] for r in members] == ["t0"]
    # 7B seed 0: the mean of seal's 0.10 and vanilla_rl's 0.20; seed 1: seal's 0.50
    (seed0, members0), (seed1, members1) = groups[("qwen2.5-7b", paper_numbers.BASE)]
    assert seed0 == {f"{OFFICIAL}/avg": pytest.approx(0.15)} and [r["name"] for r in members0] == ["s0", "v0"]
    assert seed1 == {f"{OFFICIAL}/avg": 0.50} and [r["name"] for r in members1] == ["s1"]
    final = cells._groups(runs, "final")
    assert {k: [(e[f"{OFFICIAL}/avg"], [r["name"] for r in m]) for e, m in v] for k, v in final.items()} == {
        ("qwen2.5-7b", "seal"): [(0.40, ["s0"]), (0.44, ["s1"])], ("qwen2.5-7b", "vanilla_rl"): [(0.30, ["v0"])],
        ("qwen2.5-3b", "seal"): [(0.05, ["t0"])]}
    assert cells._groups(runs, "best_on_val")[("qwen2.5-7b", "seal")] == [(None, [runs[0]]), (None, [runs[2]])]


def test_table_1_has_a_row_per_backbone_arm_and_model_over_the_runs_expected():
    runs = [_r("s0", "qwen2.5-7b", "seal", 0, initial=_eval(0.10, base=0.2), final=_eval(0.40, release=0.5, base=0.6)),
            _r("s1", "qwen2.5-7b", "seal", 1, initial=_eval(0.30, base=0.4), final=_eval(0.44, release=0.7)),
            _r("v0", "qwen2.5-7b", "vanilla_rl", 0, initial=_eval(0.20), final=_eval(0.30))]
    # the manifest expects three seeds of seal and vanilla_rl, and a wo_reweighting run that never finished
    expected = {("qwen2.5-7b", "seal"): {0, 1, 2}, ("qwen2.5-7b", "vanilla_rl"): {0, 1, 2},
                ("qwen2.5-7b", "wo_reweighting"): {0}, ("qwen2.5-7b", paper_numbers.BASE): {0, 1, 2}}
    rows = cells.main_table(runs, expected=expected)
    # best_on_val and test_selected: no run selected, so no such row
    assert [(r["arm"], r["key"]) for r in rows] == [
        (paper_numbers.BASE, "initial"), ("seal", "final"), ("vanilla_rl", "final"), ("wo_reweighting", "final")]
    base, seal, vanilla, missing = rows
    # the base model: seed 0 the mean of 10 and 20, seed 1 30: {15, 30} -> 22.5 ± t(1) * 10.607 / sqrt(2)
    assert (base["runs"], base["expected"], base["model"], base["budget"]) == (2, 3, "base model (initial)", "paper")
    assert base[("official", "avg")] == {"mean": pytest.approx(22.5), "half": pytest.approx(7.5 * T1, rel=1e-4),
                                         "n": 2, "of": 3}
    assert base[("official", "base")]["mean"] == pytest.approx(30.0) and base[("release", "avg")] is None
    assert base["paper"] == {"avg": 14.00, "base": 22, "miss_func": 14, "miss_param": 10, "long_context": 10}
    # seal: official {40, 44} -> 42 ± t(1) * 2; release {50, 70} -> 60 ± t(1) * 10; base only seed 0's 60
    assert (seal["runs"], seal["expected"], seal["model"]) == (2, 3, "final model")
    assert seal[("official", "avg")] == {"mean": pytest.approx(42.0), "half": pytest.approx(2 * T1, rel=1e-4),
                                         "n": 2, "of": 3}
    assert seal[("release", "avg")]["mean"] == pytest.approx(60.0)
    assert seal[("release", "avg")]["half"] == pytest.approx(10 * T1, rel=1e-4)
    assert (seal[("official", "base")]["mean"], seal[("official", "base")]["n"]) == (pytest.approx(60.0), 1)
    assert seal[("official", "miss_func")] is None
    assert seal["paper"]["avg"] == 40.25 and vanilla["paper"]["avg"] == 30.75
    assert vanilla[("official", "avg")] == {"mean": pytest.approx(30.0), "half": None, "n": 1, "of": 3}
    # an expected arm without a finished run: a row over 0 of 1 with no cell, beside the paper's Table 3
    assert (missing["runs"], missing["expected"], missing["budget"]) == (0, 1, "—")
    assert all(missing[(p, c)] is None for p in columns.PROTOCOLS for c in columns.COLUMNS)
    assert missing["paper"]["avg"] == 32.75
    # without `expected` a row expects the runs it has
    assert [(r["arm"], r["runs"], r["expected"]) for r in cells.main_table(runs, ("initial", "final"))] == [
        (paper_numbers.BASE, 2, 2), ("seal", 2, 2), ("vanilla_rl", 1, 1)]


def test_table_1s_selected_models_and_the_headline_model():
    val = dict(initial=_eval(0.10), final=_eval(0.38), best_on_val=_eval(0.41), test_selected=_eval(0.45))
    runs = [_r("s0", "qwen2.5-7b", "seal", 0, headline="best_on_val", **val),
            _r("s1", "qwen2.5-7b", "seal", 1, headline="final", initial=_eval(0.1), final=_eval(0.30)),
            _r("v0", "qwen2.5-7b", "vanilla_rl", 0, initial=_eval(0.20), final=_eval(0.30))]
    # a 3B run that selected nothing: no selected rows for 3B, and the 7B ones after it are still there
    without = _r("q0", "qwen2.5-3b", "seal", 0, final=_eval(0.1))
    rows = {(r["arm"], r["key"]): r for r in cells.main_table([without, *runs], ("best_on_val", "test_selected", "headline"))
            if r["backbone"] == "qwen2.5-7b"}
    assert [(r["backbone"], r["key"]) for r in cells.main_table([without], ("best_on_val", "test_selected"))] == []
    assert sorted(rows) == [("seal", "best_on_val"), ("seal", "headline"), ("seal", "test_selected"),
                            ("vanilla_rl", "headline")]
    # one of seal's two runs selected on validation: 41 over 1 of 2
    assert rows[("seal", "best_on_val")][("official", "avg")] == {"mean": pytest.approx(41.0), "half": None,
                                                                   "n": 1, "of": 2}
    assert rows[("seal", "test_selected")][("official", "avg")]["mean"] == pytest.approx(45.0)
    # the headline model: each run's own, {41, 30} -> 35.5, and the row names both models
    headline = rows[("seal", "headline")]
    assert (headline[("official", "avg")]["mean"], headline[("official", "avg")]["n"]) == (pytest.approx(35.5), 2)
    assert headline["model"] == "best on validation (1), final model (1)"
    assert rows[("vanilla_rl", "headline")]["model"] == "final model"
    # the headline row of an expected arm without runs, and none for the base model
    expected = {("qwen2.5-3b", "seal"): {0}, ("qwen2.5-3b", paper_numbers.BASE): {0}}
    assert [(r["backbone"], r["arm"], r["runs"], r["expected"]) for r in cells.main_table([], ("headline",), expected)] == [
        ("qwen2.5-3b", "seal", 0, 1)]
    assert [(r["backbone"], r["arm"]) for r in cells.main_table([], ("initial",), expected)] == [("qwen2.5-3b", paper_numbers.BASE)]
    assert cells.main_table([], ("best_on_val", "test_selected"), expected) == []


def test_a_row_names_its_runs_budgets():
    runs = [_r("s0", "qwen2.5-7b", "seal", 0, final=_eval(0.4)),
            _r("s1", "qwen2.5-7b", "seal", 1, budget="smoke", final=_eval(0.2)),
            _r("s2", "qwen2.5-7b", "seal", 2, budget="smoke", final=_eval(0.3))]
    (row,) = cells.main_table(runs, ("final",))
    assert row["budget"] == "paper (1), smoke (2)"
    assert row[("official", "avg")]["mean"] == pytest.approx(30.0)


def _traj_run(root, name, arm, seed, valid, backbone="qwen2.5-7b", headline="final", folder="eval_after",
              file="trajectories.jsonl"):
    """A run with its headline model's trajectories on disk: valid = {entry id: passed}."""
    run = _r(name, backbone, arm, seed, headline=headline, **{headline: _eval(0.0)})
    run["dir"] = str(root / name)
    run["folders"] = {headline: folder, "headline": folder}
    if valid is not None:
        (root / name / folder).mkdir(parents=True, exist_ok=True)
        (root / name / folder / file).write_text("".join(json.dumps({"id": i, "valid": v}) + "\n"
                                                         for i, v in valid.items()))
    return run


def test_an_entrys_reward_is_whether_its_trajectory_passed(tmp_path):
    run = _traj_run(tmp_path, "s0", "seal", 0, {"a": True, "b": False, "c": 1, "d": 0})
    assert differences.entry_rewards(run, "final", "official") == {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}
    assert differences.entry_rewards(run, "headline", "official") == {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}
    # the release protocol's file was not written; a model without a folder has none
    assert differences.entry_rewards(run, "final", "release") is None
    assert differences.entry_rewards(run, "best_on_val", "official") is None
    release = _traj_run(tmp_path, "s1", "seal", 1, {"a": False}, file="trajectories_release.jsonl")
    assert differences.entry_rewards(release, "final", "release") == {"a": 0.0}


def test_the_bootstrap_draws_from_numpys_default_generator_seeded_0_by_default():
    import numpy as np

    d = np.array([[100.0, 0.0, -100.0], [0.0, 100.0, 100.0]])
    rng = np.random.default_rng(0)  # seed rows for every replicate first, then entry columns
    seeds, entries = rng.integers(0, 2, size=(4, 2)).tolist(), rng.integers(0, 3, size=(4, 3)).tolist()
    by_hand = [sum(d[s][e] for s in ss for e in es) / 6 for ss, es in zip(seeds, entries)]
    assert differences.bootstrap_replicates(d, n=4).tolist() == pytest.approx(by_hand)


def test_the_interval_is_the_replicates_2_5_and_97_5_percentiles_by_linear_interpolation():
    import numpy as np

    a = {0: {"x": 1.0, "y": 0.0, "z": 0.0}, 1: {"x": 0.0, "y": 1.0, "z": 1.0}}
    b = {0: {"x": 0.0, "y": 0.0, "z": 1.0}, 1: {"x": 0.0, "y": 0.0, "z": 0.0}}
    d = [[100.0, 0.0, -100.0], [0.0, 100.0, 100.0]]
    rng = np.random.default_rng(0)
    seeds, entries = rng.integers(0, 2, size=(5, 2)).tolist(), rng.integers(0, 3, size=(5, 3)).tolist()
    reps = sorted(sum(d[s][e] for s in ss for e in es) / 6 for ss, es in zip(seeds, entries))
    # 5 replicates: the 2.5th percentile sits at rank 0.1, the 97.5th at rank 3.9 (of 0..4)
    low, high = reps[0] + 0.1 * (reps[1] - reps[0]), reps[3] + 0.9 * (reps[4] - reps[3])
    result = differences.paired_bootstrap(a, b, n=5)
    assert (result["ci_low"], result["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert (result["diff"], result["seeds"], result["entries"]) == (pytest.approx(100 / 3), 2, 3)


def test_the_default_bootstrap_has_10000_replicates():
    import numpy as np

    # one seed, differences (+100, 0, 0): a replicate is 100 k / 3, k ~ Binomial(3, 1/3)
    a, b = {0: {"x": 1.0, "y": 0.0, "z": 0.0}}, {0: {"x": 0.0, "y": 0.0, "z": 0.0}}
    rng = np.random.default_rng(0)
    rng.integers(0, 1, size=(10000, 1))  # the seed rows: one seed, always row 0
    k = (rng.integers(0, 3, size=(10000, 3)) == 0).sum(axis=1)
    share_zero = float((k == 0).mean())  # about (2/3)^3 = 0.296
    assert differences.paired_bootstrap(a, b)["p"] == pytest.approx(2 * share_zero, abs=1e-12)


def test_the_p_value_is_twice_the_smaller_tail_capped_at_1():
    # equal arms: every replicate is 0, both tails hold all of them: p = min(1, 2 * 1) = 1, interval [0, 0]
    same = {0: {"x": 1.0, "y": 0.0}}
    assert {k: v for k, v in differences.paired_bootstrap(same, same, n=50).items() if k != "entries"} == {
        "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p": 1.0, "seeds": 1}
    # one seed, differences (-100, 0, 0, 0): a replicate is -25 k, k ~ Binomial(4, 1/4); all are <= 0 and
    # P(d* >= 0) = P(k = 0) = (3/4)^4: p = 2 * 0.3164
    a, b = {0: {"e1": 0.0, "e2": 1.0, "e3": 0.0, "e4": 0.0}}, {0: {"e1": 1.0, "e2": 1.0, "e3": 0.0, "e4": 0.0}}
    result = differences.paired_bootstrap(a, b, n=4000)
    assert result["diff"] == pytest.approx(-25.0) and (result["ci_low"], result["ci_high"]) == (-75.0, 0.0)
    assert result["p"] == pytest.approx(2 * 0.75 ** 4, abs=0.05)
    # one of 200 entries differs by +100: a replicate is 0.5 k, k ~ Binomial(200, 1/200); P(d* <= 0) =
    # (199/200)^200 = 0.367, so p = 0.734 (replicates of 0.5 and 1 are above 0, never counted as <= 0)
    a = {0: {f"e{i}": float(i == 0) for i in range(200)}}
    b = {0: {f"e{i}": 0.0 for i in range(200)}}
    assert differences.paired_bootstrap(a, b, n=4000)["p"] == pytest.approx(2 * (199 / 200) ** 200, abs=0.05)


def test_seal_is_compared_with_vanilla_rl_and_each_ablation_per_backbone_and_protocol(tmp_path):
    runs = [_traj_run(tmp_path, "s0", "seal", 0, {"a": True, "b": True}),
            _traj_run(tmp_path, "v0", "vanilla_rl", 0, {"a": True, "b": False}),
            _traj_run(tmp_path, "r0", "wo_reweighting", 0, {"a": False, "b": False}),
            # another backbone without seal: nothing to compare
            _traj_run(tmp_path, "x0", "vanilla_rl", 0, {"a": True}, backbone="qwen2.5-3b")]
    rows = differences.differences(runs, n=50)
    assert [(d["backbone"], d["comparison"], d["protocol"]) for d in rows] == [
        ("qwen2.5-7b", "seal - vanilla_rl", "release"), ("qwen2.5-7b", "seal - vanilla_rl", "official"),
        ("qwen2.5-7b", "seal - wo_reweighting", "release"), ("qwen2.5-7b", "seal - wo_reweighting", "official")]
    by = {(d["comparison"], d["protocol"]): d for d in rows}
    # official: (1, 1) - (1, 0) = +50 and (1, 1) - (0, 0) = +100, one seed, two entries
    assert (by[("seal - vanilla_rl", "official")]["diff"], by[("seal - wo_reweighting", "official")]["diff"]) == (50.0, 100.0)
    assert by[("seal - vanilla_rl", "official")]["model"] == columns.HEADLINE_LABEL
    assert (by[("seal - vanilla_rl", "official")]["seeds"], by[("seal - vanilla_rl", "official")]["entries"]) == (1, 2)
    # no release trajectories: a row without numbers that says exactly why
    assert by[("seal - vanilla_rl", "release")] == {
        "backbone": "qwen2.5-7b", "comparison": "seal - vanilla_rl", "protocol": "release", "model": columns.HEADLINE_LABEL,
        "notes": "seed 0 dropped: seal run s0 has no final model trajectories_release.jsonl; "
                 "seed 0 dropped: vanilla_rl run v0 has no final model trajectories_release.jsonl; "
                 "no seed with trajectories of both arms"}
    # an arm that only a problem names still gets its comparison, every seed named
    problems = [{"dir": "c0", "backbone": "qwen2.5-7b", "experiment": "wo_closed_loop", "seed": 0, "kind": "absent",
                 "state": "failed: boom"},
                {"dir": "e0", "backbone": "qwen2.5-7b", "experiment": "wo_env_adaptation", "seed": 0,
                 "kind": "unlisted", "state": "not in the manifest"}]
    closed = [d for d in differences.differences(runs, problems, n=50) if d["comparison"] == "seal - wo_closed_loop"]
    assert [d["notes"] for d in closed] == [
        "seed 0 dropped: seal run s0 has no final model trajectories_release.jsonl; "
        "seed 0 dropped: wo_closed_loop run failed: boom; no seed with trajectories of both arms",
        "seed 0 dropped: wo_closed_loop run failed: boom; no seed with trajectories of both arms"]
    # an unlisted run is in no comparison
    assert not [d for d in differences.differences(runs, problems, n=50) if "wo_env_adaptation" in d["comparison"]]


def test_a_comparison_names_a_seed_one_arm_lacks_and_the_entries_it_left_out(tmp_path):
    runs = [_traj_run(tmp_path, "s0", "seal", 0, {"a": True, "b": True, "c": True}),
            _traj_run(tmp_path, "v0", "vanilla_rl", 0, {"a": True, "b": False}),
            _traj_run(tmp_path, "s1", "seal", 1, {"a": True, "b": True, "c": False})]  # vanilla_rl seed 1: nowhere
    (row,) = [d for d in differences.differences(runs, n=1) if d["protocol"] == "official"]
    # seed 0 over entries a and b: (1, 1) - (1, 0) = +50; c is in one run of the pair only
    assert (row["diff"], row["seeds"], row["entries"]) == (50.0, 1, 2)
    assert row["notes"] == "seed 1 dropped: vanilla_rl run absent; 1 entries not in every paired run left out (v0 has 2 of 3)"
    # one replicate: both ends of the interval are that replicate
    assert row["ci_low"] == row["ci_high"]


def test_a_comparison_of_another_model_names_that_model(tmp_path):
    s0 = _traj_run(tmp_path, "s0", "seal", 0, {"a": True}, headline="best_on_val", folder="eval_test_best")
    s0["folders"]["final"] = "eval_test_final"  # the final model's folder, without trajectories
    v0 = _traj_run(tmp_path, "v0", "vanilla_rl", 0, {"a": False}, folder="eval_test_final")
    (final,) = [d for d in differences.differences([s0, v0], model="final", n=10) if d["protocol"] == "official"]
    assert final["model"] == "final model"
    assert final["notes"] == "seed 0 dropped: seal run s0 has no final model trajectories.jsonl; no seed with trajectories of both arms"
    (headline,) = [d for d in differences.differences([s0, v0], n=10) if d["protocol"] == "official"]
    assert (headline["diff"], headline["notes"]) == (100.0, "seed 0 pairs seal's best on validation with vanilla_rl's final model")


def test_table_2_has_the_initial_model_once_per_seed_and_each_arms_final_model():
    def ood(memory, web, tau2=None):
        out = {"bfcl_v4_memory": {"eval/bfcl_v4_memory/avg": memory}, "bfcl_v4_web_search": {"eval/bfcl_v4_web_search/avg": web}}
        return out | ({"tau2": {"eval/tau2/avg": tau2}} if tau2 is not None else {})

    runs = [_r("s0", "qwen2.5-3b", "seal", 0), _r("v0", "qwen2.5-3b", "vanilla_rl", 0), _r("s1", "qwen2.5-3b", "seal", 1),
            _r("n0", "qwen2.5-7b", "vanilla_rl", 0)]  # 7B: never evaluated out of domain
    for run, before, after in zip(runs, [ood(0.02, 0.04), ood(0.02, 0.04), ood(0.06, 0.00), {}],
                                  [ood(0.10, 0.20, 0.3), ood(0.04, 0.06), ood(0.20, 0.30, 0.5), {}]):
        run["ood_before"], run["ood_after"] = before, after
    table = cells.ood_table(runs, {("qwen2.5-3b", "seal"): {0, 1, 2}})
    rows = {(r["backbone"], r["arm"]): r for r in table if not r.get("reference")}
    # the paper's three 3B rows; no 7B row: no 7B run has an out-of-domain evaluation
    assert list(rows) == [("qwen2.5-3b", paper_numbers.BASE), ("qwen2.5-3b", "seal"), ("qwen2.5-3b", "vanilla_rl")]
    # then the paper's rows no run stands beside: ToolACE-2's (no ToolACE run here) and the three reference rows
    assert [(r["backbone"], r["arm"], r["runs"]) for r in table if r.get("reference")] == [
        ("toolace-2-8b", paper_numbers.BASE, 0), ("BitAgent-8B", "reference", 0), ("watt-tool-8B", "reference", 0),
        ("Qwen3-30B-A3B-Instruct", "reference", 0)]
    base, seal, vanilla = rows.values()
    assert (base["model"], seal["model"], vanilla["model"]) == ("base model (initial)", "final model", "final model")
    # base: seed 0 once (its two runs hold one evaluation), seed 1: memory {2, 6} -> 4; V4 {3, 3} -> 3 ± 0
    assert (base["runs"], base["expected"], base["budget"]) == (2, 2, "paper")
    assert base["bfcl_v4_memory"] == {"mean": pytest.approx(4.0), "half": pytest.approx(2 * T1, rel=1e-4), "n": 2, "of": 2}
    assert (base["bfcl_v4"]["mean"], base["bfcl_v4"]["half"]) == (pytest.approx(3.0), pytest.approx(0.0, abs=1e-9))
    # seal over 2 of the 3 seeds expected: web {20, 30} -> 25, V4 {15, 25} -> 20, tau2 {30, 50} -> 40
    assert (seal["runs"], seal["expected"]) == (2, 3)
    assert [seal[c]["mean"] for c in ("bfcl_v4_web_search", "bfcl_v4", "tau2")] == [
        pytest.approx(25.0), pytest.approx(20.0), pytest.approx(40.0)]
    assert (seal["tau2"]["n"], seal["tau2"]["of"]) == (2, 3) and seal["tau2_retail"] is None
    assert vanilla["bfcl_v4"] == {"mean": pytest.approx(5.0), "half": None, "n": 1, "of": 1} and vanilla["tau2"] is None
    assert (base["paper"]["bfcl_v4"], seal["paper"]["bfcl_v4"], vanilla["paper"]["bfcl_v4"]) == (4.69, 8.63, 5.98)


def test_table_3_has_each_ablation_and_seal_for_a_backbone_that_has_or_expects_an_ablation():
    runs = [_r("s0", "qwen2.5-7b", "seal", 0, final=_eval(0.40, release=0.5)),
            _r("s1", "qwen2.5-7b", "seal", 1, final=_eval(0.44, release=0.7)),
            _r("c0", "qwen2.5-7b", "wo_closed_loop", 0, budget="smoke", final=_eval(0.30)),
            _r("q0", "qwen2.5-3b", "seal", 0, final=_eval(0.1)),  # 3B: no ablation run or expected
            _r("t0", "toolace-2-8b", "seal", 0, final=_eval(0.2))]
    expected = {("qwen2.5-7b", "wo_closed_loop"): {0, 1}, ("toolace-2-8b", "wo_reweighting"): {0}}
    rows = cells.ablation_table(runs, "final", expected)
    assert [(r["backbone"], r["arm"], r["runs"], r["expected"]) for r in rows] == [
        ("qwen2.5-7b", "wo_closed_loop", 1, 2), ("qwen2.5-7b", "seal", 2, 2),
        ("toolace-2-8b", "wo_reweighting", 0, 1), ("toolace-2-8b", "seal", 1, 1)]
    closed, seal, missing, toolace = rows
    assert (closed["model"], closed["budget"], closed["paper"]["avg"]) == ("final model", "smoke", 33.00)
    assert closed[("official", "avg")] == {"mean": pytest.approx(30.0), "half": None, "n": 1, "of": 2}
    assert closed[("release", "avg")] is None
    assert seal[("release", "avg")] == {"mean": pytest.approx(60.0), "half": pytest.approx(10 * T1, rel=1e-4), "n": 2, "of": 2}
    assert seal[("official", "avg")]["mean"] == pytest.approx(42.0) and seal["paper"]["miss_func"] == 36
    assert all(missing[(p, c)] is None for p in columns.PROTOCOLS for c in columns.COLUMNS) and missing["paper"] is None
    assert toolace[("official", "avg")]["mean"] == pytest.approx(20.0)
    # the headline model by default
    runs[2]["evals"]["headline"] = _eval(0.36)
    assert cells.ablation_table(runs[:3])[0][("official", "avg")]["mean"] == pytest.approx(36.0)
    # a seed evaluated on another split's test entries: the row is not the paper's measurement (w/o closed loop 33.00)
    runs[1]["split"] = "scenario_disjoint"
    rows = cells.ablation_table(runs, "final", expected)
    assert (rows[1]["arm"], rows[1]["paper"], rows[0]["paper"]["avg"], rows[0]["withheld"]) == ("seal", None, 33.00, None)
    assert rows[1]["withheld"] == ("evaluated on other test entries than the paper's (1 run on split scenario_disjoint; "
                                   "the paper's: the test part of the authors' split, seal_release)")


def test_a_cell_prints_two_decimals_its_half_width_and_a_shortfall_of_runs():
    assert write._fmt(None) == "—"
    assert write._fmt({"mean": 41.0, "half": 12.7062, "n": 2, "of": 2}) == "41.00 ± 12.71"
    assert write._fmt({"mean": 40.0, "half": None, "n": 1, "of": 3}) == "40.00 (n=1 of 3)"
    assert write._fmt({"mean": 0.0, "half": 0.0, "n": 2, "of": 3}) == "0.00 ± 0.00 (n=2 of 3)"
    # the paper's numbers with two decimals in every table, as the paper prints them ("30.00 (+6.00)")
    assert [write._paper_fmt(v) for v in (14.0, 22, 64.5, 8.63, 2.0, 11.76, None)] == [
        "14.00", "22.00", "64.50", "8.63", "2.00", "11.76", "—"]
    # the CSV: mean, half-width, runs with a value; an empty cell is no value over 0 runs
    assert write._csv_cell({"mean": 40.0, "half": 1.5, "n": 2, "of": 3}) == [40.0, 1.5, 2]
    assert write._csv_cell(None) == [None, None, 0]


def test_a_rows_expected_seeds_are_its_runs_and_its_named_problems_and_the_base_model_has_every_seed():
    runs = [_r("s0", "qwen2.5-7b", "seal", 0), _r("v1", "qwen2.5-7b", "vanilla_rl", 1)]
    problems = [{"dir": "s2", "backbone": "qwen2.5-7b", "experiment": "seal", "seed": 2, "kind": "absent", "state": "x"},
                {"dir": "z", "kind": "absent", "state": "not started"},  # no configuration: no identity
                {"dir": "u", "backbone": "qwen2.5-7b", "experiment": "seal", "seed": 7, "kind": "unlisted", "state": "x"},
                {"dir": "d", "backbone": "qwen2.5-3b", "experiment": "seal", "seed": 4, "kind": "duplicate", "state": "x"}]
    assert reading.expected_seeds(runs, problems) == {("qwen2.5-7b", "seal"): {0, 2}, ("qwen2.5-7b", "vanilla_rl"): {1},
                                                   ("qwen2.5-7b", paper_numbers.BASE): {0, 1, 2}, ("qwen2.5-3b", "seal"): {4},
                                                   ("qwen2.5-3b", paper_numbers.BASE): {4}}


def test_two_finished_runs_of_one_backbone_arm_and_seed_are_both_named_and_neither_kept():
    runs = [_r("a", "qwen2.5-7b", "seal", 0), _r("b", "qwen2.5-7b", "seal", 0), _r("c", "qwen2.5-7b", "seal", 1),
            _r("d", "qwen2.5-3b", "seal", 0), _r("e", "qwen2.5-7b", "vanilla_rl", 0), _r("f", "qwen2.5-7b", "seal", 0)]
    problems = []
    kept = reading._without_duplicates(runs, problems)
    assert [r["name"] for r in kept] == ["c", "d", "e"]
    assert [(p["dir"], p["backbone"], p["experiment"], p["seed"], p["kind"]) for p in problems] == [
        (n, "qwen2.5-7b", "seal", 0, "duplicate") for n in "abf"]
    assert problems[1]["state"] == ("duplicate: qwen2.5-7b seal seed 0 is also a, f; neither is used (remove one, or "
                                    "aggregate with a manifest that lists one)")


def test_an_older_runs_test_selected_score_moves_to_the_release_key_only_when_the_release_protocol_played_alone():
    official, release = f"{OFFICIAL}/avg", f"{RELEASE}/avg"
    selected = {official: 0.45, "round": "round_0009"}
    moved = {release: 0.45, "round": "round_0009"}
    assert reading._test_selected({"test_selected_diagnostic": selected, "test_final": {release: 0.3}}) == moved
    # left as stored: the final evaluation had the official protocol too, or neither, or the score has both keys
    for final in ({release: 0.3, official: 0.2}, {}, {official: 0.2}):
        assert reading._test_selected({"test_selected_diagnostic": selected, "test_final": final}) == selected
    both = {official: 0.45, release: 0.5}
    assert reading._test_selected({"test_selected_diagnostic": both, "test_final": {release: 0.3}}) == both
    assert reading._test_selected({"test_selected_diagnostic": {release: 0.5}, "test_final": {release: 0.3}}) == {release: 0.5}
    assert reading._test_selected({"test_selected_diagnostic": selected}) == selected  # no test_final at all
    assert reading._test_selected({"test_final": {release: 0.3}}) is None
    assert reading._test_selected({"test_selected_diagnostic": {}}) is None


def _run_dir(root, name, config, metrics):
    d = root / name
    d.mkdir(parents=True)
    (d / "run_config.json").write_text(json.dumps({"backbone": {"name": "qwen2.5-7b"}, "experiment_name": "seal",
                                                   "seed": 3, "budget": {"name": "paper"},
                                                   "split": {"_target_": "seal.env.splits.seal_release"}} | config))
    (d / "metrics.json").write_text(json.dumps(metrics))
    return d


def test_a_run_with_a_validation_part_is_read_from_its_test_evaluations_and_the_rest_from_eval_before_after(tmp_path):
    val, test = _eval(0.9) | {"num_entries": 48}, dict(
        test_before=_eval(0.1), test_final=_eval(0.38) | {"num_entries": 400},
        test_best_on_val=_eval(0.41) | {"selected": {"round": 59}}, test_selected_diagnostic=_eval(0.45))
    ood = {"tau2": {"eval/tau2/avg": 0.2}}
    run = reading.read_run(_run_dir(tmp_path, "v", {"heldout_part": "val"},
                                {"eval_before": val, "eval_after": val, "ood_before": ood, **test}), "v")
    assert run["evals"] == {"initial": test["test_before"], "final": test["test_final"],
                            "best_on_val": test["test_best_on_val"], "test_selected": test["test_selected_diagnostic"],
                            "headline": test["test_best_on_val"]}
    assert run["folders"] == {"initial": "eval_test_before", "final": "eval_test_final", "best_on_val": "eval_test_best",
                              "headline": "eval_test_best"}
    assert {k: run[k] for k in ("dir", "name", "backbone", "experiment", "seed", "part", "budget", "headline",
                                "selected_round", "no_test", "entries", "ood_before", "ood_after")} == {
        "dir": str(tmp_path / "v"), "name": "v", "backbone": "qwen2.5-7b", "experiment": "seal", "seed": 3,
        "part": "val", "budget": "paper", "headline": "best_on_val", "selected_round": 59, "no_test": None,
        "entries": {"initial": None, "final": 400, "best_on_val": None, "test_selected": None}, "ood_before": ood,
        "ood_after": {}}
    # no validation part (heldout_part defaults to test): the before/after evaluation is on test
    plain = reading.read_run(_run_dir(tmp_path, "t", {}, {"eval_before": _eval(0.1), "eval_after": _eval(0.3)}), "t")
    assert plain["evals"] == {"initial": _eval(0.1), "final": _eval(0.3), "headline": _eval(0.3)}
    assert plain["folders"] == {"initial": "eval_before", "final": "eval_after", "headline": "eval_after"}
    assert (plain["part"], plain["headline"], plain["selected_round"], plain["no_test"], plain["entries"]) == (
        "test", "final", None, None, {"initial": None, "final": None})
    # a validation part without test evaluations: its before/after (validation) is never a test number
    lost = reading.read_run(_run_dir(tmp_path, "l", {"heldout_part": "val"}, {"eval_before": val, "eval_after": val}), "l")
    assert (lost["evals"], lost["folders"], lost["headline"]) == ({}, {}, "final")
    assert lost["no_test"].startswith("finished, not evaluated on test: its before/after evaluation is on the validation")
    # a validated run whose final model was scored but no model chosen: the final model is its headline
    final_only = reading.read_run(_run_dir(tmp_path, "f", {"heldout_part": "val"}, {"test_final": _eval(0.3)}), "f")
    assert (final_only["headline"], final_only["evals"]["headline"], final_only["folders"]["headline"]) == (
        "final", _eval(0.3), "eval_test_final")


def test_a_runs_arm_is_what_it_recorded_else_its_label_when_its_config_names_no_arm_group():
    assert reading.arm({"arm": "vanilla_rl", "experiment_name": "my label"}) == "vanilla_rl"
    assert reading.arm({"arm": "", "experiment_name": "seal"}) == "seal"
    # budget alone (or some of the arm groups) is not enough to work the arm out
    assert reading.arm({"experiment_name": "seal", "budget": {"name": "paper"}, "reweighting": {"mode": "off"}}) == "seal"


def test_the_comparisons_default_bootstrap_has_10000_replicates(tmp_path):
    import numpy as np

    runs = [_traj_run(tmp_path, "s0", "seal", 0, {"x": True, "y": False, "z": False}),
            _traj_run(tmp_path, "v0", "vanilla_rl", 0, {"x": False, "y": False, "z": False})]
    # one seed, differences (+100, 0, 0): a replicate is 0 when none of its 3 entry draws is x
    rng = np.random.default_rng(0)
    rng.integers(0, 1, size=(10000, 1))
    share_zero = float(((rng.integers(0, 3, size=(10000, 3)) == 0).sum(axis=1) == 0).mean())
    (row,) = [d for d in differences.differences(runs) if d["protocol"] == "official"]
    assert (row["diff"], row["p"]) == (pytest.approx(100 / 3), pytest.approx(2 * share_zero, abs=1e-12))


def test_survey_names_each_kind_of_run_left_out(tmp_path):
    def run_dir(name, seed, metrics, part="test", budget=None):
        return _run_dir(tmp_path, name, {"seed": seed, "heldout_part": part, "budget": budget or {"name": "paper"}}, metrics)

    run_dir("ok", 0, {"eval_before": _eval(0.1), "eval_after": _eval(0.3)})
    (tmp_path / "ok" / "eval_after").mkdir()
    (tmp_path / "ok" / "eval_after" / "trajectories.jsonl").write_text('{"id": "a", "valid": true}\n')
    run_dir("val", 1, {"eval_after": _eval(0.5)}, part="val", budget={"name": "paper", "val_every": 10})
    run_dir("dup0", 2, {"eval_after": _eval(0.5)})
    run_dir("dup1", 2, {"eval_after": _eval(0.6)})
    run_dir("stray", 9, {"eval_after": _eval(0.9)})
    manifest = [{"dir": n} for n in ("ok", "val", "dup0", "dup1")] + [
        {"dir": "never", "backbone": "qwen2.5-7b", "experiment": "seal", "seed": 5}]
    runs, problems = reading.survey(tmp_path, manifest)
    assert [r["name"] for r in runs] == ["ok", "val"]
    assert sorted((p["dir"], p["kind"]) for p in problems) == [
        ("dup0", "duplicate"), ("dup1", "duplicate"), ("never", "absent"), ("stray", "unlisted"), ("val", "no test")]
    # a problem with a configuration carries the run's identity; an unlisted one only its folder and why
    identity = {p["dir"]: (p.get("backbone"), p.get("experiment"), p.get("seed")) for p in problems}
    assert identity == {"dup0": ("qwen2.5-7b", "seal", 2), "dup1": ("qwen2.5-7b", "seal", 2),
                        "never": ("qwen2.5-7b", "seal", 5), "stray": (None, None, None), "val": ("qwen2.5-7b", "seal", 1)}


def test_a_run_directory_is_finished_failed_unfinished_not_started_or_missing(tmp_path):
    def folder(name, files):
        d = tmp_path / name
        d.mkdir()
        for file, text in files.items():
            (d / file).write_text(text)
        return d

    config, metrics = {"run_config.json": "{}"}, {"metrics.json": "{}"}
    assert reading.run_state(tmp_path / "nowhere") == "missing: the run directory was never created"
    assert reading.run_state(folder("done", config | metrics | {"error.txt": "an earlier try"})) == "finished"
    assert reading.run_state(folder("crash", {"error.txt": "Traceback\n  ...\nValueError: boom  \n\n"})) == (
        "failed: ValueError: boom")
    assert reading.run_state(folder("blank", {"error.txt": "\n  \n"})) == "failed: see error.txt"
    assert reading.run_state(folder("two", config | {"metrics.jsonl": '{"round": 0}\n{"round": 1}\n'})) == (
        "unfinished: 2 round(s) done")
    assert reading.run_state(folder("none", config)) == "unfinished: 0 round(s) done"
    assert reading.run_state(folder("metrics_only", metrics)) == "not started"
    assert reading.run_state(folder("empty", {})) == "not started"


def test_a_manifest_is_a_list_of_runs_each_with_its_directory(tmp_path):
    from seal.errors import UserError

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"runs": [{"dir": "a", "seed": 0}, {"dir": "b"}]}))
    assert reading.read_manifest(good) == [{"dir": "a", "seed": 0}, {"dir": "b"}]
    for text in ('{"runs": [{"dir": "a"}, {"seed": 1}]}', '{"runs": ["a_dir"]}', '{"runs": {"dir": "a"}}',
                 '{"jobs": []}', "not json", "[1]"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(UserError, match="is not a manifest experiments.reproduce wrote"):
            reading.read_manifest(tmp_path / "bad.json")


def test_a_row_counts_its_runs_of_those_expected_and_its_csv_lines_hold_each_cells_numbers():
    assert [write._runs({"runs": k, "expected": n}) for k, n in ((2, 3), (0, 1), (0, 0))] == ["2 of 3", "0 of 1", "no run"]
    cells = {(p, c): None for p in columns.PROTOCOLS for c in columns.COLUMNS}
    cells[("release", "avg")] = {"mean": 60.0, "half": 127.062, "n": 2, "of": 3}
    cells[("official", "base")] = {"mean": 30.0, "half": None, "n": 1, "of": 3}
    row = {"backbone": "qwen2.5-7b", "arm": "seal", "model": "final model", "runs": 2, "expected": 3, "budget": "paper",
           "paper": {"avg": 40.25, "base": 58, "miss_func": 36, "miss_param": 34, "long_context": 33}, **cells}
    identity = ["qwen2.5-7b", "seal", "final model"]
    # per column: mean, 95% half-width, runs with a value, and the paper's number beside the release protocol only;
    # last, why the paper's numbers are withheld (none here)
    assert write._protocol_rows([row]) == [
        [*identity, "release", 2, 3, "paper", 60.0, 127.062, 2, 40.25, None, None, 0, 58, None, None, 0, 36,
         None, None, 0, 34, None, None, 0, 33, None],
        [*identity, "official", 2, 3, "paper", None, None, 0, None, 30.0, None, 1, None, None, None, 0, None,
         None, None, 0, None, None, None, 0, None, None]]
    # a row the paper lacks
    assert write._protocol_rows([row | {"paper": None}])[0][7:11] == [60.0, 127.062, 2, None]
    # a row whose runs were measured on other entries: no paper number, and why, on both protocols' lines
    release, official = write._protocol_rows([row | {"paper": None, "withheld": "evaluated on other test entries"}])
    assert (release[10], release[-1], official[-1]) == (None, "evaluated on other test entries", "evaluated on other test entries")


def test_the_papers_reference_rows_stand_without_runs_and_toolaces_table_2_row_only_once():
    names = [r["backbone"] for r in cells.reference_rows("table1")]
    assert names == ["Gemini-3-Pro-Preview", "Claude-Sonnet-4.5", "GPT-4o-2024-11-20", "Gemini-2.5-Flash", "GLM-4.6 (355B)",
                     "Qwen3-32B", "Qwen2.5-14B-Instruct", "xLAM-2-3b-fc-r"]
    first = cells.reference_rows("table1")[0]
    assert (first["arm"], first["runs"], first["expected"], first["paper"]["miss_param"]) == ("reference", 0, 0, 54.50)
    assert first[("release", "avg")] is None and first[("official", "base")] is None
    # Table 2: ToolACE-2's row (a reference row of the paper's, also ToolACE's base model) unless a ToolACE run has it
    table2 = [(r["backbone"], r["arm"]) for r in cells.reference_rows("table2")]
    assert table2 == [("toolace-2-8b", paper_numbers.BASE), ("BitAgent-8B", "reference"), ("watt-tool-8B", "reference"),
                      ("Qwen3-30B-A3B-Instruct", "reference")]
    assert [r["backbone"] for r in cells.reference_rows("table2", skip={"toolace-2-8b"})] == [
        "BitAgent-8B", "watt-tool-8B", "Qwen3-30B-A3B-Instruct"]
    assert cells.reference_rows("table2")[0]["paper"]["tau2"] == 10.83


def test_labels_that_differ_are_counted_and_short_runs_are_each_named():
    assert cells._counted(["test 40/20/40", "base 114/50/114", "test 40/20/40"]) == "base 114/50/114 (1), test 40/20/40 (2)"
    assert (cells._counted(["base 114/50/114"] * 2), cells._counted([])) == ("base 114/50/114", "—")
    # two runs that each lack one entry the other has: both named, the two entries left out
    assert differences._short_runs({"s0": {"a", "b", "c"}, "v0": {"b", "c", "d"}, "s1": {"a", "b", "c", "d"}}) == [
        "2 entries not in every paired run left out (s0 has 3 of 4; v0 has 3 of 4)"]
    assert differences._short_runs({"s0": {"a"}, "v0": {"a"}}) == []
    # a run's test entries: one number, each model's where they differ, none without a test evaluation
    assert write._entries({"entries": {"initial": 400, "final": 400}}) == "400"
    assert write._entries({"entries": {"initial": 400, "final": 396, "best_on_val": None}}) == (
        "base model (initial) 400, final model 396")
    assert write._entries({"entries": {"final": None}}) == "none"


def test_a_runs_split_is_its_configurations_split_function_and_a_row_off_the_papers_says_which_runs():
    from experiments.tables.like_measured import unlike_paper_split
    from experiments.tables.runs import split_name

    assert split_name({"split": {"_target_": "seal.env.splits.scenario_disjoint", "seed": 0}}) == "scenario_disjoint"
    # named as split= chooses it (conf/split/all.yaml builds it with all_entries); a function no choice names: by name
    assert split_name({"split": {"_target_": "seal.env.splits.all_entries"}}) == "all"
    assert split_name({"split": {"_target_": "my_splits.by_date"}}) == "by_date"
    assert split_name({"split": {"_target_": "by_date"}}) == "by_date"
    for config in ({}, {"split": "seal_release"}, {"split": {"seed": 0}}, {"split": {"_target_": ""}},
                   {"split": {"_target_": 3}}):
        assert split_name(config) is None, config
    paper = [_r("a", "qwen2.5-7b", "seal", 0), _r("b", "qwen2.5-7b", "seal", 1)]
    assert unlike_paper_split([]) is None and unlike_paper_split(paper) is None
    others = [*paper, *(_r(n, "qwen2.5-7b", "seal", 2, split=split) for n, split in
                        (("c", None), ("d", "scenario_disjoint"), ("e", "all"), ("f", "all")))]
    # by name (not by count, not as found), the runs whose configuration records no split last
    assert unlike_paper_split(others) == (
        "evaluated on other test entries than the paper's (2 runs on split all, 1 run on split scenario_disjoint, "
        "1 run on a split its configuration does not record; the paper's: the test part of the authors' split, "
        "seal_release)")
    # an arm the paper has no row for has nothing to withhold: no "≠" and no note, whatever its split
    ours = cells.main_table([_r("g", "qwen2.5-7b", "seal_evolving", 0, split="scenario_disjoint", final=_eval(0.3))],
                            ("final",))
    assert [(r["arm"], r["paper"], r["withheld"]) for r in ours] == [("seal_evolving", None, None)]


def test_a_table_1_row_of_an_ablation_arm_has_table_3s_numbers_and_only_runs_with_a_number_decide_the_split():
    # the paper's Avg of Qwen2.5-7B: SEAL 40.25 (Table 1), w/o closed-loop update 33.00 (Table 3); it ablates on 7B only
    runs = [_r("s", "qwen2.5-7b", "seal", 0, final=_eval(0.4)), _r("c", "qwen2.5-7b", "wo_closed_loop", 0, final=_eval(0.3)),
            _r("q", "qwen2.5-3b", "wo_closed_loop", 0, final=_eval(0.2)),
            # a second seal run on another split without a final evaluation (it gave the row no number)
            _r("u", "qwen2.5-7b", "seal", 1, split="scenario_disjoint")]
    rows = {(r["backbone"], r["arm"]): r for r in cells.main_table(runs, ("final",))}
    assert rows[("qwen2.5-7b", "seal")]["paper"]["avg"] == 40.25 and rows[("qwen2.5-7b", "seal")]["withheld"] is None
    assert rows[("qwen2.5-7b", "wo_closed_loop")]["paper"]["avg"] == 33.00
    assert rows[("qwen2.5-3b", "wo_closed_loop")]["paper"] is None
    # Table 3 likewise: the run without a number is not one the row's numbers were measured on
    (seal,) = [r for r in cells.ablation_table(runs, "final") if r["arm"] == "seal"]
    assert (seal["paper"]["avg"], seal["withheld"], seal["runs"]) == (40.25, None, 2)
    runs[0]["split"] = None
    (seal,) = [r for r in cells.ablation_table(runs, "final") if r["arm"] == "seal"]
    assert seal["paper"] is None and "1 run on a split its configuration does not record" in seal["withheld"]
