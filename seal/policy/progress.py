"""Progress of a long step that says what is moving: a bar on the console and lines in run.log.

An evaluation or a round's rollouts plays episodes turn by turn: the bar counts finished *turns* (each
episode's turns are known when it starts, so the bar moves whenever one ends, not only when a whole
episode does) and shows the episodes done and the tokens the model has written so far; an optimisation
counts its micro-batches. The bar is drawn on a terminal only (stderr a TTY); when it moves `every` seconds or
more after the last line, and when the step ends, one line goes to the `seal.progress` logger: run.log always has it, the console only
when no bar is drawn there (a SLURM job's log, a pipe), so that a console shows one or the other.

    progress = Progress("eval before · bfcl", total=16, unit="turn", episodes=4)
    progress.advance(turns=1, tokens=120)      # after each generation step
    progress.close()
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

log = logging.getLogger("seal.progress")
# seconds between two lines in run.log while a step runs
EVERY_S = 60.0
# the bar is redrawn at most this often when only its counts moved (tqdm redraws on update)
REDRAW_S = 0.5


def say(line: str) -> None:
    """Print one line for the console (stdout) and write it to run.log, which the console's lines otherwise
    never reach (Hydra's file handler)."""
    print(line, flush=True)
    record = logging.LogRecord("seal", logging.INFO, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def duration(seconds: float) -> str:
    """A duration as a person reads it: 45 s, 3 min 20 s, 2 h 05 min."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Progress:
    """One step's progress: `total` units (turns, optimizer steps), optionally with episodes and tokens."""

    def __init__(self, label: str, total: int, *, unit: str = "turn", episodes: int | None = None,
                 bar: bool = True, leave: bool = True, every: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.unit = label, max(0, int(total)), unit
        self.episodes_total = episodes
        self.done = self.episodes = self.tokens = 0
        self.every, self.clock = every, clock
        self.started = self._logged = self._drawn = clock()
        self.bar = _bar(label, self.total, unit, leave) if bar else None  # pragma: no mutate (display only)

    def grow(self, extra: int) -> None:
        """More units than planned (a conversation that went on past the turns known at its start)."""
        self.total += extra
        if self.bar is not None:
            self.bar.total = self.total

    def advance(self, n: int = 0, *, episodes: int = 0, tokens: int = 0) -> None:
        """`n` more units done (and `episodes` finished, `tokens` written); redraws the bar, and logs a line
        when `every` seconds have passed since the last and units are left (close() logs the step's end)."""
        self.done += n
        self.episodes += episodes
        self.tokens += tokens
        now = self.clock()
        if self.bar is not None:  # pragma: no mutate block (display only)
            self.bar.set_postfix_str(self.postfix(), refresh=False)
            if n:
                self.bar.update(n)
            elif now - self._drawn >= REDRAW_S:
                self.bar.refresh()
                self._drawn = now
        # the step's end is close()'s line, not this one's (a play whose conversations grow its turns as they go has
        # done every turn planned so far long before its last episode ends)
        over = self.done >= self.total and (self.episodes_total is None or self.episodes >= self.episodes_total)
        if now - self._logged >= self.every and not over:
            self._logged = now
            log.info("%s", self.line())

    def postfix(self) -> str:
        """What the bar shows beside its count: episodes done and tokens written (with their rate)."""
        parts = []
        if self.episodes_total is not None:
            parts.append(f"{self.episodes}/{self.episodes_total} episodes")
        if self.tokens:
            elapsed = self.clock() - self.started
            rate = f" ({self.tokens / elapsed:.0f}/s)" if elapsed > 0 else ""
            parts.append(f"{self.tokens:,} tokens{rate}")
        return ", ".join(parts)

    def line(self, final: bool = False) -> str:
        """The run.log line: what is done of what, the tokens, the time so far and what is left at this rate."""
        elapsed = self.clock() - self.started
        text = f"{self.label}: {self.unit} {self.done} of {self.total}"
        if self.episodes_total is not None:
            text += f", {self.episodes} of {self.episodes_total} episodes done"
        if self.tokens:
            text += f", {self.tokens:,} tokens written ({self.tokens / elapsed:.0f}/s)" if elapsed > 0 else ""
        text += f"; {duration(elapsed)}"
        if final:
            return text
        left = self.left()
        return text + (f", about {duration(left)} left" if left is not None else f", no {self.unit} done yet")

    def left(self) -> float | None:
        """Seconds left at the rate so far (None before the first unit is done)."""
        if not self.done:
            return None
        elapsed = self.clock() - self.started
        return elapsed / self.done * max(self.total - self.done, 0)

    def close(self) -> None:
        """The step ended: the bar closes and run.log gets its last line."""
        if self.bar is not None:  # pragma: no mutate (display only)
            self.bar.close()
        log.info("%s", self.line(final=True))


def end_bars() -> None:
    """Close every bar still drawn, so that the next line starts a line of its own: a step that Ctrl-C or an error
    stopped never closed its own (its last redraw leaves the cursor after the bar)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _bar(label: str, total: int, unit: str, leave: bool) -> Any:  # pragma: no mutate block (a display)
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    # tqdm shows done/total, the elapsed time and the time left at the current rate; disable=None: only on a
    # terminal (elsewhere the progress lines say the same, without a bar's carriage returns)
    return tqdm(total=total, desc=label, unit=unit, leave=leave, dynamic_ncols=True, disable=None)
