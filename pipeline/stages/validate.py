"""GEMM-level validation: every row of the merged results file, baseline against tuned, on the GPU.

Baseline is the library default through torch with TunableOp disabled. Tuned is the merged artifact as
the runtime will use it: on ROCm torch with TunableOp enabled, tuning off and the merged results file
loaded; on CUDA the winner's cuBLASLt algorithm (from its saved config, or rebuilt from its solution
name) through the same harness. Rounds are interleaved; medians and spread are kept. A problem that the
configs stage padded is also timed at its padded leading dimensions.

    python -m pipeline.stages validate RUN_DIR [--gpus 0,1] [--rounds 7]   (writes RUN_DIR/validate/measurements.json)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import procs
from ..atomic import atomic_write_json, atomic_write_text
from ..backends.base import DEFAULT, ProblemResult, TuneSettings
from ..backends.slots import gpu_slot, lock_dir
from ..errors import ToolError
from ..formats.tunableop import parse_key, read_file
from ..stats import Stats

MEASUREMENTS = "measurements.json"

# Datasheet peaks, dense 16-bit matrix flop/s and HBM bytes/s, by a name the device reports (first match).
PEAKS = (("H200", (989e12, 4.8e12)), ("H100", (989e12, 3.35e12)), ("MI350", (2.3e15, 8.0e12)),
         ("MI325", (1.307e15, 6.0e12)), ("MI300", (1.307e15, 5.3e12)))
DEFAULT_PEAK = PEAKS[1][1]


def peak_of(device_name: str) -> tuple[float, float]:
    """The datasheet peaks of ``device_name`` (an H100's where the name is not known)."""
    return next((peak for name, peak in PEAKS if name in device_name), DEFAULT_PEAK)


def tunableop_env(results_csv: Path, directory: Path, gpus: int) -> dict[str, str]:
    """Environment that makes torch read ``results_csv`` on every GPU: TunableOp on, tuning off, and one
    copy per device because torch always splices the device ordinal into PYTORCH_TUNABLEOP_FILENAME."""
    directory = Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    text = results_csv.read_text()
    for gpu in range(max(gpus, 1)):
        atomic_write_text(directory / f"tunableop_results{gpu}.csv", text)
    return {"PYTORCH_TUNABLEOP_ENABLED": "1", "PYTORCH_TUNABLEOP_TUNING": "0",
            "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "0",
            "PYTORCH_TUNABLEOP_FILENAME": str(directory / "tunableop_results%d.csv")}


def rows_to_measure(run_dir: Path) -> list[dict]:
    """One row per merged results entry: key, problem, solution, call count, saved config, padded variant."""
    merged_csv = run_dir / "merge" / "tunableop_results.csv"
    if not merged_csv.exists():
        raise FileNotFoundError(f"{merged_csv}: no merged results to validate; the MergeResults stage writes it")
    merged = read_file(merged_csv)
    weights = {f"{r['op_signature']},{r['params_signature']}": (r.get("calls", r["count"]), r.get("time_share"))
               for r in json.loads((run_dir / "shapes" / "shapes.json").read_text())}
    configs = {}
    results_json = run_dir / "bench" / "results.json"
    if results_json.exists():
        for data in json.loads(results_json.read_text()):
            result = ProblemResult.from_json(data)
            if result.winner_config:
                configs[result.winner] = result.winner_config
    padded = {}
    configs_json = run_dir / "configs" / "configs.json"
    if configs_json.exists():
        padded = {p["original"]: p["problem"] for p in json.loads(configs_json.read_text())["padded"]}
    rows = []
    for entry in merged.entries:
        key = f"{entry.op_signature},{entry.params_signature}"
        calls, share = weights.get(key, (1, None))
        rows.append({"key": key, "problem": entry.problem, "solution": entry.solution, "calls": calls,
                     "time_share": share, "config": configs.get(entry.solution), "padded_key": padded.get(key)})
    return rows


class Checkpoints:
    """Measured rows kept one file each as they finish (``<dir>/<id>.json``), so a killed validation resumes
    at the first row it had not finished."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def _path(self, row: dict) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / (hashlib.sha1(f"{row['key']}|{row['solution']}".encode()).hexdigest()[:16] + ".json")

    def get(self, row: dict) -> dict | None:
        path = self._path(row)
        return json.loads(path.read_text()) if path is not None and path.exists() else None

    def put(self, row: dict, measured: dict) -> dict:
        path = self._path(row)
        if path is not None:
            atomic_write_json(path, measured)
        return measured


def measure(run_dir: Path, gpu: int = 0, rounds: int = 7, margin: float = 0.02,
            progress: Callable[[int, int], None] | None = None, checkpoints: Path | None = None) -> list[dict]:
    """Time every row on this machine's GPU ``gpu`` (imports torch; run in a worker process). A row whose tuned
    time beats the baseline by ``margin`` is measured once more on fresh buffers (its ``confirm`` pair)."""
    rows = rows_to_measure(run_dir)  # the run's records first: a broken run fails here, on any machine
    saved = Checkpoints(checkpoints)

    import torch

    from ..backends.measure import TimingSettings, device_info, interleaved, rotating_operands
    from ..backends.torch_gemm import torch_launcher, with_tunableop

    timing = TimingSettings(rounds=rounds)
    rocm = torch.version.hip is not None
    backend = None
    if not rocm:
        from ..backends.cublaslt import CublasLtBackend
        from ..backends.cublaslt_algo import config_from_name

        backend = CublasLtBackend(gpu, timing)
    else:
        merged = str(run_dir / "merge" / "tunableop_results.csv")
        torch.cuda.tunable.enable(True)
        torch.cuda.tunable.tuning_enable(False)
        torch.cuda.tunable.set_filename(merged, insert_device_ordinal=False)
        torch.cuda.tunable.read_file(merged)
        torch.cuda.tunable.enable(False)
    device = torch.device("cuda", gpu)
    workspace = torch.empty(TuneSettings().workspace_bytes, dtype=torch.uint8, device=device)
    out = []
    for index, row in enumerate(rows):
        if (done := saved.get(row)) is not None:
            out.append(done)
            if progress:
                progress(index + 1, len(rows))
            continue
        problem = row["problem"]
        sets = rotating_operands(problem, device, timing)
        launchers = {"baseline": torch_launcher(problem)}
        own, closer = {}, None
        if row["solution"] != DEFAULT:
            if rocm:
                launchers["tuned"] = with_tunableop(torch_launcher(problem))  # the merged file picks
            else:
                config = row["config"] or config_from_name(row["solution"])
                launchers["tuned"], closer = backend.launcher_for(problem, config, workspace)
        if row["padded_key"]:
            padded = parse_key(*row["padded_key"].split(",", 1))
            launchers["padded"] = torch_launcher(padded)
            own["padded"] = (padded, rotating_operands(padded, device, timing))
        stats = interleaved(problem, launchers, sets, timing, own_sets=own)
        confirm = None
        if "tuned" in stats and stats["baseline"].median / stats["tuned"].median >= 1 + margin:
            fresh = rotating_operands(problem, device, dataclasses.replace(timing, seed=timing.seed + 1))
            again = interleaved(problem, {n: launchers[n] for n in ("baseline", "tuned")}, fresh, timing)
            confirm = {name: again[name].to_json() for name in ("baseline", "tuned")}
            del fresh
        if closer:
            closer.close()
        padded = {"key": row["padded_key"], "padded": stats["padded"].to_json()} if "padded" in stats else None
        out.append(saved.put(row, measured_row(row, stats["baseline"], stats.get("tuned"), confirm, padded,
                                               peak_of(torch.cuda.get_device_name(device)))))
        if progress:
            progress(index + 1, len(rows))
        del sets, own
        torch.cuda.empty_cache()
    return [{"device": device_info(device), "platform": "rocm" if rocm else "cuda"}, *out]


def measured_row(row: dict, baseline: Stats, tuned: Stats | None, confirm: dict | None,
                 padded: dict | None = None, peak: tuple[float, float] = DEFAULT_PEAK) -> dict:
    """One row of ``measurements.json`` (the same for every way of measuring)."""
    problem = row["problem"]
    return {
        "key": row["key"], "op": problem.op, "dtype": problem.a_type, "layout": problem.layout,
        "m": problem.m, "n": problem.n, "k": problem.k, "batch": problem.batch, "solution": row["solution"],
        "calls": row["calls"], "time_share": row["time_share"], "flops": problem.flops(),
        "floor_us": floor_us(problem, peak), "ld_notes": problem.ld_notes(),
        "baseline": baseline.to_json(), "tuned": (tuned or baseline).to_json(), "padded": padded, "confirm": confirm,
    }


def measure_with_bench(run_dir: Path, gpu: int, rounds: int, margin: float,
                       progress: Callable[[int, int], None] | None = None, checkpoints: Path | None = None
                       ) -> list[dict]:
    """Every merged row re-measured with hipblaslt-bench itself: the winner (``--algo_method index
    --solution_index N``) against the heuristic pick, ``rounds`` alternating runs each, medians; a row that
    beats the baseline by ``margin`` is measured again (its ``confirm`` pair). No torch is needed."""
    from ..backends.hipblaslt import HipblasltBackend

    rows = rows_to_measure(run_dir)
    runtime = json.loads((run_dir / "bench" / "runtime.json").read_text())
    backend = HipblasltBackend(gpu, runtime["bench"], runtime.get("bench_options"))
    peak = peak_of(runtime.get("name", ""))
    saved, out = Checkpoints(checkpoints), []
    for number, row in enumerate(rows):
        if (done := saved.get(row)) is not None:
            out.append(done)
            if progress:
                progress(number + 1, len(rows))
            continue
        index = None if row["solution"] == DEFAULT else int(row["solution"].rsplit("_", 1)[1])
        times = backend.measure_pair(row["problem"], index, rounds)
        baseline = Stats.of(times["baseline"])
        tuned = Stats.of(times["tuned"]) if times["tuned"] else None
        confirm = None
        if tuned and baseline.median / tuned.median >= 1 + margin:
            again = backend.measure_pair(row["problem"], index, rounds)
            confirm = {name: Stats.of(values).to_json() for name, values in again.items()}
        out.append(saved.put(row, measured_row(row, baseline, tuned, confirm, peak=peak)))
        if progress:
            progress(number + 1, len(rows))
    device = {"name": runtime.get("name", "unknown"), "arch": runtime.get("arch"), "tool": backend.bench,
              "hipblaslt": f"{runtime.get('hipblaslt_version')}-{runtime.get('hipblaslt_git')}"}
    return [{"device": device, "platform": "rocm", "measured_with": "hipblaslt-bench"}, *out]


def floor_us(problem, peak: tuple[float, float] = DEFAULT_PEAK) -> float:
    """Roofline floor of one call: max(flops / peak flop/s, minimum bytes / peak bandwidth), in us."""
    return problem.roofline_us(*peak)


def run_worker(run_dir: Path, gpus: Sequence[int], rounds: int, margin: float,
               progress: Callable[[int, int], None] | None = None) -> None:
    """Run ``python -m pipeline.stages validate``, which claims a free GPU slot of ``gpus`` itself, reporting
    its progress; raise with the log's tail if it fails. The luigi process itself never initialises CUDA."""
    run_dir = Path(run_dir).absolute()
    out = run_dir / "validate"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "validate.log"
    argv = procs.worker_argv("validate", run_dir, "--gpus", ",".join(map(str, gpus)), "--rounds", rounds,
                             "--margin", margin)
    with log.open("w") as handle, procs.running(argv, procs.with_package_on_path(os.environ), stdout=handle,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL) as proc:
        while proc.poll() is None:
            if progress and (out / "progress.json").exists():
                data = json.loads((out / "progress.json").read_text())
                progress(data["done"], data["total"])
            time.sleep(1.0)
    if proc.returncode != 0:
        tail = procs.tail_lines(log.read_text(), 15)
        raise ToolError(f"validation worker exited with code {proc.returncode}:\n{tail}")


def runtime_of(run_dir: Path, measured: dict) -> dict:
    """What the bundle is for: the Bench stage's runtime record, else what the measurements recorded."""
    bench_runtime = run_dir / "bench" / "runtime.json"  # absent when --results replaced the Bench stage
    device = measured["meta"]["device"]
    runtime = json.loads(bench_runtime.read_text()) if bench_runtime.exists() else {
        "pt_version": device["torch"].split("+")[0], **device}
    return {**runtime, "platform": measured["meta"]["platform"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--gpus", default="0", help="GPUs it may use; it claims a free one's slot itself")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--margin", type=float, default=0.02)
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    out = run_dir / "validate"

    def progress(done: int, total: int) -> None:
        atomic_write_json(out / "progress.json", {"done": done, "total": total})

    runtime = run_dir / "bench" / "runtime.json"
    with_bench = runtime.exists() and bool(json.loads(runtime.read_text()).get("bench"))  # an AMD tool ran
    with gpu_slot(lock_dir(), [int(g) for g in args.gpus.split(",")]) as gpu:
        print(f"validating on GPU {gpu}", flush=True)
        data = (measure_with_bench if with_bench else measure)(run_dir, gpu, args.rounds, args.margin, progress,
                                                                out / "rows")
        measured = {"meta": data[0], "rows": data[1:]}
        if with_bench and rocm_torch():  # the rows as torch will use them: TunableOp with the merged file
            torch_data = measure(run_dir, gpu, args.rounds, args.margin, checkpoints=out / "rows-tunableop")
            measured["tunableop_ab"] = {"meta": torch_data[0], "rows": torch_data[1:]}
    atomic_write_json(out / MEASUREMENTS, measured)
    return 0


def rocm_torch() -> bool:
    """A ROCm build of torch that sees a GPU is importable here (a CUDA build is told from its version file,
    without importing it)."""
    from .fingerprint import torch_build

    build = torch_build()
    if build is None or not build["hip"]:
        return False
    import torch

    return getattr(torch.version, "hip", None) is not None and torch.cuda.is_available()

