"""Luigi tasks: thin wiring of the core modules (docs/design.md), one directory per run and per stage. Each
task's parameters are its stage's mixin in ``dag/parameters.py``.

``workdir/<run>/collect/``  untuned<N>.csv, workload logs, manifest.json   (CollectShapes)
``workdir/<run>/shapes/``   shapes.json, summary.txt                       (GatherShapes)
``workdir/<run>/configs/``  find_exact/*.yaml, tensile/*.yaml, configs.json (GenerateConfigs)
``workdir/<run>/bench/``    problems/*.json, results.json, tunableop_results.csv, logic/, summary.json (Bench)
``workdir/<run>/merge/``    tunableop_results.csv, logic/, merge logs       (MergeResults, MergeLogic)
``workdir/<run>/validate/`` measurements.json, gate.json, e2e.json       (Validate)
``workdir/<run>/bundle/``   tunableop_results.csv, logic/, manifest.json   (Validate, when the gate passes)
``workdir/<run>/report/``   report.md, report.html, *.svg, summary.json    (Validate)
``workdir/<run>/package/``  package.json; the package itself in ``dist/<fingerprint>/``   (Package)
``workdir/cache/``          ``stack/`` stack facts by cheap signature; ``tuned/<fingerprint>/`` tuned problems
shared by runs. Stages from Bench on stamp ``stack.json`` with the fingerprint they ran under.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

import luigi
import luigi.configuration
import luigi.interface
from luigi.util import inherits

from .atomic import atomic_write_json, atomic_write_text
from .backends.base import TuneSettings
from .backends.slots import gpu_count
from .dag.arguments import BadArguments, margin_value
from .dag.base import PipelineTask, StackBound, log, stage_run
from .dag.parameters import (
    BENCH_PARAMS,
    REPO_LOGIC,
    BenchParameters,
    CollectParameters,
    ConfigsParameters,
    GatherParameters,
    MergeLogicParameters,
    MergeResultsParameters,
    PackageParameters,
    ValidateParameters,
    embedded_args,
    read_json,
    split_specs,
    user_files,
)
from .dag.preflight import preflight
from .stages.bench import config_tool, on_host, registry
from .stages.bench import tune as bench
from .stages.configs import render as configs
from .stages.gather import call_weights, mgrid
from .stages.gather.collect import collect
from .stages.gather.shapes import (
    apply_grid,
    apply_weights,
    expand_inputs,
    gather,
    read_shapes_json,
    require_gemms,
    summary_table,
    write_shapes_json,
)
from .stages.merge.logic_merge import MergeOptions, merge_dirs
from .stages.merge.results_merge import merge_paths
from .stages.run.made_from import tree_files
from .stages.run.progress import ProgressBar
from .stages.ship import package
from .stages.validate import report
from .stages.validate.acceptance import AcceptanceSettings, accept


class CollectShapes(CollectParameters, PipelineTask):
    """Run the workload under TunableOp record-untuned mode and keep what it recorded."""

    def redo_stages(self) -> tuple[str, ...]:
        return ("collect",)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().collect_manifest)

    @stage_run
    def run(self) -> None:
        self.set_status_message("running the workload with TunableOp recording")
        time_on = (
            (lambda: range(gpu_count("Timing the recorded GEMMs (--call-times false skips it)")))
            if self.call_times
            else None
        )
        result = collect(
            self.layout().collect,
            self.workload_cmd or None,
            timeout_s=self.workload_timeout,
            time_on=time_on,
            embedded_args=embedded_args(self),
        )
        self.set_status_message(f"recorded {len(result.files)} files in {result.seconds:.0f} s")


@inherits(CollectShapes)
class GatherShapes(GatherParameters, PipelineTask):
    """Parse the recorded (or the user's ``--untuned``) TunableOp files into ``shapes.json``."""

    def requires(self) -> luigi.Task | None:
        return None if self.untuned else self.clone(CollectShapes)

    def user_files(self) -> list[Path]:
        return user_files(self.input_specs()) if self.untuned else []

    def redo_stages(self) -> tuple[str, ...]:
        return ("shapes",)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().shapes)

    def input_specs(self) -> list[str]:
        if self.untuned:
            return split_specs(self.untuned)
        manifest = Path(self.input().path)
        return [str(manifest.parent / name) for name in json.loads(manifest.read_text())["files"]]

    @stage_run
    def run(self) -> None:
        specs = self.input_specs()
        result = gather(specs, lenient=self.lenient)
        require_gemms(result, specs)
        collected = None if self.untuned else Path(self.input().path).parent
        files = (call_weights.CALLS, call_weights.BASELINE)
        apply_weights(result, *(None if collected is None else read_json(collected / name) for name in files))
        embedded = not (self.workload_cmd or self.untuned)  # the README's first run: auto keeps it exact
        spec, m_max = mgrid.parse_grid(self.m_grid), mgrid.parse_m_max(self.m_max)
        apply_grid(result, spec, m_max, 60 * self.grid_budget, embedded)
        summary = summary_table(result)
        atomic_write_text(self.layout().shapes_summary, summary)
        write_shapes_json(self.output().path, result)
        log.info("%s", summary.rstrip())


@inherits(GatherShapes)
class GenerateConfigs(ConfigsParameters, PipelineTask):
    """Render the find_exact and TensileLite configs of the gathered shapes, with stride padding."""

    def redo_stages(self) -> tuple[str, ...]:
        return ("configs",)

    def requires(self) -> luigi.Task:
        self.settings()  # a pair of options no TensileLite takes is refused before any stage runs
        return self.clone(GatherShapes)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().configs_manifest)

    def settings(self) -> configs.ConfigSettings:
        return configs.ConfigSettings(
            arch=self.arch, padding=self.padding, preset=self.tensile_preset, tensile_generation=self.tensile_generation
        )

    @stage_run
    def run(self) -> None:
        records = read_shapes_json(self.input().path)
        settings = dataclasses.replace(self.settings(), library_type=configs.library_type(r.bucket for r in records))
        data = configs.write_configs(self.layout().configs, [record.problem for record in records], settings)
        log.info("%s", configs.summary(data).rstrip())


@inherits(GenerateConfigs)
class Bench(BenchParameters, StackBound):
    """Tune every gathered GEMM on this machine's GPUs with the chosen backend, through the per-fingerprint
    cache of tuned problems (``<workdir>/cache/tuned/<fingerprint>``)."""

    stack_stages = ("bench",)

    def requires(self) -> list[luigi.Task]:
        preflight(self)
        return self.dependencies()

    def dependencies(self) -> list[luigi.Task]:
        if self.sharded():
            return [self.clone(BenchShard, shard_index=i) for i in range(self.shards)]
        configs = registry.entry(self.backend).kind == "config tool"
        return [self.clone(GenerateConfigs) if configs else self.clone(GatherShapes)]

    def sharded(self) -> bool:
        return bool(self.shards) and registry.entry(self.backend).kind == "tuner"

    def redo_stages(self) -> tuple[str, ...]:
        return () if self.sharded() else ("bench",)  # sharded: BenchPlan sets it aside, before the shards

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().bench_summary)

    def backend_options(self) -> dict:
        """Constructor arguments of the backend besides the GPU; the tool is checked here, before any work."""
        return registry.entry(self.backend).construct_options(self.param_kwargs)

    def problems(self) -> list:
        return [record.problem for record in read_shapes_json(self.layout().shapes)]

    def tune_settings(self) -> TuneSettings:
        return TuneSettings(margin=self.tuning_margin(), time_budget_s=self.time_budget)

    def triton_request(self) -> dict | None:
        """What ``--triton`` (or the backend's default) asked of this backend, for the summary (None: not asked)."""
        wanted = registry.entry(self.backend).flag("triton", self.param_kwargs)
        return {"backend": self.backend, "amd": registry.amd(self.backend)} if wanted else None

    @stage_run
    def run(self) -> None:
        if self.sharded():  # the BenchShard tasks did the tuning
            bench.write_outputs(self.problems(), self.layout().bench, self.triton_request())
            return
        self.claim_stages()
        options = self.backend_options()
        problems, out, settings = self.problems(), self.layout().bench, self.tune_settings()
        bar = ProgressBar("Bench")

        def progress(done: int, total: int) -> None:
            self.set_status_message(f"tuned {done}/{total} GEMMs")
            self.set_progress_percentage(round(100 * done / max(total, 1)))
            bar.show(done, total)

        if registry.entry(self.backend).kind == "config tool":
            tool = registry.entry(self.backend).factory(self.gpu_indices("Bench")[0], **options)
            config_tool.tune_configs(tool, problems, self.layout().configs, out, settings, progress)
        else:
            atomic_write_json(out / "cache.json", self.host_bench(options).tune(problems, progress))
        bench.write_outputs(problems, out, self.triton_request())

    def host_bench(self, options: dict) -> on_host.HostBench:
        """This host's Bench: its GPUs, the backend and its ``options``, the settings and the grid."""
        return on_host.HostBench(
            self.layout(),
            Path(self.workdir),
            self.stack(),
            self.gpu_indices("Bench"),
            registry.entry(self.backend).factory_path,
            options,
            self.tune_settings(),
            self.m_grid,
        )


@inherits(Bench)
class BenchPlan(StackBound):
    """The shard plan of a sharded Bench: problems split by estimated cost into ``--shards`` parts, fixed
    before any worker starts so every host agrees on it."""

    stack_stages = ("bench",)
    made_from_params = BENCH_PARAMS

    def requires(self) -> luigi.Task:
        return self.clone(GatherShapes)

    def redo_stages(self) -> tuple[str, ...]:
        return ("bench",)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().shard_plan(self.shards))

    @stage_run
    def run(self) -> None:
        self.claim_stages()
        self.clone(Bench).backend_options()  # the tool is checked once, before any shard starts
        grid = any(record.bucket for record in read_shapes_json(self.layout().shapes))
        atomic_write_json(self.output().path, bench.shard_plan(self.clone(Bench).problems(), self.shards, grid))


@inherits(Bench)
class BenchShard(StackBound):
    """One shard of a sharded Bench: any Luigi worker of any host may take it; it tunes on that host's GPU
    slots, through the fingerprint's cache. Results land one problem at a time (atomically), the done
    record last: a worker killed mid-shard leaves finished problems and no done record, and the next worker
    that takes the shard tunes only what is missing."""

    shard_index = luigi.IntParameter(description="which shard of --shards")
    stack_stages = ("bench",)
    made_from_params = (*BENCH_PARAMS, "shard_index")

    def timing_name(self) -> str:
        return f"BenchShard-{self.shard_index}"

    def requires(self) -> luigi.Task:
        return self.clone(BenchPlan)

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().shard_done(self.shard_index, self.shards))

    @stage_run
    def run(self) -> None:
        parent = self.clone(Bench)
        problems = bench.plan_shard(Path(self.input().path), self.shard_index)
        done = parent.host_bench(parent.backend_options()).tune(problems, name=f"s{self.shard_index}of{self.shards}-")
        atomic_write_json(
            self.output().path,
            {
                **done,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "problems": [bench.problem_id(p) for p in problems],
            },
        )


@inherits(Bench)
class MergeResults(MergeResultsParameters, StackBound):
    """Merge tuned ``tunableop_results*.csv`` files into ``merge/tunableop_results.csv``, and hipBLASLt override
    files among them into ``merge/hipblaslt_override.txt``.

    Inputs: ``--results`` files, or the Bench stage's results (and override file) when none are given.
    """

    def requires(self) -> list[luigi.Task]:
        return [] if self.results else [self.clone(Bench)]

    def user_files(self) -> list[Path]:
        specs = split_specs(self.results)
        return [*user_files(specs), *([Path(self.validators_from)] * bool(self.validators_from))]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().merged_csv)

    stack_stages = ("merge",)

    @stage_run
    def run(self) -> None:
        self.claim_stages()
        specs = split_specs(self.results) or bench.files_to_merge(self.layout().bench)
        merged = merge_paths(expand_inputs(specs), self.validators_from or None)
        if merged.results is None:
            raise BadArguments(
                f"--results {self.results}: no TunableOp results file among them (Validate "
                "measures the merged tunableop_results.csv)"
            )
        atomic_write_text(self.layout().results_merge_log, "\n".join(merged.lines) + "\n")
        merged.write(self.output().path, self.layout().merged_override)


@inherits(Bench)
class MergeLogic(MergeLogicParameters, StackBound):
    """Merge tuned logic files into the base logic (``logic/`` or ``--base-logic``) under ``merge/logic``."""

    def requires(self) -> list[luigi.Task]:
        return [] if self.new_logic else [self.clone(Bench)]

    def user_files(self) -> list[Path]:
        return [*tree_files(self.base_logic), *(tree_files(self.new_logic) if self.new_logic else [])]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().logic_merge_log)

    stack_stages = ("merge",)

    @stage_run
    def run(self) -> None:
        self.claim_stages()
        new_logic = Path(self.new_logic) if self.new_logic else self.layout().bench_logic
        base = Path(self.base_logic)
        if base == REPO_LOGIC:
            base = package.published_base(REPO_LOGIC, self.stack().fingerprint)
        merged = merge_dirs(
            base,
            new_logic,
            self.layout().merged_logic,
            MergeOptions(policy=self.policy, margin=self.logic_margin),
            records_dir=self.layout().merged_records,
        )
        atomic_write_text(self.output().path, "\n".join(merged.lines) + "\n")


@inherits(GenerateConfigs, MergeResults, MergeLogic)
class Validate(ValidateParameters, StackBound):
    """Time the merged artifact against the baseline, gate it, bundle what passes, A/B the workload, report."""

    def redo_stages(self) -> tuple[str, ...]:
        return ("validate", "bundle", "report")

    def requires(self) -> list[luigi.Task]:
        configs_stage = [] if self.backend == "cublaslt" else [self.clone(GenerateConfigs)]  # AMD's (padding)
        return [*configs_stage, self.clone(MergeResults), self.clone(MergeLogic)]

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().bundle_manifest)

    stack_stages = ("validate", "bundle", "report")
    written_whole = ("bundle",)

    def done(self) -> bool:
        """The bundle and, written after it, the report (a run killed between them is not done)."""
        return super().done() and self.layout().report_summary.exists()

    @stage_run
    def run(self) -> None:
        self.claim_stages()
        if self.backend == "cublaslt":
            log.info(
                "configs: --backend cublaslt uses no AMD configs (find_exact, TensileLite, stride padding); "
                "GenerateConfigs did not run"
            )

        bar = ProgressBar("Validate")

        def progress(done: int, total: int) -> None:
            self.set_progress_percentage(round(100 * done / max(total, 1)))
            bar.show(done, total)

        settings = AcceptanceSettings(
            gpus=lambda: self.gpu_indices("Validate"),
            margin=margin_value(self.margin, self.gate_margin),
            min_speedup=self.min_speedup,
            rounds=self.validate_rounds,
            e2e_reps=self.e2e_reps,
            e2e_max_reps=self.e2e_cap(),
            workload_timeout_s=self.workload_timeout,
            workload_cmd=self.e2e_cmd or self.workload_cmd,
            has_workload=bool(self.e2e_cmd or self.workload_cmd or not self.untuned),
            e2e_gpus=self.gpus,
            embedded_args=embedded_args(self),
            allow_e2e_regression=self.allow_e2e_regression,
            e2e_graphs_only=self.e2e_graphs_only,
            e2e_parallel=self.e2e_parallel,
        )
        accept(self.stage_dir(""), self.stack(), settings, progress, self.set_status_message)


@inherits(Validate)
class TuneWorkload(StackBound):
    """The nightly job: collect, gather, configs, bench, merge, validate; prints the key figures at the end."""

    def requires(self) -> luigi.Task:
        preflight(self)
        return self.upstream()

    def dependencies(self) -> list[luigi.Task]:
        return [self.upstream()]

    def upstream(self) -> luigi.Task:
        return self.clone(Validate)

    chained = True

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().tune_workload)

    @stage_run
    def run(self) -> None:
        lines = report.key_lines(report.add_stage_times(self.stage_dir("")))
        atomic_write_text(self.output().path, "\n".join(lines) + "\n")
        print("\n".join(lines))


@TuneWorkload.event_handler(luigi.Event.DEPENDENCY_PRESENT)
def _done_already(task: TuneWorkload) -> None:
    """A rerun that finds the job done prints its key lines again (the verdict, the report's path), as the run
    that did it printed them, where Luigi alone would say only that it ran nothing."""
    recorded = Path(task.output().path)
    if isinstance(task, TuneWorkload) and recorded.is_file():
        print(f"gemm-tune: {task.layout().root} is done already; its result:\n{recorded.read_text().rstrip()}")


@inherits(TuneWorkload)
class Package(PackageParameters, StackBound):
    """``dist/<fingerprint>/``: the accepted bundle as an image takes it (results, logic, override, env.sh,
    Dockerfile fragment, README, manifest); ``--publish`` also puts its logic into ``logic/<fingerprint>``."""

    stack_stages = ("package",)

    def requires(self) -> luigi.Task:
        return self.upstream()

    def upstream(self) -> luigi.Task:
        return self.clone(TuneWorkload)

    chained = True

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.layout().package_record)

    def dist_root(self) -> Path:
        return Path(os.path.abspath(self.dist)) if self.dist else Path(os.path.abspath(self.workdir)) / "dist"

    @stage_run
    def run(self) -> None:
        self.claim_stages()
        manifest = package.write_package(
            self.stage_dir(""), self.dist_root(), self.stack(), self.package_devices, self.docker_builder
        )
        where = self.dist_root() / manifest["fingerprint"]
        published = str(package.publish(where, Path(self.publish_dir))) if self.publish else None
        atomic_write_json(
            self.output().path,
            {"package": str(where), "published": published, "serves": manifest["serves"], "files": manifest["files"]},
        )
        print(
            f"package: {where} (serves torch {manifest['serves']['torch']}, "
            f"{manifest['serves']['tunableop_rows']} TunableOp rows)"
        )
