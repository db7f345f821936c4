"""How a config of our Triton kernels runs (``triton_gemm`` says what the kernels and their configs are): the
integers a call hands the kernels (``Frame``), the ``Runner`` that compiles a tuned problem's kernels ahead and
launches them without Triton's JIT, and ``launcher``, one config on an ``OperandSet`` as Bench times it
(docs/triton.md, "In the runtime"). Needs torch and triton (the ``cuda`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..problem import GemmProblem
from .triton_cache import compiling_into
from .triton_gemm import TritonConfig


def unhooked(runtime) -> bool:
    """Whether no launch hook is set in Triton's ``knobs.runtime`` (a profiler sets them; the JIT's path then
    calls them): each slot is a ``HookChain`` (Triton >= 3.4) with no calls, or None."""
    hooks = (runtime.launch_enter_hook, runtime.launch_exit_hook)
    return all(hook is None or (isinstance(hook.calls, list) and not hook.calls) for hook in hooks)


@dataclass(frozen=True)
class Frame:
    """The integers a call hands the kernels besides its pointers: batch, rows, K, columns and the (batch, row,
    column) strides of X, Y and the output. Triton specialises a kernel on them (a value of 1, divisibility by
    16), so a compiled kernel holds for the calls of one frame."""

    batch: int
    rows: int
    k: int
    cols: int
    xs: tuple[int, int, int]
    ys: tuple[int, int, int]
    os: tuple[int, int, int]

    @classmethod
    def of_call(cls, x, y, out) -> Frame:
        """The frame of a call's torch-frame operands (2-D, or 3-D batched)."""
        if x.dim() == 2:
            (rows, k), cols = x.shape, y.shape[1]
            return cls(1, rows, k, cols, (0, *x.stride()), (0, *y.stride()), (0, *out.stride()))
        (batch, rows, k), cols = x.shape, y.shape[2]
        return cls(batch, rows, k, cols, x.stride(), y.stride(), out.stride())

    @classmethod
    def of_problem(cls, problem: GemmProblem) -> Frame:
        """The frame of ``problem``'s calls: its operands laid out as ``torch_gemm.torch_views`` lays them, which
        is how the runtime's router receives a call of its key (``runtime/frame.py``) up to the strides of
        dimensions of size 1, which address nothing."""
        p = problem
        lda, ldb, ldc = p.blas_lds()
        batched = p.op == "gemm_strided_batched"
        y = (lda, 1) if p.transa == "N" else (1, lda)  # Y[k, m] is BLAS A
        x = (ldb, 1) if p.transb == "N" else (1, ldb)  # X[n, k] is BLAS B
        a_cols, b_cols = (p.k if p.transa == "N" else p.m), (p.n if p.transb == "N" else p.k)
        packed = (a_cols * lda, b_cols * ldb, p.n * ldc) if batched else (0, 0, 0)
        return cls(p.batch, p.n, p.k, p.m, (packed[1], *x), (packed[0], *y), (packed[2], ldc, 1))

    def compiled_alike(self) -> tuple[tuple[bool, bool, bool], ...]:
        """What Triton specialises a compiled kernel on among these integers (per value: whether it is 1, whether
        it divides by 16, whether it fits 32 bits; docs/triton.md, "Token counts a winner serves"): two frames
        alike here run one compiled kernel."""
        values = (self.batch, self.rows, self.k, self.cols, *self.xs, *self.ys, *self.os)
        return tuple((v == 1, v % 16 == 0, -(2**31) <= v < 2**31) for v in values)


def compiled_counts(problem: GemmProblem, lo: int, hi: int) -> list[int]:
    """The token counts among ``lo..hi`` that a winner serving them over ``problem``'s weight needs compiled
    apart from ``problem``'s own: the least count of each other ``Frame.compiled_alike`` class (a range's calls
    then load a kernel compiled at install, never compile one)."""
    seen = {Frame.of_problem(problem).compiled_alike()}
    found = []
    for m in range(lo, hi + 1):
        moved = problem.with_tokens(m)
        if moved is None:
            continue
        alike = Frame.of_problem(moved).compiled_alike()
        if alike not in seen:
            seen.add(alike)
            found.append(m)
    return found


class Runner:
    """``config`` on torch-frame operands: ``out[b, r, c] = sum_k x[b, r, k] y[b, k, c] (+ bias[c])``, the FP8
    product scaled by ``scale_x * scale_y`` first; the split-K scratch kept per output shape.

    Calling it goes through Triton's JIT, which binds and specialises every argument on every call (about 30 us
    of host time). ``prepare`` compiles (or loads from Triton's cache) the kernels of one tuned problem without
    launching them, and builds a launcher that hands the frame's arguments and each call's pointers straight to
    the compiled kernels' launchers (``CompiledKernel.run``, as ``JITFunction.run`` ends): what the runtime does
    at install and calls per GEMM, and what Bench times. ``fast`` builds the same launcher from a first call
    instead. It holds while the arguments specialise alike, which for one tuned problem (fixed shapes and
    strides) leaves the pointers' 16-byte alignment: ``aligned`` says whether a call keeps it."""

    def __init__(self, config: TritonConfig, problem: GemmProblem | None = None) -> None:
        import triton
        from triton import knobs

        from . import triton_kernels as kernels

        kernel = getattr(kernels, config.kernel)
        self.config, self._gemm, self._reduce, self._cdiv = config, kernel, kernels.reduce, triton.cdiv
        self._knobs = knobs.runtime
        self._scratch: dict = {}
        self._launch: Callable | None = None  # the launcher of ``prepare`` or ``fast``
        self.problem = problem  # with one, the first call prepares for it rather than going through ``fast``

    def run(self, x, y, out, bias=None, scale_x=None, scale_y=None) -> None:
        """One call the quickest way that holds: through the launcher (``prepare``'s, or else ``fast``'s built
        on the first call), or the JIT where the launcher declines (a pointer not aligned as compiled)."""
        launch = self._launch
        if launch is None and self.problem is not None:
            self.prepare(self.problem, out.get_device())
            launch = self._launch
        if launch is None:
            self._launch = self.fast(x, y, out, bias, scale_x, scale_y)
        elif not launch(x, y, out, bias, scale_x, scale_y):
            self(x, y, out, bias, scale_x, scale_y)

    def prepare(self, problem: GemmProblem, device: int, cache: Path | None = None) -> None:
        """Compile or load the kernels of ``problem``'s calls on ``device`` and build their launcher, launching
        nothing: no later call of the problem meets Triton's JIT (docs/triton.md, "In the runtime"); in ``cache``
        (a ``cache_dir``) where given, else in Triton's own cache. Raises what Triton raises for a config that
        does not compile or does not fit the device."""
        import torch
        from triton.runtime.jit import MockTensor

        from .torch_gemm import torch_dtype

        x_type, out_type = torch_dtype(problem.a_type), torch_dtype(problem.c_type)
        scaled = problem.op == "scaled_gemm"
        bias = out_type if problem.has_bias else None  # a bias of the output's type (``serves``)
        scales = (torch.float32, torch.float32) if scaled else (None, None)
        c = self.config
        with torch.cuda.device(device), compiling_into(cache):
            frame = Frame.of_problem(problem)
            grid, args, reduce_grid, reduce_args = self._args(frame, x_type, x_type, out_type, bias, *scales, device)
            gemm = self._gemm.warmup(  # the pointers as their dtypes at address 0: the aligned specialisation
                *map(MockTensor.wrap_dtype, args), grid=grid, num_warps=c.num_warps, num_stages=c.num_stages
            )
            reduce = None
            if reduce_grid:
                reduce = self._reduce.warmup(*map(MockTensor.wrap_dtype, reduce_args), grid=reduce_grid, num_warps=4)
            if gemm is None or (reduce_grid and reduce is None):
                raise RuntimeError("a Triton jit_cache_hook took the compile over: no kernel to launch")
            self._launch = self._launcher(gemm, reduce, grid, args, reduce_grid, reduce_args, device, scaled)

    def _args(self, frame: Frame, x, y, out, bias, scale_x, scale_y, device) -> tuple:
        """(gemm grid, gemm arguments, reduce grid or None, reduce arguments), every parameter in order; the
        operands are tensors, or their dtypes where ``prepare`` compiles without them."""
        c, cdiv, f = self.config, self._cdiv, frame
        k_per = cdiv(cdiv(f.k, c.split_k), c.block_k) * c.block_k
        part = out
        if c.split_k > 1:
            key = (device, f.batch, f.rows, f.cols)
            part = self._scratch.get(key)
            if part is None:
                import torch

                part = self._scratch[key] = torch.empty(
                    (f.batch, c.split_k, f.rows, f.cols), device=device, dtype=torch.float32
                )
        has_bias, scaled = bias is not None, scale_x is not None
        bias_or = bias if has_bias else out
        grid = (cdiv(f.rows, c.block_r) * cdiv(f.cols, c.block_c), c.split_k, f.batch)
        args = (
            x, y, out, bias_or, part, scale_x if scaled else out, scale_y if scaled else out, f.rows, f.cols, f.k,
            k_per, *f.xs, *f.ys, *f.os, has_bias, scaled, c.split_k, c.block_r, c.block_c, c.block_k, c.group,
            f.k % c.block_k == 0,
        )  # fmt: skip
        if c.split_k == 1:
            return grid, args, None, ()
        block = 1024
        reduce_args = (part, out, bias_or, f.rows, f.cols, *f.os, has_bias, c.split_k, block)
        return grid, args, (cdiv(f.rows * f.cols, block), f.batch, 1), reduce_args

    def _call_args(self, x, y, out, bias, scale_x, scale_y) -> tuple:
        return self._args(Frame.of_call(x, y, out), x, y, out, bias, scale_x, scale_y, out.device)

    def __call__(self, x, y, out, bias=None, scale_x=None, scale_y=None) -> tuple:
        """Run through Triton's JIT; returns the compiled (gemm, reduce or None) kernels."""
        return self._jit(*self._call_args(x, y, out, bias, scale_x, scale_y))

    def _jit(self, grid, args, reduce_grid, reduce_args) -> tuple:
        c = self.config
        gemm = self._gemm[grid](*args, num_warps=c.num_warps, num_stages=c.num_stages)
        reduce = self._reduce[reduce_grid](*reduce_args, num_warps=4) if reduce_grid else None
        return gemm, reduce

    @staticmethod
    def aligned(*tensors) -> bool:
        """Whether every given tensor's address is 16-byte aligned (None: no tensor, aligned)."""
        address = 0
        for t in tensors:
            if t is not None:
                address |= t.data_ptr()
        return not address & 15

    def fast(self, x, y, out, bias=None, scale_x=None, scale_y=None) -> Callable | None:
        """Run once through the JIT, then return the launcher of the further calls of this problem (``prepare``'s,
        built from this call); None where this call's own pointers are not aligned or a launch hook is set."""
        grid, args, reduce_grid, reduce_args = self._call_args(x, y, out, bias, scale_x, scale_y)
        gemm, reduce = self._jit(grid, args, reduce_grid, reduce_args)
        if not (self.aligned(x, y, out, bias, scale_x, scale_y) and unhooked(self._knobs)):
            return None
        return self._launcher(gemm, reduce, grid, args, reduce_grid, reduce_args, out.get_device(), scale_x is not None)

    def _launcher(self, gemm, reduce, grid, args, reduce_grid, reduce_args, device: int, scaled: bool) -> Callable:
        """``launch(x, y, out, bias, scale_x, scale_y)``: the compiled kernels on this call's pointers and the
        frame's other arguments; it returns False, launching nothing, where a pointer is not 16-byte aligned or
        a launch hook is set (the JIT's path serves those)."""
        import torch

        part = args[4] if reduce is not None else None  # the split-K scratch; without one, the call's own output
        rest, reduce_rest = args[7:], reduce_args[3:]
        enter, leave = self._knobs.launch_enter_hook, self._knobs.launch_exit_hook
        enter_calls = [] if enter is None else enter.calls  # the chains' live lists: a hook added later is seen
        exit_calls = [] if leave is None else leave.calls
        stream_of = torch._C._cuda_getCurrentRawStream
        with torch.cuda.device(device):  # a kernel's handles load on the current device
            g_run, g_function, g_meta = gemm.run, gemm.function, gemm.packed_metadata
            r_run, r_function, r_meta = (reduce.run, reduce.function, reduce.packed_metadata) if reduce else (None,) * 3
        g0, g1, g2 = grid
        r0, r1, r2 = reduce_grid or (0, 0, 0)

        def launch(x, y, out, bias=None, scale_x=None, scale_y=None) -> bool:
            b = out if bias is None else bias
            sx, sy = (scale_x, scale_y) if scaled else (out, out)
            if (x.data_ptr() | y.data_ptr() | out.data_ptr() | b.data_ptr() | sx.data_ptr() | sy.data_ptr()) & 15:
                return False
            if enter_calls or exit_calls:
                return False
            stream = stream_of(device)
            p = out if part is None else part
            g_run(g0, g1, g2, stream, g_function, g_meta, None, None, None, x, y, out, b, p, sx, sy, *rest)
            if r_run is not None:
                r_run(r0, r1, r2, stream, r_function, r_meta, None, None, None, part, out, b, *reduce_rest)
            return True

        return launch


def launcher(problem: GemmProblem, config: TritonConfig) -> Callable:
    """Run ``config`` on an ``OperandSet`` of ``problem``, writing its output (bias added where it has one)."""
    from .torch_gemm import torch_views

    run = Runner(config, problem).run  # launched as the runtime launches it: the same launcher and host cost

    def launch(ops) -> None:
        x, y, out = torch_views(problem, ops)
        scaled = ops.scale_a is not None  # X is BLAS B: it takes torch's scale_b
        run(x, y, out, ops.bias, ops.scale_b if scaled else None, ops.scale_a if scaled else None)

    return launch
