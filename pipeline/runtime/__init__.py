"""Apply tuned cuBLASLt choices inside PyTorch at run time, where torch itself cannot (CUDA torch < 2.14).

    import pipeline.runtime
    pipeline.runtime.install("workdir/default/bundle")   # or a package dir, or a tunableop_results.csv
    ...                                                   # mm, addmm, bmm, F.linear run the tuned algorithms
    pipeline.runtime.uninstall()

or, for any Python program: ``python -m pipeline.runtime --bundle DIR -- script.py ARGS`` (also ``-m module``,
``-c code``, or a command such as ``bash run.sh``/``torchrun``, whose Python processes get it on importing torch).
``python -m pipeline.runtime.hostcost --bundle DIR --out F.json`` measures what its dispatch costs a call here.

``install`` overrides the CUDA kernels of ``aten::mm``, ``aten::addmm``, ``aten::bmm`` and ``aten::_scaled_mm``
(FP8, keyed as ``runtime.scaled`` keys it) through ``torch.library``, each only where the table has rows it can
run (``status()["routed_ops"]``; the others keep torch's kernel and cost nothing). A call whose BLAS key has a tuned
``Gemm_Cublaslt_id_..`` row runs that algorithm through ``nvmath.bindings.cublasLt.matmul`` on torch's current
stream (descriptors, layouts, algorithm cached per problem; a workspace per stream that never moves, so CUDA-graph
capture works); every other call, and every call made under settings the row was not tuned under, runs torch's own
kernel (``dispatch.blocked``). On torch >= 2.14 (CUDA) and on ROCm, TunableOp reads the same rows itself:
``install`` says so and does nothing. The dispatcher is process-wide, so is the installed runtime: one at a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..formats.solution_names import release
from .table import KERNELS, TunedTable, key_text, load_table, tuned_device

__all__ = ["Runtime", "install", "installed", "tunableop_consumes", "uninstall"]


class DeviceMismatch(RuntimeError):
    """The rows were tuned on another GPU model."""


def tunableop_consumes(torch_version: str, hip: str | None) -> str | None:
    """Why TunableOp itself applies the rows in this torch (None: it cannot, the runtime is needed)."""
    if hip:
        return f"torch {torch_version} on ROCm: TunableOp reads the bundle's results itself (source env.sh)"
    if release(torch_version) >= (2, 14):
        return (
            f"torch {torch_version} has cuBLASLt solutions in TunableOp: it reads the bundle's results "
            "itself (source env.sh); the runtime is for torch < 2.14 on CUDA"
        )
    return None


@dataclass
class Runtime:
    """An installed runtime: the table, the router, and ``status()`` of what it did."""

    table: TunedTable
    router: object = None
    executor: object = None
    consumer: str | None = None  # set when TunableOp is the consumer and nothing was installed
    notes: list[str] = field(default_factory=list)
    install_s: float = 0.0  # install(): the table, the executor (nvmath's import), the kernels registered
    capture_only: object = None  # graphs.CaptureOnly under ``graphs_only``: routes only inside a graph capture

    def status(self) -> dict:
        out = {
            "source": str(self.table.source),
            "tuned_rows": len(self.table),
            "rows_left_out": dict(self.table.left_out),
            "notes": self.notes,
        }
        if self.consumer:
            return {**out, "installed": False, "consumer": self.consumer}
        router = self.router
        fallbacks, missed, defaulted = router.fallback_counts()
        tuned = router.tuned_calls()
        return {
            **out,
            "installed": router is not None and (router._lib is not None or self.capture_only is not None),
            "graphs_only": None if self.capture_only is None else {"captures": self.capture_only.captures},
            "routed_ops": router.routed_ops(),  # the aten ops overridden: those the table has rows for
            "rows_rejected": {" ".join(map(str, k)): v for k, v in router.rejected.items()},
            "tuned_calls": tuned,
            "fallbacks": fallbacks,
            "missed_calls": missed,  # calls without a row, by TunableOp key
            "defaulted_calls": defaulted,  # calls at counts whose tuned choice is torch's default, by key
            "coverage": coverage(tuned, missed, self.table.meta, defaulted),
            "untuned_keys": [key_text(k) for k in router.untuned],
            "startup": {"install_s": self.install_s, "plan_build_s": router.plan_build_s},
        }

    def uninstall(self) -> None:
        if self.capture_only is not None:
            self.capture_only.uninstall()
            self.capture_only = None
        if self.router is not None:
            self.router.unregister()
            self.router.close()
        if self.executor is not None and hasattr(self.executor, "close"):
            self.executor.close()
        self.router = self.executor = None
        if _ACTIVE and _ACTIVE[0] is self:
            _ACTIVE.clear()


def coverage(
    tuned: dict[str, int], missed: dict[str, int], meta: dict, defaulted: dict[str, int] | None = None
) -> dict | None:
    """Of the GEMM calls at keys the collection never saw (not in the manifest's ``collected``: token counts a
    serving grid covers, or nothing covers), the share that ran a tuned choice, by calls and by GEMM time (each
    call weighed by its problem's roofline time on the tuned device: an estimate). A tuned choice is a tuned
    row's plan, or torch's default where the tuner measured it best for the call's token count (``defaulted``,
    the manifest's ``default_ranges``: counted apart too). None without ``collected``."""
    if "collected" not in meta:
        return None
    from ..formats.tunableop import parse_key

    seen, device = set(meta["collected"]), tuned_device(meta) or ""
    sums = {name: 0 for name in ("unseen_calls", "unseen_tuned_calls", "unseen_default_calls")}
    sums |= {"unseen_us": 0.0, "unseen_tuned_us": 0.0}
    ran = [(name.split(" ", 1)[1], n, "plan") for name, n in tuned.items() if " " in name]
    chosen = [(key, n, "default") for key, n in (defaulted or {}).items()]
    for key, calls, choice in [*ran, *chosen, *((key, n, None) for key, n in missed.items())]:
        if key in seen:
            continue
        us = calls * parse_key(*key.split(",", 1)).floor_us(device)
        sums["unseen_calls"] += calls
        sums["unseen_us"] += us
        if choice:
            sums["unseen_tuned_calls"] += calls
            sums["unseen_tuned_us"] += us
        if choice == "default":
            sums["unseen_default_calls"] += calls
    return with_shares(sums)


def coverage_line(coverage: dict | None) -> str:
    """The tuned share at keys the collection never saw (``coverage``), for the runtime's summary line and the
    report's end-to-end line; empty where nothing was unseen, and says so where only captured calls were counted."""
    scope = (
        "; under --graphs-only coverage counts the calls captured into CUDA graphs alone (eager calls, prefill's "
        "among them, ran torch's default)"
        if coverage and coverage.get("graphs_only")
        else ""
    )
    if not coverage or not coverage["unseen_calls"]:
        return scope
    return scope + (
        f"; coverage at token counts the collection never saw: {coverage['tuned_share_of_time']:.1%} of their GEMM "
        f"time ({coverage['unseen_us']:.3g} us by the roofline estimate; {coverage['unseen_tuned_calls']} of "
        f"{coverage['unseen_calls']} calls) ran a tuned choice"
        + (
            f" ({coverage['unseen_default_calls']} of them torch's default, measured best there)"
            if coverage.get("unseen_default_calls")
            else ""
        )
    )


def with_shares(sums: dict) -> dict:
    """Coverage sums with their shares (None where nothing was unseen); ``e2e`` adds several processes' sums."""
    calls, us = sums["unseen_calls"], sums["unseen_us"]
    return {
        **sums,
        "tuned_share_of_calls": sums["unseen_tuned_calls"] / calls if calls else None,
        "tuned_share_of_time": sums["unseen_tuned_us"] / us if us else None,
    }


_ACTIVE: list[Runtime] = []  # the dispatcher is process-wide: at most one installed runtime


def install(
    bundle: str | Path,
    *,
    workspace_bytes: int | None = None,
    any_device: bool = False,
    graphs_only: bool = False,
    executor=None,
    dispatch_key: str = "CUDA",
) -> Runtime:
    """Route tuned GEMMs of ``bundle`` (a bundle or package directory, or a results CSV) through cuBLASLt;
    ``graphs_only``: only the GEMMs captured into CUDA graphs (``graphs.CaptureOnly``: an eager call costs
    nothing, for a workload whose eager part is host-bound).

    Raises ``DeviceMismatch`` when the bundle's manifest names another GPU model (``any_device`` overrides);
    ``executor``/``dispatch_key`` exist for tests (the CPU double under ``tests/``)."""
    # the runtime's own start-up, without the torch import the workload pays anyway; the bundle is read first, so
    # that one that is not there, or corrupt, is named before that import (seconds)
    start = time.perf_counter()
    table = load_table(bundle)
    loaded_s = time.perf_counter() - start

    import torch

    from .dispatch import Router

    start = time.perf_counter()
    consumer = tunableop_consumes(torch.__version__, torch.version.hip)
    if consumer and executor is None:
        if torch.version.hip or not table.triton_rows():
            return Runtime(table, consumer=consumer, notes=[consumer])
        table = table.only_triton()  # TunableOp applies the rest; it knows no Triton kernel
    if _ACTIVE:
        raise RuntimeError(f"a runtime is already installed (from {_ACTIVE[0].table.source}); uninstall() first")
    if executor is None:
        from .cublaslt import DEFAULT_WORKSPACE, CublasLtExecutor
        from .triton_plan import tuned_with

        executor = CublasLtExecutor(
            workspace_bytes or DEFAULT_WORKSPACE,
            tuned_with(table.meta),
            Path(table.source).parent / KERNELS,
            table.meta.get("files"),  # a package's manifest: what its kernels must hash to
        )
    runtime = Runtime(table, executor=executor)
    tuned_on, here = tuned_device(table.meta), executor.device_name(executor.current_device())
    if tuned_on and tuned_on != here:
        message = f"{table.source}: tuned on {tuned_on}, this is {here}"
        if not any_device:
            raise DeviceMismatch(f"{message}; tune on this GPU, or pass any_device=True (--any-device)")
        runtime.notes.append(message)
    runtime.router = Router(table, executor, dispatch_key)
    if graphs_only:
        from .graphs import CaptureOnly

        runtime.router.build_own_kernels(executor.current_device())
        runtime.capture_only = CaptureOnly(runtime.router)
        runtime.capture_only.install()
    else:
        runtime.router.install()
    runtime.install_s = loaded_s + time.perf_counter() - start
    _ACTIVE.append(runtime)
    return runtime


def installed() -> Runtime | None:
    return _ACTIVE[0] if _ACTIVE else None


def uninstall() -> None:
    """Restore torch's own kernels (nothing happens when no runtime is installed)."""
    if _ACTIVE:
        _ACTIVE[0].uninstall()
