"""The README's two set-up commands are the ones CI and the device runs use."""

from __future__ import annotations

import pytest

from .helpers import ROOT


def _bash_blocks(text: str) -> list[str]:
    return [block.split("```", 1)[0].strip() for block in text.split("```bash\n")[1:]]


def test_ci_runs_the_readme_test_command():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    install_and_run, test_command = blocks[0], blocks[1]
    assert "luigi --module pipeline TuneWorkload" in install_and_run
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def _one_line(block: str) -> str:
    return block.replace("\\\n", " ")


@pytest.mark.long
def test_the_cpu_try_out_and_its_package_run_as_the_readme_prints_them(tmp_path):
    """The README's CPU try-out (third block), then the Package form it documents for it, from a directory
    holding the checkout's tests/ (so ./workdir is this test's): the package lands under ./workdir/dist."""
    import json
    import os
    import re
    import shlex
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text()
    try_out = _one_line(_bash_blocks(text)[2]).split("&&", 1)[1]
    package = re.search(
        r"For the CPU try-out above: `(luigi --module pipeline Package [^`]+)`", text.replace("\n", " ")
    )
    assert "--backend hipblaslt" in try_out and package, "the README documents both"
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "GEMM_TUNE_LOCK_DIR": str(tmp_path / "locks"), "HIPBLASLT_DOUBLE_NOISE": "0"}
    for command in (try_out, package[1]):
        argv = [sys.executable, "-m", "luigi", *shlex.split(command)[1:]]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "redoing" not in proc.stderr, "the Package form has the try-out's parameters: it redoes no stage"
    assert "bundle accepted" in (tmp_path / "workdir" / "try" / "tune-workload.txt").read_text()
    record = json.loads((tmp_path / "workdir" / "try" / "package" / "package.json").read_text())
    assert record["package"].startswith(str(tmp_path / "workdir" / "dist"))
