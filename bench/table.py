"""Print a results JSON of bench/cublaslt_search.py as the Markdown table of bench/README.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> None:
    data = json.loads(Path(path).read_text())
    s = data["summary"]
    print(
        f"Device: {data['device']['name']} ({data['device']['sm_count']} SMs, L2 {data['device']['l2_bytes'] >> 20}"
        f" MiB), torch {data['versions']['torch']}, cuBLASLt {data['versions']['cublasLt']}, nvmath "
        f"{data['versions']['nvmath']}; {data['date']}; {len(data['problems'])} problems, wall "
        f"{data['wall_s']:.0f} s.\n"
    )
    print("| mode | geomean speedup | min | problems >= 1.03x | tuning s |")
    print("|---|---|---|---|---|")
    for mode in ("ours", "exhaustive", "nvmath"):
        m = s[mode]
        print(
            f"| {mode} | {m['geomean_speedup']:.4f} | {m['min_speedup']:.3f} | {m['improved_3pct']} | "
            f"{m['tuning_s']:.1f} |"
        )
    r = s["ours_vs_exhaustive"]
    print(
        f"\nOurs / exhaustive: geomean speedup ratio {r['geomean_ratio']:.4f}, share of the excess speedup "
        f"{r['speedup_share']:.2f}, tuning time share {r['time_share']:.3f}. Roofline efficiency (geomean): "
        f"{s['eff_geomean_default']:.3f} default -> {s['eff_geomean_tuned']:.3f} tuned.\n"
    )
    print("| problem | default us | tuned us | speedup | eff default -> tuned | tuning s | exhaustive | nvmath |")
    print("|---|---|---|---|---|---|---|---|")
    for row in data["problems"]:
        o, e, n = row["ours"], row.get("exhaustive", {}), row.get("nvmath", {})
        print(
            f"| {row['label']} | {o['default_us']:.1f} | {o['tuned_us']:.1f} | {o['speedup']:.3f} | "
            f"{o['eff_default']:.2f} -> {o['eff_tuned']:.2f} | {o['tuning_s']:.1f} | "
            f"{e.get('speedup', float('nan')):.3f} ({e.get('tuning_s', float('nan')):.1f} s) | "
            f"{n.get('speedup', float('nan')):.3f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
