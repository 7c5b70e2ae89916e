"""What the console and run.log leave out: the libraries' messages expected on every run (KNOWN_NOISE), each
still worded as the library words it, and the progress lines while a bar shows them on a terminal."""

import inspect
import logging

import pytest

from seal.tasks import KNOWN_NOISE, ConsoleFilter, KnownNoise


def record(name, message, level=logging.WARNING):
    return logging.LogRecord(name, level, __file__, 0, message, None, None)


@pytest.mark.parametrize("logger, start", KNOWN_NOISE)
def test_each_known_message_is_still_the_librarys_and_is_left_out(logger, start):
    # the library's own source still says it (a reworded message would slip through unnoticed otherwise)
    module = pytest.importorskip(logger)  # vLLM is not installed under VLLM=none
    assert start in inspect.getsource(module)
    noise = KnownNoise()
    assert not noise.filter(record(logger, f"[RANK 0] {start} and the rest of the sentence."))
    assert noise.filter(record(logger, "something else entirely"))
    assert noise.filter(record("seal.tasks.train", start))


def test_progress_lines_reach_the_console_only_without_a_live_bar(monkeypatch):
    import sys

    line = record("seal.progress", "eval before · bfcl: turn 3 of 16", logging.INFO)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert not ConsoleFilter().filter(line)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a SLURM job's log: no bar to read
    assert ConsoleFilter().filter(line)


def test_quiet_console_filters_the_console_and_run_log_as_run_py_sets_them_up(tmp_path, monkeypatch):
    """run.py calls quiet_console once Hydra has put its console and run.log handlers on the root logger: a
    library's expected message reaches neither, the project's lines reach both, another library's warning
    reaches run.log only, and its error the console too."""
    import io

    from seal.tasks import quiet_console

    root = logging.getLogger()
    console, log_file = logging.StreamHandler(io.StringIO()), logging.FileHandler(tmp_path / "run.log")
    for handler in (console, log_file):
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    monkeypatch.setattr(root, "handlers", [console, log_file])
    monkeypatch.setattr(root, "level", logging.INFO)
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "WANDB_SILENT"):  # registered, so that the test's end restores them
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    quiet_console()
    logger, start = KNOWN_NOISE[0]
    logging.getLogger(logger).warning("%s and the rest of the sentence.", start)
    logging.getLogger("seal.tasks.train").info("plan: 2 rounds")
    logging.getLogger("datasets").warning("a warning of its own")
    logging.getLogger("datasets").error("an error of its own")
    log_file.flush()
    assert console.stream.getvalue().splitlines() == ["seal.tasks.train: plan: 2 rounds", "datasets: an error of its own"]
    assert (tmp_path / "run.log").read_text().splitlines() == [
        "seal.tasks.train: plan: 2 rounds", "datasets: a warning of its own", "datasets: an error of its own"]
    log_file.close()
    # what quiet_console changed beyond the handlers, undone for the tests after this one
    import transformers.utils.logging as hf_logging

    logging.captureWarnings(False)
    hf_logging.enable_default_handler()
    hf_logging.disable_propagation()
    hf_logging.enable_progress_bar()


def test_transformers_own_line_for_offline_wandb_is_kept_off_the_console():
    """transformers prints "[INFO] Running in WANDB offline mode" (a bare print) when its W&B integration is first
    imported under WANDB_MODE=offline, which a training run does through the trainer: quiet_console imports it first
    with that line dropped. A fresh interpreter, since this one may have imported the integration already."""
    import os
    import subprocess
    import sys

    code = ("from seal.tasks import quiet_console; quiet_console(); import transformers.trainer; "
            "import transformers.integrations.integration_utils; print('the project goes on')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the project goes on\n"
    # the line is transformers', as the test reads it: the same import without quiet_console prints it
    bare = subprocess.run([sys.executable, "-c", "import transformers.integrations.integration_utils"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "WANDB_MODE": "offline"})
    assert bare.stdout == "[INFO] Running in WANDB offline mode\n"
