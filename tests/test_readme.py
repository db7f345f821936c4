"""The README's two set-up commands are the ones CI and the device runs use."""

from __future__ import annotations

from .helpers import ROOT


def _bash_blocks(text: str) -> list[str]:
    return [block.split("```", 1)[0].strip() for block in text.split("```bash\n")[1:]]


def test_ci_runs_the_readme_test_command():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    install_and_run, test_command = blocks[0], blocks[1]
    assert "luigi --module pipeline TuneWorkload" in install_and_run
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()
