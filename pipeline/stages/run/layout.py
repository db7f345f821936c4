"""A run directory's layout, in one place: every stage's directory and the files the stages hand each other.

    <run>/collect/    manifest.json, untuned<N>.csv, calls.json, baseline.json, workload logs   CollectShapes
    <run>/shapes/     shapes.json, summary.txt                                                 GatherShapes
    <run>/configs/    configs.json, find_exact/*.yaml, tensile/*.yaml                          GenerateConfigs
    <run>/bench/      problems/, results.json, runtime.json, tunableop_results.csv, logic/,
                      hipblaslt_override.txt, shards/, summary.json (last)                     Bench
    <run>/merge/      tunableop_results.csv, hipblaslt_override.txt, logic/, *-merge.log       MergeResults, MergeLogic
    <run>/validate/   rows/, measurements.json, gate.json, e2e.json                            Validate
    <run>/bundle/     tunableop_results.csv, logic/, manifest.json (the gate passed)           Validate
    <run>/report/     report.md, report.html, *.svg, summary.json                              Validate
    <run>/package/    package.json (the package itself: <workdir>/dist/<fingerprint>/)         Package
    <run>/tune-workload.txt, timings/, made_from/                                              every task
    <run>/<stage>.<fingerprint>/, stacks/<fingerprint>/made_from/   a stack's stages set aside, their records

The tasks' ``output()`` and the stages that read another stage's files take their paths from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULTS_CSV = "tunableop_results.csv"
OVERRIDE = "hipblaslt_override.txt"
RUNTIME = "runtime.json"


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory (``root``, absolute)."""

    root: Path

    @classmethod
    def of(cls, run_dir: str | Path) -> RunLayout:
        return cls(Path(run_dir).absolute())

    def stage(self, name: str) -> Path:
        """A stage's directory (``""``: the run directory itself)."""
        return self.root / name if name else self.root

    # -- the stages' directories --------------------------------------------------------------------------
    @property
    def collect(self) -> Path:
        return self.root / "collect"

    @property
    def shapes_dir(self) -> Path:
        return self.root / "shapes"

    @property
    def configs(self) -> Path:
        return self.root / "configs"

    @property
    def bench(self) -> Path:
        return self.root / "bench"

    @property
    def merge(self) -> Path:
        return self.root / "merge"

    @property
    def validate(self) -> Path:
        return self.root / "validate"

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def package(self) -> Path:
        return self.root / "package"

    # -- the files the stages hand each other --------------------------------------------------------------
    @property
    def collect_manifest(self) -> Path:
        return self.collect / "manifest.json"

    @property
    def workload_stderr(self) -> Path:
        return self.collect / "workload.stderr.log"

    @property
    def shapes(self) -> Path:
        return self.shapes_dir / "shapes.json"

    @property
    def shapes_summary(self) -> Path:
        return self.shapes_dir / "summary.txt"

    @property
    def configs_manifest(self) -> Path:
        return self.configs / "configs.json"

    @property
    def bench_summary(self) -> Path:
        return self.bench / "summary.json"

    @property
    def bench_results(self) -> Path:
        return self.bench / "results.json"

    @property
    def bench_runtime(self) -> Path:
        return self.bench / RUNTIME

    @property
    def bench_csv(self) -> Path:
        return self.bench / RESULTS_CSV

    @property
    def bench_logic(self) -> Path:
        return self.bench / "logic"

    def shard_plan(self, shards: int) -> Path:
        return self.bench / "shards" / f"plan{shards}.json"

    def shard_done(self, index: int, shards: int) -> Path:
        return self.bench / "shards" / f"done{index}of{shards}.json"

    @property
    def merged_csv(self) -> Path:
        return self.merge / RESULTS_CSV

    @property
    def merged_logic(self) -> Path:
        return self.merge / "logic"

    @property
    def merged_records(self) -> Path:
        """Winner records beside the merged logic tree (``logic_merge.merge_dirs``)."""
        return self.merge / "records"

    @property
    def merged_override(self) -> Path:
        return self.merge / OVERRIDE

    @property
    def logic_merge_log(self) -> Path:
        return self.merge / "logic-merge.log"

    @property
    def results_merge_log(self) -> Path:
        return self.merge / "results-merge.log"

    @property
    def measurements(self) -> Path:
        return self.validate / "measurements.json"

    @property
    def gate(self) -> Path:
        return self.validate / "gate.json"

    @property
    def e2e(self) -> Path:
        return self.validate / "e2e.json"

    @property
    def bundle_manifest(self) -> Path:
        return self.bundle / "manifest.json"

    @property
    def bundle_csv(self) -> Path:
        return self.bundle / RESULTS_CSV

    @property
    def report_summary(self) -> Path:
        return self.report / "summary.json"

    @property
    def package_record(self) -> Path:
        return self.package / "package.json"

    @property
    def tune_workload(self) -> Path:
        return self.root / "tune-workload.txt"
