"""A stage's progress line: redrawn in place on a terminal, a short list of lines in a log."""

from __future__ import annotations

import io

from pipeline.stages.run.progress import ProgressBar


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_outside_a_terminal_a_line_when_the_count_changed_and_at_most_every_few_seconds():
    now = [0.0]
    log = _Log()
    bar = ProgressBar("Bench", log, every_s=5.0, clock=lambda: now[0])
    for done in range(28):  # a count every second, some of them repeated as a worker reports again
        now[0] = float(done)
        bar.show(done, 27)
        bar.show(done, 27)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert [line.split()[-1] for line in lines] == ["0/27", "5/27", "10/27", "15/27", "20/27", "25/27", "27/27"]
    assert lines[-1] == "Bench [" + "#" * 30 + "] 27/27"


def test_on_a_terminal_the_line_is_redrawn_in_place():
    term = _Terminal()
    bar = ProgressBar("Validate", term)
    for done in range(4):
        bar.show(done, 3)
    assert term.getvalue().count("\r") == 4 and term.getvalue().endswith("3/3\n")
