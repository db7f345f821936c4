"""gemm-tune: the steps people run by hand, on the same core as the Luigi tasks.

Exit codes: 0 success, 2 a malformed command line, 10 bundle refused, 11 tool failure, 12 bad input,
13 busy (workdir or GPUs held by another run), 1 anything else (pipeline/errors.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

from . import errors
from .atomic import atomic_write_text, claim_output_dir, claim_output_file, note_written
from .defaults import LOGIC_MARGIN
from .formats import json_file
from .stages.configs import render as configs
from .stages.gather import mgrid
from .stages.gather.shapes import (
    apply_grid,
    apply_weights,
    gather,
    read_shapes_json,
    summary_table,
    write_shapes_json,
)
from .stages.merge.logic_merge import MergeOptions, merge_dirs, pending_path
from .stages.merge.results_merge import expand_paths, merge_paths


def _shapes(args: argparse.Namespace) -> int:
    spec, m_max = mgrid.parse_grid(args.m_grid), mgrid.parse_m_max(args.m_max)
    result = gather(args.paths, lenient=args.lenient)
    if args.json:
        claim_output_file(args.json, result.files, args.force)  # never over one of the files it read
    apply_weights(
        result,
        *(
            json_file.load(f, what) if f else None
            for f, what in ((args.calls, "calls JSON"), (args.baseline, "baseline JSON"))
        ),
    )
    apply_grid(result, spec, m_max, 60 * args.grid_budget)
    sys.stdout.write(summary_table(result))
    if args.json:
        write_shapes_json(args.json, result)
        note_written(args.json)
    return 0


def _configs(args: argparse.Namespace) -> int:
    settings = configs.ConfigSettings(
        arch=args.arch, padding=args.padding, preset=args.tensile_preset, tensile_generation=args.tensile_generation
    )
    out = claim_output_dir(args.out, [args.shapes], args.force)
    records = read_shapes_json(args.shapes)
    settings = dataclasses.replace(settings, library_type=configs.library_type(r.bucket for r in records))
    problems = [record.problem for record in records]
    sys.stdout.write(configs.summary(configs.write_configs(out, problems, settings, marker="gemm-tune configs")))
    return 0


def _merge_logic(args: argparse.Namespace) -> int:
    options = MergeOptions(
        policy=args.policy, trim=args.trim, no_eff=args.no_eff, force_merge=args.force_merge, margin=args.margin
    )
    out = claim_output_dir(args.out, [args.base, args.new], args.force)
    records = claim_output_dir(args.records_out or f"{out}-records", [args.base, args.new], args.force)
    if args.policy == "faster":
        claim_output_file(pending_path(out), [], args.force)
    report = merge_dirs(Path(args.base), Path(args.new), out, options, "gemm-tune merge-logic", records)
    print("\n".join(report.lines))
    print(f"{len(report.written)} logic files written to {args.out}")
    if report.records:
        print(f"{len(report.records)} winner records written to {records} (beside the logic, never compiled)")
    if options.policy == "faster":
        note_written(pending_path(out))
        if report.pending:
            print(f"{len(report.pending)} sizes replaced pending a measurement: {pending_path(out)}")
    return 0


def _merge_results(args: argparse.Namespace) -> int:
    inputs = expand_paths(args.inputs)
    claim_output_file(args.out, [*inputs, *([args.validators_from] if args.validators_from else [])], args.force)
    merged = merge_paths(inputs, args.validators_from, lenient=args.lenient)
    if merged.results is not None and merged.override is not None:
        raise errors.BadInput("inputs mix TunableOp results and hipBLASLt override files; merge each kind separately")
    merged.write(args.out if merged.results else None, args.out if merged.override else None)
    note_written(args.out)
    print("\n".join(merged.lines))
    print(f"written {args.out}")
    return 0


def _nightly(args: argparse.Namespace) -> int:
    from . import tasks  # noqa: F401  (registers the task classes the check looks up)
    from .dag.arguments import check_parameters
    from .stages.ship import nightly

    workdir = Path(os.path.abspath(args.workdir))
    task = "Package" if args.package else "TuneWorkload"
    check_parameters(task, ["--workdir", str(workdir), *args.luigi_args])
    if args.print_units:
        texts = nightly.units(workdir, ["--package"] * args.package + args.luigi_args, args.at)
        env_file, secrets = workdir / nightly.ENV_FILE, texts.pop(nightly.SECRETS_FILE, None)
        try:
            atomic_write_text(env_file, texts.pop(nightly.ENV_FILE), private=secrets is not None)
            if secrets is not None:
                atomic_write_text(workdir / nightly.SECRETS_FILE, secrets, private=True)
        except OSError as err:
            raise errors.BadInput(f"workdir {workdir} cannot be written: {err.strerror or err}") from None
        print(f"==> {env_file} <==\n(written: the environment the crontab line reads)\n")
        if secrets is not None:
            print(f"==> {workdir / nightly.SECRETS_FILE} <==\n(written, 0600: the secrets the service reads)\n")
        for name, text in texts.items():
            print(f"==> {name} <==\n{text}")
        return 0
    start = time.monotonic()
    code, failures = nightly.run(workdir, task, args.luigi_args, args.wait, sys.argv)
    print(
        f"gemm-tune nightly: exit {code} ({errors.KINDS.get(code, 'failure')}) after "
        f"{time.monotonic() - start:.1f} s"
        + "".join(f"\n  {f['task']}: {f['error']}: {f['message'][:300]}" for f in failures),
        file=sys.stderr,
    )
    return code


def _report(args: argparse.Namespace) -> int:
    from .stages.ship import nightly
    from .stages.validate import report

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise errors.BadInput(f"{run_dir}: no such run directory")
    nightly.RunLocks().hold(run_dir, sys.argv)  # never beside a run that writes it
    summary = report.build(run_dir)
    print("\n".join(report.key_lines(summary)))
    return 0


def _history(args: argparse.Namespace) -> int:
    from .stages.validate import history

    workdir = Path(args.workdir)
    if not workdir.is_dir():
        raise errors.BadInput(f"{workdir}: no such workdir")
    past = history.load(workdir)
    if not past.runs:
        print(f"{workdir}: no run in its history yet ({workdir / history.DIRECTORY}/: each run's Validate adds one)")
        return 0
    if args.csv:
        sys.stdout.write(history.csv_text(past.gemms, history.GEMM_COLUMNS))
        return 0
    print("\n".join(history.gemm_lines(past, args.gemm) if args.gemm else history.trend_lines(past)))
    return 0


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number >= 0")
    return value


def _time_of_day(text: str) -> str:
    from .stages.ship.nightly import parse_at

    try:
        parse_at(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


class _NightlyHelp(argparse.Action):
    """``nightly --help``: its own options, then the TuneWorkload and Package parameters it passes on."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values, option_string=None
    ) -> None:
        from . import tasks

        parser.print_help()
        print("\nTuneWorkload and Package parameters (passed on to Luigi as given):")
        for name, param in tasks.Package.get_params():
            if name != "workdir":
                print(parameter_help(name, param))
        parser.exit()


def parameter_help(name: str, param) -> str:
    """One Luigi parameter for ``nightly --help``: its option, then its description, its choices in a fixed order
    and its default, wrapped under it at 100 columns."""
    words = [param.description or "(no description)"]
    choices = getattr(param, "_choices", None)
    if choices:  # Luigi appends its own "Choices: {...}", in set order: here once, sorted
        words = [words[0].split("Choices:")[0].strip(" ;") or "(no description)"]
        words.append(f"choices: {', '.join(sorted(map(str, choices)))}")
    default = getattr(param, "_default", None)
    if default not in (None, "") and not isinstance(default, type):
        words.append(f"default: {default}")
    body = textwrap.fill("; ".join(words), width=100, initial_indent="      ", subsequent_indent="      ")
    return f"  --{name.replace('_', '-')}\n{body}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gemm-tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    shapes = steps.add_parser(
        "shapes",
        help="gather and dedupe GEMMs from TunableOp CSV files",
        description="Read TunableOp untuned/results files (torch 2.6-2.15), dedupe by "
        "problem and print a summary table.",
    )
    shapes.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or globs")
    shapes.add_argument("--json", metavar="OUT", help="also write the shapes as JSON")
    shapes.add_argument("--force", action="store_true", help="replace a --json file that gemm-tune did not write")
    shapes.add_argument("--lenient", action="store_true", help="skip malformed lines, count and list them")
    shapes.add_argument("--calls", metavar="CALLS.json", help="call counts a collection recorded (collect/calls.json)")
    shapes.add_argument(
        "--baseline",
        metavar="BASELINE.json",
        help="baseline time per call a collection measured (collect/baseline.json): time shares",
    )
    shapes.add_argument(
        "--m-grid",
        default=mgrid.AUTO,
        metavar="GRID",
        help="token counts (M) each weight is tuned at: exact (those the files show), serving (those plus a "
        "server's decode and prefill sizes up to --m-max), an ascending list such as 1,2,4,16, or auto (serving "
        "where the files show a weight at more than one count, within --grid-budget or else 10 minutes; else "
        "exact; the default)",
    )
    shapes.add_argument(
        "--m-max",
        default=None,
        metavar="M",
        help="the largest token count of the serving grid (default: the largest the files show)",
    )
    shapes.add_argument(
        "--grid-budget",
        type=_non_negative,
        default=0.0,
        metavar="MIN",
        help="minutes of Bench on one GPU the grid may cost (estimated; 10 where auto chooses serving): the "
        "finest grid points the files do not "
        "show are dropped to fit, then the finest counts they show are seeded, then the lightest of what they show "
        "is dropped (default: no bound)",
    )
    shapes.set_defaults(func=_shapes)

    gen = steps.add_parser(
        "configs",
        help="render find_exact and TensileLite configs from shapes.json",
        description="One find_exact and one TensileLite config per ProblemType, with stride "
        "padding; lists padded and skipped problems with the reason.",
    )
    gen.add_argument("shapes", metavar="SHAPES.json")
    gen.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="output directory, replaced as a whole: new, empty or written by gemm-tune",
    )
    gen.add_argument("--force", action="store_true", help="replace a non-empty --out that gemm-tune did not write")
    gen.add_argument("--arch", default="gfx942", help="target arch: " + ", ".join(configs.ARCH_NAMES))
    gen.add_argument("--padding", choices=["auto", "off"], default="auto")
    gen.add_argument(
        "--tensile-generation",
        choices=configs.TENSILE_GENERATIONS,
        default="2025",
        help="the TensileLite tree the configs are for: 2025 (ROCm 6.4+, rocm-libraries; FP8 fnuz is "
        "F8N/B8N) or 2024 (hipBLASLt <= 0.11; one F8/B8)",
    )
    gen.add_argument(
        "--tensile-preset",
        "--preset",
        dest="tensile_preset",
        default="mi300x",
        help="TensileLite parameter preset (templates/tensile_presets.yaml), as TuneWorkload's --tensile-preset",
    )
    gen.set_defaults(func=_configs)

    merge = steps.add_parser(
        "merge-logic",
        help="merge a directory of tuned logic YAMLs into the base logic",
        description="Merge NEW_DIR's logic files into BASE_DIR's, by basename, into OUT_DIR.",
    )
    merge.add_argument("base", metavar="BASE_DIR", help="the base logic directory (e.g. the library's)")
    merge.add_argument("new", metavar="NEW_DIR", help="the tuned logic files")
    merge.add_argument(
        "out",
        metavar="OUT_DIR",
        help="where the merged logic goes, replaced as a whole: new, empty or "
        "written by gemm-tune, holding neither input nor the cwd",
    )
    merge.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR that gemm-tune did not write")
    merge.add_argument(
        "--records-out",
        metavar="DIR",
        help="where winner records (hipblaslt_*/cublaslt_*.yaml, not TensileLite logic) go, beside OUT_DIR "
        "(default: OUT_DIR-records; written only where there are some)",
    )
    merge.add_argument(
        "--policy",
        choices=["upstream", "faster"],
        default="faster",
        help="upstream: S24 merge.py exactly; faster (default): keep the faster entry, report all",
    )
    merge.add_argument(
        "--notrim",
        dest="trim",
        action="store_false",
        help="keep 8-value (LD-distinct) keys instead of trimming them to [M, N, B, K]",
    )
    merge.add_argument(
        "--no-eff", "--no_eff", dest="no_eff", action="store_true", help="store efficiency 0.0 for merged rows"
    )
    merge.add_argument(
        "--force-merge",
        "--force_merge",
        dest="force_merge",
        default="none",
        choices=["none", "true", "false"],
        help="none (upstream: forced unless the path holds 'arcturus'), true or false",
    )
    merge.add_argument(
        "--logic-margin",
        "--margin",
        dest="margin",
        type=_non_negative,
        default=LOGIC_MARGIN,
        help="faster policy: how much faster a new entry must be to replace the base (0.02 = 2%%; the job's "
        "--logic-margin; --margin is its old name) (default: %(default)s)",
    )
    merge.set_defaults(func=_merge_logic)

    results = steps.add_parser(
        "merge-results",
        help="merge tunableop_results.csv (or hipBLASLt override) files",
        description="Dedupe on (op, params), keep the fastest row, write one validator block.",
    )
    results.add_argument("out", metavar="OUT.csv")
    results.add_argument("inputs", nargs="+", metavar="IN.csv")
    results.add_argument(
        "--validators-from",
        metavar="FILE",
        help="take the validator block (or Git Version) of the runtime to target from FILE",
    )
    results.add_argument("--lenient", action="store_true", help="skip malformed lines, count and list them")
    results.add_argument("--force", action="store_true", help="replace an OUT that gemm-tune did not write")
    results.set_defaults(func=_merge_results)

    night = steps.add_parser(
        "nightly",
        help="the nightly run: TuneWorkload under a workdir lock, scheduler exit codes",
        description="Run TuneWorkload (or, with --package, the Package task after it) holding "
        "WORKDIR's lock. Every option not listed here is a TuneWorkload/Package "
        "parameter passed on, e.g. --backend hipblaslt (listed below). Exit 0 "
        "accepted, 10 bundle refused, 11 tool failure, 12 bad input, 13 workdir in "
        "use, 2 a malformed command line, 1 other failure.",
        add_help=False,
    )
    night.add_argument("-h", "--help", action=_NightlyHelp, help="show this help and the TuneWorkload parameters")
    night.add_argument("--workdir", default="workdir", help="root of the run directories (default: ./workdir)")
    night.add_argument(
        "--wait", type=_non_negative, default=0.0, help="seconds to wait for another run's lock (default: 0)"
    )
    night.add_argument(
        "--print-units",
        action="store_true",
        help="write WORKDIR/nightly.env and print a crontab line and a systemd service and timer "
        "for this command; run nothing",
    )
    night.add_argument(
        "--at",
        default="02:00",
        type=_time_of_day,
        help="with --print-units: the time of day, HH:MM from 00:00 to 23:59 (default 02:00)",
    )
    night.add_argument(
        "--package",
        action="store_true",
        help="end with the Package task: WORKDIR/dist/<fingerprint>/ for the image (--dist DIR, --publish)",
    )
    night.set_defaults(func=_nightly, luigi_args=[])

    rep = steps.add_parser(
        "report",
        help="rebuild report.md, report.html, plots and summary.json of a run",
        description="Rebuild RUN_DIR/report from the run's validation, gate and e2e records.",
    )
    rep.add_argument("run_dir", metavar="RUN_DIR", help="e.g. workdir/2026-11-22")
    rep.set_defaults(func=_report)

    hist = steps.add_parser(
        "history",
        help="the nights of a workdir: the trend across library upgrades, or one GEMM's line",
        description="Each run's Validate appends its figures to WORKDIR/history/; this reads them back: per night "
        "the weighted and end-to-end speedup, the rows kept, those the library caught up with and the new shapes, "
        "an upgrade marked where the stack fingerprint changed with the default's own speedup across it.",
    )
    hist.add_argument("workdir", metavar="WORKDIR", help="the pipeline's --workdir")
    hist.add_argument("--gemm", metavar="KEY", help="one GEMM's line over the nights (its TunableOp key or label)")
    hist.add_argument("--csv", action="store_true", help="the whole GEMM table as CSV on stdout")
    hist.set_defaults(func=_history)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.step != "nightly":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.luigi_args = [*getattr(args, "luigi_args", []), *extra]
    said = logging.getLogger("pipeline")  # what the stages say (Luigi's own logger stays quiet here)
    if not said.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        said.addHandler(handler)
        said.setLevel(logging.INFO)
    try:
        return args.func(args)
    except (errors.PipelineError, OSError) as err:  # the error says what is wrong, and its exit code which kind
        print(f"gemm-tune {args.step}: {errors.one_line(err)}", file=sys.stderr)  # the whole cause, one line
        return errors.exit_code(err)
