"""The rates a job's estimate starts from (seal.report.pace): a like run's beside it, an earlier attempt's
evaluation, and the plan line's words for whose rates they are. Every figure is worked out by hand from the
files each test writes."""

import json
import os

import pytest

from seal.report.pace import PACE_KEYS, PACE_TRAINER_KEYS, evaluation_rate, pace_of, similar_run, time_it_takes


def test_the_run_beside_is_the_newest_like_run_that_measured_something(tmp_path):
    config = {"backbone": {"name": "tiny"}, "budget": {"rounds": 3}, "launch": {"processes": 1}, "eval": {},
              "benchmark": {}, "world_size": 1, "sharding": None, "machine": "1 process on a CPU (2 cores)",
              "seed": 0, "reweighting": {"name": "off"}}

    def folder(name, when, config=config, rounds=(), evaluation=None, damaged=None):
        path = tmp_path / name
        path.mkdir()
        (path / "run_config.json").write_text(json.dumps(config))
        (path / "metrics.jsonl").write_text("".join(json.dumps({"round": i, "time/generation": g, "time/optimisation": o,
                                                                "train/reward_mean": 0.5}) + "\n"
                                                    for i, (g, o) in enumerate(rounds)))
        if evaluation:
            (path / "eval_before.json").write_text(json.dumps(evaluation))
        for file, text in (damaged or {}).items():
            (path / file).write_text(text)
        for p in path.iterdir():
            os.utime(p, (when, when))
        return path

    folder("older", 100, rounds=[(1.0, 2.0)])
    newest = folder("newer", 200, rounds=[(1.0, 3.0), (2.0, 4.0)],
                    evaluation={"num_entries": 4, "timing": {"seconds": 6.0}, "timing_release": {"seconds": 10.0}})
    folder("other_seed", 250, config={**config, "seed": 1, "reweighting": {"name": "closed_loop"}})  # nothing measured
    folder("other_budget", 300, config={**config, "budget": {"rounds": 30}}, rounds=[(9.0, 9.0)])
    folder("torn", 400, rounds=[(1.0, 1.0)], damaged={"metrics.jsonl": '{"round": 0, "time/gen'})
    folder("cut_short", 500, rounds=[(1.0, 1.0)], damaged={"run_config.json": '{"backbone": '})
    # the newest that measured something, of the same backbone, budget, launch and machine (its arm and seed
    # may differ): rounds of 1 + 3 and 2 + 4 s, 4 entries under 2 protocols in 6 + 10 s
    assert similar_run(tmp_path / "mine", config) == (
        newest, {"round_seconds": [4.0, 6.0], "eval_episodes": 8, "eval_seconds": 16.0})
    # a like run with a different seed and arm measured later: it is the one
    later = folder("later", 600, config={**config, "seed": 2}, rounds=[(5.0, 5.0)])
    assert similar_run(tmp_path / "mine", config) == (later, {"round_seconds": [10.0], "eval_episodes": 0,
                                                              "eval_seconds": 0.0})
    assert similar_run(tmp_path / "absent" / "mine", config) is None  # a parent that is not there


def test_the_plan_line_says_whose_rates_its_estimate_is_at(tmp_path):
    beside = tmp_path / "reweighting=off"
    assert time_it_takes(None, None, None) == "estimated once the first evaluation or round is timed"
    assert time_it_takes((90.0, []), None, beside) == (
        f"about 1 min 30 s at the rates of {beside} (the same backbone, budget, launch and evaluation on this kind of "
        "machine)")
    # a resumed run: its own earlier attempt's rates; the run beside added only what that attempt had not timed
    assert time_it_takes((90.0, ["2 out-of-domain evaluations"]), (90.0, ["2 out-of-domain evaluations"]), beside) == (
        "about 1 min 30 s at the earlier attempt's rates + 2 out-of-domain evaluations (not timed yet)")
    assert time_it_takes((150.0, []), (90.0, ["2 rounds"]), beside) == (
        f"about 2 min 30 s at the earlier attempt's rates and those of {beside}")


def test_a_folder_beside_that_holds_what_no_run_writes_or_timed_nothing_is_passed_over(tmp_path):
    config = {**{k: {"name": k} for k in PACE_KEYS}, "trainer": {k: 1 for k in PACE_TRAINER_KEYS},
              "seed": 0}
    good = tmp_path / "good"
    good.mkdir()
    (good / "run_config.json").write_text(json.dumps({**config, "seed": 3, "split": {"name": "split", "seed": 3},
                                                      "trainer": {**config["trainer"], "learning_rate": 0.5}}))
    # another seed (the split's too: conf/split's seed is the run's) and learning rate: alike
    (good / "metrics.jsonl").write_text(json.dumps({"round": 0, "time/generation": 2.0, "time/optimisation": 5.0}) + "\n")
    os.utime(good / "metrics.jsonl", (100, 100))
    os.utime(good / "run_config.json", (100, 100))
    # newer folders of the same pace that a run would not have written, or that timed nothing
    wrong = {"list_evaluation": {"eval_before.json": "[]"},
             "null_seconds": {"eval_before.json": '{"num_entries": 2, "timing": {"seconds": null}}'},
             "null_time": {"metrics.jsonl": '{"round": 0, "time/generation": null}\n'},
             "untimed_rounds": {"metrics.jsonl": '{"round": 0, "train/reward_mean": 0.5}\n'},
             "zero_evaluation": {"eval_before.json": '{"num_entries": 2, "timing": {"seconds": 0.0}}'}}
    for name, files in wrong.items():
        (tmp_path / name).mkdir()
        for file, text in {"run_config.json": json.dumps(config), **files}.items():
            (tmp_path / name / file).write_text(text)
    (tmp_path / "a_file").write_text("not a run")
    assert similar_run(tmp_path / "mine", config) == (good, {"round_seconds": [7.0], "eval_episodes": 0,
                                                             "eval_seconds": 0.0})
    # every key of the pace counts: a run that differs in any one of them lends nothing
    for key in PACE_KEYS:
        assert similar_run(tmp_path / "mine", {**config, key: {"name": "another"}}) is None, key
    for key in PACE_TRAINER_KEYS:
        assert similar_run(tmp_path / "mine", {**config, "trainer": {**config["trainer"], key: 2}}) is None, key


def like_run(path, config, rounds=None, evaluation=None):
    """A run folder as a run leaves it: run_config.json, and when given its rounds (metrics.jsonl) and its
    evaluation before training (eval_before.json)."""
    path.mkdir()
    (path / "run_config.json").write_text(json.dumps(config))
    if rounds is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps({"round": i, **r}) + "\n" for i, r in enumerate(rounds)))
    if evaluation is not None:
        (path / "eval_before.json").write_text(json.dumps(evaluation))
    return path


PACED = {**{k: {"name": k} for k in PACE_KEYS}, "trainer": {**{k: 1 for k in PACE_TRAINER_KEYS}, "learning_rate": 0.1},
         "seed": 0}


def test_the_pace_is_the_config_keys_a_runs_time_depends_on_as_json_reads_them_back(tmp_path):
    config = {**PACED, "backbone": {"name": "tiny", "path": tmp_path}, "split": {"name": "bfcl", "seed": 4, "val": 8},
              "launch": {"processes": (1, 2)}}
    # by hand: the eleven keys (a folder as its text, a tuple as JSON's list, the split without its seed) and of the
    # trainer's the three that change a step's work; the seed and the learning rate are not the pace
    assert pace_of(config) == {
        "backbone": {"name": "tiny", "path": str(tmp_path)}, "budget": {"name": "budget"}, "launch": {"processes": [1, 2]},
        "eval": {"name": "eval"}, "benchmark": {"name": "benchmark"}, "protocol": {"name": "protocol"},
        "split": {"name": "bfcl", "val": 8}, "rendering": {"name": "rendering"}, "world_size": {"name": "world_size"},
        "sharding": {"name": "sharding"}, "machine": {"name": "machine"},
        "trainer": {"beta": 1, "gradient_checkpointing": 1, "loss_type": 1}}
    # a config without a trainer section (or a damaged one) has a pace of nothing for it
    assert pace_of({"trainer": "x"})["trainer"] == {"beta": None, "gradient_checkpointing": None, "loss_type": None}


def test_a_run_is_not_its_own_like_run_and_unlike_folders_before_it_do_not_hide_a_like_one(tmp_path):
    mine = like_run(tmp_path / "mine", PACED, rounds=[{"time/generation": 3.0}])
    assert similar_run(mine, PACED) is None  # only itself measured
    # folders read in name order: two unlike runs, then the like one
    like_run(tmp_path / "a_other_budget", {**PACED, "budget": {"name": "paper"}}, rounds=[{"time/generation": 9.0}])
    like_run(tmp_path / "b_other_backbone", {**PACED, "backbone": {"name": "big"}}, rounds=[{"time/generation": 9.0}])
    like = like_run(tmp_path / "c_like", PACED, rounds=[{"time/generation": 2.0, "time/optimisation": 0.5}])
    assert similar_run(mine, PACED) == (like, {"round_seconds": [2.5], "eval_episodes": 0, "eval_seconds": 0.0})


def test_a_like_run_that_timed_only_its_evaluation_lends_that_and_short_timings_count(tmp_path):
    # no metrics.jsonl yet (stopped during its first round): its evaluation of 3 entries x 2 protocols in 0.75 s
    only_evaluated = like_run(tmp_path / "evaluated", PACED, evaluation={
        "num_entries": 3, "timing": {"seconds": 0.5}, "timing_release": {"seconds": 0.25}})
    assert similar_run(tmp_path / "mine", PACED) == (
        only_evaluated, {"round_seconds": [], "eval_episodes": 6, "eval_seconds": 0.75})


def test_an_evaluation_of_no_measurable_time_lends_no_rate_beside_rounds_that_were_timed(tmp_path):
    os.utime(like_run(tmp_path / "run", PACED, rounds=[{"time/generation": 0.25}, {"time/generation": 0.0}],
                      evaluation={"num_entries": 4, "timing": {"seconds": 0.0}}), (1, 1))
    # the round of 0 s timed nothing; 4 episodes in 0 s are no rate (4 x 0 s would estimate every evaluation at 0)
    assert similar_run(tmp_path / "mine", PACED) == (
        tmp_path / "run", {"round_seconds": [0.25], "eval_episodes": 0, "eval_seconds": 0.0})


@pytest.mark.parametrize(("metrics", "rate"), [
    # 5 entries under both protocols: 10 episodes in 2 + 3 s
    ({"num_entries": 5, "timing": {"seconds": 2.0}, "timing_release": {"seconds": 3.0}}, (10, 5.0)),
    # under one protocol: 5 episodes
    ({"num_entries": 5, "timing_release": {"seconds": 3.0}}, (5, 3.0)),
    # a timing without its seconds adds no time; a file without its entry count counts no episode
    ({"num_entries": 5, "timing": {}, "timing_release": {"seconds": 3.0}}, (10, 3.0)),
    ({"timing": {"seconds": 2.0}}, (0, 2.0)),
    # no timing at all (an evaluation file of an older version)
    ({"num_entries": 5}, (0, 0.0)),
])
def test_an_evaluation_files_rate_is_its_episodes_and_seconds(tmp_path, metrics, rate):
    (tmp_path / "eval_before.json").write_text(json.dumps(metrics))
    assert evaluation_rate(tmp_path / "eval_before.json") == {"eval_episodes": rate[0], "eval_seconds": rate[1]}


def test_no_evaluation_file_is_no_rate(tmp_path):
    assert evaluation_rate(tmp_path / "eval_before.json") == {"eval_episodes": 0, "eval_seconds": 0.0}
