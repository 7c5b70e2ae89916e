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
