"""GEMM-level validation: every row of the merged results file, baseline against tuned, on the GPU.

Baseline is the library default through torch with TunableOp disabled. Tuned is the merged artifact as
the runtime will use it: on ROCm torch with TunableOp enabled, tuning off and the merged results file
loaded; on CUDA the winner's cuBLASLt algorithm (from its saved config, or rebuilt from its solution
name) through the same harness. Rounds are interleaved; medians and spread are kept. A problem that the
configs stage padded is also timed at its padded leading dimensions.

    python -m pipeline.stages validate RUN_DIR [--gpus 0,1] [--rounds 7]   (writes RUN_DIR/validate/measurements.json)

Given several GPUs, ``run_worker`` first spreads the rows over them: one worker per GPU (``--shard I/N``) times
every N-th row, each row on one GPU alone (its baseline and tuned interleaved there), into the per-row
checkpoints; then one worker reads them back into ``measurements.json``. A row's ratio is taken on one board,
so boards that differ by a few percent do not mix inside a row.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ... import procs
from ...atomic import atomic_write_json, atomic_write_text
from ...backends.base import DEFAULT, ProblemResult, TuneSettings
from ...backends.slots import gpu_slot, lock_dir
from ...defaults import GATE_MARGIN
from ...errors import ToolError
from ...formats.tunableop import TunableOpEntry, parse_key, read_file, write_file
from ...problem import GemmProblem
from ...stats import Stats
from ..gather.shapes import ShapeRecord, ran_inside_of
from ..run.layout import RunLayout
from . import bundle, held_out
from .measured import MeasuredRow, Padded, Pair

MEASUREMENTS = "measurements.json"
log = logging.getLogger("pipeline")


def tunableop_env(results_csv: Path, directory: Path, gpus: int) -> dict[str, str]:
    """Environment that makes torch read ``results_csv`` on every GPU: TunableOp on, tuning off, and one
    copy per device because torch always splices the device ordinal into PYTORCH_TUNABLEOP_FILENAME."""
    directory = Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    text = results_csv.read_text()
    for gpu in range(max(gpus, 1)):
        atomic_write_text(directory / f"tunableop_results{gpu}.csv", text)
    return {
        "PYTORCH_TUNABLEOP_ENABLED": "1",
        "PYTORCH_TUNABLEOP_TUNING": "0",
        "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "0",
        "PYTORCH_TUNABLEOP_FILENAME": str(directory / "tunableop_results%d.csv"),
    }


@dataclass(frozen=True)
class MergedRow:
    """A merged results row to measure: its key and problem, the solution, its weight, the winner's saved
    config (cuBLASLt) and the key of its padded variant (the configs stage's)."""

    key: str
    problem: GemmProblem
    solution: str
    calls: int
    time_share: float | None
    config: dict | None = None
    padded_key: str | None = None
    held_out_of: str | None = None  # a token count held out of this grid row's bucket (``held_out``)


def rows_to_measure(run_dir: Path) -> list[MergedRow]:
    """One row per merged results entry, then the held-out token counts of the grid rows' buckets."""
    layout = RunLayout.of(run_dir)
    merged_csv = layout.merged_csv
    if not merged_csv.exists():
        raise FileNotFoundError(f"{merged_csv}: no merged results to validate; the MergeResults stage writes it")
    merged = read_file(merged_csv)
    shapes = [ShapeRecord.from_json(r) for r in json.loads(layout.shapes.read_text())]
    weights = {shape.key: (shape.call_count, shape.time_share) for shape in shapes}
    configs = {}
    results_json = layout.bench_results
    if results_json.exists():
        for data in json.loads(results_json.read_text()):
            result = ProblemResult.from_json(data)
            if result.record:
                configs[result.winner] = result.record.solution
    padded = {}
    configs_json = layout.configs_manifest
    if configs_json.exists():
        padded = {p["original"]: p["problem"] for p in json.loads(configs_json.read_text())["padded"]}
    buckets = bundle.grid_buckets(layout, shapes)[0]
    rows = []
    for entry in merged.entries:
        key = f"{entry.op_signature},{entry.params_signature}"
        calls, share = weights.get(key, (0, 0.0) if key in buckets else (1, None))  # a row below: no weight
        rows.append(
            MergedRow(key, entry.problem, entry.solution, calls, share, configs.get(entry.solution), padded.get(key))
        )
    return rows + held_out.held_out_rows(rows, buckets, ran_inside=ran_inside_of(shapes))


class Checkpoints:
    """Measured rows kept one file each as they finish (``<dir>/<id>.json``), so a killed validation resumes
    at the first row it had not finished."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def _path(self, row: MergedRow) -> Path | None:
        if self.directory is None:
            return None
        return self.directory / (hashlib.sha1(f"{row.key}|{row.solution}".encode()).hexdigest()[:16] + ".json")

    def get(self, row: MergedRow) -> MeasuredRow | None:
        path = self._path(row)
        return MeasuredRow.from_json(json.loads(path.read_text())) if path is not None and path.exists() else None

    def put(self, row: MergedRow, measured: MeasuredRow) -> MeasuredRow:
        path = self._path(row)
        if path is not None:
            atomic_write_json(path, measured.to_json())
        return measured


def second_look(first: float, margin: float) -> bool:
    """Whether a first pair's speedup calls for a confirmation: it beat the margin, or fell short of the
    baseline by less than the margin. One pair is a draw: on the H100 first pairs of rows Bench named at
    x1.033-1.056 read x0.996-1.019 where other runs read x1.03-1.05 (``bench/README.md``, "Does Bench predict
    what ships?"); the gate decides such a row on both pairs (``gate.gate``)."""
    return first >= 1 - margin


class Timer(Protocol):
    """How one platform times a merged row: baseline against the tuned artifact (and the padded variant),
    ``fresh`` on new operand buffers for the confirming pair."""

    device_name: str

    def pair(self, row: MergedRow, fresh: bool) -> tuple[Pair, Padded | None]: ...


def measure_rows(
    rows: Sequence[MergedRow],
    timer: Timer,
    margin: float,
    progress: Callable[[int, int], None] | None = None,
    checkpoints: Path | None = None,
) -> list[MeasuredRow]:
    """Every row timed by ``timer``; a row whose first pair says it may win (``second_look``) is timed once
    more on fresh buffers (its ``confirm`` pair). Rows finished before (``checkpoints``) are not timed again."""
    saved, out = Checkpoints(checkpoints), []
    for index, row in enumerate(rows):
        measured = saved.get(row)
        if measured is None:
            first, padded = timer.pair(row, fresh=False)
            confirm = None
            if row.solution != DEFAULT and second_look(first.speedup, margin):
                confirm, _ = timer.pair(row, fresh=True)
            measured = saved.put(
                row,
                MeasuredRow.of(
                    row.problem,
                    row.key,
                    row.solution,
                    row.calls,
                    row.time_share,
                    row.problem.floor_us(timer.device_name),
                    first,
                    confirm,
                    padded,
                    row.held_out_of,
                ),
            )
        out.append(measured)
        if progress:
            progress(index + 1, len(rows))
    return out


def solution_config(name: str) -> dict:
    """The config a solution name spells out: a cuBLASLt algorithm's attributes, or a Triton config."""
    from ...kernels import triton_gemm

    if name.startswith(triton_gemm.PREFIX):
        return triton_gemm.config_from_name(name).to_json()
    from ...kernels.cublaslt_algo import config_from_name  # nvmath-python: the cuda extra

    return config_from_name(name)


def tunableop_file(run_dir: Path) -> Path:
    """The results file ROCm's TunableOp validates with: the merged file, or where grid rows have held-out token
    counts (``held_out``), the merged rows and a row of each grid row's winner at each such count
    (``validate/held_out_results.csv``)."""
    layout = RunLayout.of(run_dir)
    held = [TunableOpEntry.from_problem(r.problem, r.solution) for r in rows_to_measure(run_dir) if r.held_out_of]
    if not held:
        return layout.merged_csv
    merged = read_file(layout.merged_csv)
    path = layout.validate / "held_out_results.csv"
    write_file(path, merged.validators, [*merged.entries, *held])
    return path


class TorchTimer:
    """torch's default call against the tuned artifact as the runtime uses it: on CUDA the winner's cuBLASLt
    algorithm (its saved config, or rebuilt from its name); on ROCm torch with TunableOp on and the merged file
    loaded. Imports torch: run in a worker process."""

    def __init__(self, run_dir: Path, gpu: int, rounds: int) -> None:
        import torch

        from ...backends.measure import TimingSettings, device_info

        self.timing = TimingSettings(rounds=rounds)
        self.rocm = torch.version.hip is not None
        self.device = torch.device("cuda", gpu)
        self.device_name = torch.cuda.get_device_name(self.device)
        self.meta = {"device": device_info(self.device), "platform": "rocm" if self.rocm else "cuda"}
        self.backend = None
        if self.rocm:
            merged = str(tunableop_file(run_dir))
            torch.cuda.tunable.enable(True)
            torch.cuda.tunable.tuning_enable(False)
            torch.cuda.tunable.set_filename(merged, insert_device_ordinal=False)
            torch.cuda.tunable.read_file(merged)
            torch.cuda.tunable.enable(False)
        else:
            from ...backends.cublaslt import CublasLtBackend

            self.backend = CublasLtBackend(gpu, self.timing)
        self.workspace = torch.empty(TuneSettings().workspace_bytes, dtype=torch.uint8, device=self.device)

    def pair(self, row: MergedRow, fresh: bool) -> tuple[Pair, Padded | None]:
        import torch

        from ...backends.measure import interleaved, rotating_operands, window_count, windowed_samples
        from ...kernels.torch_gemm import torch_launcher, with_tunableop

        timing = dataclasses.replace(self.timing, seed=self.timing.seed + fresh)
        launchers, closer, padded = {"baseline": torch_launcher(row.problem)}, None, None
        if row.solution != DEFAULT and self.rocm:
            launchers["tuned"] = with_tunableop(torch_launcher(row.problem))  # the merged file picks
        elif row.solution != DEFAULT:
            config = row.config or solution_config(row.solution)
            launchers["tuned"], closer = self.backend.launcher_for(row.problem, config, self.workspace)
        try:
            samples = windowed_samples(row.problem, launchers, self.device, timing)
            pair = Pair.of_samples(samples, window_count(timing))
            if row.padded_key and not fresh:  # the padded variant against the baseline, at baseline
                padded_problem = parse_key(*row.padded_key.split(",", 1))
                sets = rotating_operands(row.problem, self.device, timing)
                own = {"padded": (padded_problem, rotating_operands(padded_problem, self.device, timing))}
                both = {"baseline": launchers["baseline"], "padded": torch_launcher(padded_problem)}
                padded = Padded(row.padded_key, interleaved(row.problem, both, sets, timing, own_sets=own)["padded"])
                del sets, own
        finally:
            if closer:
                closer.close()
            torch.cuda.empty_cache()
        return pair, padded


class BenchTimer:
    """hipblaslt-bench itself: the winner (``--algo_method index --solution_index N``) against the heuristic
    pick, ``rounds`` alternating runs each, medians. No torch is needed."""

    def __init__(self, run_dir: Path, gpu: int, rounds: int) -> None:
        from ...backends.hipblaslt import HipblasltBackend

        runtime = json.loads((RunLayout.of(run_dir).bench_runtime).read_text())
        self.backend = HipblasltBackend(gpu, runtime["bench"], runtime.get("bench_options"))
        self.rounds, self.device_name = rounds, runtime.get("name", "")
        self.meta = {
            "device": {
                "name": runtime.get("name", "unknown"),
                "arch": runtime.get("arch"),
                "tool": self.backend.bench,
                "hipblaslt": f"{runtime.get('hipblaslt_version')}-{runtime.get('hipblaslt_git')}",
            },
            "platform": "rocm",
            "measured_with": "hipblaslt-bench",
        }

    def pair(self, row: MergedRow, fresh: bool) -> tuple[Pair, Padded | None]:
        index = None if row.solution == DEFAULT else int(row.solution.rsplit("_", 1)[1])
        times = self.backend.measure_pair(row.problem, index, self.rounds)
        baseline = Stats.of(times["baseline"])
        return Pair(baseline, Stats.of(times["tuned"]) if times["tuned"] else baseline), None


def measure(
    run_dir: Path,
    timer_kind: type,
    gpu: int = 0,
    rounds: int = 7,
    margin: float = GATE_MARGIN,
    progress: Callable[[int, int], None] | None = None,
    checkpoints: Path | None = None,
    shard: tuple[int, int] = (0, 1),
) -> dict:
    """``measurements.json``'s content for every merged row (``shard`` (I, N): every N-th from the I-th), timed on
    GPU ``gpu`` by a ``timer_kind``: the run's records are read first, so a broken run fails here, on any
    machine."""
    rows = rows_to_measure(run_dir)[shard[0] :: shard[1]]
    timer = timer_kind(run_dir, gpu, rounds)
    measured = measure_rows(rows, timer, margin, progress, checkpoints)
    return {
        "meta": timer.meta,
        "rows": [row.to_json() for row in measured if not row.held_out_of],
        "held_out": [row.to_json() for row in measured if row.held_out_of],  # ``held_out.verdict`` reads them
    }


PROGRESS, LOG = "progress{}.json", "validate{}.log"  # a worker's rows done and to do, its log ("-shardI": shard I)


def shard_suffix(index: int) -> str:
    return f"-shard{index}"


def run_worker(
    run_dir: Path, gpus: Sequence[int], rounds: int, margin: float, progress: Callable[[int, int], None] | None = None
) -> None:
    """Run ``python -m pipeline.stages validate``, which claims a free GPU slot of ``gpus`` itself, reporting
    its progress; raise with the log's tail if it fails. Given more than one GPU, one worker per GPU times its
    share of the rows first (``--shard``), and the last one only reads them back. The luigi process itself
    never initialises CUDA."""
    run_dir = Path(run_dir).absolute()
    out = RunLayout.of(run_dir).validate
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(PROGRESS.format("*")):  # a stopped run's: this run's workers write their own
        stale.unlink()
    options = ("--gpus", ",".join(map(str, gpus)), "--rounds", rounds, "--margin", margin)
    if len(gpus) > 1:
        shards = [(shard_suffix(i), ("--shard", f"{i}/{len(gpus)}")) for i in range(len(gpus))]
        _run(run_dir, shards, options, progress)
    _run(run_dir, [("", ())], options, progress)


def _run(run_dir: Path, workers: Sequence[tuple[str, tuple]], options: tuple, progress) -> None:
    """``workers`` on ``run_dir`` at once (each: the suffix of its log and progress files, its own options) until
    every one has ended, their progress summed; raise with the log's tail of the first that fails (the others
    are killed)."""
    out = RunLayout.of(run_dir).validate
    logs = [out / LOG.format(suffix) for suffix, _ in workers]
    counts = [out / PROGRESS.format(suffix) for suffix, _ in workers]
    with contextlib.ExitStack() as stack:
        running = {}
        for log, (_, own) in zip(logs, workers, strict=True):
            handle = stack.enter_context(log.open("w"))
            running[log] = stack.enter_context(procs.running_worker(handle, "validate", run_dir, *options, *own))
        while running:
            for log, proc in list(running.items()):
                if procs.exited_within(proc, 1.0 / len(running)):
                    del running[log]
                    if proc.returncode != 0:
                        tail = procs.tail_lines(log.read_text(), 15)
                        raise ToolError(f"validation worker exited with code {proc.returncode} ({log}):\n{tail}")
            found = [json.loads(path.read_text()) for path in counts if path.exists()]
            if progress and found:
                progress(sum(c["done"] for c in found), sum(c["total"] for c in found))


def runtime_of(run_dir: Path, measured: dict) -> dict:
    """What the bundle is for: the Bench stage's runtime record, else what the measurements recorded."""
    bench_runtime = RunLayout.of(run_dir).bench_runtime  # absent when --results replaced the Bench stage
    device = measured["meta"]["device"]
    runtime = (
        json.loads(bench_runtime.read_text())
        if bench_runtime.exists()
        else {"pt_version": device["torch"].split("+")[0], **device}
    )
    return {**runtime, "platform": measured["meta"]["platform"]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--gpus", default="0", help="GPUs it may use; it claims a free one's slot itself")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--margin", type=float, default=GATE_MARGIN)
    parser.add_argument(
        "--shard", type=shard_of, help="I/N: time every N-th row from the I-th into the checkpoints, and no more"
    )
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    layout = RunLayout.of(run_dir)
    out = layout.validate
    shard = args.shard or (0, 1)
    progress_file = out / PROGRESS.format(shard_suffix(shard[0]) if args.shard else "")

    def progress(done: int, total: int) -> None:
        atomic_write_json(progress_file, {"done": done, "total": total})

    runtime = layout.bench_runtime
    with_bench = runtime.exists() and bool(json.loads(runtime.read_text()).get("bench"))  # an AMD tool ran
    with gpu_slot(lock_dir(), [int(g) for g in args.gpus.split(",")], first=shard[0]) as gpu:
        log.info("validating on GPU %d%s", gpu, f", shard {args.shard[0]} of {args.shard[1]}" if args.shard else "")
        kind = BenchTimer if with_bench else TorchTimer
        measured = measure(run_dir, kind, gpu, args.rounds, args.margin, progress, out / "rows", shard)
        if with_bench and rocm_torch():  # the rows as torch will use them: TunableOp with the merged file
            measured["tunableop_ab"] = measure(
                run_dir, TorchTimer, gpu, args.rounds, args.margin, checkpoints=out / "rows-tunableop", shard=shard
            )
    if not args.shard:
        atomic_write_json(out / MEASUREMENTS, measured)
    return 0


def shard_of(text: str) -> tuple[int, int]:
    """``I/N`` (0 <= I < N) as (I, N)."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 0 <= I < N")
    return int(index), int(count)


def rocm_torch() -> bool:
    """A ROCm build of torch that sees a GPU is importable here (a CUDA build is told from its version file,
    without importing it)."""
    from ...formats.torch_build import torch_build

    build = torch_build()
    if build is None or not build["hip"]:
        return False
    import torch

    return getattr(torch.version, "hip", None) is not None and torch.cuda.is_available()
