"""How runs appear in W&B: a sweep's jobs grouped, the arm as job_type, backbone and seed as tags."""

import hashlib
from pathlib import Path

import pytest

from seal.report.wandb_run import WandbRun, run_identity


def sha8(text):
    return hashlib.sha256(text.encode()).hexdigest()[:8]  # the first 8 hex digits of SHA-256


def test_the_jobs_of_one_sweep_share_a_group_and_differ_in_arm_tags_and_id(tmp_path):
    sweep = tmp_path / "multirun" / "train"
    a = run_identity(out_dir=sweep / "experiment=seal,seed=0", fingerprint="f1", experiment="seal",
                     backbone="qwen2.5-7b", seed=0, tags=["paper"], sweep_dir=sweep)
    b = run_identity(out_dir=sweep / "experiment=vanilla_rl,seed=1", fingerprint="f2", experiment="vanilla_rl",
                     backbone="qwen2.5-7b", seed=1, sweep_dir=sweep)
    assert a == {"run_id": f"seal-f1-{sha8(str(sweep / 'experiment=seal,seed=0'))}", "name": "seal | qwen2.5-7b | seed 0",
                 "group": f"train-{sha8(str(sweep))}", "job_type": "seal",
                 "tags": ["paper", "backbone=qwen2.5-7b", "seed=0"]}
    assert b["group"] == a["group"] and (b["job_type"], b["tags"]) == ("vanilla_rl", ["backbone=qwen2.5-7b", "seed=1"])
    # the same configuration in another directory is another W&B run; another sweep is another group
    other = tmp_path / "elsewhere" / "train"
    c = run_identity(out_dir=other / "experiment=seal,seed=0", fingerprint="f1", experiment="seal",
                     backbone="qwen2.5-7b", seed=0, sweep_dir=other)
    assert c["run_id"] != a["run_id"] and c["group"] != a["group"]
    # a single run has no group unless logger.group names one
    single = dict(out_dir=tmp_path / "run", fingerprint="f1", experiment="seal", backbone="b", seed=0)
    assert run_identity(**single)["group"] is None and run_identity(**single, group="mine")["group"] == "mine"


def test_a_run_is_named_by_its_arm_backbone_and_seed_not_by_its_override_string(tmp_path):
    overrides = "backbone=qwen2.5-7b,budget.max_new_tokens=512,budget.rounds=40,reweighting=off,seed=3"
    identity = run_identity(out_dir=tmp_path / overrides, fingerprint="f", experiment="seal_evolving+reweighting=off",
                            backbone="qwen2.5-7b", seed=3)
    assert identity["name"] == "seal_evolving+reweighting=off | qwen2.5-7b | seed 3"
    # a label of the user's own (experiment_name=...) names the run; the job type stays the arm
    labelled = run_identity(out_dir=tmp_path / overrides, fingerprint="f", experiment="seal_evolving+reweighting=off",
                            backbone="qwen2.5-7b", seed=3, label="lr_probe")
    assert (labelled["name"], labelled["job_type"]) == ("lr_probe | qwen2.5-7b | seed 3", "seal_evolving+reweighting=off")


def test_wandb_init_receives_group_and_job_type(tmp_path, monkeypatch, caplog):
    import logging

    import wandb

    seen = {}
    monkeypatch.setattr(wandb, "init", lambda **kwargs: seen.update(kwargs) or object())
    identity = run_identity(out_dir=tmp_path, fingerprint="f", experiment="wo_reweighting", backbone="b", seed=2,
                            sweep_dir=tmp_path.parent)
    caplog.set_level(logging.INFO, logger="seal.report.wandb_run")
    WandbRun(mode="offline", project="seal", entity=None, out_dir=tmp_path, config={}, **identity)
    # the console names the run as W&B shows it: its name and group (the id only beside them)
    assert caplog.records[-1].getMessage() == (
        f"W&B run 'wo_reweighting | b | seed 2' in group {identity['group']} (offline; id {identity['run_id']}) in "
        f"{tmp_path / 'wandb'}")
    assert (seen["group"], seen["job_type"], seen["tags"], seen["id"]) == (
        identity["group"], "wo_reweighting", ["backbone=b", "seed=2"], identity["run_id"])
    assert seen["mode"] == "offline" and seen["resume"] == "allow" and Path(seen["dir"]) == tmp_path


def test_an_unknown_mode_is_refused():
    from seal.errors import UserError

    with pytest.raises(UserError, match="logger.mode='sometimes' is not one of offline, online, disabled"):
        WandbRun(mode="sometimes", project="p", entity=None, tags=[], out_dir=Path("."), run_id="r", name="n", config={})


def test_online_without_an_api_key_is_refused_naming_the_setting(tmp_path, monkeypatch):
    from seal.errors import UserError
    from seal.report.wandb_run import log_files_as_artifact

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(UserError, match=r"^logger.mode=online needs a W&B API key.*or use logger.mode=offline"):
        WandbRun(mode="online", project="p", entity=None, tags=[], out_dir=tmp_path, run_id="r", name="n", config={})
    with pytest.raises(UserError, match=r"^--wandb=online needs a W&B API key.*or use --wandb=offline"):
        log_files_as_artifact([], mode="online", project="p", name="t", kind="tables", out_dir=tmp_path)
    # with a key in ~/.netrc the check passes (the machine entry W&B's login writes)
    (tmp_path / "no-netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    from seal.report.wandb_run import _has_api_key

    assert _has_api_key()


def test_wandb_mode_from_the_environment_unless_the_command_line_sets_logger_mode(monkeypatch):
    from tests.test_configs import compose_with

    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert compose_with().logger.mode == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert compose_with().logger.mode == "disabled"
    assert compose_with("logger.mode=online").logger.mode == "online"
