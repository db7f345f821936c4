"""What a compiled workload did not send to the BLAS library, and why: the report's "Compiled workload" part.

Two sources, both real output of the run:

* **Inductor's own kernels.** In a max-autotune mode Inductor times its Triton templates against the library
  (the extern ``mm``/``addmm``/``bmm``/``_scaled_mm`` choices) and compiles the fastest in; the tables it
  writes to stderr (``formats.inductor_autotune``) are in CollectShapes' ``workload.stderr.log``. A GEMM whose
  chosen kernel is a template never reaches the library, so no tuned row can speed it up.
* **Recorded, never run.** A key TunableOp recorded that the tuned end-to-end run never looked up
  (``pipeline.runtime``'s per-key calls). Under ``torch.compile`` that is mostly Inductor's ``pad_mm``: at
  compile time it benchmarks a GEMM padded to aligned sizes against the unpadded one, through the library
  (so TunableOp records both), and keeps one; the other is a *padded twin* that never runs afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ...formats.inductor_autotune import AutotuneTable, read_tables
from ...formats.tunableop import parse_key
from ...problem import GemmProblem
from ..run.layout import RunLayout

ALIGNMENT = {"float16": 8, "bfloat16": 8, "float32": 4}  # pad_mm's get_alignment_size_dtype


def inductor_kernels(stderr_log: Path) -> list[AutotuneTable]:
    """The GEMMs Inductor compiled to its own kernels rather than the library (none without the log)."""
    if not stderr_log.exists():
        return []
    with stderr_log.open(errors="replace") as f:
        return [t for t in read_tables(f) if not t.sent_to_library]


def padded_twin(padded: GemmProblem, served: GemmProblem) -> bool:
    """Whether ``padded`` is ``served`` with some of M, N, K rounded up to an aligned size (pad_mm's twin)."""
    same = (padded.op, padded.a_type, padded.transa, padded.transb, padded.batch) == (
        served.op,
        served.a_type,
        served.transa,
        served.transb,
        served.batch,
    )
    align = ALIGNMENT.get(padded.a_type)
    if any(not isinstance(d, int) for d in (padded.m, padded.n, padded.k, served.m, served.n, served.k)):
        return False  # a wildcard key is no one's twin
    dims = list(zip((padded.m, padded.n, padded.k), (served.m, served.n, served.k), strict=True))
    return bool(align) and same and all(a >= b for a, b in dims) and any(a > b and a % align == 0 for a, b in dims)


def never_run(kept: Iterable[str], recorded: Iterable[str], tuned_calls: Mapping[str, int]) -> list[dict]:
    """Kept bundle rows the tuned run never called (``tuned_calls``: the runtime's ``"<solution> <key>"``
    counts), each with why: the padded twin of a recorded key that did run, or not called in that run."""
    ran = {name.split(" ", 1)[1] for name, calls in tuned_calls.items() if calls and " " in name}
    problems = {key: parse_key(*key.split(",", 1)) for key in set(recorded) | set(kept)}
    out = []
    for key in sorted(set(kept) - ran):
        reason = "recorded but not called in the tuned run (a compile-time benchmark, or a path this run did not take)"
        for other in sorted(ran - {key}):
            if other not in problems:
                continue
            if padded_twin(problems[key], problems[other]):
                reason = f"padded twin of {other}: Inductor's pad_mm benchmarks it at compile time and runs the other"
                break
            if padded_twin(problems[other], problems[key]):
                reason = f"unpadded twin of {other}: Inductor's pad_mm benchmarks both and runs the padded one"
                break
        out.append({"key": key, "reason": reason})
    return out


def section(run_dir: Path, kept: Iterable[str], recorded: Iterable[str], e2e: Mapping) -> dict:
    """The report's compiled-workload facts: Inductor's own kernels and kept rows the tuned run never ran."""
    tables = inductor_kernels(RunLayout.of(run_dir).workload_stderr)
    inductor = [
        {"gemm": t.describe(), "kernel": t.chosen, "kernel_ms": t.chosen_ms, "library_ms": t.library_ms, "line": t.line}
        for t in tables
    ]
    runtime = e2e.get("runtime") or {}
    unused = never_run(kept, recorded, runtime["tuned_calls"]) if runtime.get("installed") else []
    return {"inductor_kernels": inductor, "never_run": unused}


def lines(facts: Mapping) -> list[str]:
    """The section as plain lines (the report's markdown and TuneWorkload's notes)."""
    out = []
    for t in facts.get("inductor_kernels", []):
        library = (
            f"the library's best {t['library_ms']:.4f} ms"
            if t["library_ms"] is not None
            else "no library choice in Inductor's top list"
        )
        out.append(
            f"{t['gemm']}: not sent to the library; Inductor compiled its own kernel {t['kernel']} "
            f"({t['kernel_ms']:.4f} ms against {library}; collect/workload.stderr.log line {t['line']})"
        )
    for u in facts.get("never_run", []):
        out.append(f"{u['key']}: {u['reason']}")
    return out
