"""GEMM kernels of our own, written in Triton: a kernel source Bench can draw candidates from where no library
kernel wins (docs/triton.md).

One kernel computes ``out[r, c] = sum_k X[r, k] Y[k, c] (+ bias[c])`` in torch's row-major frame
(``torch_gemm.torch_views``: ``r`` runs over the BLAS ``n``, the tokens of ``F.linear``; ``c`` over ``m``, its
output features), over a grid of ``BLOCK_R x BLOCK_C`` output tiles, split over ``K`` into ``SPLIT_K`` slices
whose fp32 partial sums a second kernel adds in a fixed order (deterministic, bias and cast there); FP8
operands of a tensorwise-scaled ``_scaled_mm`` have the product scaled before the bias. Its config families:

    gemv    one row (one token) where ``literal`` is not offered: ``triton_kernels.gemv``, no ``tl.dot``, a
            few columns a program (the kernel runs one too, as saved winners may)
    literal one row: ``triton_kernels.gemv_literal``, one column a program (eight in saved winners), compiled
            for one frame (every size and stride a literal, as Inductor compiles; a kernel per shape)
    skinny  rows 2-16 (decode): one 16-row tile holds every token, so each weight tile is read once for all
            of them; split-K fills the GPU when the output has few column tiles
    swapped rows 2-16: the skinny tile transposed, 64 or 128 weight columns on the MMA's M side (Hopper's
            warpgroup MMA reads them from shared memory) and the tokens on its N side (``triton_kernels.swapped``)
    tiled   more rows: 32-128-row tiles over 64-long K tiles, split-K only where the tiles alone leave SMs idle

``serves(problem)`` says why a problem is not served (None: it is); ``configs(problem, sms)`` are the configs
worth timing for its shape; ``launcher(problem, config)`` runs one on an ``OperandSet``. A config that fails to
compile or to launch raises where it runs: the timing harness scores it as failed, as Triton's autotuner scores
such a config infinite time. ``triton_cache`` keys Triton's compile cache by every version that changes what
it holds. Needs torch and triton (both with the ``cuda`` extra); ``serves``/``configs`` need neither.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..problem import ROWWISE, GemmProblem, dtype_bytes
from .triton_cache import compiling_into

SERVED_OPS = ("gemm", "gemm_and_bias", "gemm_strided_batched", "scaled_gemm")
SERVED_TYPES = ("bfloat16", "float16")
FP8_TYPES = ("float8_e4m3fn",)  # tensorwise-scaled operands of torch._scaled_mm, out bf16 or fp16
ALIGN_BYTES = 16  # lds in whole 16-byte units, so every tile load can be vectorised
SKINNY_ROWS = 16  # tl.dot's least tile side: a skinny tile holds up to 16 tokens
SWAPPED_COLUMNS = (64, 128)  # a warpgroup MMA's M side per 4 warps: 64 columns each
SHARED_BYTES = 224 * 1024  # the pipeline's stages of X and Y tiles must fit the SM's shared memory (H100: 227 KB)
PREFIX = "triton_"  # every solution name of these kernels (``TritonConfig.name``): Bench, bundles, the runtime
SOURCE = "triton"  # a saved config's ``"source"``, and the name of Bench's candidate that says why not served
NOT_SERVED = "not served: "  # that candidate's error, before ``serves``' reason


def is_config(config: dict | None) -> bool:
    """Whether a saved winner's config is one of these kernels' (not a cuBLASLt algorithm's)."""
    return (config or {}).get("source") == SOURCE


@dataclass(frozen=True)
class TritonConfig:
    """One compiled variant: tile sides, K split, tile grouping (L2 reuse), warps and pipeline stages; a
    ``swapped`` one runs ``triton_kernels.swapped`` (its name ends ``_swap``), a ``literal`` one
    ``triton_kernels.gemv_literal`` (``_lit``)."""

    block_r: int
    block_c: int
    block_k: int
    split_k: int = 1
    group: int = 8
    num_warps: int = 4
    num_stages: int = 3
    swapped: bool = False
    literal: bool = False

    @property
    def name(self) -> str:
        """The candidate's name in Bench's pool and the bundle."""
        c = self
        tiles = f"r{c.block_r}c{c.block_c}k{c.block_k}_s{c.split_k}_g{c.group}_w{c.num_warps}_st{c.num_stages}"
        return PREFIX + tiles + ("_swap" if c.swapped else "_lit" if c.literal else "")

    @property
    def family(self) -> str:
        if self.swapped:
            return "swapped"
        if self.literal:
            return "literal"
        return "gemv" if self.block_r == 1 else "skinny" if self.block_r == SKINNY_ROWS else "tiled"

    @property
    def kernel(self) -> str:
        """The name of the ``triton_kernels`` function that runs it (skinny and tiled configs share ``gemm``)."""
        return {"gemv": "gemv", "swapped": "swapped", "literal": "gemv_literal"}.get(self.family, "gemm")

    def to_json(self) -> dict:
        return {"source": SOURCE, "family": self.family, "name": self.name, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> TritonConfig:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})  # a bundle from before a field


def serves(problem: GemmProblem) -> str | None:
    """Why the Triton kernels do not serve ``problem`` (None: they do); the library keeps it."""
    p = problem
    if p.op not in SERVED_OPS:
        return f"{p.op}: no Triton kernel for it yet (served: {', '.join(SERVED_OPS)})"
    if p.op == "scaled_gemm":
        if not (p.a_type == p.b_type and p.a_type in FP8_TYPES and p.c_type in SERVED_TYPES):
            return f"types {p.a_type}/{p.b_type}/{p.c_type}: the scaled kernel takes e4m3 into bf16 or fp16"
        if p.rowwise or ROWWISE in (p.scale_a_recipe, p.scale_b_recipe) or p.output_scale or p.swizzle:
            return "rowwise, output or swizzled scales: the scaled kernel takes tensorwise scales alone"
        if p.bias_type not in (None, p.c_type):
            return f"bias {p.bias_type} on a {p.c_type} output: the scaled kernel adds a bias of the output's type"
    elif not (p.a_type == p.b_type == p.c_type and p.a_type in SERVED_TYPES):
        return f"types {p.a_type}/{p.b_type}/{p.c_type}: the Triton kernels take {' or '.join(SERVED_TYPES)} alone"
    if p.compute_type != "float32":
        return f"compute type {p.compute_type}: the Triton kernels accumulate in float32"
    if p.layout != "TN":
        return f"layout {p.layout}: the Triton kernels read both operands along K (TN, as F.linear records)"
    lda, ldb, _ = p.blas_lds()
    align = int(ALIGN_BYTES // dtype_bytes(p.a_type))
    odd = [f"{name} {ld}" for name, ld in (("lda", lda), ("ldb", ldb)) if ld % align]
    if odd:
        return f"{', '.join(odd)} not a multiple of {align} elements (16 bytes): unaligned tile loads"
    return None


def configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """The configs worth timing for ``problem`` on a GPU of ``sms`` multiprocessors: per family, tiles no larger
    than the problem needs, K slices of at least one K tile, enough programs to fill the GPU without splitting
    K where the tiles already do, and pipelines whose stages fit the shared memory."""
    rows, cols, k = problem.n, problem.m, problem.k
    if rows == 1:  # one token: the skinny tile's best was 4-39% behind gemv's on every GEMM measured (docs/triton.md)
        return _gemv_configs(problem, sms)
    operand_bytes = dtype_bytes(problem.a_type)
    if rows <= SKINNY_ROWS:
        tiles = [(SKINNY_ROWS, c, bk) for c in (32, 64, 128) for bk in (128, 256)]
        splits, warps, stages = (1, 2, 4, 8, 16), (2, 4), (3, 4, 5)
    else:  # K tiles of 64 (32 below that): a 32-long one was never the best tile on the GEMMs measured
        sides = [r for r in (32, 64, 128) if r <= max(32, rows)]
        bk = 64 if k >= 64 else 32
        tiles = [(r, c, bk) for r in sides for c in (64, 128, 256) if r * c <= 128 * 256]
        splits, warps, stages = (1, 2, 4), (4, 8), (3, 4)
    found = []
    for r, c, bk in tiles:
        if c > max(32, cols) * 2 or bk > max(32, k):
            continue
        output_tiles = -(-rows // r) * -(-cols // c) * problem.batch
        for split in splits:
            if split > 1 and (k // split < bk or output_tiles >= sms):
                continue  # a slice shorter than a K tile, or a grid the tiles fill already
            if split > 1 and output_tiles * split > 8 * sms:
                continue  # K split into more programs than the GPU holds resident
            found += [
                TritonConfig(r, c, bk, split, 8, w, s)
                for w in warps
                for s in stages
                if w * 32 * 2 <= r * c
                and (w > 2 or c == 32)  # two warps for the narrowest skinny tile alone
                and s * (r + c) * bk * operand_bytes <= SHARED_BYTES
            ]
    return found + (_swapped_configs(problem, sms) if rows <= SKINNY_ROWS else [])


def _swapped_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """2-16 tokens: the ``swapped`` tile, 64 or 128 weight columns (4 warps per 64) over 128- or 256-long K
    tiles in 4 or 6 stages within the shared memory; 64-column tiles split K 2 or 4 ways where they leave
    half the SMs idle (on the decode projections measured, an unsplit tile won everywhere: docs/triton.md)."""
    operand_bytes = dtype_bytes(problem.a_type)
    found = []
    for c in SWAPPED_COLUMNS:
        output_tiles = -(-problem.m // c) * problem.batch
        splits = (1, 2, 4) if c == 64 and 2 * output_tiles <= sms else (1,)
        for bk in (128, 256):
            if bk > max(32, problem.k):
                continue
            found += [
                TritonConfig(SKINNY_ROWS, c, bk, split, 1, c // 16, s, swapped=True)
                for split in splits
                if split == 1 or problem.k // split >= bk
                for s in (4, 6)
                if s * (SKINNY_ROWS + c) * bk * operand_bytes <= SHARED_BYTES
            ]
    return found


def _gemv_configs(problem: GemmProblem, sms: int) -> list[TritonConfig]:
    """One token: where a program per column gives every SM two or more, the ``literal`` kernel alone (its best
    came within 0.04% of the best of every family on ten one-token GEMMs, docs/triton.md, "What Bench
    compiles"); else, or where K is shorter than its slices, the ``gemv`` kernel: 4-16 columns per program over
    256-1024 of K, K split where the column blocks alone leave the GPU short of programs."""
    literal = literal_configs(problem) if problem.m * problem.batch >= 2 * sms else []
    if literal:
        return literal
    found = []
    for c in (4, 8, 16):
        programs = -(-problem.m // c) * problem.batch
        for bk in (256, 512, 1024):
            if bk > max(256, problem.k):
                continue
            for split in (1, 2, 4, 8):
                if split > 1 and (problem.k // split < bk or programs >= 2 * sms):
                    continue
                found += [TritonConfig(1, c, bk, split, 1, w, 1) for w in (4, 8) if c * bk >= w * 32 * 8]
    return found


def literal_configs(problem: GemmProblem) -> list[TritonConfig]:
    """The ``literal`` kernel's configs for one token (``410bb6e:bench/decode_floor.py``'s probe measured the same):
    one column a program (eight never won, docs/triton.md) over K slices of 512-4096, none longer than K's next
    power of two, 4-16 warps holding 2-32 elements a thread, one stage."""
    whole = 1 << (problem.k - 1).bit_length()
    return [
        TritonConfig(1, 1, bk, 1, 1, w, 1, literal=True)
        for bk in (512, 2048, 4096)
        for w in (4, 8, 16)
        if bk <= whole and 2 * 32 * w <= bk <= 32 * 32 * w
    ]


NAME = re.compile(PREFIX + r"r(\d+)c(\d+)k(\d+)_s(\d+)_g(\d+)_w(\d+)_st(\d+)(_swap|_lit)?")


def config_from_name(name: str) -> TritonConfig:
    """The config a row's solution name spells out (``TritonConfig.name``); ValueError if it is not one."""
    match = NAME.fullmatch(name)
    if match is None:
        raise ValueError(
            f"{name!r} is not a Triton solution name (triton_r<R>c<C>k<K>_s<S>_g<G>_w<W>_st<N>, then _swap, _lit or"
            " neither)"
        )
    *sizes, variant = match.groups()
    return TritonConfig(*map(int, sizes), swapped=variant == "_swap", literal=variant == "_lit")


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
