"""The runtime's executor on NVIDIA GPUs: one cuBLASLt plan per tuned problem (descriptors, layouts and the
algorithm built once and checked with ``cublasLtMatmulAlgoCheck``), run with ``nvmath.bindings.cublasLt.matmul``
on torch's current stream with a workspace per (device, stream) that is never freed or moved, and under CUDA
graph capture one from the graph's own pool, so a captured call replays safely (``docs/cublaslt.md``
sections 2 and 3.2)."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from ..kernels.cublaslt_algo import config_from_name, read_config
from ..kernels.lt_gemm import LtGemm, ScaleModeUnsupported, lt, record_from_config
from ..kernels.support import WORKSPACE_BYTES
from ..kernels.torch_gemm import torch_dtype
from ..kernels.triton_cache import device_key
from ..kernels.triton_gemm import PREFIX as TRITON_PREFIX
from ..problem import GemmProblem
from .triton_plan import TritonPlan, check_stack, kernel_cache

DEFAULT_WORKSPACE = WORKSPACE_BYTES  # what the tuner allowed: a tuned algorithm fits in it
# Workspaces outlive their executor: a CUDA graph captured under the runtime keeps launching into them.
_KEEP_ALIVE: list[torch.Tensor] = []


def _allocate_apart(nbytes: int, device: int) -> torch.Tensor:
    """``nbytes`` on ``device``, allocated by a short-lived thread (its own stream and pool routing)."""
    result: list = []

    def allocate() -> None:
        try:
            result.append(torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", device)))
        except BaseException as err:  # re-raised in the caller's thread
            result.append(err)

    thread = threading.Thread(target=allocate, name="gemm-tune-workspace")
    thread.start()
    thread.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


class LtPlan:
    """One tuned problem on one device: ``run(x, y, bias[, out])`` returns ``x @ y (+ bias)`` in a new tensor, or
    in ``out``; with ``accumulate`` (beta 1) ``out += x @ y``, torch's unfused addmm; with ``scales`` (of y and
    of x, as BLAS A and B take them) a scaled GEMM's ``(x sx) @ (y sy) (+ bias)`` in the problem's output type."""

    __slots__ = (
        "_gemm",
        "_one",
        "_pointers",
        "_record",
        "algo_bytes",
        "calls",
        "device",
        "executor",
        "name",
        "out_dtype",
        "out_shape",
    )
    accumulates = True

    def __init__(self, problem: GemmProblem, solution: str, device: int, executor: CublasLtExecutor) -> None:
        self.name, self.device, self.executor, self.calls = solution, device, executor, 0
        limit = torch.empty(executor.workspace_bytes, dtype=torch.uint8, device="meta")  # the limit, no memory
        self._gemm = gemm = LtGemm(problem, executor.handle(device), limit)
        try:
            self._record = record_from_config(gemm, config_from_name(solution))
        except Exception:
            gemm.close()
            raise
        self.algo_bytes = read_config(self._record)["AlgoBytes"]
        batch = (problem.batch,) if problem.op == "gemm_strided_batched" else ()
        self.out_shape = (*batch, problem.n, problem.m)
        self.out_dtype = torch_dtype(problem.c_type) if problem.op == "scaled_gemm" else None
        a, b, c = gemm.layouts  # numpy's .ctypes costs ~1 us a call: every address is read once, here
        self._one = gemm.alpha.copy()  # beta 1 (alpha is 1)
        self._pointers = (
            gemm.handle,
            gemm.desc,
            gemm.alpha.ctypes.data,
            a,
            b,
            gemm.beta.ctypes.data,
            c,
            self._record.ctypes.data,
            self._one.ctypes.data,
        )

    def run(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        bias: torch.Tensor | None,
        out: torch.Tensor | None = None,
        accumulate: bool = False,
        scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``x @ y (+ bias)``, into ``out`` where given (the router checked it is a contiguous output), onto what
        ``out`` holds where ``accumulate``; ``scales`` = (scale of y, scale of x) for a scaled GEMM."""
        handle, desc, alpha, a, b, beta, c, algo, one = self._pointers
        if accumulate:
            beta = one
        executor = self.executor
        if out is None:
            out = x.new_empty(self.out_shape, dtype=self.out_dtype)
        if scales is not None:
            self._gemm.set_scales(scales[0].data_ptr(), scales[1].data_ptr())
        stream = torch._C._cuda_getCurrentRawStream(self.device)
        workspace = executor.workspaces.get((self.device, stream))
        if workspace is None:
            workspace, _held = executor.new_workspace(self.device, stream)
        if bias is not None:
            self._gemm.set_bias(bias.data_ptr())
        pointer = out.data_ptr()
        lt.matmul(
            handle,
            desc,
            alpha,
            y.data_ptr(),
            a,
            x.data_ptr(),
            b,
            beta,
            pointer,
            c,
            pointer,
            c,
            algo,
            workspace,
            executor.workspace_bytes,
            stream,
        )
        self.calls += 1
        return out

    def close(self) -> None:
        self._gemm.close()


class CublasLtExecutor:
    """cuBLASLt handles per device and workspaces per (device, stream), kept until ``close``."""

    errors = (lt.cuBLASLtError, ValueError, ScaleModeUnsupported, ImportError)  # ImportError: a Triton row, no Triton

    def __init__(
        self,
        workspace_bytes: int = DEFAULT_WORKSPACE,
        triton_tuned: dict | None = None,
        shipped: Path | None = None,
        digests: dict | None = None,
    ) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError(
                "the cuBLASLt runtime needs a CUDA GPU, and torch.cuda.is_available() is False "
                f"(torch {torch.__version__})"
            )
        self.workspace_bytes = workspace_bytes
        self.workspaces: dict[tuple[int, int], int] = {}  # (device, stream) -> workspace address
        self._handles: dict[int, int] = {}
        self.cublaslt_version = lt.get_version()
        self.triton_tuned = triton_tuned  # the Triton and kernel source the Triton rows hold for
        self.kernel_caches: dict[int, Path] = {}  # per device, where the Triton rows' kernels compile
        self.shipped = shipped  # a package's compiled kernels (``triton_plan.kernel_cache`` seeds from them)
        self.digests = digests  # the sha256 of the package's files, by path (its manifest's ``files``)

    def handle(self, device: int) -> int:
        if device not in self._handles:
            with torch.cuda.device(device):
                self._handles[device] = lt.create()
        return self._handles[device]

    def new_workspace(self, device: int, stream: int) -> tuple[int, torch.Tensor | None]:
        """A workspace for a call on ``stream``: (its address, the tensor to hold until the call is enqueued).

        Outside capture it is the stream's workspace for the life of the process, allocated from a thread of its
        own so that no memory pool this thread's allocations are routed to takes it (a CUDA graph tree's warm-up
        checks that its pool holds only tensors it tracks). Under capture it is the call's own, from the graph's
        pool like any temporary of a captured op (torch does the same with its cuBLAS workspaces)."""
        if torch.cuda.is_current_stream_capturing():
            workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=torch.device("cuda", device))
            return workspace.data_ptr(), workspace
        workspace = _allocate_apart(self.workspace_bytes, device)
        _KEEP_ALIVE.append(workspace)
        self.workspaces[(device, stream)] = workspace.data_ptr()
        return workspace.data_ptr(), None

    def plan(self, problem: GemmProblem, solution: str, device: int) -> LtPlan | TritonPlan:
        if solution.startswith(TRITON_PREFIX):
            check_stack(self.triton_tuned)  # a stale row is refused before a cache is made for it
            if device not in self.kernel_caches:
                self.kernel_caches[device] = kernel_cache(device_key(device), None, self.shipped, self.digests)
            return TritonPlan(problem, solution, device, self.triton_tuned, self.kernel_caches[device])
        return LtPlan(problem, solution, device, self)

    @staticmethod
    def current_device() -> int:
        return torch._C._cuda_getDevice()

    @staticmethod
    def device_name(device: int) -> str:
        return torch.cuda.get_device_name(device)

    def close(self) -> None:
        torch.cuda.synchronize()
        self.workspaces.clear()
        for handle in self._handles.values():
            lt.destroy(handle)
        self._handles.clear()
