"""Render hipBLASLt ``find_exact.py`` and TensileLite benchmark configs from the templates in ``templates/``.

One file per ProblemType (transposes, types, bias): ``find_exact/<name>.yaml`` and ``tensile/<name>.yaml``
(``docs/upstream.md`` sections 1 and 4). Problems a tool cannot tune are listed as
skipped with the reason; padded problems (``padding.py``) go to the Tensile config beside their original.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import jinja2
import yaml

from ...atomic import atomic_directory, atomic_write_json, atomic_write_text
from ...errors import BadInput
from ...formats import yaml_text
from ...formats.hipblaslt_bench import FP8_TYPES, fnuz_fp8_on_ocp_arch, ocp_fp8_on_fnuz_arch, scaled_reason
from ...formats.rocm import (
    ARCHS,
    FIND_EXACT_TYPES,
    NO_FP8_ARCHS,
    TENSILE_GENERATIONS,
    TENSILE_TYPES,
    get_arch,
    is_packed,
    problem_type_name,
    scale_ab,
    tensile_arch_refusal,
    tensile_data_type,
    to_amd,
)
from ...formats.tensile_forks import ForkPlan, lds_limit, plan_forks, plan_groups
from ...formats.tunableop import format_key
from ...problem import GemmProblem
from ..run import templates
from .padding import PaddedProblem, PaddingRule, plan_padding, rule_for_arch

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
MANIFEST = "configs.json"
ARCH_NAMES = tuple(ARCHS)


LIBRARY_TYPES = ("Equality", "GridBased")  # what a benchmark config's LibraryLogic section may ask for


@dataclass(frozen=True)
class ConfigSettings:
    arch: str = "gfx942"
    padding: str = "auto"  # "auto": the arch's rule; "off": none
    padding_rule: PaddingRule | None = None  # overrides the arch's rule when padding is "auto"
    cold_iter: int = 20
    iters: int = 100
    rotating_buffer_mb: int = 512
    split_k: tuple[int, ...] = (0,)
    preset: str = "mi300x"
    sleep_percent: int = 300
    max_workspace_bytes: int = 128 * 1024 * 1024
    tensile_generation: str = "2025"  # whose FP8 DataType letters the Tensile configs use (formats/rocm.py)
    templates: Path = TEMPLATES
    library_type: str = "Equality"  # the TensileLite logic the configs ask for (``library_type``)

    def __post_init__(self) -> None:
        get_arch(self.arch)
        if self.tensile_generation not in TENSILE_GENERATIONS:
            raise ValueError(
                f"tensile_generation must be one of {', '.join(TENSILE_GENERATIONS)}, not {self.tensile_generation!r}"
            )
        refusal = tensile_arch_refusal(self.arch, self.tensile_generation)
        if refusal:
            raise BadInput(refusal)
        if self.library_type not in LIBRARY_TYPES:
            raise ValueError(f"library_type must be one of {', '.join(LIBRARY_TYPES)}, not {self.library_type!r}")
        if self.padding not in ("auto", "off"):
            raise ValueError(f"padding must be 'auto' or 'off', not {self.padding!r}")
        if any(not 0 <= s <= 255 for s in self.split_k):
            raise ValueError(f"SplitK values must be 0..255, not {list(self.split_k)}")

    def rule(self) -> PaddingRule | None:
        if self.padding == "off":
            return None
        return self.padding_rule or rule_for_arch(self.arch)


@dataclass(frozen=True)
class Skipped:
    problem: GemmProblem
    tool: str
    reason: str


@dataclass
class ConfigPlan:
    """Which problems go into which file, which were padded, which were skipped and why."""

    find_exact: dict[str, list[GemmProblem]] = field(default_factory=lambda: defaultdict(list))
    find_exact_excluded: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    tensile: dict[str, list[GemmProblem]] = field(default_factory=lambda: defaultdict(list))
    padded: list[PaddedProblem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _common_reason(problem: GemmProblem) -> str | None:
    if problem.is_wildcard:
        return "wildcard key: tune the concrete shapes it stands for"
    if problem.compute_type == "tf32":
        return "tf32 (xf32) compute is not supported by the tool"
    if problem.compute_suffix:
        return f"compute mode {problem.compute_suffix!r} cannot be expressed"
    return None


def find_exact_reason(problem: GemmProblem) -> str | None:
    """Why find_exact.py cannot tune ``problem`` (None when it can)."""
    reason = _common_reason(problem)
    if reason:
        return reason
    if problem.op == "scaled_gemm":
        return (
            "find_exact.py passes hipblaslt-bench no --scaleA/--scaleB (docs/upstream.md), so it would time "
            "this FP8 GEMM unscaled: another problem, whose winner may be a kernel the scaled one cannot run. "
            "Tuned by --backend hipblaslt or tensile"
        )
    for dtype in {problem.a_type, problem.b_type, problem.c_type}:
        if dtype not in FIND_EXACT_TYPES:
            return f"find_exact.py has no type letter for {dtype} (it knows {', '.join(FIND_EXACT_TYPES.values())})"
    return None


def library_type(buckets: Iterable[tuple[int, int] | None]) -> str:
    """The logic a TensileLite config asks for: ``GridBased`` where an M grid's point serves a bucket of token
    counts wider than itself (``--m-grid``: the library then looks an unseen size up toward the next grid point,
    docs/upstream.md, "GridBased logic"), else ``Equality`` (exact sizes only)."""
    return "GridBased" if any(b is not None and b[0] < b[1] for b in buckets) else "Equality"


def tensile_reason(problem: GemmProblem, arch: str | None = None, generation: str = "2025") -> str | None:
    """Why the TensileLite config for ``arch`` (any, when None) in ``generation`` cannot hold ``problem``
    (None when it can). Scaled GEMMs go in as UseScaleAB Scalar (tensorwise) or Vector (rowwise)."""
    reason = _common_reason(problem)
    if reason:
        return reason
    if problem.op == "scaled_gemm":
        reason = scaled_reason(problem)
        if reason:
            return reason
    fp8 = [t for t in (problem.a_type, problem.b_type) if t in FP8_TYPES]
    if fp8 and (arch or "").startswith(NO_FP8_ARCHS):
        return f"{arch} has no FP8 matrix instructions"
    if any(ocp_fp8_on_fnuz_arch(t, arch) for t in fp8):
        return f"OCP FP8 ({', '.join(fp8)}) does not run on {arch}, whose FP8 kernels are the fnuz types"
    if any(fnuz_fp8_on_ocp_arch(t, arch) for t in fp8):
        return (
            f"fnuz FP8 ({', '.join(dict.fromkeys(fp8))}) on {arch}, whose FP8 is OCP (float8_e4m3fn, "
            f"float8_e5m2): upstream's {arch} logic holds F8/B8 alone; record the workload with the torch of the "
            f"{arch} machine"
        )
    if fp8 and problem.op != "scaled_gemm":
        return "an FP8 GEMM without scales is not one torch records"
    for dtype in (problem.c_type, problem.bias_type) if problem.op == "scaled_gemm" else (problem.c_type,):
        if dtype is not None and dtype not in TENSILE_TYPES:
            return f"no TensileLite DataType letter for {dtype} (known: {', '.join(TENSILE_TYPES)})"
    if tensile_data_type(problem.a_type, generation, problem.b_type) is None:
        return (
            f"no TensileLite DataType letter for {problem.a_type} x {problem.b_type} "
            f"(known: {', '.join(TENSILE_TYPES)} and the FP8 types)"
        )
    return None


def describe(problem: GemmProblem) -> str:
    op, params = format_key(problem)
    return f"{op},{params}"


def plan_configs(problems: Iterable[GemmProblem], settings: ConfigSettings) -> ConfigPlan:
    """Sort ``problems`` into per-ProblemType find_exact and Tensile files, padding where the rule says."""
    problems = list(dict.fromkeys(problems))
    reasons = {
        p: (find_exact_reason(p), tensile_reason(p, settings.arch, settings.tensile_generation)) for p in problems
    }
    plan = ConfigPlan(padded=plan_padding([p for p in problems if None in reasons[p]], settings.rule()))
    padded_by_original = {p.original: p for p in plan.padded}
    for problem in problems:
        name, padded = None, padded_by_original.get(problem)
        fe_reason, t_reason = reasons[problem]
        if fe_reason:
            plan.skipped.append(Skipped(problem, "find_exact", fe_reason))
        else:
            name = problem_type_name(problem, settings.tensile_generation)
            if not is_packed(problem):
                plan.find_exact_excluded[name].append(f"{describe(problem)} (recorded with non-packed ld's)")
            else:
                plan.find_exact[name].append(problem)
                if padded:
                    plan.find_exact_excluded[name].append(
                        f"{describe(padded.problem)} (padded from {describe(problem)})"
                    )
        if t_reason:
            plan.skipped.append(Skipped(problem, "tensile", t_reason))
        else:
            name = problem_type_name(problem, settings.tensile_generation)
            plan.tensile[name] += [problem, padded.problem] if padded else [problem]
    return plan


def _find_exact_problem_type(problem: GemmProblem) -> dict:
    letter = FIND_EXACT_TYPES
    return {
        "TransposeA": int(problem.transa == "T"),
        "TransposeB": int(problem.transb == "T"),
        "ComputeInputDataType": letter[problem.a_type],
        "ComputeDataType": "S",
        "DataTypeA": letter[problem.a_type],
        "DataTypeB": letter[problem.b_type],
        "DataTypeC": letter[problem.c_type],
        "DataTypeD": letter[problem.c_type],
        "UseBias": problem.op == "gemm_and_bias",
    }


def _tensile_problem_type(problem: GemmProblem, generation: str) -> dict:
    data_type = tensile_data_type(problem.a_type, generation, problem.b_type)
    compute = "d" if data_type == "d" else "s"
    return {
        "DataType": data_type,
        "DestDataType": TENSILE_TYPES[problem.c_type],
        "ComputeDataType": compute,
        "HighPrecisionAccumulate": data_type not in ("s", "d"),
        "TransposeA": int(problem.transa == "T"),
        "TransposeB": int(problem.transb == "T"),
        "UseBias": problem.has_bias,
        "BiasDataType": TENSILE_TYPES[problem.bias_type or problem.c_type] if problem.has_bias else None,
        "UseScaleAB": scale_ab(problem),
    }


def _for_data_type(preset: dict, section: str, data_type: str) -> list | None:
    """The preset's ``section`` entry for ``data_type``: every FP8 letter (F8, B8, F8B8, their N forms) shares the
    section's ``f8`` entry."""
    table = preset.get(section) or {}
    return table.get("f8" if data_type not in TENSILE_TYPES.values() else data_type)


def _matrix_instructions(preset: dict, data_type: str) -> list | None:
    """The preset's MatrixInstruction rows for ``data_type``."""
    return _for_data_type(preset, "matrix_instructions", data_type)


def presets_file(templates: Path) -> Path:
    """The TensileLite presets of a templates folder (``--tensile-preset`` names one)."""
    return templates / "tensile_presets.yaml"


def _preset_values(preset: dict, section: str, name: str) -> list:
    return [value for item in preset.get(section, []) for value in item.get(name, [])]


def _groups(preset: dict, data_type: str) -> list | None:
    """The preset's explicit fork groups for ``data_type``, if it lists any."""
    return _for_data_type(preset, "groups", data_type)


def _fork_plan(preset: dict, settings: ConfigSettings, problem_type: dict, instructions: list | None) -> ForkPlan:
    """The preset's fork groups that TensileLite keeps for this ProblemType, the others with its reason
    (formats/tensile_forks.py): its explicit groups for the DataType, else (MatrixInstruction, DepthU[,
    1LDSBuffer]) from its rows and forks."""
    prefetch = [bool(p) for p in _preset_values(preset, "common", "PrefetchGlobalRead")] or [True]
    groups = _groups(preset, problem_type["DataType"])
    if groups:
        return plan_groups(
            problem_type["DataType"],
            bool(problem_type["TransposeA"]),
            bool(problem_type["TransposeB"]),
            groups,
            lds_limit(settings.arch, settings.tensile_generation),
            prefetch,
        )
    depth_us = _preset_values(preset, "fork", "DepthU") or _preset_values(preset, "common", "DepthU")
    if not depth_us:
        raise BadInput(f"--tensile-preset {settings.preset!r} sets no DepthU in {presets_file(settings.templates)}")
    one_lds = _preset_values(preset, "fork", "1LDSBuffer") or None
    return plan_forks(
        problem_type["DataType"],
        bool(problem_type["TransposeA"]),
        bool(problem_type["TransposeB"]),
        instructions,
        depth_us,
        lds_limit(settings.arch, settings.tensile_generation),
        prefetch,
        one_lds,
    )


def other_forks(preset: dict) -> list[dict]:
    """The preset's forks besides DepthU and 1LDSBuffer (which the fork groups carry with the MatrixInstruction)."""
    return [item for item in preset["fork"] if not {"DepthU", "1LDSBuffer"} & set(item)]


def forks_per_pair(preset: dict) -> int:
    """How many forks each kept fork group stands for: the product of the other forks."""
    count = 1
    for item in other_forks(preset):
        count *= len(next(iter(item.values())))
    return count


def _preset(settings: ConfigSettings) -> dict:
    presets = load_presets(settings.templates)
    if settings.preset not in presets:
        raise BadInput(
            f"--tensile-preset {settings.preset!r}: no such preset in {presets_file(settings.templates)}; "
            f"known: {', '.join(presets)}"
        )
    return presets[settings.preset]


def fork_plans(plan: ConfigPlan, settings: ConfigSettings, preset: dict) -> dict[str, ForkPlan]:
    """Per Tensile config name: the preset's forks TensileLite keeps for it and those it would reject."""
    plans = {}
    for name, problems in sorted(plan.tensile.items()):
        problem_type = _tensile_problem_type(problems[0], settings.tensile_generation)
        instructions = _matrix_instructions(preset, problem_type["DataType"])
        if not instructions and not _groups(preset, problem_type["DataType"]):
            raise BadInput(
                f"--tensile-preset {settings.preset!r} has no MatrixInstruction for DataType "
                f"{problem_type['DataType']!r} in {presets_file(settings.templates)}"
            )
        plans[name] = _fork_plan(preset, settings, problem_type, instructions)
        if not plans[name].kept:
            raise BadInput(
                f"--tensile-preset {settings.preset!r}: TensileLite would reject every fork of {name} on "
                f"{settings.arch} ({plans[name].pruned[0][1]}, ...); add a smaller DepthU or MatrixInstruction "
                f"to {presets_file(settings.templates)}"
            )
    return plans


def load_presets(templates: Path) -> dict:
    path = presets_file(templates)
    try:
        return yaml_text.load(path.read_text())
    except (OSError, yaml.YAMLError) as err:  # a YAML error names the line
        raise BadInput(f"{path}: {err}") from None


def render_configs(
    plan: ConfigPlan, settings: ConfigSettings, preset: dict, forks: dict[str, ForkPlan]
) -> dict[str, str]:
    """Relative path -> rendered text, for every find_exact and Tensile file of ``plan`` (``preset``: the
    settings' TensileLite preset; ``forks``: ``fork_plans``' for it)."""
    env = templates.environment(
        settings.templates,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    arch = get_arch(settings.arch)
    common = {"arch": arch, "settings": settings}
    files = {}
    for name, problems in sorted(plan.find_exact.items()):
        sizes = sorted({tuple(to_amd(p).find_exact_size) for p in problems})
        files[f"find_exact/{name}.yaml"] = env.get_template("find_exact.yaml.j2").render(
            common,
            title="hipBLASLt find_exact.py config",
            name=name,
            problem_count=len(problems),
            problem_type=_find_exact_problem_type(problems[0]),
            sizes=sizes,
            excluded=plan.find_exact_excluded.get(name, []),
        )
    padded_lines = {p.problem: f"{describe(p.problem)}: {'; '.join(p.reasons)}" for p in plan.padded}
    for name, problems in sorted(plan.tensile.items()):
        problem_type = _tensile_problem_type(problems[0], settings.tensile_generation)
        sizes = list(dict.fromkeys(tuple(to_amd(p).tensile_exact) for p in problems))
        files[f"tensile/{name}.yaml"] = env.get_template("tensile_config.yaml.j2").render(
            common,
            title="TensileLite benchmark config",
            name=name,
            problem_count=len(problems),
            problem_type=problem_type,
            sizes=sizes,
            preset_name=settings.preset,
            preset=preset,
            fork_groups=forks[name].kept,
            other_forks=other_forks(preset),
            pruned=forks[name].lines(),
            fork_total=forks[name].total(),
            padded=[padded_lines[p] for p in problems if p in padded_lines],
        )
    return files


def manifest(plan: ConfigPlan, files: Iterable[str], settings: ConfigSettings, forks: dict[str, ForkPlan]) -> dict:
    rule = settings.rule()
    return {
        "arch": settings.arch,
        "tensile_generation": settings.tensile_generation,
        "padding": {"mode": settings.padding, "rule": asdict(rule) if rule else None},
        "files": sorted(files),
        "padded": [
            {"problem": describe(p.problem), "original": describe(p.original), "reasons": list(p.reasons)}
            for p in plan.padded
        ],
        "skipped": [{"problem": describe(s.problem), "tool": s.tool, "reason": s.reason} for s in plan.skipped],
        "forks": {
            f"tensile/{name}.yaml": {"kept": len(kept.kept), "total": kept.total(), "pruned": kept.lines()}
            for name, kept in forks.items()
        },
    }


def write_configs(
    out_dir: Path, problems: Iterable[GemmProblem], settings: ConfigSettings, marker: str | None = None
) -> dict:
    """Plan, render and write every config into ``out_dir`` (replaced as a whole; ``marker``: see
    ``atomic_directory``); return the manifest."""
    plan = plan_configs(problems, settings)
    preset = _preset(settings)
    forks = fork_plans(plan, settings, preset)
    files = render_configs(plan, settings, preset, forks)
    with atomic_directory(out_dir, marker) as staging:
        for relative, text in files.items():
            atomic_write_text(staging / relative, text)
        data = manifest(plan, files, settings, forks)
        atomic_write_json(staging / MANIFEST, data)
    return data


def summary(data: dict) -> str:
    """Human-readable account of a manifest: files, padded problems and skipped ones with reasons."""
    lines = [f"{len(data['files'])} config files for {data['arch']}:"] + [f"  {f}" for f in data["files"]]
    lines.append(f"{len(data['padded'])} padded problems:")
    lines += [f"  {p['problem']} <- {p['original']}: {'; '.join(p['reasons'])}" for p in data["padded"]]
    lines.append(f"{len(data['skipped'])} skipped:")
    lines += [f"  [{s['tool']}] {s['problem']}: {s['reason']}" for s in data["skipped"]]
    forks = data.get("forks", {})
    if forks:
        lines.append("TensileLite fork groups (MatrixInstruction, DepthU, ...) kept; it would reject the others:")
        lines += [f"  {f}: {c['kept']} of {c['total']}" for f, c in forks.items()]
    return "\n".join(lines) + "\n"


def configs_generation(configs_dir: Path) -> str:
    """The TensileLite generation the configs in ``configs_dir`` were named for (its manifest's; files written
    before the manifest recorded one: 2025)."""
    path = Path(configs_dir) / MANIFEST
    if not path.exists():
        return "2025"
    try:
        return json.loads(path.read_text()).get("tensile_generation", "2025")
    except (json.JSONDecodeError, AttributeError) as err:
        where = f":{err.lineno}" if isinstance(err, json.JSONDecodeError) else ""
        raise BadInput(f"{path}{where}: not a configs manifest ({err}); run GenerateConfigs again") from err
