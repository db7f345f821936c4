"""``gemm-tune``: the steps people run by hand, on the same core as the Luigi tasks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .shapes import ShapeInputError, gather, summary_table, write_shapes_json
from .tunableop import TunableOpFormatError


def _shapes(args: argparse.Namespace) -> int:
    result = gather(args.paths, lenient=args.lenient)
    sys.stdout.write(summary_table(result))
    if args.json:
        write_shapes_json(args.json, result)
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (TunableOpFormatError, ShapeInputError, OSError) as err:
        print(f"gemm-tune {args.step}: error: {err}", file=sys.stderr)
        return 2
