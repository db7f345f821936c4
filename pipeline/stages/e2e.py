"""End-to-end A/B of the workload: baseline environment against the tuned one, alternating repetitions.

The tuned environment makes torch use the bundle through TunableOp (enabled, tuning off, the bundle's
results file). On CUDA, torch before 2.14 knows only the ``Default`` solution, so the bundle has no
runtime consumer there: the A/B is skipped with that reason rather than reporting noise as a result.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from .collect import parse_tokens_per_s
from .validate import tunableop_env


def runtime_consumer(runtime: dict) -> str | None:
    """Why the tuned bundle cannot be applied by this runtime (None when TunableOp can load it)."""
    version = runtime.get("pt_version", "")
    if runtime.get("platform", "cuda") == "cuda":
        try:
            major, minor = (int(x) for x in version.split(".")[:2])
        except ValueError:
            return f"unknown torch version {version!r}"
        if (major, minor) < (2, 14):
            return (f"torch {version} on CUDA has no TunableOp cuBLASLt solutions (they arrive in 2.14), so the "
                    "tuned bundle has no runtime consumer yet; the GEMM-level figures are the result")
    return None


def skip_reason(runtime: dict, passed: bool, has_workload: bool) -> str | None:
    """Why the end-to-end A/B does not run (None when it does): no runtime consumer, a refused bundle, or no
    workload command."""
    reason = runtime_consumer(runtime)
    if reason is None and not passed:
        reason = "the bundle was refused"
    if reason is None and not has_workload:
        reason = "no workload to run (shapes came from --untuned files; pass --workload-cmd)"
    return reason


def ab_test(command: list[str], bundle_csv: Path, scratch: Path, reps: int, timeout_s: float,
            gpus: int = 1, env: dict[str, str] | None = None) -> dict:
    """Run ``command`` ``reps`` times in each environment, alternating (A B, B A, ...); medians."""
    base_env = {k: v for k, v in (env or os.environ).items() if not k.startswith("PYTORCH_TUNABLEOP_")}
    tuned_env = {**base_env, **tunableop_env(bundle_csv, scratch, gpus)}
    runs: dict[str, list[dict]] = {"baseline": [], "tuned": []}
    for rep in range(reps):
        order = ("baseline", "tuned") if rep % 2 == 0 else ("tuned", "baseline")
        for name in order:
            start = time.monotonic()
            proc = subprocess.run(command, env=base_env if name == "baseline" else tuned_env, capture_output=True,
                                  text=True, timeout=timeout_s, check=False)
            wall = time.monotonic() - start
            if proc.returncode != 0:
                raise RuntimeError(f"{name} run {rep} of {command} exited with code {proc.returncode}: "
                                   f"{proc.stderr.strip()[-2000:]}")
            runs[name].append({"wall_s": wall, "tokens_per_s": parse_tokens_per_s(proc.stdout)})
    out: dict = {"reps": reps, "runs": runs}
    for name, values in runs.items():
        out[name] = {"median_wall_s": statistics.median(r["wall_s"] for r in values)}
        tokens = [r["tokens_per_s"] for r in values if r["tokens_per_s"] is not None]
        out[name]["median_tokens_per_s"] = statistics.median(tokens) if tokens else None
    out["wall_speedup"] = out["baseline"]["median_wall_s"] / out["tuned"]["median_wall_s"]
    if out["baseline"]["median_tokens_per_s"] and out["tuned"]["median_tokens_per_s"]:
        out["tokens_speedup"] = out["tuned"]["median_tokens_per_s"] / out["baseline"]["median_tokens_per_s"]
    return out
