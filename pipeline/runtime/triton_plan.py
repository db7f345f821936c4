"""Triton rows at run time: a tuned problem whose winner is one of this project's Triton kernels
(``kernels/triton_runner.py``, docs/triton.md) runs that kernel, with the config its solution name spells out.

A row holds only for the Triton and the kernel source it was tuned with (the bundle's manifest records both):
under another, ``TritonPlan`` refuses to build, and the router falls back for that row with the reason. A
runtime without Triton does the same (its import fails). The kernel writes a vector bias in its epilogue but
never accumulates onto its output, so torch's unfused ``addmm`` form (bias copied into the output first) falls
back too (``accumulates``).

A plan compiles its kernels when it is built (``Runner.prepare``), in a cache of this project's own keyed by
everything that changes them (``kernel_cache``: under ``$GEMM_TUNE_CACHE``, else the user's cache directory),
loading them where an earlier process compiled them; the router builds every Triton row's plan at install: a
workload's GEMM calls meet no JIT. A config that does not compile or fit this device is refused there, and so
is every Triton row where no cache directory can be written (``NoKernelCache``, naming ``GEMM_TUNE_CACHE``);
such a row falls back."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import torch

from ..kernels.torch_gemm import torch_dtype
from ..kernels.triton_cache import CACHE_ENV, cache_dir, cache_name, holds, seed, source_hash, user_cache_root
from ..kernels.triton_gemm import config_from_name
from ..kernels.triton_runner import Runner
from ..problem import GemmProblem

log = logging.getLogger("pipeline")


class StaleTriton(ValueError):
    """A Triton row tuned under another Triton or kernel source than this runtime's."""


def tuned_with(meta: dict) -> dict | None:
    """The Triton version and kernel source digest a bundle's or package's rows were tuned with (None: none
    recorded): a bundle's manifest carries Bench's runtime record, a package's the stack facts."""
    key = (meta.get("runtime") or {}).get("triton")
    if key:
        return {"triton": key.get("triton"), "source": key.get("source")}
    stack = meta.get("stack") or {}
    if stack.get("triton_kernels"):
        return {"triton": stack.get("triton"), "source": stack["triton_kernels"]}
    return None


def check_stack(tuned: dict | None) -> None:
    """Raise ``StaleTriton`` unless this runtime's Triton and kernel source are those of ``tuned``."""
    import triton

    here = {"triton": triton.__version__, "source": source_hash()}
    if tuned is not None and tuned != here:
        raise StaleTriton(
            f"tuned with Triton {tuned['triton']} and kernels {tuned['source']}, this runtime has Triton "
            f"{here['triton']} and kernels {here['source']}: re-tune (the nightly re-times such rows)"
        )


class NoKernelCache(ValueError):
    """No directory this process can write to compile the Triton rows' kernels in."""


def kernel_cache(
    key: dict,
    environ: Mapping[str, str] | None = None,
    shipped: Path | None = None,
    digests: Mapping[str, str] | None = None,
) -> Path:
    """The directory kernels of ``key`` (``triton_cache.device_key``) compile in: ``triton_cache.cache_dir`` under
    ``user_cache_root`` (a directory from another key, or corrupt, is rebuilt), first seeded with what a
    package compiled for the same key (``shipped``: its ``kernels/`` directory), each file checked against the
    sha256 the package's manifest lists (``digests``, by path in the package; a kernel whose files differ, or
    with no digests at all, is compiled instead), so that those load rather than compile. Where no such
    directory can be made, the package's own as it is installed (a kernel it lacks does not compile there),
    else ``NoKernelCache``."""
    root = user_cache_root(environ)
    packaged = None if shipped is None else Path(shipped) / cache_name(key)
    usable = packaged is not None and bool(digests) and holds(packaged, key)

    def trusted(path: Path, data: bytes) -> bool:
        name = path.relative_to(Path(shipped).parent).as_posix()
        return digests.get(name) == hashlib.sha256(data).hexdigest()

    try:
        cache = cache_dir(root, key)
    except OSError as err:
        if usable and all(trusted(p, p.read_bytes()) for p in packaged.rglob("*") if p.is_file()):
            return packaged
        raise NoKernelCache(
            f"no cache for the Triton kernels: {root}: {err.strerror or err}; set {CACHE_ENV} to a directory "
            "this user can write"
        ) from err
    if usable:
        try:
            seed(packaged, cache, trusted=trusted)
        except OSError as err:  # a full disk, say: the kernels compile instead, as without a package
            log.warning("gemm-tune runtime: could not copy %s into %s (%s): compiling instead", packaged, cache, err)
    return cache


class KernelUnfit(ValueError):
    """A Triton row whose kernel does not compile, or does not fit this device."""


class TritonPlan:
    """One tuned problem on one device through this project's kernel: ``run(x, y, bias[, out])`` returns
    ``x @ y (+ bias)``; with ``scales`` (of y and of x) the FP8 product scaled first."""

    __slots__ = ("_run", "calls", "device", "name", "out_dtype", "out_shape")
    accumulates = False

    def __init__(self, problem: GemmProblem, solution: str, device: int, tuned: dict | None, cache: Path) -> None:
        check_stack(tuned)
        runner = Runner(config_from_name(solution))
        try:
            runner.prepare(problem, device, cache)
        except Exception as err:  # Triton's compile and resource errors have no common base
            raise KernelUnfit(f"{solution} does not compile or fit this device: {type(err).__name__}: {err}") from err
        self._run = runner.run
        self.name, self.device, self.calls = solution, device, 0
        batch = (problem.batch,) if problem.op == "gemm_strided_batched" else ()
        self.out_shape = (*batch, problem.n, problem.m)
        self.out_dtype = torch_dtype(problem.c_type) if problem.op == "scaled_gemm" else None

    def run(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if out is None:
            out = x.new_empty(self.out_shape, dtype=self.out_dtype)
        if scales is None:
            self._run(x, y, out, bias)
        else:
            self._run(x, y, out, bias, scales[1], scales[0])
        self.calls += 1
        return out

    def close(self) -> None:
        pass
