"""Tuned GEMMs in compiled real models, end to end: HF models built from config, decoding compiled with a
static cache, the nightly job run on each, next to Inductor's own GEMM autotuning (max-autotune).

    python bench/compiled_e2e.py --models llama3-8b,qwen2-7b --batches 1,8 --layers 4 --reps 3 \\
        --peer-batches 8 --out bench/results/compiled_e2e_<device>_<date>.json

Per model and batch: ``TuneWorkload`` (the README's main command, with ``--workload-cmd``) on
``python -m pipeline.workloads.hf --arch MODEL --layers L --batch B --compile reduce-overhead`` (the decode loop
transformers documents: ``StaticCache``, eager prefill, the step compiled with CUDA graphs; only the decode
loop is timed). Its Validate stage runs the end-to-end A/B: ``--reps`` alternating processes without and with
the bundle (``pipeline.runtime``), each arm in its own Inductor cache; the row takes its tokens/s, spread and
the run's GEMM-level weighted speedup. With ``--peer-batches``, the same decode compiled in ``max-autotune``
(Inductor times its Triton templates against the library and keeps the faster per GEMM): alone, and with
the bundle applied (the library's side of that contest is then the tuned kernel), each in a fresh Inductor
cache, its compile time (first decode, compile included) and tokens/s recorded; ``--peer-reps`` alternating
pairs of them, with every process's autotuning choices.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import procs
from pipeline.atomic import atomic_write_json
from pipeline.formats.inductor_autotune import read_tables
from pipeline.stages.gather.collect import parse_tokens_per_s

COMPILE = re.compile(r"compile \(([\w-]+)\) and first decode: ([0-9.]+) s")


def workload(model: str, layers: int, batch: int, mode: str, new_tokens: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipeline.workloads.hf",
        "--arch",
        model,
        "--layers",
        str(layers),
        "--batch",
        str(batch),
        "--prompt",
        "16",
        "--new-tokens",
        str(new_tokens),
        "--reps",
        "5",
        "--compile",
        mode,
    ]


def compile_seconds(stdout: str) -> float | None:
    found = COMPILE.search(stdout)
    return float(found[2]) if found else None


def tune(workdir: Path, name: str, command: list[str], reps: int, timeout_s: float) -> dict:
    """The nightly job on ``command``; what its report and Validate's A/B say."""
    start = time.monotonic()
    proc = procs.run(
        [
            sys.executable,
            "-m",
            "luigi",
            "--module",
            "pipeline",
            "TuneWorkload",
            "--local-scheduler",
            "--workdir",
            str(workdir),
            "--run-name",
            name,
            "--workload-cmd",
            " ".join(command),
            "--e2e-reps",
            str(reps),
        ],
        timeout_s=timeout_s,
    )
    run = workdir / name
    row: dict = {"command": " ".join(command), "exit": proc.returncode, "seconds": time.monotonic() - start}
    if proc.returncode != 0:
        row["error"] = proc.stderr[-3000:]
        return row
    summary = json.loads((run / "report" / "summary.json").read_text())
    e2e = json.loads((run / "validate" / "e2e.json").read_text())
    collected = (run / "collect" / "workload.stdout.log").read_text()
    row.update(
        {
            "gemms": summary["gemms"],
            "kept": summary["kept"],
            "weighted_gemm_speedup": summary["weighted_gemm_speedup"],
            "weight_basis": summary["weight_basis"],
            "top_gemms": summary["top_gemms"],
            "not_sent": summary.get("not_sent"),
            "compile_s": compile_seconds(collected),
            "e2e": e2e,
            "bundle": str(run / "bundle"),
        }
    )
    return row


def peer(workdir: Path, name: str, command: list[str], bundle: str | None, timeout_s: float) -> dict:
    """One max-autotune process in a fresh Inductor cache: its compile time and tokens/s (with the bundle
    applied through pipeline.runtime when ``bundle`` is given)."""
    cache = workdir / f"inductor-{name}"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache.absolute())}
    status = workdir / f"{name}.runtime.json"
    status.unlink(missing_ok=True)
    argv = (
        [
            sys.executable,
            "-m",
            "pipeline.runtime",
            "--bundle",
            str(Path(bundle).absolute()),
            "--status-file",
            str(status),
            "--",
            *command,
        ]
        if bundle
        else command
    )
    start = time.monotonic()
    proc = procs.run(argv, timeout_s=timeout_s, env=env)
    row = {
        "exit": proc.returncode,
        "wall_s": time.monotonic() - start,
        "compile_s": compile_seconds(proc.stdout),
        "tokens_per_s": parse_tokens_per_s(proc.stdout),
        "autotuned": [
            [t.describe(), t.chosen, t.chosen_ms, t.library_ms] for t in read_tables(proc.stderr.splitlines())
        ],
        "runtime": next((ln for ln in proc.stderr.splitlines() if ln.startswith("gemm-tune runtime:")), None),
    }
    if status.exists():  # the command's own process: tuned calls, fallbacks, the keys that found no row
        row["runtime_status"] = json.loads(status.read_text())
    if proc.returncode != 0:
        row["error"] = proc.stderr[-3000:]
    return row


def peers(workdir: Path, name: str, command: list[str], bundle: str, reps: int, timeout_s: float) -> dict:
    """``reps`` alternating pairs of max-autotune processes, alone and with the bundle, each in a fresh cache:
    per arm the median tokens/s and compile time, the spread, and every process (its autotuning choices:
    Inductor's picks can differ from one compile to the next)."""
    arms: dict[str, list] = {"max_autotune": [], "max_autotune_with_bundle": []}
    for rep in range(reps):
        for arm, applied in (("max_autotune", None), ("max_autotune_with_bundle", bundle)):
            arms[arm].append(peer(workdir, f"{name}-{arm}-{rep}", command, applied, timeout_s))
    summary = {}
    for arm, runs in arms.items():
        rates = [r["tokens_per_s"] for r in runs if r["tokens_per_s"]]
        compiles = [r["compile_s"] for r in runs if r["compile_s"]]
        summary[arm] = {
            "tokens_per_s": statistics.median(rates) if rates else None,
            "compile_s": statistics.median(compiles) if compiles else None,
            "spread": (max(rates) - min(rates)) / statistics.median(rates) if rates else None,
            "runs": runs,
        }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="llama3-8b,qwen2-7b")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--peer-batches", default="8", help="batches also run in max-autotune ('' for none)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=3, help="alternating A/B processes per arm")
    parser.add_argument("--peer-reps", type=int, default=1, help="alternating max-autotune processes per arm")
    parser.add_argument("--workdir", default="workdir/compiled-bench")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import torch

    workdir = Path(args.workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    data = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0),
        "versions": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": __import__("transformers").__version__,
        },
        "settings": {k: getattr(args, k) for k in ("layers", "new_tokens", "reps", "peer_reps")},
        "rows": [],
    }
    peer_batches = {int(b) for b in args.peer_batches.split(",") if b}
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            name = f"{model}-b{batch}"
            row = {
                "model": model,
                "batch": batch,
                "layers": args.layers,
                "tuned": tune(
                    workdir,
                    name,
                    workload(model, args.layers, batch, "reduce-overhead", args.new_tokens),
                    args.reps,
                    args.timeout_s,
                ),
            }
            if batch in peer_batches and "error" not in row["tuned"]:
                command = workload(model, args.layers, batch, "max-autotune", args.new_tokens)
                row.update(peers(workdir, name, command, row["tuned"]["bundle"], args.peer_reps, args.timeout_s))
            data["rows"].append(row)
            atomic_write_json(Path(args.out), data)
            tuned, e2e = row["tuned"], row["tuned"].get("e2e", {})
            print(
                f"{name}: {tuned.get('seconds', 0):.0f} s, GEMM x{tuned.get('weighted_gemm_speedup', 0):.3f}, "
                f"e2e x{e2e.get('tokens_speedup', 0):.3f} noise {e2e.get('noise') or 0:.1%}"
                + "".join(
                    f" | {k} {row[k]['tokens_per_s']} tok/s compile {row[k]['compile_s']} s"
                    for k in ("max_autotune", "max_autotune_with_bundle")
                    if k in row
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
