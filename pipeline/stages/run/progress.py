"""A stage's progress on stderr: on a terminal one line redrawn in place; anywhere else (cron's ``nightly.log``,
a CI log, a pipe) a line of its own when the count has changed, at most every few seconds, and the last count
always, so a log reads as a short list instead of a redraw per problem."""

from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
EVERY_S = 5.0  # outside a terminal: at most one line this often, besides the last


class ProgressBar:
    """``show(done, total)`` as the work goes; ``stream`` defaults to stderr, ``clock`` to ``time.monotonic``."""

    def __init__(self, label: str, stream: TextIO | None = None, every_s: float = EVERY_S, clock=time.monotonic):
        self.label, self.stream, self.every_s, self.clock = label, stream or sys.stderr, every_s, clock
        self.shown: tuple[int, int] | None = None
        self.last_s = -float("inf")

    def show(self, done: int, total: int) -> None:
        filled = round(WIDTH * done / max(total, 1))
        text = f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total}"
        finished = done >= total
        if self.stream.isatty():
            print(f"\r{text}", end="\n" if finished else "", file=self.stream, flush=True)
            return
        now = self.clock()
        if (done, total) == self.shown or (not finished and now - self.last_s < self.every_s):
            return
        print(text, file=self.stream, flush=True)
        self.shown, self.last_s = (done, total), now
