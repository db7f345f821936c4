"""Luigi tasks: thin wiring of the core modules, one directory per run and per stage.

``workdir/<run>/collect/``  untuned<N>.csv, workload logs, manifest.json   (CollectShapes)
``workdir/<run>/shapes/``   shapes.json, summary.txt                       (GatherShapes)
``workdir/<run>/configs/``  find_exact/*.yaml, tensile/*.yaml, configs.json (GenerateConfigs)

``workdir/<run>/bench/``    problems/*.json, results.json, tunableop_results.csv, logic/, summary.json (Bench)
``workdir/<run>/merge/``    tunableop_results.csv, logic/, merge logs       (MergeResults, MergeLogic)

``workdir/<run>/validate/`` measurements.json, gate.json, e2e.json       (Validate)
``workdir/<run>/bundle/``   tunableop_results.csv, logic/, manifest.json   (Validate, when the gate passes)
``workdir/<run>/report/``   report.md, report.html, *.png, summary.json    (Validate)
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import luigi
from luigi.util import inherits

from .atomic import atomic_write_json, atomic_write_text
from .backends.base import TuneSettings
from .backends.hipblaslt import HipblasltBackend, find_bench
from .backends.slots import amd_gpu_count
from .formats import tunableop
from .stages import bench, bundle, call_weights, configs, e2e, find_exact, report, tensile, validate
from .stages.collect import MANIFEST, collect, embedded_command
from .stages.gate import GateRefused, GateSettings, gate
from .stages.logic_merge import MergeOptions, merge_dirs
from .stages.results_merge import merge_results
from .stages.shapes import apply_weights, expand_inputs, gather, read_shapes_json, summary_table, write_shapes_json

REPO_LOGIC = Path(__file__).resolve().parents[1] / "logic"
AMD_TOOLS = ("hipblaslt", "find_exact", "tensile")
CONFIG_TOOLS = ("find_exact", "tensile")  # run on the configs GenerateConfigs writes


class PipelineTask(luigi.Task):
    """Common parameters: where runs live and which run this is."""

    workdir = luigi.Parameter(default="workdir", description="root of all run directories")
    run_name = luigi.Parameter(default=datetime.date.today().isoformat(),
                               description="run directory under --workdir (default: today's date); "
                                           "a rerun with the same name resumes")

    def gpu_indices(self, who: str) -> list[int]:
        """``--gpus`` GPUs, else every visible one (through torch for cuBLASLt, the AMD tools' own count)."""
        if getattr(self, "gpus", 0):
            return list(range(self.gpus))
        amd = getattr(self, "backend", "cublaslt") in AMD_TOOLS
        return list(range(amd_gpu_count() if amd else gpu_count(who)))

    def stage_dir(self, stage: str) -> Path:
        """Absolute: these paths reach subprocesses, environment variables and files other programs read."""
        return Path(self.workdir).absolute() / self.run_name / stage


class CollectShapes(PipelineTask):
    """Run the workload under TunableOp record-untuned mode and keep what it recorded."""

    workload_cmd = luigi.Parameter(default="", description="shell command of the workload "
                                                           "(default: the embedded Llama decoder)")
    workload_timeout = luigi.FloatParameter(default=3600.0, description="seconds before the workload is stopped")
    call_times = luigi.BoolParameter(default=True, parsing=luigi.BoolParameter.EXPLICIT_PARSING,
                                     description="time each recorded GEMM once at baseline on the GPU, for its "
                                                 "share of the workload's GEMM time (--call-times false: calls only)")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("collect") / MANIFEST)

    def run(self) -> None:
        self.set_status_message("running the workload with TunableOp recording")
        time_on = (lambda: range(gpu_count("Timing the recorded GEMMs (--call-times false skips it)"))) \
            if self.call_times else None
        result = collect(self.stage_dir("collect"), self.workload_cmd or None, timeout_s=self.workload_timeout,
                         time_on=time_on)
        self.set_status_message(f"recorded {len(result.files)} files in {result.seconds:.0f} s")


@inherits(CollectShapes)
class GatherShapes(PipelineTask):
    """Parse the recorded (or the user's ``--untuned``) TunableOp files into ``shapes.json``."""

    untuned = luigi.Parameter(default="", description="comma-separated files, directories or globs of "
                                                      "TunableOp CSVs; when given, no collection runs")
    lenient = luigi.BoolParameter(default=False, description="skip and count malformed lines")

    def requires(self) -> luigi.Task | None:
        return None if self.untuned else self.clone(CollectShapes)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("shapes") / "shapes.json")

    def input_specs(self) -> list[str]:
        if self.untuned:
            return [spec.strip() for spec in self.untuned.split(",") if spec.strip()]
        manifest = Path(self.input().path)
        return [str(manifest.parent / name) for name in json.loads(manifest.read_text())["files"]]

    def run(self) -> None:
        result = gather(self.input_specs(), lenient=self.lenient)
        collected = None if self.untuned else Path(self.input().path).parent
        apply_weights(result, *(None, None) if collected is None else (
            read_json(collected / call_weights.CALLS), read_json(collected / call_weights.BASELINE)))
        summary = summary_table(result)
        atomic_write_text(self.stage_dir("shapes") / "summary.txt", summary)
        write_shapes_json(self.output().path, result)
        print(summary, end="")


@inherits(GatherShapes)
class GenerateConfigs(PipelineTask):
    """Render the find_exact and TensileLite configs of the gathered shapes, with stride padding."""

    arch = luigi.ChoiceParameter(default="gfx942", choices=configs.ARCH_NAMES, description="AMD target arch")
    padding = luigi.ChoiceParameter(default="auto", choices=["auto", "off"], description="stride padding")
    tensile_preset = luigi.Parameter(default="mi300x", description="TensileLite parameter preset")

    def requires(self) -> luigi.Task:
        return self.clone(GatherShapes)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("configs") / configs.MANIFEST)

    def run(self) -> None:
        settings = configs.ConfigSettings(arch=self.arch, padding=self.padding, preset=self.tensile_preset)
        problems = [record.problem for record in read_shapes_json(self.input().path)]
        data = configs.write_configs(self.stage_dir("configs"), problems, settings)
        print(configs.summary(data), end="")


@inherits(GenerateConfigs)
class Bench(PipelineTask):
    """Tune every gathered GEMM on this machine's GPUs with the chosen backend."""

    backend = luigi.ChoiceParameter(default="cublaslt",
                                    choices=["cublaslt", "hipblaslt", "find_exact", "tensile", "tunableop"],
                                    description="tuner: cublaslt on NVIDIA, hipblaslt (hipblaslt-bench) on AMD")
    hipblaslt_bench = luigi.Parameter(default="", description="hipblaslt-bench to run (default: $HIPBLASLT_BENCH, "
                                                              "then hipblaslt-bench on PATH)")
    hipblaslt_root = luigi.Parameter(default="", description="find_exact: the hipBLASLt build directory "
                                                             "(default: $HIPBLASLT_ROOT)")
    tensile_root = luigi.Parameter(default="", description="tensile: hipBLASLt's tensilelite directory "
                                                           "(default: $TENSILE_ROOT)")
    tunableop_iterations = luigi.IntParameter(default=100, description="tunableop: tuning iterations per candidate")
    tunableop_duration_ms = luigi.IntParameter(default=30, description="tunableop: tuning ms per candidate")
    tunableop_rotating_mb = luigi.IntParameter(default=-1, description="tunableop: rotating buffer MiB (-1: L2)")
    tunableop_numerical_check = luigi.BoolParameter(default=False, description="tunableop: check every candidate "
                                                                               "against Default")
    gpus = luigi.IntParameter(default=0, description="GPUs to use (0: every visible one)")
    time_budget = luigi.FloatParameter(default=20.0, description="screening seconds per problem")
    margin = luigi.FloatParameter(default=0.02, description="a winner must beat the default by this fraction")

    def requires(self) -> luigi.Task:
        return self.clone(GenerateConfigs) if self.backend in CONFIG_TOOLS else self.clone(GatherShapes)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("bench") / "summary.json")

    def backend_options(self) -> dict:
        """Constructor arguments of the backend besides the GPU; the tool is checked here, before any work."""
        if self.backend in ("hipblaslt", "tensile"):
            return {"bench": find_bench(self.hipblaslt_bench or None)}
        if self.backend in bench.BACKENDS:
            bench.backend_class(self.backend)  # its import needs what the backend needs (nvmath, torch)
        if self.backend == "tunableop":
            return {"iterations": self.tunableop_iterations, "duration_ms": self.tunableop_duration_ms,
                    "rotating_mb": self.tunableop_rotating_mb, "numerical_check": self.tunableop_numerical_check}
        return {}

    def run(self) -> None:
        build = find_exact.locate(self.hipblaslt_root or None) if self.backend == "find_exact" else None
        tool = tensile.locate(self.tensile_root or None) if self.backend == "tensile" else None
        options = self.backend_options()
        problems = [record.problem for record in read_shapes_json(self.stage_dir("shapes") / "shapes.json")]
        out = self.stage_dir("bench")
        settings = TuneSettings(margin=self.margin, time_budget_s=self.time_budget)

        def progress(done: int, total: int) -> None:
            self.set_status_message(f"tuned {done}/{total} GEMMs")
            self.set_progress_percentage(round(100 * done / max(total, 1)))
            bench.progress_bar("Bench", done, total)

        if build is not None:
            find_exact.tune_configs(problems, self.stage_dir("configs"), out, build, settings,
                                    self.gpu_indices("Bench")[0], progress=progress)
        elif tool is not None:
            tensile.tune_configs(problems, self.stage_dir("configs"), out, tool,
                                 HipblasltBackend(self.gpu_indices("Bench")[0], options["bench"]), settings,
                                 progress=progress)
        else:
            bench.run_shards(problems, out, self.gpu_indices("Bench"), settings, self.backend, progress, options)
        bench.write_outputs(problems, out)


@inherits(Bench)
class MergeResults(PipelineTask):
    """Merge tuned ``tunableop_results*.csv`` files into ``merge/tunableop_results.csv``.

    Inputs: ``--results`` files, or the Bench stage's results when none are given.
    """

    results = luigi.Parameter(default="", description="comma-separated results files or globs (default: Bench's)")
    validators_from = luigi.Parameter(default="", description="results file of the runtime to target")

    def requires(self) -> list[luigi.Task]:
        return [] if self.results else [self.clone(Bench)]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("merge") / "tunableop_results.csv")

    def run(self) -> None:
        specs = [s.strip() for s in self.results.split(",") if s.strip()]
        if not specs:
            specs = [str(self.stage_dir("bench") / "tunableop_results.csv")]
        files = [tunableop.read_file(path) for path in expand_inputs(specs)]
        target = tunableop.read_file(self.validators_from).validators if self.validators_from else None
        merged = merge_results(files, target)
        atomic_write_text(self.stage_dir("merge") / "results-merge.log", "\n".join(merged.lines) + "\n")
        tunableop.write_file(self.output().path, merged.validators, merged.entries)


@inherits(Bench)
class MergeLogic(PipelineTask):
    """Merge tuned logic files into the base logic (``logic/`` or ``--base-logic``) under ``merge/logic``."""

    base_logic = luigi.Parameter(default=str(REPO_LOGIC), description="directory of the base logic files")
    new_logic = luigi.Parameter(default="", description="directory of tuned logic files (default: Bench's)")
    policy = luigi.ChoiceParameter(default="faster", choices=["upstream", "faster"])
    logic_margin = luigi.FloatParameter(default=0.02, description="faster policy: required speedup to replace")

    def requires(self) -> list[luigi.Task]:
        return [] if self.new_logic else [self.clone(Bench)]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("merge") / "logic-merge.log")

    def run(self) -> None:
        new_logic = Path(self.new_logic) if self.new_logic else self.stage_dir("bench") / "logic"
        merged = merge_dirs(Path(self.base_logic), new_logic, self.stage_dir("merge") / "logic",
                            MergeOptions(policy=self.policy, margin=self.logic_margin))
        atomic_write_text(self.output().path, "\n".join(merged.lines) + "\n")


@inherits(GenerateConfigs, MergeResults, MergeLogic)
class Validate(PipelineTask):
    """Time the merged artifact against the baseline, gate it, bundle what passes, A/B the workload, report."""

    min_speedup = luigi.FloatParameter(default=1.0, description="refuse a bundle whose weighted GEMM speedup "
                                                                "is under this")
    validate_rounds = luigi.IntParameter(default=7, description="interleaved rounds per GEMM")
    e2e_reps = luigi.IntParameter(default=3, description="alternating end-to-end runs per environment")

    def requires(self) -> list[luigi.Task]:
        return [self.clone(GenerateConfigs), self.clone(MergeResults), self.clone(MergeLogic)]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("bundle") / bundle.MANIFEST)

    def run(self) -> None:
        run_dir, out = self.stage_dir(""), self.stage_dir("validate")
        if not (out / validate.MEASUREMENTS).exists():
            self.set_status_message("validating GEMMs against the baseline")

            def progress(done: int, total: int) -> None:
                self.set_progress_percentage(round(100 * done / max(total, 1)))
                bench.progress_bar("Validate", done, total)

            validate.run_worker(run_dir, self.gpu_indices("Validate"), self.validate_rounds, self.margin,
                                progress)
        measured = json.loads((out / validate.MEASUREMENTS).read_text())
        result = gate(measured["rows"], GateSettings(margin=self.margin, min_speedup=self.min_speedup))
        atomic_write_json(out / "gate.json", result.to_json())
        runtime = validate.runtime_of(run_dir, measured)
        if result.passed:
            bundle.write_bundle(run_dir, result, {"runtime": runtime})
        reason = e2e.skip_reason(runtime, result.passed, has_workload=bool(self.workload_cmd or not self.untuned))
        if reason:
            outcome = {"skipped": reason}
        else:
            self.set_status_message("end-to-end A/B of the workload")
            command = ["bash", "-c", self.workload_cmd] if self.workload_cmd else embedded_command()
            outcome = e2e.ab_test(command, self.stage_dir("bundle") / "tunableop_results.csv", out / "e2e-tunableop",
                                  self.e2e_reps, self.workload_timeout, gpus=self.gpus or gpu_count("Validate"))
        atomic_write_json(out / "e2e.json", outcome)
        summary = report.build(run_dir)
        if not result.passed:
            raise GateRefused(f"{result.message}. Report: {summary['report']}")


@inherits(Validate)
class TuneWorkload(PipelineTask):
    """The nightly job: collect, gather, configs, bench, merge, validate; prints the key figures at the end."""

    def requires(self) -> luigi.Task:
        return self.clone(Validate)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("") / "tune-workload.txt")

    def run(self) -> None:
        lines = report.key_lines(json.loads((self.stage_dir("report") / report.SUMMARY).read_text()))
        atomic_write_text(self.output().path, "\n".join(lines) + "\n")
        print("\n".join(lines))


def gpu_count(who: str) -> int:
    """GPUs torch sees, asked in a subprocess so this process never initialises CUDA; ``who`` needs them."""
    probe = "import torch; print(torch.cuda.device_count())"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    count = int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0
    if count == 0:
        raise RuntimeError(f"{who} needs a GPU and torch with CUDA or ROCm (pip install -e '.[cuda]'); none is "
                           f"visible ({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no device'}"
                           "). The AMD tool configs are written by GenerateConfigs without one.")
    return count


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None
