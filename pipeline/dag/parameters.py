"""Each stage's command line: its Luigi parameters with their defaults and help, and which of them its outputs
are made from (``made_from_params``, docs/design.md "Reruns"). The task classes in ``pipeline/tasks.py`` take
them as mixins, so a task is its wiring alone; defaults shared with ``gemm-tune`` are ``pipeline/defaults.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import luigi

from ..defaults import GATE_MARGIN, LOGIC_MARGIN
from ..errors import BadInput
from ..stages.bench import registry
from ..stages.configs import render as configs
from ..stages.gather import mgrid
from ..stages.gather.shapes import expand_inputs
from .arguments import BadArguments, GridParameter, counted

REPO_LOGIC = Path(__file__).resolve().parents[2] / "logic"


class CollectParameters:
    workload_cmd = luigi.Parameter(
        default="", description="shell command of the workload (default: the embedded Llama decoder)"
    )
    workload_timeout = counted(
        float, 0, low_included=False, default=3600.0, description="seconds before the workload is stopped"
    )
    call_times = luigi.BoolParameter(
        default=True,
        parsing=luigi.BoolParameter.EXPLICIT_PARSING,
        description="time each recorded GEMM once at baseline on the GPU, for its "
        "share of the workload's GEMM time (--call-times false: calls only)",
    )
    fp8 = luigi.BoolParameter(
        default=False,
        description="the embedded workload in FP8 (its --fp8: linear layers "
        "through torch._scaled_mm, tensorwise scales)",
    )
    made_from_params = ("workload_cmd", "call_times", "fp8")


class GatherParameters:
    untuned = luigi.Parameter(
        default="",
        description="comma-separated files, directories or globs of TunableOp CSVs; when given, no collection runs",
    )
    lenient = luigi.BoolParameter(default=False, description="skip and count malformed lines")
    m_grid = GridParameter(
        default=mgrid.AUTO,
        description="token counts (M) each weight is tuned at: exact (those the workload ran), serving (those "
        "plus a server's decode and prefill sizes up to --m-max), an ascending list such as 1,2,4,16, or auto "
        "(serving where the workload ran a weight at more than one count, within --grid-budget or else 10 "
        "minutes; exact otherwise, and for the embedded default workload)",
    )
    m_max = counted(
        int, 0, 1 << 24, default=0, description="largest token count of the serving grid (0: the largest M seen)"
    )
    grid_budget = counted(
        float,
        0.0,
        1e6,
        default=0.0,
        description="minutes of Bench on one GPU the M grid may cost (estimated; 0: no bound, but 10 where "
        "--m-grid auto chooses serving): the finest grid "
        "points the workload did not run are dropped to fit, then the finest counts it ran are seeded (their "
        "search starts from a neighbour's winner), then outer products of negligible time share and the finest "
        "counts it ran are dropped (served by the next count up)",
    )
    made_from_params = ("untuned", "lenient", "m_grid", "m_max", "grid_budget")


class ConfigsParameters:
    arch = luigi.ChoiceParameter(default="gfx942", choices=configs.ARCH_NAMES, description="AMD target arch")
    padding = luigi.ChoiceParameter(default="auto", choices=["auto", "off"], description="stride padding")
    tensile_preset = luigi.Parameter(default="mi300x", description="TensileLite parameter preset")
    tensile_generation = luigi.ChoiceParameter(
        default="2025",
        choices=configs.TENSILE_GENERATIONS,
        description="the TensileLite tree the configs are for (its FP8 DataType letters): 2025 (ROCm 6.4+) or 2024",
    )
    made_from_params = ("arch", "padding", "tensile_preset", "tensile_generation")


BENCH_PARAMS = (
    "backend",
    "triton",
    "time_budget",
    "tune_margin",
    "margin",
    "shards",
    *registry.parameters(),
)  # what Bench's results depend on (--gpus is how, not what)


class BenchParameters:
    gpus = counted(int, 0, 4096, default=0, description="GPUs to use (0: every visible one)")
    shards = counted(
        int,
        0,
        100000,
        default=0,
        description="split the tuning into this many BenchShard tasks, "
        "for Luigi workers on several hosts (0: one task)",
    )
    made_from_params = BENCH_PARAMS


class MergeResultsParameters:
    results = luigi.Parameter(
        default="",
        description="comma-separated TunableOp results and hipBLASLt override files or globs (default: Bench's)",
    )
    validators_from = luigi.Parameter(default="", description="results file of the runtime to target")
    made_from_params = ("results", "validators_from")


class MergeLogicParameters:
    base_logic = luigi.Parameter(
        default=str(REPO_LOGIC),
        description="directory of the base logic files "
        "(default: what Package --publish put in logic/<fingerprint>, else logic/)",
    )
    new_logic = luigi.Parameter(default="", description="directory of tuned logic files (default: Bench's)")
    policy = luigi.ChoiceParameter(
        default="faster",
        choices=["upstream", "faster"],
        description="how tuned logic replaces the base's: faster (where it is faster by --logic-margin) or "
        "upstream (upstream merge.py's rule)",
    )
    logic_margin = counted(float, 0, 10, default=LOGIC_MARGIN, description="faster policy: required speedup to replace")
    made_from_params = ("base_logic", "new_logic", "policy", "logic_margin")


class ValidateParameters:
    min_speedup = counted(
        float, 0, 1000, default=1.0, description="refuse a bundle whose weighted GEMM speedup is under this"
    )
    gate_margin = counted(
        float,
        0,
        10,
        default=GATE_MARGIN,
        description="Validate keeps a row only where it beats torch's default by this fraction, confirmed "
        "(not in the fingerprint: a change re-judges without tuning again)",
    )
    validate_rounds = counted(int, 1, 10000, default=7, description="interleaved rounds per GEMM")
    e2e_reps = counted(int, 1, 1000, default=3, description="alternating end-to-end runs per environment")
    e2e_max_reps = counted(
        int,
        0,
        100000,
        default=0,
        description="the most alternations the end-to-end A/B runs while its paired interval is wider than 3% "
        "(0: four times --e2e-reps; --e2e-reps itself: no more than asked), which bounds its time",
    )
    allow_e2e_regression = luigi.BoolParameter(
        default=False,
        description="ship a bundle even when the workload ran slower with it end to end (beyond the run-to-run spread, "
        "or its whole paired interval under x1.00)",
    )
    e2e_graphs_only = luigi.BoolParameter(
        default=False,
        description="the end-to-end A/B applies the bundle through pipeline.runtime --graphs-only (only the GEMMs "
        "captured into CUDA graphs are routed, an eager call costs nothing), and the package's command says so: "
        "for a workload whose eager part is host-bound (the report says when)",
    )
    e2e_parallel = luigi.BoolParameter(
        default=False,
        description="the end-to-end A/B runs its alternations side by side, one on each GPU Validate may use, each "
        "run shown its GPU alone and each pair on one GPU: for a workload that runs on one GPU",
    )
    e2e_cmd = luigi.Parameter(
        default="",
        description="the workload the end-to-end A/B runs (default: --workload-cmd); a serving workload on another "
        "seed than the collection's proves the bundle at token counts it never saw",
    )

    def e2e_cap(self) -> int | None:
        """The most alternations the end-to-end A/B may run (None: the A/B's own default, four times
        ``--e2e-reps``); a cap below ``--e2e-reps`` is refused."""
        if not self.e2e_max_reps:
            return None
        if self.e2e_max_reps < self.e2e_reps:
            raise BadArguments(
                f"--e2e-max-reps {self.e2e_max_reps}: below --e2e-reps {self.e2e_reps}, the alternations the A/B "
                "runs at least; give at least that, or 0 (four times --e2e-reps)"
            )
        return self.e2e_max_reps

    made_from_params = (
        "min_speedup",
        "validate_rounds",
        "e2e_reps",
        "e2e_max_reps",
        "gate_margin",
        "margin",
        "workload_cmd",
        "e2e_cmd",
        "e2e_graphs_only",
        "e2e_parallel",
        "fp8",
        "allow_e2e_regression",
    )


class PackageParameters:
    dist = luigi.Parameter(
        default="", description="where package directories go, one per fingerprint (default: <workdir>/dist)"
    )
    publish = luigi.BoolParameter(default=False, description="copy the logic tree to --publish-dir/<fp>/")
    publish_dir = luigi.Parameter(default=str(REPO_LOGIC), description="where --publish puts logic (the repo's logic/)")
    package_devices = counted(int, 1, 1024, default=8, description="per-ordinal copies of the results file")
    docker_builder = luigi.Parameter(
        default="rocm/dev-ubuntu-24.04", description="image of the logic-compiling build stage (AMD)"
    )
    made_from_params = ("dist", "publish", "publish_dir", "package_devices", "docker_builder")


def embedded_args(task: luigi.Task) -> tuple[str, ...]:
    """The embedded workload's own options from ``task``'s parameters (none with --workload-cmd, whose command
    carries its own)."""
    if task.fp8 and task.workload_cmd:
        raise BadArguments(
            "--fp8 is an option of the embedded workload; with --workload-cmd, put the FP8 option "
            "in your command (e.g. 'python3 -m pipeline.workloads.llama --fp8')"
        )
    return ("--fp8",) if task.fp8 else ()


def split_specs(specs: str) -> list[str]:
    """A comma-separated parameter's entries (``--untuned``, ``--results``), blanks dropped."""
    return [spec.strip() for spec in specs.split(",") if spec.strip()]


def user_files(specs: list[str]) -> list[Path]:
    """The files ``specs`` name (files, directories, globs); a spec that names none stands for itself (its
    stage names what is missing when it runs)."""
    files: list[Path] = []
    for spec in specs:
        try:
            files += expand_inputs([spec])
        except BadInput:
            files.append(Path(spec))
    return files


def read_json(path: Path) -> dict | None:
    """A JSON file a stage wrote, or None where it did not write it."""
    return json.loads(path.read_text()) if path.exists() else None
