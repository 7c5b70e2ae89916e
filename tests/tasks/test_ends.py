"""The ends a user can cause end in one sentence on stderr, exit code 2, and leave nothing behind: a bad seed,
a misspelt key, an unknown choice, budget=paper on a CPU, a hub backbone whose weights are not here, the
aggregate on a missing folder, the notebook on a wrong run folder, a read-only output folder, a damaged file
of an earlier attempt, a torn metrics file under the notebook."""

import contextlib
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from seal.tasks import command_line
from tests.test_configs import CONF, choices

ROOT = CONF.parent


def refused(cwd, *args, env=None):
    """Run `args` in the empty folder `cwd`; return its one stderr line, after checking exit code 2 and that
    the folder is still empty."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert sorted(p.name for p in Path(cwd).iterdir()) == [], "the refused command left files behind"
    return lines[0]


RUN = str(ROOT / "run.py")


@pytest.mark.parametrize("args, sentence", [
    (["seed=abc"], "error: seed=abc: give a whole number from 0 to 4294967295 (e.g. seed=0)"),
    # numpy's seeding takes 0 to 2**32 - 1: a traceback from numpy before
    (["seed=4294967296"], "error: seed=4294967296: give a whole number from 0 to 4294967295 (e.g. seed=0)"),
    # a part no split has: a ValueError's traceback from the split before
    (["task=eval", "eval_part=dev"], "error: eval_part='dev': choose one of train, val, test"),
    # Hydra's own advice would be +budget.round=3, which the budget then refuses: the key that exists is named
    (["budget.round=3"], "error: budget.round is not a key of the config (the closest one is budget.rounds)"),
    (["reweighting.rho0.passs=2"], "error: reweighting.rho0.passs is not a key of the config (the closest one is "
                                   "reweighting.rho0.pass)"),
    (["budget.rounds=["], "error: an override could not be read (no viable alternative at input '['); write "
                          "group=choice, key=value, or +new.key=value for a key the config does not have"),
    # a sweep: Hydra has made its sweep folder (multirun/train/multirun.yaml) when it finds the bad job
    (["-m", "reweighting=off,sometimes"], "error: reweighting=sometimes is not a choice of reweighting; choose one of "
                                          "closed_loop, fixed, off, shuffled"),
    (["-m", "budget.round=3,4"], "error: budget.round is not a key of the config (the closest one is budget.rounds)"),
    # `+` adds a key Hydra does not check: one no config has is refused before Hydra makes any folder (logger.foo
    # reached W&B's constructor as a keyword; trainer.foo was ignored by the whole run)
    (["+logger.foo=1"], "error: +logger.foo adds logger.foo, which no config of seal has and nothing reads (the "
                        "closest one is logger.mode)"),
    (["-m", "+trainer.learning_rat=1e-5,2e-5"], "error: +trainer.learning_rat adds trainer.learning_rat, which no "
                                                "config of seal has and nothing reads (the closest one is "
                                                "trainer.learning_rate)"),
    (["backbone.lora={rank: 8}"], "error: backbone.lora.rank is not a LoRA key; the keys are r, alpha, dropout, "
                                  "target_modules"),
])
def test_a_command_line_hydra_or_the_run_refuses_is_one_sentence(tmp_path, args, sentence):
    assert refused(tmp_path, RUN, *args, "logger.mode=disabled") == sentence


def test_an_unknown_choice_lists_the_groups_files_and_no_search_path(tmp_path):
    line = refused(tmp_path, RUN, "backbone=qwen9")
    assert line == f"error: backbone=qwen9 is not a choice of backbone; choose one of {', '.join(choices('backbone'))}"


def test_the_paper_budget_on_a_machine_without_a_gpu(tmp_path):
    line = refused(tmp_path, RUN, "budget=paper", "logger.mode=disabled", env={"CUDA_VISIBLE_DEVICES": ""})
    assert line.startswith("error: budget=paper is sized for GPUs") and line.endswith("budget.allow_cpu=true to start it anyway")


def test_a_hub_backbone_without_its_weights_says_so_before_any_memory_plan(tmp_path):
    # an empty hub cache and no hub: the 3B model would not fit this machine's memory plan either, but what
    # is missing first is the weights
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    line = refused(cwd, RUN, "backbone=qwen2.5-3b", "logger.mode=disabled",
                   env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert line == ("error: backbone qwen2.5-3b: the weights of Qwen/Qwen2.5-3B-Instruct are not on this machine and "
                    "HF_HUB_OFFLINE is set; download them where the hub is reachable (`hf download "
                    "Qwen/Qwen2.5-3B-Instruct`) or set backbone.local_path=/path/to/weights")


def test_the_aggregate_on_a_folder_that_does_not_exist(tmp_path):
    line = refused(tmp_path, "-m", "experiments.aggregate", str(tmp_path / "multirun"))
    assert line == f"error: {tmp_path / 'multirun'} is not a directory: give the folder that holds the run directories"


def test_the_notebook_on_a_folder_that_is_not_a_run(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    line = refused(cwd, "-m", "seal.report.inspect_run", str(tmp_path / "nothere"))
    assert line == f"error: {tmp_path / 'nothere'} is not a folder; name a training run's folder, e.g. outputs/train/<run>"
    line = refused(cwd, "-m", "seal.report.inspect_run", str(cwd))
    assert line == (f"error: {cwd} is not a training run's folder (it has no run_config.json); name one that "
                    "`python run.py` wrote, e.g. outputs/train/<run>")


def test_a_refused_run_keeps_a_folder_an_earlier_run_left(tmp_path):
    earlier = tmp_path / "run"
    (earlier / "checkpoints").mkdir(parents=True)
    proc = subprocess.run([sys.executable, RUN, "seed=abc", f"hydra.run.dir={earlier}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert (earlier / "checkpoints").is_dir() and (earlier / ".hydra").is_dir()


def test_the_closest_key_is_named_only_when_one_is_close():
    keys = ["budget.rounds", "budget.epochs", "seed"]
    assert command_line.missing_key("budget.round", keys) == \
        "budget.round is not a key of the config (the closest one is budget.rounds)"
    assert command_line.missing_key("colour", keys) == "colour is not a key of the config (`python run.py --cfg job` lists them)"


def test_hydra_raises_while_it_composes_and_reports_a_failing_task_its_own_way_again(monkeypatch, capsys):
    monkeypatch.delenv(command_line.FULL_ERROR, raising=False)
    seen = {}

    def composes_then_fails():
        seen["composing"] = os.environ.get(command_line.FULL_ERROR)
        command_line.composed()  # what seal.tasks.run does first
        seen["task"] = os.environ.get(command_line.FULL_ERROR)
        raise RuntimeError("a task's crash")

    with pytest.raises(RuntimeError):
        command_line.main(composes_then_fails)
    assert seen == {"composing": "1", "task": None} and command_line.FULL_ERROR not in os.environ

    def refused_by_hydra():
        raise ConfigCompositionException("Could not append to config.\nAn item is already at 'seed'.")

    with pytest.raises(SystemExit) as done:
        command_line.main(refused_by_hydra)
    assert done.value.code == 2
    assert capsys.readouterr().err == "error: Could not append to config. An item is already at 'seed'.\n"
    # a user who asked for Hydra's full errors gets them
    monkeypatch.setenv(command_line.FULL_ERROR, "1")
    with pytest.raises(ConfigCompositionException):
        command_line.main(refused_by_hydra)


def test_in_jupyter_the_notebook_shows_a_wrong_run_folder_as_the_same_sentence(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.read(ROOT / "notebooks" / "inspect_run.ipynb", as_version=4)
    monkeypatch.setenv("SEAL_RUN_DIR", str(tmp_path / "nothere"))
    with pytest.raises(CellExecutionError):
        NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    (error,) = [o for o in notebook.cells[1].outputs if o.output_type == "error"]
    # what IPython shows is the sentence alone, no traceback
    assert error.traceback == [f"error: {tmp_path / 'nothere'} is not a folder; name a training run's folder, "
                               "e.g. outputs/train/<run>"]


@contextlib.contextmanager
def _read_only_folder(tmp_path, fill=lambda folder: None):
    """(a folder nothing can be written into, the reason a write fails), after `fill(folder)` wrote its files: a
    read-only file system (root can write through permissions; unmounted afterwards), else folders without write
    permission. The test is skipped when neither can be made here."""
    folder = tmp_path / "ro"
    folder.mkdir()
    root = os.geteuid() == 0
    if root and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                               capture_output=True).returncode != 0:
        pytest.skip("no read-only folder can be made here (root without mount)")
    try:
        fill(folder)
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True, capture_output=True)
        else:
            for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
                path.chmod(0o555)
        yield folder, "the file system is read-only" if root else "permission denied"
    finally:
        if root:
            subprocess.run(["umount", str(folder)], capture_output=True)


# the run folder inside a read-only one (Hydra cannot make it), or the read-only folder itself (it exists: Hydra
# cannot open its run.log, which logging reports as a ValueError)
@pytest.mark.parametrize("run_dir, unwritable", [("{folder}/run", "{folder}/run"), ("{folder}", "{folder}/run.log")])
def test_a_read_only_output_folder_is_one_sentence(tmp_path, run_dir, unwritable):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with _read_only_folder(tmp_path) as (folder, reason):
        line = refused(cwd, RUN, "task=replay", f"hydra.run.dir={run_dir.format(folder=folder)}")
    assert line == (f"error: cannot write {unwritable.format(folder=folder)}: {reason}; run from a folder you can "
                    "write, or give the run another folder with hydra.run.dir=<folder> (a sweep: hydra.sweep.dir=<folder>)")


def test_a_damaged_file_of_an_earlier_attempt_is_named_in_one_sentence(tmp_path, capsys):
    from seal.tasks import run
    from tests.test_configs import compose_with

    # the evaluation before training, cut short: a resumed run reads it back instead of evaluating again
    (tmp_path / "eval_before.json").write_text('{"eval/bfcl_v3/avg": 0.')
    cfg = compose_with("backbone=tiny-random", "budget=tiny", "logger.mode=disabled")
    with pytest.raises(SystemExit) as done:
        run(cfg, tmp_path)
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'eval_before.json'} is damaged: it ends in the middle of a value after 23 bytes (cut "
        "short while it was written?); move it away (or restore it) and run the same command again")


def _torn_run(folder):
    """A run folder whose metrics.jsonl's second line was cut short."""
    import json

    folder.mkdir()
    (folder / "run_config.json").write_text(json.dumps({"experiment_name": "seal", "backbone": {"name": "tiny-random"}}))
    rounds = [json.dumps({"round": r, "train/reward_mean": 0.5}) for r in range(3)]
    (folder / "metrics.jsonl").write_text("\n".join([rounds[0], rounds[1][:12], rounds[2]]) + "\n")
    return folder


def test_the_notebook_on_a_torn_metrics_file_names_the_file_and_the_line(tmp_path):
    run_dir = _torn_run(tmp_path / "run")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    line = refused(cwd, "-m", "seal.report.inspect_run", str(run_dir))
    assert line == (f"error: {run_dir / 'metrics.jsonl'} is damaged at line 2: it ends in the middle of a value after 12 "
                    "bytes (cut short while it was written?); the notebook reads it whole: move it away or restore it")


def test_in_jupyter_a_torn_metrics_file_is_the_same_sentence(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    run_dir = _torn_run(tmp_path / "run")
    notebook = nbformat.read(ROOT / "notebooks" / "inspect_run.ipynb", as_version=4)
    monkeypatch.setenv("SEAL_RUN_DIR", str(run_dir))
    with pytest.raises(CellExecutionError):
        NotebookClient(notebook, timeout=120, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    (error,) = [o for o in notebook.cells[1].outputs if o.output_type == "error"]
    assert error.traceback == [f"error: {run_dir / 'metrics.jsonl'} is damaged at line 2: it ends in the middle of a "
                               "value after 12 bytes (cut short while it was written?); the notebook reads it whole: "
                               "move it away or restore it"]


def _two_round_run(folder):
    """What the notebook reads of a two-round run."""
    import json

    (folder / "run_config.json").write_text(json.dumps({"experiment_name": "seal", "backbone": {"name": "tiny-random"}}))
    (folder / "metrics.jsonl").write_text("".join(
        json.dumps({"round": r, "train/reward_mean": 0.5, "train/turn_pass_rate": 0.25}) + "\n" for r in range(2)))
    (folder / "interface").mkdir()
    for r in range(2):
        (folder / "interface" / f"round_{r:04d}.json").write_text(json.dumps({"version": r}))


def test_a_read_only_run_under_the_notebook(tmp_path):
    """From the command line, which saves the executed notebook in the run: refused in one sentence before it runs;
    under `jupyter execute`, which saves only the figure: one line that it was not saved, and the notebook goes on."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with _read_only_folder(tmp_path, fill=_two_round_run) as (run_dir, reason):
        line = refused(cwd, "-m", "seal.report.inspect_run", str(run_dir))
        jupyter = subprocess.run([str(Path(sys.executable).parent / "jupyter"), "execute", "notebooks/inspect_run.ipynb"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600,
                                 env={**os.environ, "SEAL_RUN_DIR": str(run_dir)})
    assert line == (f"error: cannot write {run_dir / 'inspect_run.ipynb'}: {reason}; copy the run to a folder you can "
                    "write and name the copy, or open notebooks/inspect_run.ipynb in Jupyter with SEAL_RUN_DIR=<run> "
                    "(it shows the run, and says that its figure was not saved)")
    assert jupyter.returncode == 0, jupyter.stderr
    assert f"inspect_run: figure not saved: cannot write {run_dir / 'inspect_run.png'}: {reason}; the notebook shows it\n" \
        in jupyter.stderr and "Traceback" not in jupyter.stderr


def test_a_run_stopped_by_a_full_disk_keeps_its_checkpoint(tmp_path, monkeypatch, capsys):
    """A new run's folder is removed when the run is refused, not once it holds a checkpoint the message says
    the same command resumes from."""
    import errno

    import torch

    import seal.tasks as tasks
    from tests.rl.test_loop import TINY
    from tests.test_configs import compose_with

    out = tmp_path / "run"
    (out / ".hydra").mkdir(parents=True)  # what Hydra makes for a new run before the task starts
    monkeypatch.setattr(tasks, "output_dir", lambda: out)
    real_save = torch.save

    def full_disk(obj, f, *args, **kwargs):
        if "checkpoint-2" in str(f):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write into an open file: no file name
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(SystemExit) as done:
        tasks.run(compose_with(*TINY, "budget.heldout_entries_per_category=0", "logger.mode=disabled"))
    assert done.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: writing {out / 'checkpoints' / 'checkpoint-2'} failed (OSError: [Errno 28] No space")
    assert "checkpoint-1 is intact and the same command resumes from it" in line
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1"]


@pytest.mark.parametrize("stop, code, opening", [(KeyboardInterrupt(), 130, "interrupted: nothing of this task=replay"),
                                                  ("refused", 2, "error: refused")])
def test_the_last_sentence_starts_its_own_line_below_a_bar_the_stop_left_drawn(tmp_path, monkeypatch, capsys, stop,
                                                                                code, opening):
    """Ctrl-C or an error in the middle of a step leaves its bar drawn with the cursor after it (a bar ends in a
    carriage return, not a newline): the sentence goes below it, not glued to its end."""
    from tqdm import tqdm

    import seal.tasks as tasks
    from seal.errors import UserError
    from tests.test_configs import compose_with

    out = tmp_path / "run"
    (out / ".hydra").mkdir(parents=True)
    monkeypatch.setattr(tasks, "output_dir", lambda: out)

    def task(cfg, out_dir):
        bar = tqdm(total=4, desc="round 0 · optimisation", unit="micro-batch", disable=False)  # as on a terminal
        bar.update(1)
        raise stop if isinstance(stop, BaseException) else UserError(stop)

    monkeypatch.setattr(tasks, "resolve", lambda name: task)
    with pytest.raises(SystemExit) as done:
        tasks.run(compose_with("task=replay"))
    assert done.value.code == code
    err = capsys.readouterr().err
    before, sentence = err.rsplit(opening, 1)
    assert "round 0 · optimisation:  25%" in before and before.endswith("\n"), repr(err[-300:])
    assert not tqdm._instances


@contextlib.contextmanager
def _full_folder(tmp_path, fill=lambda folder: None):
    """A folder on a file system with no room left, after `fill(folder)` wrote its files (a 1 MiB tmpfs filled with
    zeros to the last page; root only, unmounted afterwards; skipped elsewhere)."""
    folder = tmp_path / "full"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("no full file system can be made here (needs root and mount)")
    try:
        fill(folder)
        subprocess.run(["dd", "if=/dev/zero", f"of={folder / '.filler'}", "bs=4k"], capture_output=True)
        with pytest.raises(OSError) as full:
            (folder / ".probe").write_bytes(b"x")
        assert full.value.errno == errno.ENOSPC
        (folder / ".probe").unlink()
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_tables_onto_a_full_disk_are_one_sentence(tmp_path):
    """A write into an open file on a full disk raises an OSError without a file name: the sentence names the
    folder the tables were going to."""
    from tests.experiments.test_aggregate import _two_arms_two_seeds

    runs = tmp_path / "runs"
    _two_arms_two_seeds(runs)
    with _full_folder(tmp_path) as full:
        tables = subprocess.run([sys.executable, "-m", "experiments.aggregate", str(runs), "--bootstrap", "20", "--out",
                                 str(full / "tables")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert tables.returncode == 2 and tables.stdout.startswith("# BFCL V3 multi-turn accuracy")
    assert tables.stderr == (f"error: cannot write {full / 'tables'}: the disk is full; give --out a folder you can "
                             "write (the tables above were printed)\n")


def test_the_notebook_on_a_full_disk_says_what_it_could_not_save(tmp_path):
    """The figure and then the executed notebook cannot be written: a line for the figure, one sentence for the
    notebook, and neither left half-written in the run."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with _full_folder(tmp_path, fill=_two_round_run) as run_dir:
        proc = subprocess.run([sys.executable, "-m", "seal.report.inspect_run", str(run_dir)], cwd=cwd,
                              capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
        left = sorted(p.name for p in run_dir.iterdir())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        f"inspect_run: figure not saved: cannot write {run_dir / 'inspect_run.png'}: the disk is full; the notebook "
        "shows it",
        f"error: cannot write {run_dir / 'inspect_run.ipynb'}: the disk is full; copy the run to a folder you can "
        "write and name the copy, or open notebooks/inspect_run.ipynb in Jupyter with SEAL_RUN_DIR=<run> (it shows "
        "the run, and says that its figure was not saved)"]
    assert left == [".filler", "interface", "metrics.jsonl", "run_config.json"]


def test_a_disk_that_fills_during_a_run_is_named_with_the_runs_folder(tmp_path):
    from seal.tasks import _damaged

    # a write into an open file: no file name in the error, so the run's folder is named
    error = _damaged(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), tmp_path)
    assert str(error) == (f"cannot write {tmp_path}: the disk is full; make room on it and run the same command "
                          "again, which goes on from what the run kept")
    # a file that could not be made names itself, and the way out is another folder
    error = _damaged(OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "run.log")), tmp_path)
    assert str(error).startswith(f"cannot write {tmp_path / 'run.log'}: the file system is read-only; run from a folder")
    # anything else is no folder's problem: the traceback stays
    assert _damaged(OSError(errno.EIO, os.strerror(errno.EIO)), tmp_path) is None


def test_a_relative_run_folder_is_read_from_the_working_directory_then_the_repository(tmp_path, monkeypatch):
    """Jupyter runs the notebook in notebooks/: SEAL_RUN_DIR=outputs/train/<run>, typed at the repository's root,
    is found there."""
    from seal.errors import UserError
    from seal.report.inspect_run import find_run

    repo, notebooks = tmp_path / "repo", tmp_path / "repo" / "notebooks"
    run_dir = repo / "outputs" / "train" / "a"
    run_dir.mkdir(parents=True)
    for name in ("run_config.json", "metrics.jsonl"):
        (run_dir / name).write_text("{}\n")
    notebooks.mkdir()
    monkeypatch.chdir(notebooks)
    assert find_run("outputs/train/a", repo) == repo / "outputs" / "train" / "a"
    (notebooks / "a").mkdir()  # the working directory comes first
    for name in ("run_config.json", "metrics.jsonl"):
        (notebooks / "a" / name).write_text("{}\n")
    assert find_run("a", repo) == Path("a")
    with pytest.raises(UserError) as error:
        find_run("outputs/train/b", repo)
    assert str(error.value) == (f"outputs/train/b is not a folder in {notebooks} or in {repo}; name a training run's "
                                "folder, e.g. outputs/train/<run>")
    monkeypatch.chdir(repo)
    with pytest.raises(UserError) as error:
        find_run("outputs/train/b", repo)
    assert str(error.value).startswith(f"outputs/train/b is not a folder in {repo}; name")


def test_without_a_folder_the_notebook_reads_the_newest_run_and_says_which(tmp_path, monkeypatch):
    """`jupyter execute notebooks/inspect_run.ipynb` (the README's command, no SEAL_RUN_DIR): the run whose
    metrics.jsonl was written last, sweeps' nested folders included, named on the terminal with how to pick
    another; none yet is one sentence."""
    import io
    import os

    from seal.errors import UserError
    from seal.report.inspect_run import QUIET, announce, find_run

    with pytest.raises(UserError) as error:
        find_run(None, tmp_path)
    assert str(error.value) == (f"no training run under {tmp_path / 'outputs' / 'train'}: run `make run` first, or "
                                "name a run folder (SEAL_RUN_DIR=... in Jupyter)")
    train = tmp_path / "outputs" / "train"
    for name, written in (("defaults", 1_000), ("sweep/reweighting=off", 3_000), ("old", 2_000)):
        (train / name).mkdir(parents=True)
        (train / name / "metrics.jsonl").write_text("{}\n")
        os.utime(train / name / "metrics.jsonl", (written, written))
    (train / "not_a_run").mkdir()  # a folder without rounds, written later than every run
    assert find_run(None, tmp_path) == train / "sweep" / "reweighting=off"
    os.utime(train / "old" / "metrics.jsonl", (4_000, 4_000))  # a resumed run's next round
    assert find_run(None, tmp_path) == train / "old"
    said = io.StringIO()
    monkeypatch.setattr("sys.__stderr__", said)
    monkeypatch.delenv(QUIET, raising=False)
    announce(train / "old", chosen=False)
    announce(train / "old", chosen=True)
    announce(train / "old", chosen=False, saved=train / "old" / "inspect_run.png")
    assert said.getvalue().splitlines() == [
        f"inspect_run: {train / 'old'} (the newest under outputs/train/; SEAL_RUN_DIR=<run> picks another)",
        f"inspect_run: {train / 'old'} (named by SEAL_RUN_DIR)",
        f"inspect_run: figure saved as {train / 'old' / 'inspect_run.png'}"]
    monkeypatch.setenv(QUIET, "1")  # under python -m seal.report.inspect_run, which says it itself
    announce(train / "old", chosen=False)
    assert len(said.getvalue().splitlines()) == 3


def test_the_keys_a_config_folder_declares_by_hand(tmp_path):
    """A group's file under its group, a `_global_` file at the top, a file included `@_here_` under the
    includer's group (and not under its own folder), defaults lists and hydra settings no keys; null and {} open."""
    conf = tmp_path / "conf"
    for name, text in {
        "config.yaml": "defaults:\n  - _self_\n  - trainer: a\nseed: 0\nhydra:\n  run:\n    dir: x\n",
        "trainer/a.yaml": "lr: 1\nextra: {}\nnested:\n  depth: 2\n",
        "experiment/e.yaml": "# @package _global_\ndefaults:\n  - override /trainer: a\ntrainer:\n  beta: 0\n",
        "backbone/b.yaml": "defaults:\n  - /base/common@_here_\n  - _self_\nname: b\n",
        "base/common.yaml": "lora: null\ndtype: x\n",
        # an include without its leading / is found in the includer's group
        "launch/l.yaml": "defaults:\n  - parts/shared@_here_\nprocesses: 1\n",
        "launch/parts/shared.yaml": "engine: vllm\n",
        # a dotted name (qwen2.5-7b) is the file's whole name, not a suffix
        "launch/gpu.yaml": "defaults:\n  - /base/v2.5-x@_here_\n",
        "base/v2.5-x.yaml": "sharding: fsdp2\n",
    }.items():
        (conf / name).parent.mkdir(parents=True, exist_ok=True)
        (conf / name).write_text(text)
    keys, open_keys = command_line.declared_keys(conf)
    assert keys == {"seed", "trainer", "trainer.lr", "trainer.extra", "trainer.nested", "trainer.nested.depth", "trainer.beta",
                    "backbone.name", "backbone.lora", "backbone.dtype", "launch.processes", "launch.engine",
                    "launch.sharding"}
    assert open_keys == {"trainer.extra", "backbone.lora"}
    refusal = command_line.added_key_refusal
    assert refusal(["+trainer.nested.depth=3", "+backbone.lora.r=8", "+trainer.extra.any.depth=1", "trainer.lr=2",
                    "+hydra.job.chdir=true", "+experiment=e", "-m", "--cfg", "job", "+launch.engine=x=y",
                    "+trainer.nope", "+trainer@elsewhere=a"], conf) is None
    # what is skipped (a flag, a plain override, Hydra's own key) does not end the reading before a refused key
    for before in ("-m", "trainer.lr=2", "+hydra.job.chdir=true", "+trainer.lr=1"):
        assert refusal([before, "++trainer.nested.dept=a=b"], conf) == (
            "++trainer.nested.dept adds trainer.nested.dept, which no config of seal has and nothing reads (the "
            "closest one is trainer.nested.depth)")
    assert refusal(["+base.lora=1"], conf).startswith("+base.lora adds base.lora,")
    assert refusal(["+launch.parts.engine=1"], conf).startswith("+launch.parts.engine adds launch.parts.engine,")
    # a config folder of the user's may declare what conf/ does not: Hydra alone judges then
    for flag in (["--config-dir", "mine"], ["-cd", "mine"], ["--config-path=mine"], ["-cp", "mine"]):
        assert refusal([*flag, "+colour=red"], conf) is None
    assert refusal(["+colour=red"], conf) == ("+colour adds colour, which no config of seal has and nothing reads "
                                              "(`python run.py --cfg job` lists them)")
    # difflib's ratio 2M/T of trainer.qqqq against its nearest keys: trainer 14/19 = 0.737, trainer.lr 16/22 = 0.727,
    # under the 0.75 a suggestion needs: the group's keys are pointed to instead
    assert refusal(["+trainer.qqqq=1"], conf) == ("+trainer.qqqq adds trainer.qqqq, which no config of seal has and "
                                                  "nothing reads (`python run.py --cfg job --package trainer` lists "
                                                  "the keys)")


@pytest.mark.parametrize("arg", ["+backbone.tau2_split=test", "+env_interface.thresholds.cap/format.on=0.2",
                                 "+backbone.lora.r=8", "+hydra.launcher.additional_parameters.mail_type=END"])
def test_keys_this_projects_configs_leave_to_add_are_added(arg):
    # tau2_split: only toolace-2-8b.yaml sets it (conf/benchmark/tau2.yaml reads it with oc.select); thresholds and
    # lora: left open (a mapping of the user's); hydra.*: Hydra's own
    assert command_line.added_key_refusal([arg], command_line.CONF) is None
