"""How many forks of each preset TensileLite keeps, per tree generation, arch, data type and transposes: had the
configs forked every (MatrixInstruction, DepthU) pair of today's presets (as they did until 2026-11-24), and as
written now, pruned by its rules; given a 2024-layout TensileLite tree, what that tree itself keeps of the
configs written now (tests/tensilelite_forks.py). Each figure is [forks kept, forks enumerated].

    python bench/tensilelite_forks.py --out bench/results/tensilelite_forks_<date>.json [--tree TENSILELITE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.atomic import atomic_write_json
from pipeline.formats.tensile_forks import ARCH_LDS
from pipeline.stages.configs.render import TEMPLATES, ConfigSettings, forks_per_pair, load_presets, write_configs
from tests.test_tensile_forks import _problems

PROBE = Path(__file__).resolve().parents[1] / "tests" / "tensilelite_forks.py"


def rows(tree: Path | None) -> list[dict]:
    out = []
    for generation, archs in ARCH_LDS.items():
        for arch in archs:
            for preset, table in load_presets(TEMPLATES).items():
                others = forks_per_pair(table)
                with tempfile.TemporaryDirectory() as tmp:
                    settings = ConfigSettings(arch=arch, preset=preset, tensile_generation=generation)
                    forks = write_configs(Path(tmp), _problems(arch, generation), settings)["forks"]
                    files = sorted(str(p) for p in Path(tmp, "tensile").glob("*.yaml"))
                    tree_counts = _count(tree, arch, files) if tree and generation == "2024" else {}
                for name, count in forks.items():
                    counted = tree_counts.get(str(Path(tmp, name)))
                    out.append(
                        {
                            "generation": generation,
                            "arch": arch,
                            "preset": preset,
                            "config": Path(name).stem,
                            "unpruned": [count["kept"] * others, count["total"] * others],
                            "written": [count["kept"] * others, count["kept"] * others],
                            "tree_keeps_written": counted,
                        }
                    )
    return out


def _count(tree: Path, arch: str, files: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, str(PROBE), "count", str(tree), arch, *files], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tree", type=Path, help="a 2024-layout TensileLite tree to count with")
    args = parser.parse_args(argv)
    table = rows(args.tree)
    for r in table:
        print(
            f"{r['generation']} {r['arch']:7s} {r['preset']:7s} {r['config']:34s} unpruned {r['unpruned'][0]:4d}/"
            f"{r['unpruned'][1]:<4d} written {r['written'][0]}/{r['written'][1]} tree {r['tree_keeps_written'] or '-'}"
        )
    tree = {"tree": str(args.tree), "note": "hipBLASLt 7d9fb683 tensilelite"} if args.tree else None
    atomic_write_json(args.out, {"date": datetime.date.today().isoformat(), "counted_with": tree, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
