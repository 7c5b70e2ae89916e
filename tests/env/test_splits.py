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
