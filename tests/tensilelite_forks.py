"""Count the forks of TensileLite configs that a real TensileLite tree keeps, on a machine without ROCm.

    python tests/tensilelite_forks.py count TREE ARCH CONFIG.yaml [...]   # JSON: file -> [valid, total]
    python tests/tensilelite_forks.py solutions TREE ARCH CASES.json [MAX_LDS]   # JSON: reason or null per case
    python tests/tensilelite_forks.py read-logic TREE ARCH LOGIC.yaml [...]   # JSON: each file's tables, as read

``TREE`` is a TensileLite checkout (the folder holding ``Tensile/``, e.g. hipBLASLt's ``tensilelite``; its Python
needs joblib, msgpack and PyYAML). The script loads each config with the tree's own reader and enumerates its
forks as ``Tensile/BenchmarkProblems.py`` does (``BenchmarkProcess``, ``constructForkPermutations``, one
``Solution`` per permutation, ``Solution["Valid"]``), stopping before the first step that needs the GPU or the
compiler. Two stand-ins replace the ROCm tools the tree calls while it sets itself up:

- ``amdgpu-arch`` prints ``ARCH`` (``detectGlobalCurrentISA`` takes it as the current ISA);
- the assembler answers ``_initAsmCaps``'s probes (``Tensile/TensileInstructions/Base.py``) as LLVM's assembler
  answers them for gfx942 and gfx90a, and refuses every other target. Of its answers, ``SolutionStructs.py``
  reads ``SupportedISA``, ``HasMFMA``, ``HasWMMA*`` and ``HasNTModifier``; the others are listed for
  completeness.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
import tempfile
from copy import deepcopy
from pathlib import Path

# Probe instruction (its mnemonic and first operand, as _initAsmCaps writes it) -> the targets that accept it.
ACCEPTED = {
    "": ("gfx90a", "gfx942"),
    "v_add_co_u32 v0,vcc": ("gfx90a", "gfx942"),
    "buffer_load_dword v36": ("gfx90a", "gfx942"),
    "v_add_lshl_u32 v47": ("gfx90a", "gfx942"),
    "v_lshl_or_b32 v47": ("gfx90a", "gfx942"),
    "s_mul_hi_u32 s47": ("gfx90a", "gfx942"),
    "v_mfma_f32_32x32x1_2b_f32 a[0:31]": ("gfx942",),
    "v_mfma_f32_32x32x2bf16 a[0:31]": ("gfx90a",),
    "v_mfma_f64_16x16x4f64 v[0:7]": ("gfx90a",),
    "v_mfma_f64_16x16x4_f64 v[0:7]": ("gfx942",),
    "v_mfma_f32_32x32x4bf16_1k a[0:31]": ("gfx90a", "gfx942"),
    "v_mfma_f32_16x16x32_fp8_fp8 a[0:3]": ("gfx942",),
    "v_mfma_f32_16x16x32_bf8_bf8 a[0:3]": ("gfx942",),
    "v_mfma_f32_32x32x4_xf32 a[0:15]": ("gfx942",),
    "v_smfmac_f32_32x32x16_f16 a[0:15]": ("gfx942",),
    "v_mac_f16 v47": ("gfx90a",),
    "v_fma_f16 v47, v36, v34, v47": ("gfx90a", "gfx942"),
    "v_pk_fma_f16 v47, v36, v34, v47": ("gfx90a", "gfx942"),
    "v_pk_add_f32 v[48:49]": ("gfx90a", "gfx942"),
    "v_pk_mul_f32 v[48:49]": ("gfx90a", "gfx942"),
    "v_pk_mul_f32 v[20:21]": ("gfx90a", "gfx942"),
    "v_fma_mix_f32 v47": ("gfx90a", "gfx942"),
    "v_dot2_f32_f16 v20": ("gfx90a", "gfx942"),
    "v_dot2c_f32_f16 v47": ("gfx90a", "gfx942"),
    "v_dot4c_i32_i8 v47": ("gfx90a", "gfx942"),
    "v_dot4_i32_i8 v47, v36, v34, v47": ("gfx90a", "gfx942"),
    "v_mac_f32 v20": ("gfx90a",),
    "v_fma_f32 v20": ("gfx90a", "gfx942"),
    "v_fmac_f32 v20": ("gfx90a", "gfx942"),
    "v_fma_f64 v[20:21]": ("gfx90a", "gfx942"),
    "buffer_atomic_add_f32 v0, v1, s[0:3], 0": ("gfx90a", "gfx942"),
    "buffer_load_dwordx4 v[10:13], v[0], s[0:3], 0, offen offset:0, glc": ("gfx90a",),
    "buffer_load_dword v40": ("gfx90a", "gfx942"),
    "s_cmpk_gt_u32 s56": ("gfx90a", "gfx942"),
    "buffer_load_dwordx4 v[10:13], v[0], s[0:3], 0, offen offset:0, nt": ("gfx942",),
    "s_waitcnt vmcnt(63)": ("gfx90a", "gfx942"),
}


def _assembler(folder: Path) -> Path:
    """A shell stand-in for the ROCm assembler: exit 0 where ``ACCEPTED`` says the target takes the probe."""
    cases = "\n".join(f'  "{target}:{probe}") exit 0 ;;' for probe, targets in ACCEPTED.items() for target in targets)
    known = " ".join(f"'{probe}'" for probe in ACCEPTED if probe)
    script = f"""#!/bin/sh
for arg; do case "$arg" in -mcpu=*) target="${{arg#-mcpu=}}" ;; esac; done
probe="$(cat)"
for known in {known}; do
  case "$probe" in "$known"*) probe="$known" ;; esac
done
case "$target:$probe" in
{cases}
esac
echo "error: stand-in assembler: $target does not take: $probe" >&2
exit 1
"""
    return _executable(folder / "clang++", script)


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IRUSR)
    return path


def _load_tree(tree: Path, arch: str, folder: Path, max_lds: int | None = None):
    """Import the tree's Tensile and set its globals up as on an ``arch`` machine, with the stand-ins."""
    sys.path.insert(0, str(tree))
    os.environ["TENSILE_ROCM_ASSEMBLER_PATH"] = str(_assembler(folder))
    arch_tool = _executable(folder / "amdgpu-arch", f"#!/bin/sh\necho {arch}\n")
    from Tensile import Common

    config = {"AMDGPUArchPath": str(arch_tool), "PrintLevel": 0, "PrintSolutionRejectionReason": True}
    with contextlib.redirect_stdout(sys.stderr):
        Common.assignGlobalParameters({**config, **({"MaxLDS": max_lds} if max_lds else {})})


def count_forks(tree: Path, arch: str, configs: list[Path]) -> dict[str, list[int]]:
    """Per config file: [forks TensileLite keeps, forks it enumerates], summed over its problems and groups."""
    with tempfile.TemporaryDirectory() as tmp:
        _load_tree(tree, arch, Path(tmp))
        from Tensile import LibraryIO
        from Tensile.BenchmarkProblems import generateForkedSolutions
        from Tensile.BenchmarkStructs import BenchmarkProcess, constructForkPermutations

        counts = {}
        for config in configs:
            valid = total = 0
            for problem_type, *groups in LibraryIO.read(str(config))["BenchmarkProblems"]:
                for group in groups or [{}]:
                    with contextlib.redirect_stdout(sys.stderr):
                        process = BenchmarkProcess(problem_type, group)
                        for step in (process[i] for i in range(len(process))):
                            forks = constructForkPermutations(step.forkParams, step.paramGroups)
                            kept = generateForkedSolutions(process.problemType, step.constantParams, forks)
                            valid, total = valid + len(kept), total + len(forks)
            counts[str(config)] = [valid, total]
    return counts


def solution_rejections(tree: Path, arch: str, cases: list[dict], max_lds: int | None = None) -> list[str | None]:
    """Per case ({DataType, TransposeA, TransposeB, MatrixInstruction, DepthU, PrefetchGlobalRead[, 1LDSBuffer]}): the
    message the tree's ``Solution`` rejects it with, or None where it is valid."""
    with tempfile.TemporaryDirectory() as tmp:
        _load_tree(tree, arch, Path(tmp), max_lds)
        from Tensile.SolutionStructs import ProblemType, Solution

        found = []
        for case in cases:
            fp8 = case["DataType"] not in ("h", "b", "s", "d")
            problem_type = {
                "OperationType": "GEMM",
                "DataType": case["DataType"],
                "DestDataType": "b" if fp8 else case["DataType"],
                "ComputeDataType": "d" if case["DataType"] == "d" else "s",
                "HighPrecisionAccumulate": case["DataType"] not in ("s", "d"),
                "TransposeA": case["TransposeA"],
                "TransposeB": case["TransposeB"],
                "UseBeta": True,
                "Batched": True,
                **({"UseScaleAB": "Scalar"} if fp8 else {}),
            }
            parameters = {
                key: case[key]
                for key in (
                    "MatrixInstruction",
                    "DepthU",
                    "PrefetchGlobalRead",
                    "1LDSBuffer",
                    "StaggerU",
                    "StaggerUStride",
                )
                if key in case
            }
            log = io.StringIO()
            with contextlib.redirect_stdout(log):
                state = {"ProblemType": deepcopy(ProblemType(problem_type).state), "KernelLanguage": "Assembly"}
                solution = Solution({**_defaults(), **state, **parameters})
            rejects = [line for line in log.getvalue().splitlines() if line.startswith("reject: ")]
            found.append(None if solution["Valid"] else (rejects[-1][len("reject: ") :] if rejects else "rejected"))
    return found


def read_logic(tree: Path, arch: str, paths: list[Path]) -> dict[str, dict]:
    """Per logic file, what the tree's own reader makes of it (``LibraryIO.parseLibraryLogicFile``, which builds
    the ``MasterSolutionLibrary`` TensileCreateLibrary writes): each matching table's distance and keys."""
    with tempfile.TemporaryDirectory() as tmp:
        _load_tree(tree, arch, Path(tmp))
        from Tensile import LibraryIO

        found = {}
        for path in paths:
            with contextlib.redirect_stdout(sys.stderr):
                library = LibraryIO.parseLibraryLogicFile(str(path)).library
            tables, todo = [], [library.library]
            while todo:  # the hierarchy: predicate rows, problem maps, then the matching tables
                node = todo.pop()
                if hasattr(node, "distance"):
                    tables.append({"distance": node.distance, "keys": [row["key"] for row in node.table]})
                todo += [row["library"] for row in getattr(node, "rows", None) or []]
                todo += list((getattr(node, "mapping", None) or {}).values())
            found[str(path)] = {"tables": tables}
    return found


def _defaults() -> dict:
    """TensileLite's default solution parameters, one value each (BenchmarkStructs fills them in the same way)."""
    from Tensile.Common import defaultBenchmarkCommonParameters

    return {key: values[0] for item in defaultBenchmarkCommonParameters for key, values in item.items()}


if __name__ == "__main__":
    command, tree, arch, *rest = sys.argv[1:]
    if command == "count":
        result = count_forks(Path(tree), arch, [Path(f) for f in rest])
    elif command == "read-logic":
        result = read_logic(Path(tree), arch, [Path(f) for f in rest])
    else:  # "solutions" CASES.json [MAX_LDS]
        cases = json.loads(Path(rest[0]).read_text())
        result = solution_rejections(Path(tree), arch, cases, int(rest[1]) if len(rest) > 1 else None)
    print(json.dumps(result))
