"""``python -m pipeline.runtime --bundle DIR [--status-file F] [--graphs-only] -- CMD...``: run CMD with the tuned
GEMMs applied (``--graphs-only``: only those captured into CUDA graphs; an eager call then costs nothing).

CMD is ``script.py ARGS``, ``-m module ARGS`` or ``-c code`` (optionally after ``python``/``python3``), run in
this process after ``install``; anything else (``bash run.sh``, ``torchrun ...``) runs as a child whose
Python processes install the runtime when they import torch (``PYTHONPATH`` gets ``autoload/``, which holds a
``sitecustomize`` that chains to any other). At exit, what the runtime did goes to stderr and --status-file.
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..atomic import atomic_write_json, create_json
from . import coverage_line

BUNDLE_ENV = "GEMM_TUNE_RUNTIME_BUNDLE"
STATUS_ENV = "GEMM_TUNE_RUNTIME_STATUS"
GRAPHS_ONLY_ENV = "GEMM_TUNE_RUNTIME_GRAPHS_ONLY"
ANY_DEVICE_ENV = "GEMM_TUNE_RUNTIME_ANY_DEVICE"
AUTOLOAD = Path(__file__).parent / "autoload"
TOOL_EXIT = 11  # as gemm-tune nightly: a tool (the GPU, nvmath-python) is missing or failed


def with_autoload(env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``autoload/`` (its ``sitecustomize`` acts on the runtime's variables) and this package's root
    first on ``PYTHONPATH``, so every Python process started with it runs the hook and can import the package."""
    package_root = str(Path(__file__).parents[2])
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(AUTOLOAD), package_root, env.get("PYTHONPATH")) if p)}


def child_env(bundle: Path, status_file: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that makes every Python child install the runtime on importing torch."""
    env = dict(os.environ if base is None else base)
    env[BUNDLE_ENV] = str(bundle.absolute())
    if status_file:
        env[STATUS_ENV] = str(status_file.absolute())
    return with_autoload(env)


def summary_line(status: dict) -> str:
    if not status.get("installed"):
        return f"gemm-tune runtime: not installed: {status.get('consumer') or 'uninstalled'}"
    tuned = sum(status["tuned_calls"].values())
    fallbacks = ", ".join(f"{n} {reason}" for reason, n in sorted(status["fallbacks"].items(), key=lambda x: -x[1]))
    graphs = status.get("graphs_only")
    return (
        f"gemm-tune runtime: {status['tuned_rows']} tuned rows from {status['source']}"
        + (f" (graphs only: routed inside {graphs['captures']} CUDA-graph captures)" if graphs else "")
        + ("; no CUDA graph was captured, so nothing was routed" if graphs and not graphs["captures"] else "")
        + f"; {tuned} calls ran a "
        f"tuned algorithm ({len(status['tuned_calls'])} problems); to torch: {fallbacks or 'none'}"
        + (f"; rejected rows: {len(status['rows_rejected'])}" if status["rows_rejected"] else "")
        + coverage_line(status.get("coverage"))
    )


def report(runtime, status_file: Path | None, skip_idle: bool = False) -> None:
    """The summary line on stderr and the record in ``status_file`` (one per process: the first takes the name,
    later ones add their pid). ``skip_idle``: a helper process that made no GEMM call (torch.compile's workers,
    a data loader) reports nothing, so the command's own record is the one under the name."""
    status = runtime.status()
    if skip_idle and status.get("installed") and not status["tuned_calls"] and not status["fallbacks"]:
        return
    print(summary_line(status), file=sys.stderr)
    if status_file and not create_json(status_file, status):  # several processes of one command: one record each
        atomic_write_json(status_file.with_name(f"{status_file.stem}.{os.getpid()}{status_file.suffix}"), status)


def _run_in_process(command: list[str]) -> int:
    """Run ``script.py``/``-m module``/``-c code`` with its own argv, as ``python`` would."""
    head, rest = command[0], command[1:]
    try:
        if head == "-m":
            sys.argv = [rest[0], *rest[1:]]
            runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
        elif head == "-c":
            sys.argv = ["-c", *rest[1:]]
            exec(compile(rest[0], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = command
            sys.path.insert(0, str(Path(head).absolute().parent))
            runpy.run_path(head, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print(
            "usage: python -m pipeline.runtime --bundle DIR [--status-file F] [--any-device] [--graphs-only] -- CMD...",
            file=sys.stderr,
        )
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.runtime", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bundle", type=Path, required=True, help="bundle or package dir, or a results CSV")
    parser.add_argument("--status-file", type=Path, help="write what the runtime did here (JSON) at exit")
    parser.add_argument("--any-device", action="store_true", help="apply rows tuned on another GPU model")
    parser.add_argument(
        "--graphs-only",
        action="store_true",
        help="route only the GEMMs captured into CUDA graphs: an eager call never meets the runtime (for a "
        "workload whose eager part is host-bound, as the end-to-end report says)",
    )
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not command:
        parser.error("no command after --")
    if re.fullmatch(r"python(\d+(\.\d+)?)?", Path(command[0]).name) and len(command) > 1:
        command = command[1:]
    if not (command[0] in ("-m", "-c") or command[0].endswith(".py")):
        env = child_env(args.bundle, args.status_file)
        for flag, name in ((args.any_device, ANY_DEVICE_ENV), (args.graphs_only, GRAPHS_ONLY_ENV)):
            if flag:
                env[name] = "1"
        # the user's command stays in this process group, as a plain launcher leaves it (Ctrl-C reaches it);
        # under the pipeline this whole process runs in a group of its own that dies with the run (procs)
        return subprocess.run(command, env=env, check=False).returncode
    from . import install

    try:
        runtime = install(args.bundle, any_device=args.any_device, graphs_only=args.graphs_only)
    except (ImportError, RuntimeError, OSError, ValueError) as err:  # missing GPU/nvmath, bad bundle, other GPU
        print(f"gemm-tune runtime: cannot apply {args.bundle}: {err}", file=sys.stderr)
        return TOOL_EXIT
    try:
        return _run_in_process(command)
    finally:
        report(runtime, args.status_file)
        runtime.uninstall()


if __name__ == "__main__":
    sys.exit(main())
