from collections import Counter

import pytest

from seal.env.benchmarks.bfcl_v3 import CATEGORIES, DUPLICATE_SCENARIO_GROUPS, scenario_of
from seal.env.splits import all_entries, leakage_report, old_per_category_split, scenario_disjoint, seal_release


def per_category(ids):
    return Counter(i.rsplit("_", 1)[0].removeprefix("multi_turn_") for i in ids)


def test_old_per_category_split_leaks_173_scenarios():
    report = leakage_report(old_per_category_split())
    assert report["overlap"]["train-test"]["shared_scenarios"] == 173
    assert not report["leak_free"]


def test_release_split_is_400_400_and_scenario_disjoint_by_number():
    split = seal_release()
    assert len(split.train) == len(split.test) == 400 and not split.val
    assert per_category(split.train) == per_category(split.test) == {c: 100 for c in CATEGORIES}
    overlap = split.leakage()["overlap"]["train-test"]
    assert overlap["shared_scenarios"] == 0
    # ...but two duplicate-scenario groups straddle it, and the report says so
    assert sorted(map(tuple, overlap["shared_duplicate_groups"])) == [(40, 43), (66, 70, 74)]


def test_the_release_split_file_holds_only_what_the_release_split_has():
    """The release's own split file (data/bfcl_400_split.json) has train, test and a seed, and every one of its
    arms validates on all 400 test entries (val_files: data/bfcl_eval_400.parquet): no validation subset of test
    to carry as the release's."""
    import json
    from importlib.resources import files

    data = json.loads(files("seal.env").joinpath("data/bfcl_v3_seal_release_split.json").read_text())
    assert set(data) == {"train", "test"} and (len(data["train"]), len(data["test"])) == (400, 400)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_scenario_disjoint_split_is_leak_free(seed):
    split = scenario_disjoint(val_scenarios=10, seed=seed)
    assert per_category(split.test) == {c: 100 for c in CATEGORIES}
    assert per_category(split.train) == {c: 90 for c in CATEGORIES} and per_category(split.val) == {c: 10 for c in CATEGORIES}
    assert split.leakage()["leak_free"]
    side = {scenario_of(i): name for name in ("train", "val", "test") for i in split.part(name)}
    for group in DUPLICATE_SCENARIO_GROUPS:
        assert len({side[s] for s in group}) == 1
    assert scenario_disjoint(val_scenarios=10, seed=seed).test == split.test


def test_seeds_give_different_splits_and_all_covers_800():
    assert scenario_disjoint(seed=0).test != scenario_disjoint(seed=1).test
    assert len(all_entries().test) == 800


def test_validation_is_carved_from_train_never_from_test():
    split = seal_release(val_scenarios=10, seed=3)
    assert set(split.val) <= set(seal_release().train) and not set(split.val) & set(split.test)
    assert len(split.train) + len(split.val) == 400


def test_the_ids_a_split_is_built_from_are_bfcl_evals_entries():
    """BFCL V3's ids live with its benchmark (seal.env.benchmarks.bfcl_v3): id_of inverts category_of and
    scenario_of, and the 4 x 200 ids it gives are every multi-turn entry bfcl-eval ships."""
    from seal.env.benchmarks.bfcl_v3 import NUM_SCENARIOS, category_of, id_of, load_benchmark

    assert id_of("miss_param", 7) == "multi_turn_miss_param_7"
    assert (category_of(id_of("long_context", 199)), scenario_of(id_of("long_context", 199))) == ("long_context", 199)
    assert NUM_SCENARIOS == 200
    assert {id_of(c, s) for c in CATEGORIES for s in range(NUM_SCENARIOS)} == set(load_benchmark())


@pytest.mark.parametrize("bad, message", [
    ("base_3", "'base_3' is not a BFCL multi-turn id (multi_turn_<category>_<n>)"),
    # BFCL V3's four multi-turn categories (bfcl-eval's multi_turn_* files), in its order
    ("multi_turn_composite_3", "'multi_turn_composite_3' is not a BFCL V3 multi-turn id; categories are base, "
                               "miss_func, miss_param, long_context"),
    # a known category but no scenario number
    ("multi_turn_base_x", "'multi_turn_base_x' is not a BFCL V3 multi-turn id; categories are base, miss_func, "
                          "miss_param, long_context"),
])
def test_an_id_that_is_not_bfcl_v3s_is_refused_in_one_sentence(bad, message):
    from seal.env.benchmarks.bfcl_v3 import category_of

    with pytest.raises(ValueError) as caught:
        scenario_of(bad)
    assert str(caught.value) == message
    with pytest.raises(ValueError):
        category_of(bad)


def test_unknown_entries_are_counted_and_the_first_five_named():
    from seal.env.benchmarks.bfcl_v3 import get_entries

    unknown = [f"multi_turn_base_{n}" for n in range(200, 206)]  # scenarios run 0..199; one past five
    with pytest.raises(KeyError) as caught:
        get_entries(["multi_turn_base_0", *unknown])
    assert caught.value.args[0] == ("6 id(s) are not BFCL V3 multi-turn entries: multi_turn_base_200, "
                                    "multi_turn_base_201, multi_turn_base_202, multi_turn_base_203, multi_turn_base_204 ...")
    with pytest.raises(KeyError) as caught:
        get_entries(unknown[:5])
    assert caught.value.args[0].endswith(": " + ", ".join(unknown[:5]))  # all five shown, nothing left out
    assert [e.id for e in get_entries(["multi_turn_miss_func_9", "multi_turn_base_0"])] == [
        "multi_turn_miss_func_9", "multi_turn_base_0"]


def test_a_summary_of_no_results_has_a_mean_of_zero():
    """Nothing played (an empty selection) reads as no accuracy, not a division by zero."""
    from seal.env.benchmarks.bfcl_v3 import category_summary

    assert category_summary([]) == {"total": 0, "passed": 0, "by_category": {}, "accuracy_mean": 0.0}
    # by hand: base 1/2, long_context 1/1 -> (0.5 + 1.0) / 2; categories in BFCL's order, not the results'
    summary = category_summary([("multi_turn_long_context_3", True), ("multi_turn_base_1", False),
                                ("multi_turn_base_2", True)])
    assert list(summary["by_category"]) == ["base", "long_context"]
    assert (summary["total"], summary["passed"], summary["accuracy_mean"]) == (3, 2, 0.75)
