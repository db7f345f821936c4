"""Does Bench predict what ships? Bench's speedup beside Validate's, per GEMM, over finished runs of the main job.

    python bench/bench_agreement.py workdir/readme workdir/readme-fp8 workdir/hf-mistral \\
        --out bench/results/bench_agreement_<gpu>_<date>.json

Each argument is a run directory whose report was written (``report/summary.json``: its ``bench_agreement``,
``pipeline/stages/validate/agreement.py``), or a file this script wrote (its runs join, so runs made on separate
machines of one kind combine: ``bench_agreement.py a.json b.json --out all.json``; devices must match).
Over all of them: how many winners Bench named and Validate measured, the fraction whose validated speedup is
within 2% of the predicted one (target >= 95%), the worst validated speedup of a Bench winner (target >=
x0.99), and per source of the winner (Triton or the library) how far predicted sits from validated on average
(``by_source``). A run whose report is missing is an error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
from pathlib import Path

from pipeline.api import TRITON_PREFIX, agreement_upgraded, atomic_write_json

TARGET_FRACTION, TARGET_WORST = 0.95, 0.99


def run_entries(path: Path) -> list[tuple[dict, str]]:
    """The run(s) ``path`` holds, each with its device: a run directory's report, or an earlier output's runs."""
    if path.is_file():
        earlier = json.loads(path.read_text())
        if "runs" not in earlier or "device" not in earlier:
            raise SystemExit(f"{path}: not a file bench_agreement.py wrote (no 'runs' and 'device')")
        return [(run, earlier["device"]) for run in earlier["runs"]]
    summary_path = path / "report" / "summary.json"
    if not summary_path.exists():
        raise SystemExit(f"{summary_path}: no report summary; run TuneWorkload (or gemm-tune report) on {path} first")
    summary = json.loads(summary_path.read_text())
    agreed = summary.get("bench_agreement")
    if agreed is None:
        raise SystemExit(f"{summary_path}: written before reports compared Bench with Validate; rebuild the report")
    agreed = agreement_upgraded(agreed)  # one written before Validate's pairs were pooled: from its figures
    return [({"run": str(path), "passed": summary["passed"], **agreed}, summary["device"])]


def collect(runs: list[Path]) -> dict:
    """Every run's agreement and the figures over all of them."""
    per_run, rows, device = [], [], None
    for run in runs:
        for entry, run_device in run_entries(run):
            if device is not None and run_device != device:
                raise SystemExit(f"{run}: measured on {run_device}, not {device}; combine runs of one device only")
            device = run_device
            per_run.append(entry)
            rows += [{"run": Path(entry["run"]).name, **row} for row in entry["rows"]]
    agreeing = sum(r["agrees"] for r in rows)
    worst = min(rows, key=lambda r: r["validated"], default=None)
    return {
        "device": device,
        "date": datetime.date.today().isoformat(),
        "runs": per_run,
        "predicted_rows": len(rows),
        "agreeing_fraction": agreeing / len(rows) if rows else None,
        "worst_validated": worst["validated"] if worst else None,
        "worst": worst,
        "targets": {"agreeing_fraction": TARGET_FRACTION, "worst_validated": TARGET_WORST},
        "by_source": by_source(rows),
    }


def by_source(rows: list[dict]) -> dict:
    """Per source of the winner (this project's Triton kernels, or the library's), how far Bench's figure sits
    from Validate's: 100 ln(predicted / validated), its mean and sd (a one-sided mean is a bias of one side, not
    noise), and the fraction within 2%."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault("triton" if row["solution"].startswith(TRITON_PREFIX) else "library", []).append(row)
    out = {}
    for source, members in sorted(groups.items()):
        offsets = [100 * math.log(r["predicted"] / r["validated"]) for r in members]
        out[source] = {
            "rows": len(members),
            "mean_offset_pct": statistics.fmean(offsets),
            "sd_offset_pct": statistics.stdev(offsets) if len(offsets) > 1 else None,
            "agreeing_fraction": sum(r["agrees"] for r in members) / len(members),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = collect(args.runs)
    atomic_write_json(args.out, result)
    for run in result["runs"]:
        fraction, worst = run["agreeing_fraction"], run["worst_validated"]
        figures = f"{fraction:.0%} within 2%, worst validated x{worst:.3f}" if fraction is not None else ""
        print(f"{run['run']}: {run['predicted_rows']} predicted rows, {figures}")
    if result["predicted_rows"]:
        print(
            f"all: {result['predicted_rows']} rows, {result['agreeing_fraction']:.1%} within 2% "
            f"(target {TARGET_FRACTION:.0%}), worst validated x{result['worst_validated']:.3f} "
            f"(target x{TARGET_WORST}) on {result['worst']['key']}"
        )
    for source, figures in result["by_source"].items():
        sd = "" if figures["sd_offset_pct"] is None else f" (sd {figures['sd_offset_pct']:.2f}%)"
        print(
            f"{source}: {figures['rows']} rows, predicted over validated {figures['mean_offset_pct']:+.2f}% on "
            f"average{sd}, {figures['agreeing_fraction']:.0%} within 2%"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
