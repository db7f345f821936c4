"""Build small TensileLite logic files (list layout) for the merge tests, as the spec describes them."""

from __future__ import annotations

from pathlib import Path

import yaml

PROBLEM_TYPE = {
    "DataType": 7,
    "DestDataType": 7,
    "ComputeDataType": 0,
    "TransposeA": True,
    "TransposeB": False,
    "UseBias": False,
    "Batched": True,
    "HighPrecisionAccumulate": True,
}


def solution(tile: int, index: int = 0, gsu: int = 1, stagger: int = 32, problem_type: dict | None = None) -> dict:
    return {
        "SolutionIndex": index,
        "SolutionNameMin": f"Cijk_Alik_Bljk_BBS_BH_MT{tile}x{tile}_GSU{gsu}_SU{stagger}",
        "KernelNameMin": f"Cijk_Alik_Bljk_BBS_BH_MT{tile}x{tile}",
        "MacroTile0": tile,
        "MacroTile1": tile,
        "GlobalSplitU": gsu,
        "StaggerU": stagger,
        "StaggerUMapping": 1,
        "StaggerUStride": 256,
        "_staggerStrideShift": 2,
        "ProblemType": dict(problem_type or PROBLEM_TYPE),
    }


def logic(rows: list, solutions: list, library_type: str = "Equality", problem_type: dict | None = None) -> list:
    return [
        {"MinimumRequiredVersion": "4.33.0"},
        "aquavanjaram",
        "gfx942",
        ["Device 0049", "Device 0050"],
        dict(problem_type or PROBLEM_TYPE),
        solutions,
        [2, 3, 0, 1],
        rows,
        None,
        None,
        "DeviceEfficiency",
        library_type,
    ]


def write(directory: Path, name: str, data) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(data, default_flow_style=None))
    return path


def read(path: Path):
    return yaml.safe_load(path.read_text())
