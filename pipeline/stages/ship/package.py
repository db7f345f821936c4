"""The ship package of a run: ``dist/<fingerprint>/``, ready to copy into a Docker image.

It holds the gated bundle of one fingerprint only: the merged logic tree, ``tunableop_results.csv`` reduced
to the rows the target torch can dispatch (a solution name torch <= 2.13 does not know is a hard error at
dispatch, docs/tunableop.md section 2, "Reading") plus one copy per device ordinal (torch always splices the ordinal
into ``PYTORCH_TUNABLEOP_FILENAME``), the hipBLASLt override file where one exists, ``env.sh``, a
``Dockerfile`` fragment, a README and ``manifest.json`` (sha256 of every file; written last). Where rows need
``pipeline.runtime`` (cuBLASLt rows for a torch without them, Triton rows), ``runtime_results.csv``, the runtime
as a wheel (``wheels/``, ``wheel.py``) and the Triton rows' compiled kernels (``kernels/``, ``ship_kernels``).

Logic YAMLs only take effect once compiled into a device library; the fragment carries that build stage
when the logic is TensileLite's own (find_exact, tensile backends):
``TensileCreateLibrary [OPTIONS...] <LOGIC DIRECTORY> <OUTPUT DIRECTORY> <RUNTIME LANGUAGE>`` (tensilelite
docs, TensileCreateLibrary CLI reference), with ``--architecture``, ``--code-object-version`` (code object 4,
spelled as that TensileLite's ``--help`` offers it: the trees disagree, docs/upstream.md) and
``--library-format=msgpack``, the compiler left to each tree's default, and ``HIPBLASLT_TENSILE_LIBPATH``
pointing hipBLASLt at the result (spec section 6). The cuBLASLt and
hipblaslt-bench logic files are records of the winners, not compiled.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...atomic import atomic_directory, atomic_write_json, atomic_write_text, make_readable, mkdirs_readable
from ...formats.logic import copy_logic_file, is_record, load_logic
from ...formats.solution_names import unknown_solution, validators_platform
from ...formats.tunableop import read_file, write_file
from ...kernels.triton_cache import cache_dir as triton_cache_dir
from ...kernels.triton_cache import key_of, seed
from ...kernels.triton_gemm import PREFIX as TRITON
from ...runtime.table import KERNELS, RUNTIME_RESULTS
from ..bench.tune import OVERRIDE
from ..configs.render import TEMPLATES
from ..gather import mgrid
from ..run import templates
from ..run.fingerprint import Stack
from ..run.layout import RunLayout
from .wheel import write_runtime_wheel

INSTALL_ROOT = "/opt/gemm-tune"
WHEELS = "wheels"  # the runtime's wheel, for an image to install pipeline.runtime from (``wheel.py``)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_logic(bundle: Path, out: Path) -> bool:
    """The bundle's TensileLite logic into ``out/logic`` and its winner records into ``out/records`` (a bundle
    made before records moved out of ``logic/`` has them there: they move), so the tree TensileCreateLibrary
    compiles holds logic files alone; whether there is any logic to compile."""
    (out / "logic").mkdir()
    (out / "records").mkdir()
    compile_logic = False
    for path in sorted([*(bundle / "logic").glob("*.yaml"), *(bundle / "records").glob("*.yaml")]):
        record = is_record(load_logic(path))
        copy_logic_file(path, out / ("records" if record else "logic"))
        compile_logic |= not record
    return compile_logic


@dataclass(frozen=True)
class Rows:
    """The bundle's rows sorted for the target torch: those it dispatches, those it cannot (with the reason),
    and the cuBLASLt rows among them that ``pipeline.runtime`` applies instead (an M grid's grid rows, not the
    copies spread over their ranges: the runtime looks a range up in the manifest's ``m_ranges``)."""

    validators: dict
    platform: str
    torch_version: str
    servable: list
    unservable: list[dict]
    runtime_rows: list


def sort_rows(bundle: Path) -> Rows:
    """Step 1: which rows of ``bundle``'s results the target torch can dispatch."""
    results = read_file(bundle / "tunableop_results.csv")
    platform = validators_platform(results.validators)
    torch_version = results.validators.get("PT_VERSION", "unknown")
    servable, unservable, runtime_rows = [], [], []
    for entry in results.entries:
        why = unknown_solution(entry.solution or "", platform, torch_version)
        if why:
            unservable.append(
                {"key": f"{entry.op_signature},{entry.params_signature}", "solution": entry.solution, "why": why}
            )
            if platform == "cuda" and (entry.solution or "").startswith(("Gemm_Cublaslt_", TRITON)):
                runtime_rows.append(entry)  # torch cannot dispatch it; pipeline.runtime can
        else:
            servable.append(entry)
    runtime_rows = mgrid.unspread(runtime_rows, bundle_meta(bundle).get("m_ranges") or [])  # the runtime finds M ranges
    return Rows(results.validators, platform, torch_version, servable, unservable, runtime_rows)


def nvmath_requirement() -> str:
    """nvmath-python as an image installs it for pipeline.runtime: the version this process runs (the one the
    rows were tuned and validated with), or any 1.x where it has none."""
    try:
        return f"nvmath-python=={importlib.metadata.version('nvmath-python')}"
    except importlib.metadata.PackageNotFoundError:
        return "nvmath-python>=1.0"


def ship_kernels(run_dir: Path, stack: Stack, dest: Path, installed_at: str) -> dict:
    """Copy the Triton rows' compiled kernels into ``dest`` (``triton_cache.seed``, their paths rewritten to
    ``installed_at``, where the image holds them): those the runtime compiled in Validate's end-to-end A/B, for
    the Triton and kernel source the rows were tuned with. Returns what was shipped, or why nothing was (the
    runtime then compiles them as it starts)."""
    if not stack.facts.get("triton_kernels"):
        return {"entries": 0, "why": "the stack records no Triton kernel source"}
    e2e = RunLayout.of(run_dir).e2e
    try:
        compiled = json.loads(e2e.read_text()).get("kernels") if e2e.exists() else None
    except ValueError as err:
        raise ValueError(f"{e2e}: not the end-to-end record Validate writes ({err})") from err
    if not compiled or not Path(compiled).is_dir():
        return {"entries": 0, "why": "no end-to-end run compiled them (no workload, or TunableOp alone applied it)"}
    entries = 0
    for source in sorted(Path(compiled).glob("triton-*")):
        key = key_of(source) or {}  # a torn or missing key file: never shipped
        if (key.get("triton"), key.get("source")) != (stack.facts.get("triton"), stack.facts["triton_kernels"]):
            continue  # another Triton's or kernel source's: not what the rows were tuned with
        target = triton_cache_dir(dest, key)
        entries += seed(source, target, named_at=Path(installed_at) / target.name)
    return {"entries": entries, "from": compiled} if entries else {"entries": 0, "why": f"none in {compiled}"}


def environment(rows: Rows, install: str, override: bool, compile_logic: bool) -> dict[str, str]:
    """Step 2: the variables the image sets (TunableOp only where the target torch has rows to read)."""
    env = {}
    if rows.servable:
        env.update(
            PYTORCH_TUNABLEOP_ENABLED="1",
            PYTORCH_TUNABLEOP_TUNING="0",
            PYTORCH_TUNABLEOP_RECORD_UNTUNED="0",
            PYTORCH_TUNABLEOP_FILENAME=f"{install}/tunableop_results%d.csv",
        )
    if override:
        env["HIPBLASLT_TUNING_OVERRIDE_FILE"] = f"{install}/{OVERRIDE}"
    if compile_logic:
        env["HIPBLASLT_TENSILE_LIBPATH"] = f"{install}/library"
    return env


def bundle_meta(bundle: Path) -> dict:
    """The bundle's ``manifest.json``, read where the package needs its M ranges (``m_ranges``, none under
    ``--m-grid exact``) and the options its end-to-end A/B ran ``python -m pipeline.runtime`` with
    (``runtime_flags``, ``e2e.runtime_flags``)."""
    return json.loads((bundle / "manifest.json").read_text())


def manifest(
    out: Path,
    run_dir: Path,
    bundle: Path,
    stack: Stack,
    rows: Rows,
    env: dict,
    compile_logic: bool,
    kernels: dict | None,
) -> dict:
    """Step 3: what the package is (fingerprint, inputs, what it serves, the sha256 of every file), written last."""
    bundle_manifest = (bundle / "manifest.json").read_text()
    meta = json.loads(bundle_manifest)
    data = {
        "fingerprint": stack.fingerprint,
        "stack": stack.facts,
        "settings": stack.settings,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": {
            "run": str(Path(run_dir).absolute()),
            "bundle_manifest_sha256": hashlib.sha256(bundle_manifest.encode()).hexdigest(),
        },
        "serves": {
            "platform": rows.platform,
            "torch": rows.torch_version,
            "tunableop_rows": len(rows.servable),
            "runtime_rows": len(rows.runtime_rows),
            "note": (
                f"torch {rows.torch_version} exactly: TunableOp's PT_VERSION validator must equal the running "
                "torch's version, or the whole file is rejected"
            ),
        },
        "unservable": rows.unservable,
        "environment": env,
        "compile_logic": compile_logic,
        "triton_kernels": kernels,
        "key_figures": {k: v for k, v in meta.items() if k in ("rows", "weighted_gemm_speedup")},
        "m_ranges": meta.get("m_ranges") or [],  # what the runtime looks an unseen M up in (runtime.table)
        "default_ranges": meta.get("default_ranges") or [],  # where torch's default is the tuned choice
        "files": {str(p.relative_to(out)): _sha256(p) for p in sorted(out.rglob("*")) if p.is_file()},
    }
    atomic_write_json(out / "manifest.json", data)
    return data


def write_package(
    run_dir: Path, dist_root: Path, stack: Stack, devices: int = 8, builder_image: str = "rocm/dev-ubuntu-24.04"
) -> dict:
    """Write ``dist_root/<fingerprint>/`` from ``run_dir/bundle`` in three steps (the rows, the environment,
    the manifest); returns the manifest."""
    bundle = RunLayout.of(run_dir).bundle
    if not (bundle / "manifest.json").exists():
        raise FileNotFoundError(
            f"{bundle}: no accepted bundle to package (the gate refused it, or Validate did not run)"
        )
    rows = sort_rows(bundle)
    fp = stack.fingerprint
    install = f"{INSTALL_ROOT}/{fp}"
    target = mkdirs_readable(dist_root) / fp  # an image's user reads through every directory we made
    with atomic_directory(target) as out:
        compile_logic = copy_logic(bundle, out)
        write_file(out / "tunableop_results.csv", rows.validators, rows.servable)
        wheel, kernels = None, None
        runtime_triton = sum((e.solution or "").startswith(TRITON) for e in rows.runtime_rows)
        if rows.runtime_rows:
            write_file(out / RUNTIME_RESULTS, rows.validators, rows.runtime_rows)
            wheel = write_runtime_wheel(out / WHEELS).name
        if runtime_triton:
            kernels = ship_kernels(run_dir, stack, out / KERNELS, f"{install}/{KERNELS}")
        for ordinal in range(devices):
            shutil.copyfile(out / "tunableop_results.csv", out / f"tunableop_results{ordinal}.csv")
        override = (bundle / OVERRIDE).exists()
        if override:
            shutil.copyfile(bundle / OVERRIDE, out / OVERRIDE)
        env = environment(rows, install, override, compile_logic)
        context = {
            "fp": fp,
            "install": install,
            "stack": stack.facts,
            "platform": rows.platform,
            "torch_version": rows.torch_version,
            "rows": len(rows.servable),
            "unservable": rows.unservable,
            "env": env,
            "torch_env": {k: v for k, v in env.items() if k.startswith("PYTORCH_")},
            "lib_env": {k: v for k, v in env.items() if not k.startswith("PYTORCH_")},
            "override": override,
            "compile": compile_logic,
            "builder": builder_image,
            "arch": (stack.facts.get("arch") or "").split(":")[0],
            "devices": devices,
            "hipblaslt_git": stack.facts.get("hipblaslt_git"),
            "runtime_rows": len(rows.runtime_rows),
            "runtime_file": RUNTIME_RESULTS,
            "runtime_triton": runtime_triton,
            "wheels": WHEELS,
            "wheel": wheel,
            "nvmath": nvmath_requirement(),
            "kernels": KERNELS if kernels and kernels.get("entries") else None,
            "runtime_flags": list(bundle_meta(bundle).get("runtime_flags") or []),  # as Validate's A/B applied them
        }
        jinja = templates.environment(TEMPLATES, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
        for name, template in (
            ("env.sh", "package_env.sh.j2"),
            ("Dockerfile", "package_Dockerfile.j2"),
            ("README.md", "package_README.md.j2"),
        ):
            atomic_write_text(out / name, jinja.get_template(template).render(context))
        (out / "env.sh").chmod(0o755)
        data = manifest(out, run_dir, bundle, stack, rows, env, compile_logic, kernels)
        make_readable(out)  # an image's non-root user reads it (Docker's COPY keeps modes)
    return data


def publish(package_dir: Path, repo_logic: Path) -> Path:
    """Copy the package's logic tree and winner records to ``repo_logic/<fingerprint>/`` (replacing that
    fingerprint's only): the base the next merge of this stack starts from (``published_base``), whose merge puts
    the records beside its logic again."""
    package_dir = Path(package_dir)
    with atomic_directory(mkdirs_readable(repo_logic) / package_dir.name) as out:
        for path in sorted([*(package_dir / "logic").glob("*"), *(package_dir / "records").glob("*")]):
            shutil.copyfile(path, out / path.name)
        make_readable(out)
    return Path(repo_logic) / package_dir.name


def published_base(repo_logic: Path, fp: str) -> Path:
    """The base logic of a merge: what was published for this fingerprint, else the top of ``repo_logic``."""
    own = Path(repo_logic) / fp
    return own if own.is_dir() else Path(repo_logic)
