"""task=validate_diagnoser end to end: the validation set, its metrics, the files it writes."""

import json
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from seal.diagnosis import LABELS, validate
from seal.diagnosis.validate import RECIPES, build_cases, score

REPO = Path(__file__).resolve().parents[2]


def test_score_by_hand():
    result = score(["pass", "pass", "state_mismatch", "state_mismatch"], ["pass", "state_mismatch", "state_mismatch", "state_mismatch"])
    assert result["per_label"]["pass"] == {"n": 2, "precision": 1.0, "recall": 0.5, "f1": 2 / 3}
    assert result["per_label"]["state_mismatch"]["precision"] == 2 / 3
    assert result["confusion"]["pass"] == {"pass": 1, "state_mismatch": 1}
    assert result["accuracy"] == 0.75


def test_the_validation_set_is_deterministic_and_covers_every_category():
    a, _ = build_cases(seed=7, entries_per_category=2)
    b, _ = build_cases(seed=7, entries_per_category=2)
    assert [(c.entry.id, c.recipe, c.target, c.label) for c in a] == [(c.entry.id, c.recipe, c.target, c.label) for c in b]
    assert {c.entry.category for c in a} == {"base", "miss_func", "miss_param", "long_context"}


def test_validate_diagnoser_task_writes_its_files_and_meets_the_goal(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "run.py"), "task=validate_diagnoser", f"hydra.run.dir={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "diagnoser_validation.json").read_text())
    assert result["diagnoser"] == "rules" and result["num_cases"] >= 500
    assert set(result["by_category"]) == {"base", "miss_func", "miss_param", "long_context"}
    assert min(result["by_category"].values()) > 0
    # every label the rules can emit is injected (all but NoDiagnoser's placeholder)
    assert set(result["per_label"]) == set(LABELS) - {"unlabelled"}
    assert result["macro_f1"] >= 0.95 and result["min_recall"] >= 0.9 and result["goal_met"]
    assert set(result["recipes"]) >= set(RECIPES)
    report = (tmp_path / "report.md").read_text()
    assert "Confusion matrix" in report and "ambiguous" in report
    assert "| pass |" in proc.stdout


def test_the_random_control_scores_far_below_the_rules(tmp_path, monkeypatch):
    monkeypatch.setattr(validate, "ENTRIES_PER_CATEGORY", 8)
    cfg = OmegaConf.create({"seed": 0, "diagnoser": {"_target_": "seal.diagnosis.RandomDiagnoser", "name": "random", "seed": 0}})
    result = validate.validate_diagnoser(cfg, tmp_path)
    assert result["diagnoser"] == "random" and result["macro_f1"] < 0.8 and not result["goal_met"]
    assert json.loads((tmp_path / "diagnoser_validation.json").read_text())["macro_f1"] == result["macro_f1"]
