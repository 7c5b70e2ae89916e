"""Where runs and sweeps go: the default run in a folder of its own beside the others, each sweep in a
folder of its own named after its overrides (so a second sweep never mixes with the first, and the same
sweep again finds its runs), and the W&B settings out of the folder's name (logging off still resumes)."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from seal.report.wandb_run import run_identity

ROOT = Path(__file__).resolve().parents[2]


def run(cwd, *args, env=None):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_the_default_run_sits_beside_the_others_not_above_them(tmp_path):
    assert run(tmp_path, "task=replay").returncode == 0
    assert run(tmp_path, "task=replay", "split=all").returncode == 0
    # one folder per command line, side by side: outputs/<task>/<overrides>, and `defaults` for none
    assert sorted(p.name for p in (tmp_path / "outputs" / "replay").iterdir()) == ["defaults", "split=all"]
    assert (tmp_path / "outputs" / "replay" / "defaults" / "summary.json").exists()
    assert not (tmp_path / "outputs" / "replay" / "summary.json").exists()


def test_turning_logging_off_keeps_the_run_in_its_folder(tmp_path):
    args = ("task=show_prompt", "entry=multi_turn_base_50")
    for extra, env in (((), {}), (("logger.mode=disabled", "logger.tags=[a]", "logger.group=g"), {})):
        proc = run(tmp_path, *args, *extra, env=env)
        assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "outputs" / "show_prompt").iterdir()] == ["entry=multi_turn_base_50"]


def test_each_sweep_has_a_folder_of_its_own_named_after_its_overrides(tmp_path):
    first = ("-m", "task=show_prompt", "entry=multi_turn_base_50,multi_turn_base_51", "view=train")
    second = ("-m", "task=show_prompt", "entry=multi_turn_base_50", "view=train,eval")
    for args in (first, second):
        proc = run(tmp_path, *args)
        assert proc.returncode == 0, proc.stderr
    sweeps = tmp_path / "multirun" / "show_prompt"
    # each named as Hydra names a run (its overrides sorted by key, joined by commas), each key's values sorted
    a, b = sweeps / "entry=multi_turn_base_50,multi_turn_base_51,view=train", sweeps / "entry=multi_turn_base_50,view=eval,train"
    assert sorted(p.name for p in sweeps.iterdir()) == sorted([a.name, b.name])
    assert sorted(p.name for p in a.iterdir() if p.is_dir()) == ["entry=multi_turn_base_50,view=train",
                                                                 "entry=multi_turn_base_51,view=train"]
    assert sorted(p.name for p in b.iterdir() if p.is_dir()) == ["entry=multi_turn_base_50,view=eval",
                                                                 "entry=multi_turn_base_50,view=train"]
    # each sweep keeps its own multirun.yaml, and every job of a sweep was composed with its sweep's folder
    for sweep, args in ((a, first), (b, second)):
        assert yaml.safe_load((sweep / "multirun.yaml").read_text())["hydra"]["overrides"]["task"] == list(args[1:])
        for job in (p for p in sweep.iterdir() if p.is_dir()):
            assert yaml.safe_load((job / ".hydra" / "hydra.yaml").read_text())["hydra"]["sweep"]["dir"] == str(
                sweep.relative_to(tmp_path))
            assert (job / "prompt.txt").exists()
    # so each has a W&B group of its own, and the same sweep again finds its own folder
    group = lambda sweep: run_identity(out_dir=sweep / "x", fingerprint="", experiment="", backbone="", seed=0,
                                       sweep_dir=sweep)["group"]
    assert group(a) != group(b) and group(a).startswith("entry=multi_turn_base_50,multi_turn_base_51,view=train-")
    assert run(tmp_path, *first).returncode == 0
    # and so does the same sweep with its values typed in another order
    assert run(tmp_path, "-m", "task=show_prompt", "view=train", "entry=multi_turn_base_51,multi_turn_base_50").returncode == 0
    assert sorted(p.name for p in sweeps.iterdir()) == sorted([a.name, b.name])


def test_a_sweep_made_before_its_values_were_sorted_is_found_where_it_was_made(tmp_path):
    # a sweep of 2026-12-02 (`entry=..._51,..._50` named its folder as typed) run again resumes in that folder
    sweeps = tmp_path / "multirun" / "show_prompt"
    earlier = sweeps / "entry=multi_turn_base_51,multi_turn_base_50,view=train"
    earlier.mkdir(parents=True)
    proc = run(tmp_path, "-m", "task=show_prompt", "view=train", "entry=multi_turn_base_51,multi_turn_base_50")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in sweeps.iterdir()] == [earlier.name]
    assert sorted(p.name for p in earlier.iterdir() if p.is_dir()) == ["entry=multi_turn_base_50,view=train",
                                                                       "entry=multi_turn_base_51,view=train"]


def test_a_sweep_named_on_the_command_line_goes_there(tmp_path):
    proc = run(tmp_path, "-m", "task=show_prompt", "entry=multi_turn_base_50,multi_turn_base_51",
               "hydra.sweep.dir=multirun/lr_probe")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "multirun" / "lr_probe").iterdir() if p.is_dir()) == [
        "entry=multi_turn_base_50", "entry=multi_turn_base_51"]


def test_a_training_run_of_a_sweep_is_grouped_by_its_own_sweep_folder(tmp_path, monkeypatch):
    """The W&B group a training run of a sweep gets comes from Hydra's sweep folder itself (one per sweep), not its
    parent (multirun/train/, which every sweep of task=train shares); outside a sweep a run has none."""
    from types import SimpleNamespace

    from hydra.core.hydra_config import HydraConfig

    import seal.io
    from seal.tasks import train

    sweep = tmp_path / "multirun" / "train" / "reweighting=closed_loop,off"
    monkeypatch.setattr(seal.io, "in_multirun", lambda: True)
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: SimpleNamespace(sweep=SimpleNamespace(dir=str(sweep)))))
    assert train._sweep_dir() == sweep
    group = run_identity(out_dir=sweep / "reweighting=off", fingerprint="f", experiment="seal", backbone="b", seed=0,
                         sweep_dir=train._sweep_dir())["group"]
    assert group.startswith("reweighting=closed_loop,off-")
    monkeypatch.setattr(seal.io, "in_multirun", lambda: False)
    assert train._sweep_dir() is None
