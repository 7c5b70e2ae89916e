"""`python run.py task=replay|score` end to end, as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(*overrides, cwd=REPO):
    return subprocess.run([sys.executable, str(REPO / "run.py"), *overrides], cwd=cwd, capture_output=True, text=True)


def test_replay_all_gives_800_of_800(tmp_path):
    proc = run("task=replay", "split=all", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["total"] == summary["passed"] == 800
    assert {c: v["passed"] for c, v in summary["by_category"].items()} == {
        "base": 200, "miss_func": 200, "miss_param": 200, "long_context": 200
    }
    assert "| base | 200 | 200 |" in proc.stdout
    assert json.loads((tmp_path / "leakage.json").read_text())["sizes"] == {"test": 800}


def test_score_scores_good_lines_and_names_bad_ones(tmp_path, bench):
    gold = bench["multi_turn_base_0"].gold
    good = {"id": "multi_turn_base_0", "result": [[t] if t else [] for t in gold]}
    emptied = {"id": "multi_turn_miss_param_3", "result": [[] for _ in bench["multi_turn_miss_param_3"].gold]}
    hostile = {"id": "multi_turn_base_1", "result": [[["__import__('os').system('touch /tmp/seal_pwned')"]]]}
    lines = [
        json.dumps(good).encode(),
        b"{not json",
        json.dumps({"id": "multi_turn_base_999", "result": []}).encode(),
        b'{"id": "multi_turn_base_2", "result": "\xff\xfe"}',
        json.dumps({"id": "multi_turn_base_2", "result": [["ls()"]]}).encode(),
        json.dumps(emptied).encode(),
        json.dumps(hostile).encode(),
    ]
    path = tmp_path / "traj.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out"
    proc = run("task=score", f"input={path}", f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert len(verdicts) == len(lines)
    passed = {"outcome": "pass", "cause": None}
    assert verdicts[0] == {"id": "multi_turn_base_0", "valid": True, "error_type": None, "turn_labels": [passed] * 4}
    assert [v["error_type"] for v in verdicts[1:5]] == ["seal:malformed_input"] * 4
    # a line the checker cannot read: checker_error on every turn of the entry it names (base_2 has 5)
    unread = {"outcome": "checker_error", "cause": "checker_error"}
    assert [v["turn_labels"] for v in verdicts[1:5]] == [[], [], [], [unread] * 5]
    # miss_param_3 answered with nothing: turns 0 and 2 are empty, turn 1's gold is "no call"
    empty = {"outcome": "empty_turn_model_response", "cause": "empty_turn_model_response"}
    assert verdicts[5]["turn_labels"] == [empty, {"outcome": "correct_abstention", "cause": None}, empty]
    # one turn of base_1 (4 turns), with an unsafe call: the episode ended there (BFCL's
    # force_terminated). Gold's ls(a=True) only reads, so the state matches and its result is
    # missing; the later turns were never played
    assert verdicts[6]["error_type"] == "multi_turn:force_terminated"
    lost = {"outcome": "empty_turn_model_response", "cause": "not_played"}
    assert verdicts[6]["turn_labels"] == [{"outcome": "response_mismatch", "cause": "step_limit"}] + [lost] * 3
    assert "line 2" in verdicts[1]["error"] and "line 3" in verdicts[2]["error"] and "UTF-8" in verdicts[3]["error"]
    assert "line 5" in verdicts[4]["error"]
    assert verdicts[5]["error_type"] == "multi_turn:empty_turn_model_response"
    assert verdicts[6]["valid"] is False
    summary = json.loads((out / "summary.json").read_text())
    assert summary["total"] == 3 and summary["passed"] == 1 and summary["malformed_lines"] == 4
    assert summary["by_category"]["base"] == {"total": 2, "passed": 1, "accuracy": 0.5}
    assert summary["accuracy_mean"] == (0.5 + 0.0) / 2
    assert not Path("/tmp/seal_pwned").exists()


def test_score_without_input_is_one_clear_error(tmp_path):
    proc = run("task=score", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: task=score needs an input file: add input=path/to/trajectories.jsonl"
    )
    proc = run("task=score", "input=/nonexistent.jsonl", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_unknown_task_and_group_choice_name_the_valid_ones(tmp_path):
    proc = run("task=trian", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2 and "choose one of train, eval, replay, score" in proc.stderr
    proc = run("task=replay", "split=nope", f"hydra.run.dir={tmp_path}")
    assert proc.returncode != 0 and "seal_release" in proc.stderr and "scenario_disjoint" in proc.stderr


def test_in_a_sweep_a_failing_job_leaves_its_error_and_the_next_job_runs(tmp_path):
    proc = run("-m", "task=replay", "split=seal_release", "split.val_scenarios=-3,0", f"hydra.sweep.dir={tmp_path}",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    bad, good = tmp_path / "split.val_scenarios=-3,split=seal_release", tmp_path / "split.val_scenarios=0,split=seal_release"
    assert "val_scenarios=-3" in (bad / "error.txt").read_text() and not (bad / "summary.json").exists()
    summary = json.loads((good / "summary.json").read_text())
    assert summary["total"] == summary["passed"] == 800
