"""``gemm-tune``: the steps people run by hand, on the same core as the Luigi tasks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import configs
from .shapes import gather, read_shapes_json, summary_table, write_shapes_json


def _shapes(args: argparse.Namespace) -> int:
    result = gather(args.paths, lenient=args.lenient)
    sys.stdout.write(summary_table(result))
    if args.json:
        write_shapes_json(args.json, result)
    return 0


def _configs(args: argparse.Namespace) -> int:
    settings = configs.ConfigSettings(arch=args.arch, padding=args.padding, preset=args.preset)
    problems = [record.problem for record in read_shapes_json(args.shapes)]
    sys.stdout.write(configs.summary(configs.write_configs(Path(args.out), problems, settings)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gemm-tune", description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    shapes = steps.add_parser("shapes", help="gather and dedupe GEMMs from TunableOp CSV files",
                              description="Read TunableOp untuned/results files (torch 2.6-2.15), dedupe by "
                                          "problem and print a summary table.")
    shapes.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or globs")
    shapes.add_argument("--json", metavar="OUT", help="also write the shapes as JSON")
    shapes.add_argument("--lenient", action="store_true", help="skip malformed lines, count and list them")
    shapes.set_defaults(func=_shapes)

    gen = steps.add_parser("configs", help="render find_exact and TensileLite configs from shapes.json",
                           description="One find_exact and one TensileLite config per ProblemType, with stride "
                                       "padding; lists padded and skipped problems with the reason.")
    gen.add_argument("shapes", metavar="SHAPES.json")
    gen.add_argument("--out", required=True, metavar="DIR", help="output directory (replaced as a whole)")
    gen.add_argument("--arch", default="gfx942", help="target arch: " + ", ".join(configs.ARCH_NAMES))
    gen.add_argument("--padding", choices=["auto", "off"], default="auto")
    gen.add_argument("--preset", default="mi300x", help="TensileLite parameter preset (templates/tensile_presets.yaml)")
    gen.set_defaults(func=_configs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:  # format, input and settings errors all say what is wrong
        print(f"gemm-tune {args.step}: error: {err}", file=sys.stderr)
        return 2
