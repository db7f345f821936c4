"""Does a shorter warm-up before each later window move Bench's verdict? (#36: Bench time per GEMM.)

A verdict times the winner against torch's default in six windows (``measure.windowed_samples``), each warmed up
for at least ``warmup_ms[0]`` until its clocks settle. Since 2026-11-27 only the first window warms up for 200 ms;
the later ones for ``rewarm_ms`` (at least 50 ms), as long as their clocks take to settle. For every winner of
the given runs' Bench, this times the verdict as Bench does (``CublasLtBackend.time_verdict``: the winner
rebuilt from its saved config, six windows of seven interleaved rounds) under both settings, alternating which
goes first, ``--repeats`` times on the same operands per repeat, and reports per setting the speedup (the median
of the per-round ratios, as ``stats.Verdict``) and the wall time; then, over all winners, the mean and sd of
the paired difference, beside the repeat-to-repeat sd of each setting.

    python bench/warmup_ab.py workdir/<run>/bench/results.json [...] --repeats 3 \\
        --out bench/results/warmup_ab_<gpu>_<date>.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETTINGS = {"rewarm 200 ms": (200.0, 1000.0), "rewarm 50 ms": (50.0, 1000.0)}  # the old rule, the product's


def summary(rows: list[dict], settings: list[str]) -> dict:
    """Over winners whose ``repeats`` hold each setting's ``speedup`` and ``wall_s``: the paired difference of
    the second setting's speedup from the first's (relative, mean and sd over winners of the per-winner
    mean), each setting's repeat-to-repeat sd (relative, the median over winners) and mean wall seconds."""
    first, second = settings
    diffs, spread, wall = [], {s: [] for s in settings}, {s: [] for s in settings}
    for row in rows:
        reps = row["repeats"]
        diffs.append(statistics.fmean(r[second]["speedup"] / r[first]["speedup"] - 1 for r in reps))
        for s in settings:
            values = [r[s]["speedup"] for r in reps]
            spread[s].append(statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0)
            wall[s] += [r[s]["wall_s"] for r in reps]
    return {
        "winners": len(rows),
        "difference_mean": statistics.fmean(diffs),
        "difference_sd": statistics.stdev(diffs) if len(diffs) > 1 else 0.0,
        "worst_difference": max(diffs, key=abs),
        "repeat_sd": {s: statistics.median(v) for s, v in spread.items()},
        "wall_s": {s: statistics.fmean(v) for s, v in wall.items()},
    }


def main(argv: list[str] | None = None) -> int:
    from pipeline.atomic import atomic_write_json, claim_output_file
    from pipeline.errors import INPUT, BadInput

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        claim_output_file(args.out, args.results, force=True)
    except BadInput as err:
        print(f"warmup_ab: {err}", file=sys.stderr)
        return INPUT
    import torch  # the GPU's: after the output is claimed

    from pipeline.backends.base import ProblemResult, TuneSettings
    from pipeline.backends.cublaslt import VERDICT_PAIR, CublasLtBackend
    from pipeline.backends.measure import TimingSettings, device_info, window_count
    from pipeline.stats import Verdict

    results = [ProblemResult.from_json(r) for path in args.results for r in json.loads(path.read_text())]
    winners = [r for r in results if r.has_winner]
    backend = CublasLtBackend(0, verdict_process=False)
    names = list(SETTINGS)
    out = {
        "device": device_info(backend.device),
        "date": datetime.date.today().isoformat(),
        "runs": [str(p) for p in args.results],
        "settings": {n: list(b) for n, b in SETTINGS.items()},
        "rows": [],
    }
    workspace = TuneSettings().workspace_bytes
    windows = 2 * TimingSettings().windows  # a verdict's, as ``CublasLtBackend._verdict`` sets them
    for result in winners:
        config = result.record.solution
        row = {"label": result.problem.label(), "solution": config.get("name", ""), "repeats": []}
        for i in range(args.repeats):
            rep = {}
            for name in names if i % 2 == 0 else names[::-1]:
                timing = TimingSettings(seed=100 + i, windows=windows, rewarm_ms=SETTINGS[name])
                start = time.perf_counter()
                samples = backend.time_verdict(result.problem, config, timing, timing.rounds, workspace)
                torch.cuda.synchronize()
                wall = time.perf_counter() - start
                verdict = Verdict.of(samples, *VERDICT_PAIR, windows=window_count(timing))
                rep[name] = {"speedup": verdict.speedup, "wall_s": wall}
            row["repeats"].append(rep)
        out["rows"].append(row)
        print(
            f"{row['label']:40s} "
            + " | ".join(f"{n}: " + " ".join(f"x{r[n]['speedup']:.3f}" for r in row["repeats"]) for n in names)
            + " | s "
            + " ".join(f"{r[n]['wall_s']:.2f}" for r in row["repeats"] for n in names),
            flush=True,
        )
        out["summary"] = summary(out["rows"], names)
        atomic_write_json(args.out, out)
    print(json.dumps(out.get("summary")), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
