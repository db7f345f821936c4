"""The ship package: dist/<fingerprint>/ with what an image needs, and only rows the target torch can load."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.formats.solution_names import unknown_solution
from pipeline.formats.tunableop import TunableOpEntry, parse_key, read_file, write_file
from pipeline.stages.run.fingerprint import Stack
from pipeline.stages.ship.package import write_package

from . import logic_factory
from .helpers import run_amd_dag as _run

CUBLASLT = "Gemm_Cublaslt_id_21_tile_18_stages_21_splitk_1_red_0_swizzle_0_custom_0"


def _bundle(run: Path, validators: dict, solutions: list[str], tensile_logic: bool = False) -> Path:
    bundle = run / "bundle"
    (bundle / "logic").mkdir(parents=True)
    entries = [
        TunableOpEntry.from_problem(
            parse_key("GemmTunableOp_BFloat16_TN", f"tn_{4096 + i}_8_4096_ld_4096_4096_{4096 + i}"), s, 0.01
        )
        for i, s in enumerate(solutions)
    ]
    write_file(bundle / "tunableop_results.csv", validators, entries)
    if tensile_logic:
        logic_factory.write(
            bundle / "logic",
            "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml",
            logic_factory.logic([[[4096, 8, 1, 4096], [0, 100.0]]], [logic_factory.solution(128)]),
        )
    (bundle / "manifest.json").write_text(json.dumps({"rows": len(entries), "weighted_gemm_speedup": 1.05}))
    return run


STACK = Stack(
    "cuda-sm90-0123456789ab",
    {
        "platform": "cuda",
        "gpu": "NVIDIA H100 80GB HBM3",
        "arch": "sm90",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "sm_count": 132,
    },
    {"backend": "cublaslt"},
)


@pytest.mark.parametrize(
    ("solution", "platform", "torch", "known"),
    [
        ("Default", "cuda", "2.11.0", True),
        (CUBLASLT, "cuda", "2.13.1", False),
        (CUBLASLT, "cuda", "2.14.0", True),
        ("Gemm_Hipblaslt_572", "rocm", "2.7.0", True),
        ("Gemm_Hipblaslt_TN_572", "rocm", "2.6.0", True),
        ("Gemm_Hipblaslt_TN_572", "rocm", "2.11.0", False),
        ("Gemm_Rocblas_-61", "rocm", "2.11.0", True),
        ("Gemm_Hipblaslt_572", "cuda", "2.14.0", False),
        (CUBLASLT, "rocm", "2.14.0", False),
    ],
)
def test_which_solutions_a_torch_can_dispatch(solution, platform, torch, known):
    assert (unknown_solution(solution, platform, torch) is None) == known


def test_a_cuda_package_for_torch_before_2_14_leaves_out_what_it_cannot_dispatch(tmp_path):
    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.11.0"}, [CUBLASLT, CUBLASLT.replace("21", "6", 1)])
    manifest = write_package(run, tmp_path / "dist", STACK, devices=2)
    out = tmp_path / "dist" / STACK.fingerprint
    assert read_file(out / "tunableop_results.csv").entries == [] and manifest["serves"]["tunableop_rows"] == 0
    assert len(manifest["unservable"]) == 2 and "2.14" in manifest["unservable"][0]["why"]
    env = (out / "env.sh").read_text()
    assert "PYTORCH_TUNABLEOP_ENABLED" not in env and "TunableOp stays off" in env
    assert "ENV" not in (out / "Dockerfile").read_text().split("final stage")[1]
    readme = (out / "README.md").read_text()
    assert "Serves torch 2.11.0" in readme
    # ... and hands them to pipeline.runtime, which applies them in that torch
    assert manifest["serves"]["runtime_rows"] == 2 and len(read_file(out / "runtime_results.csv").entries) == 2
    assert manifest["triton_kernels"] is None  # no Triton row: no kernels to ship, and nothing said of them
    assert f"python -m pipeline.runtime --bundle /opt/gemm-tune/{STACK.fingerprint}" in readme
    from pipeline.runtime.table import load_table

    assert len(load_table(out)) == 2  # the runtime finds them in the package directory
    assert "--graphs-only" not in readme
    manifest_path = run / "bundle" / "manifest.json"  # a bundle Validate proved through runtime --graphs-only
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "runtime_flags": ["--graphs-only"]}))
    write_package(run, tmp_path / "dist", STACK, devices=2)
    readme = (out / "README.md").read_text()
    assert f"python -m pipeline.runtime --bundle /opt/gemm-tune/{STACK.fingerprint} --graphs-only -- " in readme
    assert "Validate proved the bundle with --graphs-only" in readme


TRITON = "triton_r16c64k256_s2_g8_w4_st4"


@pytest.mark.parametrize("torch_version", ["2.11.0", "2.14.0"])
def test_triton_rows_go_to_the_runtime_and_never_to_torchs_file(tmp_path, torch_version):
    run = _bundle(tmp_path / "run", {"PT_VERSION": torch_version}, [CUBLASLT, TRITON])
    manifest = write_package(run, tmp_path / "dist", STACK, devices=1)
    out = tmp_path / "dist" / STACK.fingerprint
    torch_rows = [e.solution for e in read_file(out / "tunableop_results.csv").entries]
    runtime_rows = [e.solution for e in read_file(out / "runtime_results.csv").entries]
    assert TRITON not in torch_rows  # TunableOp never meets a name it does not know: it runs torch's default
    assert torch_rows == ([] if torch_version == "2.11.0" else [CUBLASLT])
    assert runtime_rows == ([CUBLASLT, TRITON] if torch_version == "2.11.0" else [TRITON])
    (why,) = [u["why"] for u in manifest["unservable"] if u["solution"] == TRITON]
    assert why == f"no torch names a solution {TRITON}"


def test_a_package_lists_every_file_with_its_hash_and_serves_its_torch_exactly(tmp_path):
    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.14.0"}, [CUBLASLT])
    manifest = write_package(run, tmp_path / "dist", STACK, devices=3)
    out = tmp_path / "dist" / STACK.fingerprint
    assert manifest["serves"] == {**manifest["serves"], "torch": "2.14.0", "tunableop_rows": 1, "platform": "cuda"}
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    assert all(hashlib.sha256((out / f).read_bytes()).hexdigest() == h for f, h in manifest["files"].items())
    assert [(out / f"tunableop_results{i}.csv").read_text() for i in range(3)] == [
        (out / "tunableop_results.csv").read_text()
    ] * 3
    env = (out / "env.sh").read_text()
    install = f"/opt/gemm-tune/{STACK.fingerprint}"
    assert f'GEMM_TUNE_PACKAGE="${{GEMM_TUNE_PACKAGE:-{install}}}"' in env and '= "2.14.0" ]' in env
    assert subprocess.run(["sh", "-n", str(out / "env.sh")]).returncode == 0
    fake_python = tmp_path / "bin"
    fake_python.mkdir()
    for version, applied in (("2.14.0", True), ("2.15.0", False)):
        (fake_python / "python3").write_text(f"#!/bin/sh\necho {version}+cu130\n")
        (fake_python / "python3").chmod(0o755)
        shell = f'PATH={fake_python}:$PATH; . {out / "env.sh"}; echo "[$PYTORCH_TUNABLEOP_FILENAME]"'
        proc = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
        assert (f"[{install}/tunableop_results%d.csv]" in proc.stdout) == applied, proc.stdout + proc.stderr
        assert applied or "serves torch 2.14.0; found 2.15.0" in proc.stderr
    docker = (out / "Dockerfile").read_text()
    assert f"PYTORCH_TUNABLEOP_FILENAME={install}/tunableop_results%d.csv" in docker
    assert "TensileCreateLibrary" not in docker


def test_tensile_logic_gets_a_compile_stage_and_the_library_path(tmp_path):
    rocm = Stack(
        "rocm-gfx942-0123456789ab",
        {"platform": "rocm", "arch": "gfx942:sramecc+:xnack-", "hipblaslt": "100300", "hipblaslt_git": "abc"},
        {"backend": "tensile"},
    )
    run = _bundle(
        tmp_path / "run", {"PT_VERSION": "2.11.0", "HIP_VERSION": "70051831"}, ["Default"], tensile_logic=True
    )
    manifest = write_package(run, tmp_path / "dist", rocm, devices=1)
    docker = (tmp_path / "dist" / rocm.fingerprint / "Dockerfile").read_text()
    assert manifest["compile_logic"] and "--architecture=gfx942 " in docker
    assert "/gemm-tune/logic /gemm-tune/build HIP" in docker
    assert f"HIPBLASLT_TENSILE_LIBPATH=/opt/gemm-tune/{rocm.fingerprint}/library" in docker


def test_the_package_task_ships_the_amd_run_and_publishes_its_logic(tmp_path):
    _run(
        tmp_path,
        "night",
        "",
        "Package",
        "--dist",
        str(tmp_path / "dist"),
        "--publish",
        "--publish-dir",
        str(tmp_path / "repo-logic"),
        rounds=1,
    )
    record = json.loads((tmp_path / "w" / "night" / "package" / "package.json").read_text())
    out = Path(record["package"])
    assert out.parent == tmp_path / "dist" and out.name.startswith("rocm-gfx942-")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stack"]["hipblaslt_git"] == "de5c1aebb6-dirty" and manifest["serves"]["platform"] == "rocm"
    assert manifest["serves"]["tunableop_rows"] == len(read_file(out / "tunableop_results.csv").entries) > 0
    assert "HIPBLASLT_TUNING_OVERRIDE_FILE" in manifest["environment"] and (out / "hipblaslt_override.txt").exists()
    published = sorted(p.name for p in (tmp_path / "repo-logic" / out.name).iterdir())
    shipped = sorted(p.name for d in ("logic", "records") for p in (out / d).iterdir())
    assert published == shipped and published
    assert not list((out / "logic").iterdir()), "hipBLASLt winner records alone: no TensileLite logic to compile"
    assert all(name.startswith("hipblaslt_Cijk_") for name in published) and not manifest["compile_logic"]


@pytest.mark.parametrize("shell", ["bash", "sh"])
@pytest.mark.parametrize("python3", ["missing", "no torch"])
def test_env_sh_never_aborts_a_caller_under_set_e(tmp_path, shell, python3):
    """A hipBLASLt-only image, or another venv: no python3, or one without torch, is a mismatch, not an error."""
    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.14.0"}, [CUBLASLT])
    write_package(run, tmp_path / "dist", STACK, devices=1)
    env_sh = tmp_path / "dist" / STACK.fingerprint / "env.sh"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash", "cat", "echo"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    if python3 == "no torch":
        (bin_dir / "python3").write_text("#!/bin/sh\necho 'ModuleNotFoundError: torch' >&2\nexit 1\n")
        (bin_dir / "python3").chmod(0o755)
    script = f'set -eu; . "{env_sh}"; echo "after [${{PYTORCH_TUNABLEOP_ENABLED:-unset}}]"'
    proc = subprocess.run(
        [shutil.which(shell) or shell, "-c", script], capture_output=True, text=True, env={"PATH": str(bin_dir)}
    )
    assert proc.returncode == 0 and "after [unset]" in proc.stdout, proc.stdout + proc.stderr
    assert "found no torch: TunableOp rows not applied" in proc.stderr


def test_what_ships_is_readable_by_any_user_whatever_the_umask(tmp_path):
    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.14.0"}, [CUBLASLT])
    old = os.umask(0o077)
    try:
        write_package(run, tmp_path / "new" / "dist", STACK, devices=2)
    finally:
        os.umask(old)
    out = tmp_path / "new" / "dist" / STACK.fingerprint
    for path in [tmp_path / "new", out.parent, out, *out.rglob("*")]:  # the directories it created too
        mode = path.stat().st_mode & 0o777
        if path.is_dir() or path.name == "env.sh":
            assert mode == 0o755, f"{path}: {oct(mode)}"
        else:
            assert mode == 0o644, f"{path}: {oct(mode)}"


def test_atomic_writes_get_the_mode_a_plain_open_would(tmp_path):
    from pipeline.atomic import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        with open(tmp_path / "b.txt", "w") as handle:
            handle.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o644


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="reading as another user needs root and setpriv"
)
def test_a_non_root_user_reads_the_package(tmp_path):
    import tempfile

    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.14.0"}, [CUBLASLT])
    dist = Path(tempfile.mkdtemp(prefix="gemm-tune-dist-", dir="/tmp"))
    try:
        dist.chmod(0o755)
        write_package(run, dist, STACK, devices=1)
        for name in ("manifest.json", "tunableop_results0.csv", "Dockerfile", "README.md", "env.sh"):
            proc = subprocess.run(
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "cat",
                    str(dist / STACK.fingerprint / name),
                ],
                capture_output=True,
                text=True,
            )
            assert proc.returncode == 0, f"{name}: {proc.stderr}"
    finally:
        shutil.rmtree(dist)


def _run_line(dockerfile: str) -> str:
    """The shell command of the fragment's build-stage RUN, continuation lines joined."""
    text = dockerfile.split("\nRUN ", 1)[1]
    lines = []
    for line in text.splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(lines)


@pytest.mark.parametrize("generation", ["6.2", "6.3", "2025a", "2025"])
def test_the_fragment_builds_the_library_with_every_tensilelite_generation(generation, tmp_path):
    """TensileCreateLibrary's options differ by generation (ROCm 6.2 takes only hipcc, 2024 trees take
    --code-object-version default|V4|V5, some 2025 trees only 4|5): the fragment's RUN works with each."""
    import sys

    from .helpers import DOUBLES

    rocm = Stack(
        "rocm-gfx942-0123456789ab",
        {"platform": "rocm", "arch": "gfx942:sramecc+:xnack-", "hipblaslt": "1000", "hipblaslt_git": "abc"},
        {"backend": "tensile"},
    )
    run = _bundle(
        tmp_path / "run", {"PT_VERSION": "2.11.0", "HIP_VERSION": "70051831"}, ["Default"], tensile_logic=True
    )
    write_package(run, tmp_path / "dist", rocm, devices=1)
    line = _run_line((tmp_path / "dist" / rocm.fingerprint / "Dockerfile").read_text())
    line = line.replace("/gemm-tune/", f"{tmp_path}/gemm-tune/")
    install, rest = line.split(" && ", 1)
    assert install.startswith('python3 -m pip install "${TENSILELITE:?')
    (tmp_path / "gemm-tune" / "logic").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "TensileCreateLibrary").write_text(
        f'#!/bin/sh\nexec {sys.executable} {DOUBLES / "TensileCreateLibrary"} "$@"\n'
    )
    (bin_dir / "TensileCreateLibrary").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "TENSILE_DOUBLE_GENERATION": generation}
    proc = subprocess.run(["sh", "-ec", rest], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads((tmp_path / "gemm-tune" / "build" / "library" / "TensileLibrary.dat").read_text())
    assert ran["Architecture"] == "gfx942" and ran["CodeObjectVersion"] in ("V4", "4")
    old = (
        "TensileCreateLibrary --architecture=gfx942 --cxx-compiler=/opt/rocm/bin/amdclang++ "
        f"--code-object-version=5 --library-format=msgpack {tmp_path}/gemm-tune/logic {tmp_path}/x HIP"
    )
    old_failed = subprocess.run(["sh", "-c", old], capture_output=True, env=env).returncode != 0
    assert old_failed == (generation in ("6.2", "6.3")), "the line printed before failed on the 2024 trees"


def _copied_by_the_fragment(dockerfile: str, context: Path, root: Path) -> None:
    """Carry out the fragment's final-stage ``COPY`` lines from build context ``context`` into image root
    ``root`` (``COPY --from`` of the build stage left out), as ``docker build`` would."""
    import glob

    final = dockerfile.split("final stage", 1)[1]
    for line in final.splitlines():
        if not line.startswith("COPY ") or line.startswith("COPY --from"):
            continue
        *sources, dest = line.split()[1:]
        target = root / dest.lstrip("/")
        for source in sources:
            matches = sorted(glob.glob(str(context / source.rstrip("/"))))
            assert matches, f"COPY {source}: nothing in the build context matches"
            for match in map(Path, matches):
                if match.is_dir():  # a directory's contents go into the destination
                    shutil.copytree(match, target, dirs_exist_ok=True)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(match, target / match.name)


@pytest.mark.parametrize("torch_version", ["2.11.0", "2.14.0"])
def test_the_image_the_fragment_builds_holds_every_file_the_package_serves_from(tmp_path, torch_version):
    from pipeline.runtime.table import load_table

    run = _bundle(tmp_path / "run", {"PT_VERSION": torch_version}, [CUBLASLT, TRITON, "Default"])
    manifest = write_package(run, tmp_path / "dist", STACK, devices=2)
    out = tmp_path / "dist" / STACK.fingerprint
    image = tmp_path / "image"
    _copied_by_the_fragment((out / "Dockerfile").read_text(), out, image)
    install = image / f"opt/gemm-tune/{STACK.fingerprint}"
    in_image = {str(p.relative_to(install)) for p in install.rglob("*") if p.is_file()}
    assert in_image == set(manifest["files"]) - {"Dockerfile"} | {"manifest.json"}
    # the runtime the README prints finds in the image the rows it finds in the package
    assert len(load_table(install)) == len(load_table(out)) == manifest["serves"]["runtime_rows"]
    assert "ENV GEMM_TUNE_CACHE=/tmp/gemm-tune" in (out / "Dockerfile").read_text()  # the Triton row compiles there
    assert "nvmath-python" in _run_line((out / "Dockerfile").read_text())  # the runtime loads it, Triton rows alone too
    readme = (out / "README.md").read_text()
    runtime_rows = manifest["serves"]["runtime_rows"]
    assert f"{runtime_rows} rows for `pipeline.runtime`** ({runtime_rows - 1} cuBLASLt algorithms, 1 Triton" in readme


def test_the_runtime_the_fragment_installs_reads_the_package_in_a_bare_python(tmp_path):
    """The fragment's RUN installs pipeline.runtime from the package's own wheel, offline: a Python that has
    none of this project reads the rows from the image's copy (nvmath-python's install, from an index, and
    torch, the image's own, are left out here)."""
    import sys

    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.11.0"}, [CUBLASLT, TRITON])
    write_package(run, tmp_path / "dist", STACK, devices=1)
    out = tmp_path / "dist" / STACK.fingerprint
    docker = (out / "Dockerfile").read_text()
    image = tmp_path / "image"
    _copied_by_the_fragment(docker, out, image)
    install_cmd = _run_line(docker).split(" && ")[0]
    assert install_cmd.startswith("python3 -m pip install --no-cache-dir --no-deps /opt/gemm-tune/")
    assert "nvmath-python" in _run_line(docker)  # the cuBLASLt row needs it
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)  # pip from ensurepip
    python = str(tmp_path / "venv" / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    argv = install_cmd.split()
    argv[0], argv[-1] = python, str(image / argv[-1].lstrip("/"))  # as printed, in the image's root
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_NO_INDEX": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    read = (
        "import sys, pipeline; from pipeline.runtime.table import load_table; "
        "assert 'luigi' not in sys.modules; print(pipeline.__file__, len(load_table(sys.argv[1])))"
    )
    install = image / f"opt/gemm-tune/{STACK.fingerprint}"
    proc = subprocess.run([python, "-c", read, str(install)], capture_output=True, text=True, cwd="/", env=env)
    assert proc.returncode == 0, proc.stderr
    where, rows = proc.stdout.split()
    assert where.startswith(site) and int(rows) == 2


def _compiled_in_e2e(run: Path, key: dict) -> Path:
    """What Validate's end-to-end A/B leaves: the runtime's kernel cache, named in validate/e2e.json."""
    from pipeline.kernels.triton_cache import cache_dir

    kernels = run / "validate" / "e2e-runtime" / "kernels"
    entry = cache_dir(kernels, key) / "ENTRY"
    entry.mkdir()
    (entry / "gemm.cubin").write_bytes(b"sass")
    (entry / "__grp__gemm.json").write_text(json.dumps({"child_paths": {"gemm.cubin": str(entry / "gemm.cubin")}}))
    (run / "validate" / "e2e.json").write_text(json.dumps({"via": "runtime", "kernels": str(kernels)}))
    return kernels


def test_a_package_ships_the_kernels_its_triton_rows_were_validated_with(tmp_path):
    from pipeline.kernels.triton_cache import cache_key, cache_name, source_hash

    stack = Stack(STACK.fingerprint, {**STACK.facts, "triton": "3.6.0", "triton_kernels": source_hash()}, {})
    run = _bundle(tmp_path / "run", {"PT_VERSION": "2.11.0"}, [TRITON])
    key = cache_key(STACK.facts["gpu"], "9.0", "3.6.0", "2.11.0")
    _compiled_in_e2e(run, key)
    other = _compiled_in_e2e(tmp_path / "other", {**key, "triton": "3.5.0"})  # another Triton's: never shipped
    manifest = write_package(run, tmp_path / "dist", stack, devices=1)
    out = tmp_path / "dist" / STACK.fingerprint
    assert manifest["triton_kernels"]["entries"] == 1
    group = json.loads((out / "kernels" / cache_name(key) / "ENTRY" / "__grp__gemm.json").read_text())
    install = f"/opt/gemm-tune/{STACK.fingerprint}"
    assert group["child_paths"]["gemm.cubin"] == f"{install}/kernels/{cache_name(key)}/ENTRY/gemm.cubin"
    docker = (out / "Dockerfile").read_text()
    assert f"COPY kernels/ {install}/kernels/" in docker and "loads the Triton rows' kernels" in docker
    image = tmp_path / "image"
    _copied_by_the_fragment(docker, out, image)
    assert (image / install.lstrip("/") / "kernels" / cache_name(key) / "ENTRY" / "gemm.cubin").read_bytes() == b"sass"
    # rows tuned with another Triton than the end-to-end run compiled with: nothing shipped, and the reason
    (run / "validate" / "e2e.json").write_text(json.dumps({"kernels": str(other)}))
    again = write_package(run, tmp_path / "dist2", stack, devices=1)
    assert again["triton_kernels"]["entries"] == 0 and "none in" in again["triton_kernels"]["why"]
    (run / "validate" / "e2e.json").write_text("{torn")
    with pytest.raises(ValueError, match=r"e2e\.json: not the end-to-end record Validate writes"):
        write_package(run, tmp_path / "dist3", stack, devices=1)
    assert "COPY kernels/" not in (tmp_path / "dist2" / STACK.fingerprint / "Dockerfile").read_text()


def test_the_runtime_rows_of_an_m_grid_are_its_grid_rows_and_the_manifest_carries_their_ranges(tmp_path):
    """A bundle spread over M ranges (one row per token count, for TunableOp) ships the runtime its grid rows
    alone and the ranges in the package's manifest: the runtime finds every count of a range from them."""
    from pipeline.runtime.table import load_table, runtime_key
    from pipeline.stages.gather import mgrid

    op = "GemmTunableOp_BFloat16_TN"
    grid = [
        TunableOpEntry.from_problem(parse_key(op, f"tn_4096_{n}_4096_ld_4096_4096_4096"), CUBLASLT, 0.01)
        for n in (8, 16)
    ]
    exact = TunableOpEntry.from_problem(parse_key(op, "tn_1024_3_4096_ld_4096_4096_1024"), CUBLASLT, 0.01)
    buckets = {f"{e.op_signature},{e.params_signature}": b for e, b in zip(grid, [(5, 8), (9, 16)], strict=True)}
    entries, ranges = mgrid.spread([*grid, exact], buckets)
    run = tmp_path / "run"
    (run / "bundle" / "logic").mkdir(parents=True)
    write_file(run / "bundle" / "tunableop_results.csv", {"PT_VERSION": "2.11.0"}, entries)
    (run / "bundle" / "manifest.json").write_text(json.dumps({"rows": len(entries), "m_ranges": ranges}))
    manifest = write_package(run, tmp_path / "dist", STACK, devices=1)
    out = tmp_path / "dist" / STACK.fingerprint
    shipped = read_file(out / "runtime_results.csv").entries
    assert len(entries) == 13 and [e.problem.n for e in shipped] == [8, 16, 3]
    assert manifest["serves"]["runtime_rows"] == 3 and manifest["m_ranges"] == ranges
    table = load_table(out)
    for n in range(5, 17):
        assert table.find(runtime_key(parse_key(op, f"tn_4096_{n}_4096_ld_4096_4096_4096")))[1] == CUBLASLT
    assert table.find(runtime_key(parse_key(op, "tn_4096_4_4096_ld_4096_4096_4096"))) is None
    assert mgrid.unspread(entries, []) == entries  # no ranges: nothing is a copy
