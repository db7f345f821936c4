"""Luigi tasks: thin wiring of the core modules, one directory per run and per stage.

``workdir/<run>/collect/``  untuned<N>.csv, workload logs, manifest.json   (CollectShapes)
``workdir/<run>/shapes/``   shapes.json, summary.txt                       (GatherShapes)
``workdir/<run>/configs/``  find_exact/*.yaml, tensile/*.yaml, configs.json (GenerateConfigs)

Next stages (later issues): Bench, MergeResults/MergeLogic, Validate.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import luigi
from luigi.util import inherits

from . import configs, tunableop
from .atomic import atomic_write_text
from .collect import MANIFEST, collect
from .logic_merge import MergeOptions, merge_dirs
from .results_merge import merge_results
from .shapes import expand_inputs, gather, read_shapes_json, summary_table, write_shapes_json


class PipelineTask(luigi.Task):
    """Common parameters: where runs live and which run this is."""

    workdir = luigi.Parameter(default="workdir", description="root of all run directories")
    run_name = luigi.Parameter(default=datetime.date.today().isoformat(),
                               description="run directory under --workdir (default: today's date); "
                                           "a rerun with the same name resumes")

    def stage_dir(self, stage: str) -> Path:
        return Path(self.workdir) / self.run_name / stage


class CollectShapes(PipelineTask):
    """Run the workload under TunableOp record-untuned mode and keep what it recorded."""

    workload_cmd = luigi.Parameter(default="", description="shell command of the workload "
                                                           "(default: the embedded Llama decoder)")
    workload_timeout = luigi.FloatParameter(default=3600.0, description="seconds before the workload is stopped")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("collect") / MANIFEST)

    def run(self) -> None:
        self.set_status_message("running the workload with TunableOp recording")
        result = collect(self.stage_dir("collect"), self.workload_cmd or None, timeout_s=self.workload_timeout)
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
class TuneWorkload(PipelineTask, luigi.WrapperTask):
    """The nightly job. Stages so far: CollectShapes -> GatherShapes -> GenerateConfigs."""

    def requires(self) -> luigi.Task:
        return self.clone(GenerateConfigs)


class MergeResults(PipelineTask):
    """Merge tuned ``tunableop_results*.csv`` files into ``merge/tunableop_results.csv``.

    Inputs come from ``--results`` for now; the Bench stage of the backend issue feeds it.
    """

    results = luigi.Parameter(default="", description="comma-separated results files or globs")
    validators_from = luigi.Parameter(default="", description="results file of the runtime to target")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("merge") / "tunableop_results.csv")

    def run(self) -> None:
        specs = [s.strip() for s in self.results.split(",") if s.strip()]
        if not specs:
            raise ValueError("MergeResults needs --results FILES (the Bench stage provides them once wired)")
        files = [tunableop.read_file(path) for path in expand_inputs(specs)]
        target = tunableop.read_file(self.validators_from).validators if self.validators_from else None
        merged = merge_results(files, target)
        atomic_write_text(self.stage_dir("merge") / "results-merge.log", "\n".join(merged.lines) + "\n")
        tunableop.write_file(self.output().path, merged.validators, merged.entries)


class MergeLogic(PipelineTask):
    """Merge tuned logic files into the base logic (``logic/`` or ``--base-logic``) under ``merge/logic``."""

    base_logic = luigi.Parameter(default="logic", description="directory of the base logic files")
    new_logic = luigi.Parameter(default="", description="directory of tuned logic files")
    policy = luigi.ChoiceParameter(default="faster", choices=["upstream", "faster"])
    margin = luigi.FloatParameter(default=0.02, description="faster policy: required speedup to replace")

    def output(self) -> luigi.LocalTarget:
        return luigi.LocalTarget(self.stage_dir("merge") / "logic-merge.log")

    def run(self) -> None:
        if not self.new_logic:
            raise ValueError("MergeLogic needs --new-logic DIR (the Bench stage provides it once wired)")
        report = merge_dirs(Path(self.base_logic), Path(self.new_logic), self.stage_dir("merge") / "logic",
                            MergeOptions(policy=self.policy, margin=self.margin))
        atomic_write_text(self.output().path, "\n".join(report.lines) + "\n")
