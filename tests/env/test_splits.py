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
    """Our copy of the release's split holds its train and test ids only (the release's data/bfcl_400_split.json
    adds a seed), and every one of the release's arms validates on all 400 test entries (val_files:
    data/bfcl_eval_400.parquet): no validation subset of test to carry as the release's."""
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


def _by_procedure(units, size, seed):
    """The documented carve, written out: shuffle the whole units with random.Random(seed), take each unit that
    still fits until `size` scenarios are taken; (taken, the units left in shuffled order)."""
    import random

    order = list(units)
    random.Random(seed).shuffle(order)
    taken, rest = [], []
    for unit in order:
        (taken.extend(unit) if len(taken) + len(unit) <= size else rest.append(unit))
    return taken, rest


def _units_in(scenarios):
    """The duplicate groups (in DUPLICATE_SCENARIO_GROUPS' order), then single scenarios in number order, each cut
    to `scenarios`; empty ones left out."""
    grouped = {s for g in DUPLICATE_SCENARIO_GROUPS for s in g}
    units = [sorted(set(g) & scenarios) for g in DUPLICATE_SCENARIO_GROUPS]
    units += [[s] for s in range(200) if s not in grouped and s in scenarios]
    return [u for u in units if u]


@pytest.mark.parametrize("seed", [0, 7])
def test_a_seeded_split_is_the_documented_carve(seed):
    """Test scenarios carved from every scenario with random.Random(seed), validation from what is left with
    random.Random(seed + 1) (another stream than the test part's); the release's validation with
    random.Random(seed) from its train part: the same seed gives the same split on every machine and version."""
    def ids(scenarios, categories=CATEGORIES):
        return {f"multi_turn_{c}_{s}" for c in categories for s in scenarios}

    test, rest = _by_procedure(_units_in(set(range(200))), 100, seed)
    train = {s for u in rest for s in u}
    val, _ = _by_procedure(_units_in(train), 10, seed + 1)
    split = scenario_disjoint(test_scenarios=100, val_scenarios=10, seed=seed)
    assert (set(split.test), set(split.val), set(split.train)) == (ids(test), ids(val), ids(train - set(val)))

    release = seal_release()
    present = {scenario_of(i) for i in release.train}
    val, _ = _by_procedure(_units_in(present), 10, seed)
    carved = seal_release(val_scenarios=10, seed=seed)
    assert set(carved.val) == {i for i in release.train if scenario_of(i) in set(val)}
    assert carved.test == release.test and len(carved.val) == 40
    # the defaults: no validation part, seed 0, 100 test scenarios
    assert scenario_disjoint() == scenario_disjoint(test_scenarios=100, val_scenarios=0, seed=0)
    assert seal_release(val_scenarios=10) == seal_release(val_scenarios=10, seed=0) and not seal_release().val


def test_one_validation_scenario_is_one_scenario_of_four_entries():
    split = seal_release(val_scenarios=1, seed=2)
    assert len(split.val) == 4 and len({scenario_of(i) for i in split.val}) == 1
    # every id of the split, its parts in order (what task=replay plays)
    assert split.all_ids() == split.train + split.val + split.test and len(split.all_ids()) == 800
    assert sorted(i.rsplit("_", 1)[0] for i in split.val) == sorted(f"multi_turn_{c}" for c in CATEGORIES)


def test_a_split_is_named_as_its_config_is():
    """split=<name> on the command line is conf/split/<name>.yaml; the split carries that name into every report."""
    from pathlib import Path

    import yaml
    from hydra.utils import instantiate

    named = {}
    for path in (Path(__file__).parents[2] / "conf" / "split").glob("*.yaml"):
        # the seed and the budget's validation size are interpolated from the run's config: any value names alike
        conf = {k: (1 if k in ("seed", "val_scenarios") else v) for k, v in yaml.safe_load(path.read_text()).items()}
        named[path.stem] = instantiate(conf).name
    assert named == {"all": "all", "scenario_disjoint": "scenario_disjoint", "seal_release": "seal_release"}


@pytest.mark.parametrize("size, message", [
    (4, "cannot take 4 scenarios: between 0 and 3 are available"),
    (-1, "cannot take -1 scenarios: between 0 and 3 are available"),
    (2, "cannot carve exactly 2 scenarios from whole scenario groups"),  # only [1] and [2, 3] whole: 1 or 3
])
def test_a_carve_that_cannot_be_made_is_refused(size, message):
    import random

    from seal.env.splits import _carve

    with pytest.raises(ValueError) as caught:
        _carve([[1], [2, 3]], size, random.Random(0))
    assert str(caught.value) == message


def test_a_carve_may_take_nothing_or_everything():
    import random

    from seal.env.splits import _carve

    assert _carve([[1], [2, 3]], 0, random.Random(0))[0] == []
    taken, rest = _carve([[1], [2, 3]], 3, random.Random(0))
    assert sorted(taken) == [1, 2, 3] and rest == []
    with pytest.raises(ValueError) as caught:
        seal_release(val_scenarios=-1)
    assert str(caught.value) == "val_scenarios=-1: a number of scenarios cannot be negative (0: no validation part)"


def test_an_unknown_part_is_refused_naming_the_three():
    with pytest.raises(ValueError) as caught:
        seal_release().part("dev")
    assert str(caught.value) == "unknown split part 'dev'; choose one of train, val, test"


def test_the_leakage_note_says_which_scenarios_and_groups_sit_on_both_sides():
    """By hand: scenarios 1-4 on both sides (the first three named), the group {66, 70, 74} (one initial
    configuration) split 66, 70 | 74; sizes in entries, scenarios in numbers."""
    train = [f"multi_turn_base_{s}" for s in (1, 2, 3, 4, 66, 70)]
    test = [f"multi_turn_miss_func_{s}" for s in (1, 2, 3, 4, 74)] + ["multi_turn_long_context_74"]
    report = leakage_report({"train": train, "test": test})
    assert report["sizes"] == {"train": 6, "test": 6} and report["scenarios"] == {"train": 6, "test": 5}
    assert report["overlap"]["train-test"] == {"shared_scenarios": 4, "examples": [1, 2, 3, 4],
                                               "shared_duplicate_groups": [[66, 70, 74]]}
    assert not report["leak_free"] and report["note"] == (
        "Train and test share 4 scenarios (e.g. 1, 2, 3), the same tasks on both sides. Train and test split the "
        "duplicate scenarios {66, 70, 74}, one task under several numbers (the same initial configuration): train "
        "has 66, 70; test has 74. split=scenario_disjoint keeps every scenario and every duplicate group on one side.")
    # a group whose every member is on both sides is counted as shared scenarios, not again as a split group;
    # shared scenarios alone make a split leak
    whole = leakage_report({"train": ["multi_turn_base_40", "multi_turn_base_43"],
                            "test": ["multi_turn_miss_param_40", "multi_turn_miss_param_43"]})
    assert whole["overlap"]["train-test"]["shared_duplicate_groups"] == [] and not whole["leak_free"]
    assert whole["note"] == ("Train and test share 2 scenarios (e.g. 40, 43), the same tasks on both sides. "
                             "split=scenario_disjoint keeps every scenario and every duplicate group on one side.")
    # the examples are the first ten shared scenarios, by number (the old per-category split shares 173)
    old = old_per_category_split()
    shared = sorted({scenario_of(i) for i in old["train"]} & {scenario_of(i) for i in old["test"]})
    assert leakage_report(old)["overlap"]["train-test"]["examples"] == shared[:10] and len(shared) == 173


def test_a_leak_free_split_has_no_note_and_the_release_says_why_it_is_kept():
    from seal.env.splits import Split

    assert "note" not in Split("x", train=["multi_turn_base_1"], test=["multi_turn_base_2"], provenance="P.").leakage()
    assert "note" not in scenario_disjoint(val_scenarios=10).leakage()
    # the release split straddles two duplicate groups: which side holds each member, read from its file
    release = seal_release()
    side = {scenario_of(i): part for part in ("train", "test") for i in release.part(part)}
    has = {part: {g: ", ".join(str(s) for s in g if side[s] == part) for g in [(40, 43), (66, 70, 74)]}
           for part in ("train", "test")}
    assert release.leakage()["note"] == (
        f"Train and test split the duplicate scenarios {{40, 43}}, one task under several numbers (the same first "
        f"turn): train has {has['train'][(40, 43)]}; test has {has['test'][(40, 43)]}. Train and test split the "
        f"duplicate scenarios {{66, 70, 74}}, one task under several numbers (the same initial configuration): train "
        f"has {has['train'][(66, 70, 74)]}; test has {has['test'][(66, 70, 74)]}. split=scenario_disjoint keeps "
        "every scenario and every duplicate group on one side. This is the authors' split (split=seal_release), kept "
        "as they released it so that results compare with the paper's.")
