"""A hipBLASLt build directory for find_exact tests, laid out as one generation's tree: 2024 (S24) has the bench
double at ``clients/staging/hipblaslt-bench`` and ``library/MatchTable.yaml``, 2025 at ``clients/hipblaslt-bench``
and ``device-library/MatchTable.yaml``; the table maps the double's global solution indices to a GridBased
source logic file, and the find_exact double lies at ``<source>/utilities/find_exact.py``."""

from __future__ import annotations

from pathlib import Path

import yaml

from .helpers import DOUBLES
from .logic_factory import logic, solution, write

GLOBAL_INDICES = (100, 2061, 2077, 3150, 4022, 5310)  # what the bench double reports


def fake_build(root: Path, generation: str = "2025") -> Path:
    """Make the tree under ``root``; return the build directory (what --hipblaslt-root names)."""
    source = root / "hipBLASLt"
    build = source / "build" / "release"
    clients = build / "clients" / ("staging" if generation == "2024" else "")
    clients.mkdir(parents=True)
    (clients / "hipblaslt-bench").symlink_to(DOUBLES / "hipblaslt-bench")
    (source / "utilities").mkdir()
    (source / "utilities" / "find_exact.py").symlink_to(DOUBLES / "find_exact.py")
    solutions = [solution(64 + 32 * i, index=i) for i in range(len(GLOBAL_INDICES))]
    grid = logic([[[4096, 4096, 1, 4096], [0, 500.0]]], solutions, "GridBased")
    library = build / ("library" if generation == "2024" else "device-library")
    logic_file = write(library / "Logic", "aquavanjaram_Cijk_Alik_Bljk_BBS_BH.yaml", grid)
    table = {index: [str(logic_file), local] for local, index in enumerate(GLOBAL_INDICES)}
    (library / "MatchTable.yaml").write_text(yaml.safe_dump(table))
    return build
